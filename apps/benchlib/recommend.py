"""Which card, which slice, for this workload, at what cost: recommendations from measurements.

For a workload profile and a target (throughput, an optional p99 latency bound, optional vendors), every
device model present in the fleet is an option as a whole card and as each of its active compute
templates. Each option gets:

* **throughput of one instance**, from the library, by these rules (stated on every answer):
  - *measured*: measurements taken on the same template (or on whole cards for the whole-card option);
    their mean weighted by runs × the share of the card the measuring job had;
  - *estimated*: no measurement at this share, but some at a larger share of the same model (a whole
    card, a bigger slice): scaled **linearly in the compute share**. Never scaled up from a smaller
    share — that would extrapolate beyond what was measured, so the option says "no data";
  - with a latency bound only measurements at exactly this share whose p99 met the bound count
    (latency does not scale with the share), so a latency-bound option is measured or has no data;
* **instances** to reach the target, and at least what the profile's sharded model state needs
  (``total_memory_mib``); an option whose memory per instance is below the profile's (``memory_mib``) is
  not possible; a profile stating neither is offered with its memory need marked unknown. Instances of a
  latency-bound (serving) profile are independent replicas: linear. The other profiles run as one job
  over all the cards: ``ceil(target ÷ (per-instance × efficiency))``, where the efficiency is the card's
  link within a node (NVLink, HCCS, xGMI, MLU-Link, else PCIe; slices count as PCIe) times the nodes'
  network (InfiniBand, RoCE, else Ethernet) once per doubling of the node count — a table of stated
  ASSUMPTIONS, replaced within a node by the fit of the library's multi-card measurements of the same
  profile and model. Cards per node are those of the reader's nodes, so options spanning nodes cost more;
* **whose cards**: only the cards the reader's projects may use (``devices_usable_by``: no pool reserved
  for another project, no card another project owns); an option needing more CU per hour than the
  project's quota allows (``quota_ceiling``, ``apps.quotas.library.quota_ceiling`` passed by the caller)
  is kept, marked and ranked after the others, as is one needing more cards than the reader may use;
* **cost**: compute units per hour (coefficient in force × share × instances), CU-hours per million
  units of output, and money from the rate card in force where billing provides a price
  (``PRICE_PER_CU_HOUR``, filled by ``apps.billing`` — it sits above this layer).

Options are ranked by money per million units when every option with data has a price, else by CU-hours
per million; options without data come last.

Whose figures count (issue 27 §3): an option's figure comes from **trusted** measurements (benchmark runs,
gray-batch runs, staff-verified job reports) whenever they give one; only an option no trusted measurement
covers falls back to projects' own job reports, marked ``trusted: false`` and ranked after every trusted
option — one project's reports never outweigh benchmark runs. Each option lists its evidence per source
(``evidence_by_source``), each source's figure by the same rules. The same function answers the ``recommend`` command, the
API and the submit page, and gives the scheduler its ordered alternatives for profile requests.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop, ngettext

from apps.benchlib.models import Measurement
from apps.benchlib.scaling import (
    FITTED,
    LINK_LABELS,
    cross_link,
    fit_intra,
    instances_needed,
    intra_link,
    link_efficiency,
    scaling_assumptions,
)
from apps.catalog.models import ComputeTemplate, DeviceModel, WorkloadProfile
from apps.catalog.selectors import coefficients_on
from apps.core.errors import NotFound, ValidationFailed
from apps.core.formatting import format_number
from apps.core.slots import Slot
from apps.inventory.models import Device
from apps.inventory.selectors import devices_usable_by

MEASURED = "measured"
ESTIMATED = "estimated"
NO_DATA = "no-data"
RULE_SLICE = gettext_noop(
    "a slice without its own measurement is estimated from a larger share of the same model, linear in the "
    "compute share; never from a smaller one"
)
RULE_REPLICAS = gettext_noop("several instances scale linearly in the number of instances")
RULE_LATENCY = gettext_noop(
    "with a latency bound, only measurements at the same share whose p99 met it count"
)

RULE_SCALING = gettext_noop(
    "instances of a profile measured at a latency bound are independent replicas and scale linearly; the "
    "other profiles run as one job over all its cards, at the scaling efficiency of the links between them"
)
RULE_VISIBLE = gettext_noop(
    "only cards your projects may use count: pools reserved for another project and cards another project "
    "owns are left out"
)
RULE_QUOTA = gettext_noop(
    "an option needing more CU per hour than your project's quota allows (guarantee plus borrowing limit) "
    "is kept, marked “over your quota” and ranked after the others"
)


# provider(*, template_id, device_model_id) -> (price per CU-hour, currency) or None.
PRICE_PER_CU_HOUR = Slot("benchlib_price_per_cu_hour")
# quota_ceiling(*, project_ids, vendor, device_model_id, pool_ids) -> (most CU/h the projects may hold,
# project slug) or None (no quota bounds the option): apps.quotas.library.quota_ceiling, passed by callers.
QuotaCeiling = Callable[..., tuple[Decimal, str] | None]
MILLION = Decimal(1_000_000)
Q4 = Decimal("0.0001")


@dataclass
class Evidence:
    measurements: list[int] = field(default_factory=list)
    runs: int = 0
    spread_pct: Decimal | None = None
    newest: datetime | None = None
    synthetic: bool = False

    def as_dict(self) -> dict:
        return {
            "count": len(self.measurements),
            "measurement_ids": self.measurements,
            "runs": self.runs,
            "spread_pct": None if self.spread_pct is None else str(self.spread_pct),
            "newest": self.newest.isoformat() if self.newest else None,
            "age_days": (timezone.now() - self.newest).days if self.newest else None,
            "synthetic": self.synthetic,
        }


@dataclass
class Option:
    device_model: DeviceModel
    template: ComputeTemplate | None
    share: Decimal  # percent of one card per instance
    memory_mib: int | None
    basis: str = NO_DATA
    per_instance: Decimal | None = None
    instances: int | None = None
    fits: str = ""  # "slice", "card", "several"
    coefficient: Decimal | None = None
    cu_per_hour: Decimal | None = None
    cu_hours_per_million: Decimal | None = None
    price_per_cu_hour: Decimal | None = None
    currency: str = ""
    money_per_hour: Decimal | None = None
    money_per_million: Decimal | None = None
    evidence: Evidence = field(default_factory=Evidence)
    reason: str = ""  # why there is no figure
    deciding: int | None = None  # the measurement with the most weight behind the figure
    trusted: bool = True  # False: the figure comes from projects' unverified job reports only
    by_source: dict[str, dict] = field(default_factory=dict)
    unit: str = ""
    per_node: int | None = None  # instances one node of the reader's can hold
    nodes: int | None = None
    efficiency: Decimal | None = None  # scaling efficiency at ``instances`` (1: linear)
    efficiency_basis: str = ""  # ASSUMED or FITTED
    links: list[str] = field(default_factory=list)  # link keys the efficiency depends on
    memory_need: str = ""  # "fits", "sharded", "unknown"
    memory_cards: int | None = None  # instances the profile's memory needs (sharded state)
    over_quota: bool = False
    quota_cu: Decimal | None = None
    usable_cards: int = 0  # cards of this model the reader may use
    over_capacity: bool = False  # needs more cards than the reader may use

    @property
    def label(self) -> str:
        if self.template is not None:
            name = self.template.name
            # Built-in template names already start with the model ("T4 · half (shared)").
            return name if name.startswith(self.device_model.name) else f"{self.device_model.name} · {name}"
        return f"{self.device_model.name} · {_('whole card')}"

    @property
    def has_data(self) -> bool:
        return self.per_instance is not None and self.instances is not None

    @property
    def fits_text(self) -> str:
        """The option in words: "1 card", "3 slices", "6 cards on 2 nodes"."""
        if self.instances is None:
            return ""
        n = self.instances
        if self.template is not None:
            count = ngettext("%(n)s slice", "%(n)s slices", n) % {"n": format_number(n, grouping=True)}
        else:
            count = ngettext("%(n)s card", "%(n)s cards", n) % {"n": format_number(n, grouping=True)}
        if self.nodes and self.nodes > 1:
            return ngettext("%(count)s on %(n)s node", "%(count)s on %(n)s nodes", self.nodes) % {
                "count": count,
                "n": format_number(self.nodes, grouping=True),
            }
        return count

    @property
    def per_instance_text(self) -> str:
        if self.per_instance is None:
            return ""
        number = format_number(self.per_instance.quantize(Decimal("0.1")), grouping=True)
        return f"{number} {self.unit}".strip()

    @property
    def efficiency_text(self) -> str:
        """E.g. "0.81 (NVLink, RoCE; assumed)"; "" for linear scaling."""
        if self.efficiency is None or self.efficiency >= 1:
            return ""
        links = ", ".join(_(LINK_LABELS[k]) for k in self.links)
        basis = _("measured") if self.efficiency_basis == FITTED else _("assumed")
        return f"{format_number(self.efficiency, 2)} ({links}; {basis})"

    @property
    def notes(self) -> list[str]:
        """What the reader must know about the option besides its figure."""
        out = []
        if self.over_quota:
            out.append(
                _("over your quota: needs %(need)s CU per hour, your quota allows at most %(most)s")
                % {"need": format_number(self.cu_per_hour, 2), "most": format_number(self.quota_cu, 2)}
            )
        if self.over_capacity:
            out.append(
                _("needs more cards than the %(n)s your projects may use")
                % {"n": format_number(self.usable_cards, grouping=True)}
            )
        if self.memory_need == "unknown":
            out.append(_("the profile states no memory need: whether it fits is unknown"))
        elif self.memory_need == "sharded" and self.memory_cards and self.memory_cards > 1:
            out.append(
                _("at least %(n)s instances to hold the profile's model state")
                % {"n": format_number(self.memory_cards, grouping=True)}
            )
        return out

    def as_dict(self) -> dict:
        def s(v):
            return None if v is None else str(v)

        return {
            "option": self.label,
            "device_model": self.device_model.name,
            "vendor": self.device_model.vendor,
            "template": self.template.slug if self.template else None,
            "share_pct": str(self.share),
            "basis": self.basis,
            "per_instance_throughput": s(self.per_instance),
            "instances": self.instances,
            "fits": self.fits or None,
            "coefficient": s(self.coefficient),
            "cu_per_hour": s(self.cu_per_hour),
            "cu_hours_per_million": s(self.cu_hours_per_million),
            "price_per_cu_hour": s(self.price_per_cu_hour),
            "currency": self.currency or None,
            "money_per_hour": s(self.money_per_hour),
            "money_per_million": s(self.money_per_million),
            "evidence": self.evidence.as_dict(),
            "deciding_measurement": self.deciding,
            "trusted": self.trusted if self.has_data else None,
            "evidence_by_source": self.by_source,
            "no_data": not self.has_data,
            "reason": self.reason or None,
            "fits_text": self.fits_text or None,
            "nodes": self.nodes,
            "per_node": self.per_node,
            "scaling_efficiency": s(self.efficiency),
            "scaling_basis": self.efficiency_basis or None,
            "links": self.links,
            "memory_need": self.memory_need or None,
            "memory_instances": self.memory_cards,
            "over_quota": self.over_quota,
            "quota_cu_per_hour": s(self.quota_cu),
            "usable_cards": self.usable_cards,
            "over_capacity": self.over_capacity,
            "notes": self.notes,
        }


@dataclass
class Recommendation:
    profile: WorkloadProfile
    target: Decimal
    latency_ms: Decimal | None
    vendors: list[str]
    options: list[Option]
    ranked_by: str

    @property
    def best(self) -> Option | None:
        return next((o for o in self.options if o.has_data), None)

    def as_dict(self) -> dict:
        return {
            "profile": self.profile.key,
            "unit": self.profile.unit,
            "target": str(self.target),
            "latency_ms": None if self.latency_ms is None else str(self.latency_ms),
            "vendors": self.vendors,
            "ranked_by": self.ranked_by,
            "rules": [_(r) for r in RULES],
            "scaling_assumptions": scaling_assumptions(),
            "options": [o.as_dict() for o in self.options],
        }


def _decimal(value, name: str, *, positive: bool = True) -> Decimal | None:
    if value in (None, ""):
        return None
    try:
        number = Decimal(str(value))
    except ArithmeticError:
        raise ValidationFailed(
            _("%(name)s must be a number.") % {"name": name}, details={name: ["not a number"]}
        )
    if not number.is_finite() or (positive and number <= 0) or number > Decimal("1e12"):
        raise ValidationFailed(
            _("%(name)s must be a positive number.") % {"name": name}, details={name: ["must be > 0"]}
        )
    return number


def profile_get(key: str) -> WorkloadProfile:
    profile = WorkloadProfile.objects.filter(key=str(key or "")).first()
    if profile is None:
        known = ", ".join(WorkloadProfile.objects.values_list("key", flat=True)) or "-"
        raise NotFound(
            _("Unknown workload profile %(key)r; known profiles: %(known)s.") % {"key": key, "known": known}
        )
    return profile


def _weight(m: Measurement) -> Decimal:
    return Decimal(m.runs) * Decimal(m.compute_share) / 100


def _summarise(rows: list[Measurement], value) -> tuple[Decimal, Evidence, int]:
    """Weighted mean of ``value(m)`` over ``rows`` with its evidence and the deciding measurement."""
    total_w = sum((_weight(m) for m in rows), Decimal(0))
    mean = sum((value(m) * _weight(m) for m in rows), Decimal(0)) / total_w
    values = [value(m) for m in rows]
    spread = None
    if len(values) > 1 and mean > 0:
        spread = ((max(values) - min(values)) / mean * 100).quantize(Decimal("0.1"))
    elif len(rows) == 1 and rows[0].spread_pct is not None:
        spread = Decimal(rows[0].spread_pct)
    evidence = Evidence(
        measurements=[m.pk for m in rows],
        runs=sum(m.runs for m in rows),
        spread_pct=spread,
        newest=max(m.measured_at for m in rows),
        synthetic=any(m.synthetic for m in rows),
    )
    deciding = max(rows, key=lambda m: (_weight(m), m.measured_at)).pk
    return mean, evidence, deciding


def _same_share(m: Measurement, option: Option) -> bool:
    if option.template is not None:
        return m.template_id == option.template.pk or (
            m.template_id is None and Decimal(m.compute_share) == option.share
        )
    return Decimal(m.compute_share) == 100 and (m.template_id is None or m.template.compute_share >= 100)


@dataclass
class _Figure:
    per_instance: Decimal | None = None
    basis: str = NO_DATA
    evidence: Evidence = field(default_factory=Evidence)
    deciding: int | None = None
    reason: str = ""


def _figure(option, rows: list[Measurement], latency: Decimal | None) -> _Figure:
    """The per-instance figure ``rows`` give ``option`` by the rules above (measured, estimated, none)."""
    exact = [m for m in rows if _same_share(m, option)]
    if latency is not None:
        exact = [m for m in exact if m.p99_latency_ms is not None and Decimal(m.p99_latency_ms) <= latency]
        if not exact:
            return _Figure(
                reason=_("no measurement at this share met the p99 bound of %(ms)s ms") % {"ms": latency}
                if rows
                else _("no data")
            )
    if exact:
        mean, evidence, deciding = _summarise(exact, lambda m: Decimal(m.throughput) / m.cards)
        return _Figure(mean, MEASURED, evidence, deciding)
    larger = [m for m in rows if Decimal(m.compute_share) > option.share]
    if not larger:
        return _Figure(
            reason=_("measured only at smaller shares; not extrapolated") if rows else _("no data")
        )
    per_card, evidence, deciding = _summarise(larger, lambda m: m.per_card)
    return _Figure(per_card * option.share / 100, ESTIMATED, evidence, deciding)


def _source_key(m: Measurement) -> str:
    return "job-verified" if m.source == Measurement.Source.JOB and m.verified_at else m.source


def _estimate(option, rows: list[Measurement], profile: WorkloadProfile, latency: Decimal | None) -> None:
    trusted = [m for m in rows if m.trusted]
    reported = [m for m in rows if not m.trusted]
    chosen = _figure(option, trusted, latency)
    if chosen.per_instance is None and reported:
        fallback = _figure(option, reported, latency)
        if fallback.per_instance is not None or not trusted:
            chosen = fallback
            option.trusted = False
    option.per_instance, option.basis, option.evidence = chosen.per_instance, chosen.basis, chosen.evidence
    option.deciding, option.reason = chosen.deciding, chosen.reason
    groups: dict[str, list[Measurement]] = defaultdict(list)
    for m in rows:
        groups[_source_key(m)].append(m)
    for key, group in sorted(groups.items()):
        figure = _figure(option, group, latency)
        if figure.per_instance is not None:
            option.by_source[key] = {
                "trusted": group[0].trusted,
                "basis": figure.basis,
                "per_instance_throughput": str(figure.per_instance.quantize(Q4, rounding=ROUND_HALF_UP)),
                "count": len(figure.evidence.measurements),
                "measurement_ids": figure.evidence.measurements,
            }


RULES = [RULE_SLICE, RULE_SCALING, RULE_LATENCY, RULE_VISIBLE, RULE_QUOTA]


def _project_ids(project_id: int | None, user) -> set[int] | None:
    """The projects whose cards the answer may use; None: the whole fleet (staff, the command line)."""
    from apps.accounts.selectors import is_platform_staff, user_project_ids

    if project_id is not None:
        return {project_id}
    if user is None or is_platform_staff(user):
        return None
    return set(user_project_ids(user))


def _fleet(project_ids: set[int] | None):
    """The cards the reader may use, per model: (cards per node, pools, RDMA NICs per node)."""
    devices = (
        Device.objects.exclude(health=Device.Health.RETIRED)
        if project_ids is None
        else devices_usable_by(project_ids)
    ).exclude(device_model__isnull=True)
    per_node_count: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    pools: dict[int, set[int]] = defaultdict(set)
    nics: dict[int, dict[int, list]] = defaultdict(dict)
    for model_id, node_id, pool_id, rdma in devices.values_list(
        "device_model_id", "node_id", "node__pool_id", "node__rdma_nics"
    ):
        per_node_count[model_id][node_id] += 1
        nics[model_id][node_id] = rdma or []
        if pool_id:
            pools[model_id].add(pool_id)
    return per_node_count, pools, nics


def _costs(
    option: Option,
    *,
    target: Decimal,
    instances: int,
    project_id,
    project_ids,
    pool_ids,
    quota_ceiling,
    price_of,
) -> None:
    """CU per hour and per million units; the quota's ceiling (``quota_ceiling``, when the reader's projects
    are known) and billing's price (``price_of``), where they answer."""
    model, template = option.device_model, option.template
    option.cu_per_hour = (option.coefficient * option.share / 100 * instances).quantize(Q4)
    # CU-hours per million units: CU/h ÷ (units/s × 3600 s/h) × 1e6
    option.cu_hours_per_million = (option.cu_per_hour / (target * 3600) * MILLION).quantize(Q4)
    if project_ids and quota_ceiling is not None:
        ceiling = quota_ceiling(
            project_ids=project_ids, vendor=model.vendor, device_model_id=model.pk, pool_ids=pool_ids
        )
        if ceiling:
            option.quota_cu = ceiling[0]
            option.over_quota = option.cu_per_hour > ceiling[0]
    price = price_of(
        template_id=template.pk if template else None, device_model_id=model.pk, project_id=project_id
    )
    if price:
        option.price_per_cu_hour, option.currency = price
        option.money_per_hour = (option.cu_per_hour * option.price_per_cu_hour).quantize(
            Decimal("0.01"), rounding=ROUND_HALF_UP
        )
        option.money_per_million = (option.cu_hours_per_million * option.price_per_cu_hour).quantize(Q4)


def _memory_need(option, profile: WorkloadProfile, memory) -> int | None:
    """The fewest instances the profile's sharded model state needs (1 without one), marking how the
    option meets the profile's memory; None when that cannot be told (the option has no figure then)."""
    if profile.total_memory_mib:
        if not memory:
            option.per_instance, option.reason = None, _("memory of this model is unknown")
            return None
        option.memory_need, option.memory_cards = "sharded", math.ceil(profile.total_memory_mib / memory)
        return option.memory_cards
    option.memory_need = "fits" if profile.memory_mib else "unknown"
    return 1


def recommend(
    *,
    profile: WorkloadProfile | str,
    target,
    latency_ms=None,
    vendors: list[str] | None = None,
    project_id: int | None = None,
    user=None,
    day=None,
    quota_ceiling: QuotaCeiling | None = None,
) -> Recommendation:
    """Rank the device models and templates the reader may use for ``target`` units/s of ``profile``.

    ``project_id`` (the submit page, the scheduler) or ``user`` (the library page, the API) say whose
    cards count and whose quota bounds the options; neither: the whole fleet, no quota. The quota's
    answer comes from the caller, ``quota_ceiling=apps.quotas.library.quota_ceiling`` (quotas sit above
    the library; the pages, the API and the scheduler import it); without it no option is over quota.
    """
    if not isinstance(profile, WorkloadProfile):
        profile = profile_get(profile)
    target_d = _decimal(target, "target")
    if target_d is None:
        raise ValidationFailed(_("Give a target throughput."), details={"target": ["required"]})
    latency = _decimal(latency_ms, "latency_ms")
    vendors = sorted({str(v).lower() for v in vendors or [] if str(v).strip()})
    unknown = [
        v for v in vendors if v not in {c for c, _label in DeviceModel._meta.get_field("vendor").choices}
    ]
    if unknown:
        raise ValidationFailed(
            _("Unknown vendors: %(list)s.") % {"list": ", ".join(unknown)}, details={"vendors": unknown}
        )

    project_ids = _project_ids(project_id, user)
    per_node_count, pools, nics = _fleet(project_ids)
    models = [
        m for m in DeviceModel.objects.filter(pk__in=per_node_count) if not vendors or m.vendor in vendors
    ]
    coefficients = coefficients_on([m.pk for m in models], on=day)
    by_model: dict[int, list[Measurement]] = defaultdict(list)
    for m in (
        Measurement.objects.filter(profile=profile, device_model__in=models)
        .select_related("template")
        .order_by("-measured_at", "-id")
    ):
        by_model[m.device_model_id].append(m)
    templates: dict[int, list[ComputeTemplate]] = defaultdict(list)
    for t in ComputeTemplate.objects.filter(device_model__in=models, is_retired=False).order_by(
        "compute_share", "name"
    ):
        if Decimal(t.compute_share) < 100:
            templates[t.device_model_id].append(t)
    communicating = not profile.latency_bound

    options: list[Option] = []
    for model in models:
        cards_per_node = max(per_node_count[model.pk].values())
        usable = sum(per_node_count[model.pk].values())
        cross_key = cross_link(list(nics[model.pk].values()))
        fitted = fit_intra(by_model.get(model.pk, []), cards_per_node) if communicating else None
        shapes = [(None, Decimal(100), model.memory_mib)] + [
            (t, Decimal(t.compute_share), t.memory_mib) for t in templates[model.pk]
        ]
        for template, share, memory in shapes:
            option = Option(device_model=model, template=template, share=share, memory_mib=memory)
            option.unit = profile.unit
            option.coefficient = coefficients.get(model.pk)
            slots_per_card = 1
            if template is not None:
                slots_per_card = template.max_instances or int(Decimal(100) // share) or 1
            option.per_node = cards_per_node * slots_per_card
            option.usable_cards = usable
            options.append(option)
            if profile.memory_mib and memory is not None and memory < profile.memory_mib:
                option.reason = _("%(have)s MiB per instance is less than the profile's %(need)s MiB") % {
                    "have": format_number(memory, grouping=True),
                    "need": format_number(profile.memory_mib, grouping=True),
                }
                continue
            intra_key = intra_link(model, template)
            rows = by_model.get(model.pk, [])
            intra, cross = link_efficiency(
                option, intra_key, cross_key, fitted, rows, cards_per_node, communicating
            )
            if communicating and any(m.cards == 1 for m in rows):
                # Per-card figures of a communicating profile come from single-card runs: a multi-card
                # run's per-card figure already carries its scaling loss (it refines the efficiency).
                rows = [m for m in rows if m.cards == 1]
            _estimate(option, rows, profile, latency)
            if option.per_instance is None or option.per_instance <= 0:
                option.per_instance = None
                continue
            memory_min = _memory_need(option, profile, memory)
            if memory_min is None:
                continue
            instances, eff = instances_needed(option, target_d, memory_min, intra, cross, communicating)
            option.instances = instances
            option.nodes = math.ceil(instances / option.per_node)
            option.efficiency = eff.quantize(Decimal("0.0001"))
            if communicating and instances > 1:
                option.links = [intra_key] + ([cross_key] if option.nodes > 1 else [])
            option.over_capacity = instances > usable * slots_per_card
            option.per_instance = option.per_instance.quantize(Q4, rounding=ROUND_HALF_UP)
            option.fits = "several" if instances > 1 else ("slice" if share < 100 else "card")
            if option.coefficient is None:
                option.reason = _("the model has no compute coefficient")
                continue
            _costs(
                option,
                target=target_d,
                instances=instances,
                project_id=project_id,
                project_ids=project_ids,
                pool_ids=pools[model.pk],
                quota_ceiling=quota_ceiling,
                price_of=PRICE_PER_CU_HOUR.first,
            )

    return Recommendation(profile, target_d, latency, vendors, options, _rank(options))


def _rank(options: list[Option]) -> str:
    """Sort ``options`` best first (trusted, then projects' own reports, then over quota or capacity, then
    no data); by money per million units when every option with data has a price. Returns the measure."""
    priced = [o for o in options if o.cu_hours_per_million is not None]
    by_money = bool(priced) and all(o.money_per_million is not None for o in priced)

    def key(o: Option):
        if o.cu_hours_per_million is None:
            return (3, Decimal(0), o.label)
        tier = 2 if (o.over_quota or o.over_capacity) else (0 if o.trusted else 1)
        return (tier, o.money_per_million if by_money else o.cu_hours_per_million, o.label)

    options.sort(key=key)
    return "money_per_million" if by_money else "cu_hours_per_million"


def profiles_summary() -> list[dict]:
    """Every profile with its measurement counts (``recommend --profiles``)."""
    from django.db.models import Count, Q

    rows = WorkloadProfile.objects.annotate(
        measurements_total=Count("measurements"),
        measurements_synthetic=Count("measurements", filter=Q(measurements__synthetic=True)),
        models_measured=Count("measurements__device_model", distinct=True),
    ).order_by("key")
    return [
        {
            "profile": p.key,
            "name": p.name,
            "unit": p.unit,
            "framework": p.framework,
            "precision": p.precision,
            "memory_mib": p.memory_mib,
            "latency_bound": p.latency_bound,
            "measurements": p.measurements_total,
            "synthetic": p.measurements_synthetic,
            "device_models": p.models_measured,
        }
        for p in rows
    ]
