"""Fault handling as data: the runbook of seed 000 §4.3 and the classification of failures into it.

``apps/scheduling/data/runbook.yaml`` holds each entry (symptom, likely causes, checks, fixes in
Chinese and English, and the patterns that recognise it). ``classify_failure`` turns a failure text
(pod status reason / message, exit code, event) into an entry key; failed jobs and device events link
to the entry, and an entry marked ``hardware`` (a lost card) is a hardware fault: contained with
proportion (below) — the card cordoned, the node quarantined only for a node-level fault.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from apps.core.stored_text import stored

RUNBOOK_FILE = Path(__file__).resolve().parent / "data" / "runbook.yaml"


@dataclass(frozen=True)
class RunbookEntry:
    key: str
    symptom: dict
    causes: dict
    checks: dict
    fixes: dict
    hardware: bool
    patterns: tuple[re.Pattern, ...]

    def text(self, field: str, language: str) -> str:
        values = getattr(self, field)
        return values.get("zh" if language.lower().startswith("zh") else "en") or values.get("en", "")


@cache
def runbook() -> tuple[RunbookEntry, ...]:
    entries = yaml.safe_load(RUNBOOK_FILE.read_text(encoding="utf-8"))
    return tuple(
        RunbookEntry(
            key=e["key"],
            symptom=e["symptom"],
            causes=e["causes"],
            checks=e["checks"],
            fixes=e["fixes"],
            hardware=bool(e.get("hardware", False)),
            patterns=tuple(re.compile(p, re.IGNORECASE) for p in e.get("match", [])),
        )
        for e in entries
    )


def runbook_entry(key: str) -> RunbookEntry | None:
    return next((e for e in runbook() if e.key == key), None)


# Hardware first: "Xid 79 … out of memory" is a lost card, not the workload's memory.
_ORDER = ("device_lost", "runtime_mismatch", "device_not_visible", "out_of_memory", "topology_slow")


def classify_failure(text: str, exit_code: int | None = None) -> str:
    """The runbook key a failure text points at, or "" when none matches."""
    entries = {e.key: e for e in runbook()}
    keys = [k for k in _ORDER if k in entries] + [k for k in entries if k not in _ORDER]
    for key in keys:
        if any(p.search(text or "") for p in entries[key].patterns):
            return key
    if exit_code == 137 and "oom" in (text or "").lower():
        return "out_of_memory"
    return ""


def is_hardware_fault(key: str) -> bool:
    entry = runbook_entry(key) if key else None
    return bool(entry and entry.hardware)


# --------------------------------------------------------------------------------------------------
# containment with proportion
#
# Suanchi's node quarantine is the taint ``suanchi.io/quarantine=true:NoExecute``; the taint-eviction
# controller deletes every pod on the node that does not tolerate it — healthy jobs included
# (kubernetes/kubernetes pkg/controller/tainteviction; Kubernetes docs "Taints and Tolerations" →
# NoExecute). So a fault is contained at its own size:
#
# * one card's fault (a pod failing with a hardware cause, a card the agent reports lost, a critical
#   telemetry health event on one device) cordons that card — no new allocation on it — and retries
#   only the job on it (without using up a retry), with the cause in its event; the node's other jobs
#   keep running;
# * a node-level fault (Kubernetes NotReady, a failed gray batch, an operator's quarantine, or
#   ``NODE_FAULT_INCIDENTS`` separate card faults on one node) quarantines the node; every job on it
#   is retried elsewhere from its checkpoint, one event each naming the cause
#   (``node_moved``, called by ``node_status_change``, the way every caller above the ledger moves
#   a node, and by the ledger CSV import).

# Separate card-fault incidents (distinct cordon reasons) on one node that make it a node fault.
NODE_FAULT_INCIDENTS = 2
# Cordon reasons Suanchi writes for a hardware fault start with this marker (counted as incidents).
FAULT_CORDON_PREFIX = "hardware fault: "

# Texts stored in reasons and events, shown in the reader's language (apps.core.stored_text).
FAULT_CORDON = stored("hardware fault: %(cause)s")  # FAULT_CORDON_PREFIX + the cause
CARD_FAULT = stored("hardware fault on card %(cards)s (cordoned): %(cause)s")
CARDS_FAILED = stored("%(count)s cards failed on this node; latest: %(cause)s")
NODE_QUARANTINED = stored("node %(node)s quarantined (NoExecute): %(cause)s")


def _jobs_on(**allocation_filter):
    from apps.jobs.models import ACTIVE_STATES, Allocation, Job

    job_ids = Allocation.objects.filter(
        released_at__isnull=True,
        releasing_since__isnull=True,
        job__state__in=ACTIVE_STATES,
        **allocation_filter,
    ).values_list("job_id", flat=True)
    return list(Job.objects.filter(pk__in=list(job_ids)).order_by("pk"))


def _retry(job, *, reason: str, actor, failure_class: str, ended_on: list[str] | None = None) -> str:
    from apps.scheduling.lifecycle import job_retry_or_fail

    return job_retry_or_fail(
        job=job,
        reason=reason,
        actor=actor,
        count_attempt=False,  # the hardware, not the workload, ended the attempt
        failure_class=failure_class,
        # Not avoided by the next attempt: the fault is contained by the cordon / quarantine itself,
        # and a node released from quarantine must take its jobs again.
        ended_on=ended_on,
    )


def node_fault_incidents(node) -> int:
    """Separate card faults on ``node`` now: distinct fault cordons, plus cards reported lost."""
    from apps.inventory.models import Device

    cards = Device.objects.filter(node=node).exclude(health=Device.Health.RETIRED)
    cordons = set(
        cards.filter(cordoned=True, cordon_reason__startswith=FAULT_CORDON_PREFIX)
        .exclude(health=Device.Health.LOST)
        .values_list("cordon_reason", flat=True)
    )
    return len(cordons) + cards.filter(health=Device.Health.LOST).count()


def cards_fault(*, devices: list, reason: str, actor) -> list[str]:
    """One hardware fault on ``devices`` (cards of one node): cordon them, retry the jobs running
    on them, and quarantine the node once it has ``NODE_FAULT_INCIDENTS`` separate card faults.
    Returns the names of the nodes this quarantined."""
    from django.db import transaction

    from apps.inventory.models import Node
    from apps.inventory.services.ledger import device_cordon

    if not devices:
        return []
    quarantined: list[str] = []
    with transaction.atomic():
        for device in devices:
            if not device.cordoned:
                device_cordon(
                    device=device, cordoned=True, reason=(FAULT_CORDON_PREFIX + reason)[:300], actor=actor
                )
        names = ", ".join(str(d) for d in devices)
        for job in _jobs_on(device__in=[d.pk for d in devices]):
            _retry(
                job,
                reason=CARD_FAULT % {"cards": names, "cause": reason},
                actor=actor,
                failure_class="device_lost",
            )
        for node in Node.objects.filter(pk__in={d.node_id for d in devices}).order_by("pk"):
            if node.status in (Node.Status.QUARANTINED, Node.Status.RETIRED):
                continue
            incidents = node_fault_incidents(node)
            if incidents >= NODE_FAULT_INCIDENTS:
                node_quarantine(
                    node=node,
                    reason=CARDS_FAILED % {"count": incidents, "cause": reason},
                    actor=actor,
                )
                quarantined.append(node.name)
    return quarantined


def job_hardware_fault(*, job, attempt: int, nodes: list[str], reason: str, actor) -> list[str]:
    """An attempt of ``job`` failed with a hardware cause on ``nodes`` (reconcile, after retrying the
    job): the cards that attempt held there are the suspects — only the lost ones when the ledger
    knows which — and are cordoned as one fault. Returns the nodes this quarantined."""
    from apps.inventory.models import Device
    from apps.jobs.models import Allocation

    device_ids = Allocation.objects.filter(job=job, attempt=attempt, node__name__in=nodes).values_list(
        "device_id", flat=True
    )
    devices = list(Device.objects.filter(pk__in=list(device_ids)).select_related("node").order_by("pk"))
    lost = [d for d in devices if d.health == Device.Health.LOST]
    quarantined: list[str] = []
    by_node: dict[int, list] = {}
    for device in lost or devices:
        by_node.setdefault(device.node_id, []).append(device)
    for group in by_node.values():
        quarantined += cards_fault(devices=group, reason=reason, actor=actor)
    return quarantined


def device_fault_events(events, *, actor) -> list[str]:
    """Critical device events (telemetry's XID / uncorrectable ECC / unhealthy, written by
    ``apps.telemetry.services``): each card with one is a card fault of its own. Returns the nodes
    this quarantined."""
    from apps.inventory.models import Device, DeviceEvent

    causes: dict[int, str] = {}
    for event in events:
        if event.device_id and event.severity == DeviceEvent.Severity.CRITICAL:
            causes.setdefault(event.device_id, event.message)
    if not causes:
        return []
    quarantined: list[str] = []
    devices = (
        Device.objects.filter(pk__in=list(causes))
        .exclude(health=Device.Health.RETIRED)
        .select_related("node")
        .order_by("pk")
    )
    for device in devices:
        if device.cordoned and device.cordon_reason.startswith(FAULT_CORDON_PREFIX):
            continue  # already contained
        quarantined += cards_fault(devices=[device], reason=causes[device.pk], actor=actor)
    return quarantined


def node_quarantine(*, node, reason: str, actor) -> bool:
    """A node-level fault: quarantine the node (its NoExecute taint goes out through the outbox;
    ``node_moved`` retries its jobs). False when it already is quarantined or retired."""
    from apps.inventory.models import Node

    if node.status in (Node.Status.QUARANTINED, Node.Status.RETIRED):
        return False
    node_status_change(node=node, status=Node.Status.QUARANTINED, reason=reason[:300], actor=actor)
    return True


def node_status_change(*, node, status: str, reason: str = "", actor):
    """Move a node through the ledger's state machine (``apps.inventory.services.ledger.node_status_set``)
    and do what that means for the jobs on it (``node_moved``), in one transaction. Every caller
    above the ledger (pages, API, admin actions, tasks, fault detection, gray batches) moves a node
    with this. Returns the node."""
    from django.db import transaction

    from apps.inventory.services.ledger import node_status_move

    with transaction.atomic():
        moved, previous = node_status_move(node=node, status=status, reason=reason, actor=actor)
        if previous is not None:
            node_moved(node=moved, previous=previous, reason=(reason or "").strip(), actor=actor)
    return moved


def node_moved(*, node, previous: str, reason: str = "", actor=None) -> None:
    """``node`` moved from ``previous`` to ``node.status`` (in the caller's transaction): a changed
    status taint (maintenance, quarantine) is queued for Kubernetes (the Node patch); into
    quarantine, its jobs are retried elsewhere (``_node_quarantined``); from quarantine back to
    ready, the jobs whose attempt ended there wake (``service_nodes.node_released``). Also passed
    to the ledger CSV import, which moves nodes too."""
    from apps.clusters.outbox import node_patch_enqueue
    from apps.inventory.models import Node
    from apps.inventory.services.ledger import _STATUS_TAINTS

    if _STATUS_TAINTS.get(previous) != _STATUS_TAINTS.get(node.status):
        node_patch_enqueue(node)  # the maintenance / quarantine taint reaches Kubernetes
    if node.status == Node.Status.QUARANTINED:
        _node_quarantined(node=node, reason=reason, actor=actor)
    elif previous == Node.Status.QUARANTINED and node.status == Node.Status.READY:
        from apps.scheduling.service_nodes import node_released

        node_released(node=node, actor=actor)


def _node_quarantined(*, node, reason: str = "", actor=None) -> None:
    """The ledger quarantined ``node`` (in its transaction): the NoExecute taint will evict every pod
    there, so each job on the node is retried elsewhere from its checkpoint now, without using up a
    retry, its event naming the cause. An inference service that also runs on other nodes loses
    only its replicas on this one (``service_nodes.service_nodes_lost``). The quarantine, not the
    job, ended these attempts: the node is not avoided once it is released."""
    from apps.scheduling.service_nodes import service_nodes_lost

    why = NODE_QUARANTINED % {"node": node.name, "cause": reason or "-"}
    for job in _jobs_on(node=node):
        if service_nodes_lost(job=job, nodes=[node.name], reason=why, actor=actor or "ledger"):
            continue
        _retry(
            job, reason=why, actor=actor or "ledger", failure_class="node_quarantined", ended_on=[node.name]
        )
