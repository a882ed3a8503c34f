"""Why a job waits or was preempted, in categories: the board's reading of the texts the scheduling
layer writes — the engine's pending reasons (``engine/filters.py``), the quota refusals of the cycle
(``persist.QUOTA_REASON``), the preemption texts (``reclaim`` / ``lifecycle``) — and ``redact``, which
hides from a member the projects they cannot see.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass

from django.utils.translation import gettext_lazy as _

from apps.quotas import admission
from apps.quotas import services as quota_services
from apps.scheduling import lifecycle, proposals
from apps.scheduling import services as cycle
from apps.scheduling.engine import filters

# --------------------------------------------------------------------------------------------------
# reason categories

QUOTA, DEVICE, TOPOLOGY, VENDOR, OTHER = "quota", "device", "topology", "vendor", "other"
CATEGORIES = (QUOTA, DEVICE, TOPOLOGY, VENDOR, OTHER)
# A job's reason names several causes (one per rejected node): the first category here that occurs
# is the one it is counted under. Topology first (the job's shape is what blocks it), then devices
# (nodes with the right cards exist but they are busy or unfit), then vendor (no node has the card),
# then the rest (node states, reservations, host CPU / memory).
PRECEDENCE = (QUOTA, TOPOLOGY, DEVICE, VENDOR, OTHER)
CATEGORY_LABELS = {
    QUOTA: _("quota"),
    DEVICE: _("devices"),
    TOPOLOGY: _("topology"),
    VENDOR: _("vendor or model"),
    OTHER: _("other reasons"),
}
CATEGORY_HELP = {
    QUOTA: _("the project's guarantee, borrowing limit or lendable capacity refuses the request"),
    DEVICE: _("nodes with matching cards exist, but their cards are busy, too small or unfit"),
    TOPOLOGY: _("the job's shape does not fit: a gang, a switch domain, one cluster"),
    VENDOR: _("no node has the card, feature or runtime the job asks for"),
    OTHER: _("node states, reservations, host CPU or memory, scheduler errors"),
}

# Each counted reason of engine/filters.py, by category ("{}" is the detail the engine fills in).
REASON_CATEGORY: dict[str, str] = {
    **{reason: OTHER for reason in filters.STATUS_REASONS.values()},
    filters.OTHER_POOL: OTHER,
    # "node in another cluster": the per-cluster attempts of a multi-cluster job count every node of
    # the other clusters so; the reasons of that cluster's own nodes say what blocks it.
    filters.OTHER_CLUSTER: OTHER,
    filters.POOL_RESERVED: OTHER,
    filters.NODE_RESERVED: OTHER,
    filters.SELECTOR: OTHER,
    filters.TAINT: OTHER,
    filters.PRECHECK: VENDOR,
    filters.NO_DEVICE: VENDOR,
    filters.MISSING_FEATURE: VENDOR,
    filters.CARD_TOO_SMALL: DEVICE,
    filters.UNHEALTHY: DEVICE,
    filters.GRAY_ONLY: DEVICE,
    filters.DEVICE_RESERVED: DEVICE,
    filters.TOO_FEW: DEVICE,
    filters.CPU: OTHER,
    filters.MEMORY: OTHER,
    filters.CARDS: DEVICE,
    filters.DEVICE_MEMORY: DEVICE,
    filters.DEVICE_COMPUTE: DEVICE,
    filters.DEVICES: DEVICE,
    filters.MIG_PLACEMENT: DEVICE,
    filters.NO_SWITCH: TOPOLOGY,
}

# The engine's explanations around the counted reasons (engine/engine.py, engine/clusters.py), in the
# stored form apps/scheduling/engine_texts.py registers them (tests/quotas/test_board.py checks each is
# registered there).
GANG = "gang of %(replicas)s replicas: only %(placed)s fit. %(detail)s"
GANG_SHORT = "gang of %(replicas)s replicas: only %(placed)s fit"
FALLBACK = "%(detail)s Fallback %(level)s: no switch domain can host every part."
NO_CLUSTER = "no single cluster can hold the whole job (a job never spans clusters): %(failures)s"
# kube-scheduler's frame as ``filters.explain_counts`` writes it (the reason list may be cut at 500
# characters, the length of ``Job.state_reason``).
FRAME = re.compile(
    r"(?P<available>\d+)/(?P<total>\d+) nodes are available(?:: (?P<parts>.*?))?\.?", re.DOTALL
)
COUNTED = re.compile(r"(?P<count>\d+) (?P<reason>.+)", re.DOTALL)

# Why a quota refuses (the inner reason of ``QUOTA_REASON``), most literal first.
QUOTA_DETAILS = (
    (admission.DEPARTMENT_LIMIT, _("the department's borrowing limit")),
    (admission.NOT_LENDABLE, _("nothing idle to borrow")),
    (admission.RECLAIMS_ITSELF, _("nothing idle to borrow")),
    (admission.NEEDS_MEMORY, _("the device memory limit")),
    (admission.BORROW_REFUSED, _("the borrowing limit")),
    (quota_services.UNCOVERED, _("no quota row covers the cards")),
    (quota_services.UNCOVERED_ANY, _("no quota row covers the cards")),
)
# Whole reasons of the scheduling layer that are not the engine's explanation.
OTHER_DETAILS = (
    (cycle.NO_MODEL, _("no device model can provide the request")),
    (cycle.CONFLICT, _("lost a race for capacity; retried next cycle")),
    (cycle.RENDER_FAILED, _("its Kubernetes objects could not be rendered")),
    (proposals.REFUSED, _("the scheduler's proposal was refused; retried next cycle")),
    (lifecycle.REQUEUED_AFTER_PREEMPTION, _("requeued after preemption, waits for the next cycle")),
)

# Why a job was preempted (the reason inside ``lifecycle.PREEMPTED_ATTEMPT``).
LENDER, PRIORITY = "lender", "priority"
PREEMPTION_CAUSES = {
    LENDER: _("a lender took its guarantee back"),
    PRIORITY: _("a higher-priority job of the same project"),
    OTHER: _("other"),
}

_PLACEHOLDER = re.compile(r"%\((\w+)\)[sd]")


def _pattern(msgid: str) -> re.Pattern:
    """A regular expression that matches the texts made from ``msgid`` (``%(name)s`` → a group)."""
    parts, last = [], 0
    for match in _PLACEHOLDER.finditer(msgid):
        parts.append(re.escape(msgid[last : match.start()]))
        parts.append(f"(?P<{match.group(1)}>.+?)")
        last = match.end()
    parts.append(re.escape(msgid[last:]))
    return re.compile("".join(parts), re.DOTALL)


_PATTERNS: dict[str, re.Pattern] = {}


def _match(msgid: str, text: str) -> dict[str, str] | None:
    pattern = _PATTERNS.get(msgid)
    if pattern is None:
        pattern = _PATTERNS[msgid] = _pattern(msgid)
    found = pattern.fullmatch(text)
    return found.groupdict() if found else None


def _reason_pattern(reason: str) -> re.Pattern:
    before, _sep, after = reason.partition("{}")
    return re.compile(re.escape(before) + (".+" if _sep else "") + re.escape(after), re.DOTALL)


# Most literal first: "no free MIG placement for {}" before "no {}".
_COUNTED_REASONS = sorted(
    ((_reason_pattern(reason), reason, category) for reason, category in REASON_CATEGORY.items()),
    key=lambda item: (-len(item[1].replace("{}", "")), item[1]),
)


@dataclass(frozen=True)
class Classified:
    """Why one job waits: its category, and the cause in a few words (an English text of the engine
    or a lazy label; shown through ``|localized``)."""

    category: str
    detail: str


def counted_reason(reason: str) -> tuple[str, str] | None:
    """(constant, category) of one counted reason of the engine ("insufficient free cards"), or None."""
    for pattern, constant, category in _COUNTED_REASONS:
        if pattern.fullmatch(reason):
            return constant, category
    return None


def _explanation(text: str) -> Classified | None:
    """The kube-scheduler style explanation: the category of the reasons by ``PRECEDENCE``, the
    detail the reason of that category that the most nodes give."""
    found = FRAME.fullmatch(text.strip())
    if found is None:
        return None
    by_category: dict[str, Counter] = defaultdict(Counter)
    for part in re.split(r", (?=\d+ )", found.group("parts") or ""):
        counted = COUNTED.fullmatch(part.strip())
        if counted is None:
            continue
        reason = counted.group("reason")
        known = counted_reason(reason)
        if known is None:
            continue  # cut short at 500 characters, or a reason this board does not know
        by_category[known[1]][reason] += int(counted.group("count"))
    for category in PRECEDENCE:
        if by_category.get(category):
            reason, _n = sorted(by_category[category].items(), key=lambda kv: (-kv[1], kv[0]))[0]
            return Classified(category, reason)
    return Classified(OTHER, text)


def _combine(results: list[Classified]) -> Classified | None:
    for category in PRECEDENCE:
        for result in results:
            if result.category == category:
                return result
    return None


def classify(reason: str | None) -> Classified | None:
    """The category a pending job's ``state_reason`` falls in (None: not examined yet).

    Parsed from the texts the scheduling layer writes: ``services.QUOTA_REASON`` (quota), the engine's
    explanation (``filters.explain_counts`` with the reasons of ``REASON_CATEGORY``, the gang,
    switch-domain fallback and one-cluster sentences around it) and the cycle's own reasons
    (``OTHER_DETAILS``). A text none of these made is "other"."""
    text = (reason or "").strip()
    if not text:
        return None
    quota = _match(cycle.QUOTA_REASON, text)
    if quota is not None:
        inner = quota["reason"]
        for msgid, label in QUOTA_DETAILS:
            if _match(msgid, inner) is not None:
                return Classified(QUOTA, label)
        return Classified(QUOTA, inner)
    gang = _match(GANG, text) or _match(GANG_SHORT, text)
    if gang is not None:
        placed = gang.get("placed", "")
        if placed.isdigit() and int(placed) == 0 and gang.get("detail"):
            # Not even one replica fits: what blocks the first one is the cause.
            return classify(gang["detail"]) or Classified(TOPOLOGY, filters.NO_SWITCH)
        return Classified(TOPOLOGY, _("a gang of replicas (all or nothing) does not fit whole"))
    if _match(FALLBACK, text) is not None:
        return Classified(TOPOLOGY, filters.NO_SWITCH)
    clusters = _match(NO_CLUSTER, text)
    if clusters is not None:
        results = []
        for failure in clusters["failures"].split("; "):
            _cluster, _sep, why = failure.partition(": ")
            result = classify(why) if why else None
            if result is not None:
                results.append(result)
        return _combine(results) or Classified(TOPOLOGY, _("no single cluster can hold the whole job"))
    explained = _explanation(text)
    if explained is not None:
        return explained
    for msgid, label in OTHER_DETAILS:
        if _match(msgid, text) is not None:
            return Classified(OTHER, label)
    return Classified(OTHER, text)


def preemption_cause(message: str) -> tuple[str, str | None]:
    """(cause, reclaiming project or None) of a ``JobEvent.Kind.PREEMPTED`` message."""
    event = _match(lifecycle.PREEMPTED_ATTEMPT, message or "")
    reason = event["reason"] if event else (message or "")
    if reason == cycle.RECLAIMED_FOR_LENDER:
        return LENDER, None
    by = _match(cycle.RECLAIMED_BY, reason)
    if by is not None:
        return LENDER, by["project"]
    if _match(cycle.PREEMPTED_FOR, reason) is not None:
        return PRIORITY, None
    return OTHER, None


_BEFORE, _AFTER = cycle.RECLAIMED_BY.split("%(project)s")
_RECLAIMED_BY_ANYWHERE = re.compile(re.escape(_BEFORE) + r"(?P<project>[-\w]+)" + re.escape(_AFTER))


def redact(text: str, visible: set[str]) -> str:
    """``text`` without the name of a reclaiming project the reader may not see:
    ``cycle.RECLAIMED_BY`` ("reclaimed by project X: it needs its guarantee back …", the one stored
    text of a job's own history that names another project) becomes ``cycle.RECLAIMED_FOR_LENDER``,
    the same cause without the name (both are stored texts, shown in the reader's language)."""
    if not text:
        return text
    return _RECLAIMED_BY_ANYWHERE.sub(
        lambda found: found.group(0) if found.group("project") in visible else cycle.RECLAIMED_FOR_LENDER,
        text,
    )
