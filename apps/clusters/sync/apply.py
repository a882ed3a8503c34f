"""Writing the ledger from what Kubernetes says, in one transaction: new nodes and their cards,
Ready / allocatable / label / taint / slice drift (an event each), the pending nodes it confirms."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.clusters.health import sync_outcome_log
from apps.clusters.manifests import node_patch, pci_address_sysfs
from apps.clusters.models import PushAction
from apps.clusters.outbox import object_stream, push_object_enqueue
from apps.clusters.sync.kube import (
    _MODEL_LABELS,
    DEFAULT_POOL_SLUG,
    POOL_LABEL,
    SUANCHI_PREFIX,
    WHOLE_DEVICE_RESOURCES,
    NodeView,
    SliceDevice,
    cluster_read,
    driver_vendor,
    nodes_parse,
    slices_parse,
)
from apps.core.audit import actor_fields, change_record_create
from apps.core.errors import ValidationFailed
from apps.core.stored_text import stored
from apps.inventory.models import Cluster, Device, DeviceEvent, Node, Pool
from apps.inventory.services.discovery import node_confirm_in_cluster
from apps.inventory.services.ledger.events import device_event_create
from apps.inventory.services.ledger.nodes import Registration, node_register

# Texts stored in node and device events, shown in the reader's language (apps.core.stored_text).
NODE_FOUND = stored("node %(name)s found in Kubernetes by cluster sync (pool %(pool)s, %(cards)d cards)")
LABELS_KEPT = stored("labels or taints of node %(name)s changed outside Suanchi; kept: %(keys)s")
LABELS_RESTORING = stored(
    "Suanchi's labels or taints on node %(name)s were changed outside Suanchi (%(keys)s); restoring them"
)
LABELS_OK = stored("Suanchi's labels and taints on node %(name)s are as the ledger wants")
NOT_READY = stored("Kubernetes reports node %(name)s NotReady (%(reason)s)")
READY_AGAIN = stored("Kubernetes reports node %(name)s Ready again")
LISTED_AGAIN = stored("node %(name)s is listed by Kubernetes again")
PLUGIN_DROPPED = stored(
    "node %(name)s: Kubernetes can allocate %(alloc)d %(res)s but the ledger has %(have)d healthy cards: the device plugin dropped %(short)d"
)
ALLOCATABLE_OK = stored("node %(name)s: %(res)s allocatable matches the ledger again")
CARD_UUID = stored("card %(index)d of node %(name)s: UUID %(uuid)s from ResourceSlice %(slice)s")
SLICE_UNKNOWN_DEVICE = stored(
    "ResourceSlice %(slice)s of driver %(driver)s publishes device %(uuid)s on node %(name)s; the ledger lacks it"
)
SLICE_DEVICE_OK = stored("device %(uuid)s of node %(name)s is in the ledger")
CARD_MIG_DEVICES = stored(
    "card %(index)d of node %(name)s: MIG devices %(devices)s published by the NVIDIA DRA driver"
)
CARD_AMD_DEVICES = stored(
    "card %(index)d of node %(name)s: devices %(devices)s published by the AMD GPU DRA driver"
)
CARD_NOT_PUBLISHED = stored(
    "card %(uuid)s of node %(name)s is in the ledger but in no ResourceSlice of its driver"
)
CARD_PUBLISHED = stored("card %(uuid)s of node %(name)s is published again")
NODE_NOT_LISTED = stored("node %(name)s is in the ledger but Kubernetes no longer lists it")
TAINTS = stored("taints")  # a parameter of LABELS_KEPT / LABELS_RESTORING

# --------------------------------------------------------------------------------------------------
# writing the ledger


@dataclass
class SyncReport:
    cluster: str
    dry_run: bool
    nodes: list[dict] = field(default_factory=list)
    slices: list[dict] = field(default_factory=list)
    drift: list[dict] = field(default_factory=list)
    created_nodes: list[str] = field(default_factory=list)
    created_devices: int = 0
    confirmed: list[str] = field(default_factory=list)
    events: int = 0
    patches: int = 0

    def as_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> dict:
        return {
            "nodes": len(self.nodes),
            "created": len(self.created_nodes),
            "drift": len(self.drift),
            "events": self.events,
            "patches": self.patches,
        }


class _Sync:
    def __init__(self, cluster: Cluster, report: SyncReport, actor: Any):
        self.cluster, self.report, self.actor = cluster, report, actor
        self.actor_label = actor_fields(actor)["actor_label"][:150]

    def drift(
        self,
        node: Node,
        key: str,
        state: dict,
        normal: dict,
        *,
        kind: str,
        message: str,
        severity: str = DeviceEvent.Severity.WARNING,
        device: Device | None = None,
    ) -> None:
        """Note the drift ``key`` of ``node`` in ``state``; an event only when that differs from the
        last state recorded for the key (no record yet = ``normal``)."""
        if state != normal:
            self.report.drift.append({"node": node.name, "drift": key, **state, "message": message})
        last = (
            DeviceEvent.objects.filter(node=node, after__drift=key)
            .order_by("-created_at", "-id")
            .values_list("after", flat=True)
            .first()
        )
        previous = {k: v for k, v in last.items() if k != "drift"} if last else normal
        if previous == state:
            return
        device_event_create(
            node=node,
            device=device,
            kind=kind,
            severity=severity if state != normal else DeviceEvent.Severity.INFO,
            message=message[:500],
            before={"drift": key, **previous},
            after={"drift": key, **state},
            actor_label=self.actor_label,
        )
        self.report.events += 1


def _pool_for(cluster: Cluster, labels: dict[str, str]) -> Pool:
    slug = labels.get(POOL_LABEL)
    if slug:
        pool = Pool.objects.filter(cluster=cluster, slug=slug).first()
        if pool is not None:
            return pool
    pool, _created = Pool.objects.get_or_create(
        cluster=cluster, slug=DEFAULT_POOL_SLUG, defaults={"name": f"{cluster.name} default"}
    )
    return pool


def _cards(view: NodeView) -> dict[str, int]:
    """vendor -> whole cards in capacity."""
    out: dict[str, int] = {}
    for res, n in view.capacity.items():
        vendor = WHOLE_DEVICE_RESOURCES.get(res)
        if vendor:
            out[vendor] = out.get(vendor, 0) + n
    return out


def _node_create(s: _Sync, view: NodeView) -> Node:
    pool = _pool_for(s.cluster, view.labels)
    model = next((view.labels[k] for k in _MODEL_LABELS if view.labels.get(k)), "")
    cards = _cards(view)
    node, devices = node_register(
        cluster=s.cluster,
        name=view.name,
        actor=s.actor,
        values={"pool": pool, "labels": view.labels, "taints": view.taints},
        cards=[
            {"vendor": vendor, "index": index, "raw_model_name": model[:150]}
            for vendor, count in sorted(cards.items())
            for index in range(count)
        ],
        registration=Registration(
            kind=DeviceEvent.Kind.REGISTERED,
            message=NODE_FOUND % {"name": view.name, "pool": pool.slug, "cards": sum(cards.values())},
            after={"pool": pool.slug, "cards": cards},
            audit_action="node.sync_create",
            audit_after={"cards": cards},
            audit_message=False,
        ),
    )
    s.report.created_devices += len(devices)
    s.report.events += 1
    s.report.created_nodes.append(view.name)
    return node


def _owned(key: str) -> bool:
    return key.startswith(SUANCHI_PREFIX)


def _taint_key(t: dict) -> tuple:
    return (t.get("key", ""), t.get("value", ""), t.get("effect", ""))


def _sync_labels(s: _Sync, node: Node, view: NodeView) -> None:
    """Outside changes to others' labels/taints are kept (taken into the ledger); Suanchi's are
    restored through the outbox. Both are drift events."""
    ours = {k: v for k, v in node.labels.items() if _owned(k)}
    live_ours = {k: v for k, v in view.labels.items() if _owned(k)}
    theirs_live = {k: v for k, v in view.labels.items() if not _owned(k)}
    theirs_ledger = {k: v for k, v in node.labels.items() if not _owned(k)}
    our_taints = sorted((t for t in node.taints if _owned(t.get("key", ""))), key=_taint_key)
    live_our_taints = sorted((t for t in view.taints if _owned(t.get("key", ""))), key=_taint_key)
    their_taints_live = [t for t in view.taints if not _owned(t.get("key", ""))]
    their_taints_ledger = [t for t in node.taints if not _owned(t.get("key", ""))]

    if theirs_live != theirs_ledger or sorted(map(_taint_key, their_taints_live)) != sorted(
        map(_taint_key, their_taints_ledger)
    ):
        before = {"labels": node.labels, "taints": node.taints}
        node.labels = {**theirs_live, **ours}
        node.taints = their_taints_live + [t for t in node.taints if _owned(t.get("key", ""))]
        node.save(update_fields=["labels", "taints", "updated_at"])
        changed = sorted(set(theirs_live.items()) ^ set(theirs_ledger.items()))
        device_event_create(
            node=node,
            kind=DeviceEvent.Kind.UPDATED,
            severity=DeviceEvent.Severity.INFO,
            message=(
                LABELS_KEPT
                % {"name": node.name, "keys": ", ".join(sorted({k for k, _v in changed})) or TAINTS}
            )[:500],
            before=before,
            after={"labels": node.labels, "taints": node.taints},
            actor_label=s.actor_label,
        )
        s.report.events += 1
        s.report.drift.append(
            {"node": node.name, "drift": "labels-kept", "keys": sorted({k for k, _v in changed})}
        )
        change_record_create(
            actor=s.actor,
            action="node.sync_labels",
            obj=node,
            before=before,
            after={"labels": node.labels, "taints": node.taints},
        )

    wrong = sorted(k for k in set(ours) | set(live_ours) if ours.get(k) != live_ours.get(k))
    taints_wrong = list(map(_taint_key, our_taints)) != list(map(_taint_key, live_our_taints))
    state = {"keys": wrong, "taints": taints_wrong}
    s.drift(
        node,
        "suanchi-labels",
        state,
        {"keys": [], "taints": False},
        kind=DeviceEvent.Kind.UPDATED,
        message=(LABELS_RESTORING % {"name": node.name, "keys": ", ".join(wrong) or TAINTS})
        if wrong or taints_wrong
        else LABELS_OK % {"name": node.name},
    )
    if not (wrong or taints_wrong):
        return
    stream = object_stream(s.cluster, "Node", "", node.name)
    if PushAction.objects.filter(cluster=s.cluster, stream=stream, state=PushAction.State.PENDING).exists():
        return  # a restoring patch is already on its way
    manifest = node_patch(node)
    for key in set(live_ours) - set(ours):  # a Suanchi label added outside: remove it (value null)
        manifest["metadata"]["labels"][key] = None
    push_object_enqueue(cluster=s.cluster, manifest=manifest, actor=s.actor, verb="patch")
    s.report.patches += 1


def _sync_node(s: _Sync, node: Node, view: NodeView, created: bool) -> None:
    s.drift(
        node,
        "ready",
        {"ready": view.ready, "reason": view.ready_reason},
        {"ready": True, "reason": ""},
        kind=DeviceEvent.Kind.NOT_READY if not view.ready else DeviceEvent.Kind.STATUS_CHANGED,
        message=(
            NOT_READY % {"name": node.name, "reason": view.ready_reason}
            if not view.ready
            else READY_AGAIN % {"name": node.name}
        ),
    )
    s.drift(
        node,
        "presence",
        {"present": True},
        {"present": True},
        kind=DeviceEvent.Kind.STATUS_CHANGED,
        message=LISTED_AGAIN % {"name": node.name},
    )
    healthy: dict[str, int] = {}
    for vendor in Device.objects.filter(node=node, health=Device.Health.HEALTHY).values_list(
        "vendor", flat=True
    ):
        healthy[vendor] = healthy.get(vendor, 0) + 1
    for res, vendor in sorted(WHOLE_DEVICE_RESOURCES.items()):
        if res not in view.capacity and res not in view.allocatable:
            continue
        have = healthy.get(vendor, 0)
        allocatable = view.allocatable.get(res, 0)
        short = max(0, have - allocatable)
        s.drift(
            node,
            f"allocatable:{res}",
            {"short": short, "allocatable": allocatable} if short else {"short": 0},
            {"short": 0},
            kind=DeviceEvent.Kind.CONFLICT,
            message=(
                PLUGIN_DROPPED
                % {"name": node.name, "alloc": allocatable, "res": res, "have": have, "short": short}
                if short
                else ALLOCATABLE_OK % {"name": node.name, "res": res}
            ),
        )
    if not created:
        _sync_labels(s, node, view)


def _card_pci(card: Device) -> str:
    return pci_address_sysfs(card.pci_bus_id)


def _slice_card(d: SliceDevice, cards: list[Device]) -> Device | None:
    """The ledger card slice device ``d`` is, or is a partition of (None: the ledger lacks it).

    A partition names its card: NVIDIA MIG devices by ``parentUUID`` (on a MIG-enabled GPU the
    driver publishes only these, not the card), AMD partitions by ``parentPciAddr``. A card is
    its UUID (NVIDIA), else its PCI address (AMD publishes no UUID) when one side has no UUID."""
    if d.physical_id is not None:  # HAMi's Ascend driver: the chip whose index is its physicalID
        return next((c for c in cards if c.index == d.physical_id), None)
    if d.parent_uuid or d.parent_pci:
        return next(
            (
                c
                for c in cards
                if (d.parent_uuid and c.uuid == d.parent_uuid)
                or (d.parent_pci and _card_pci(c) == d.parent_pci)
            ),
            None,
        )
    if d.uuid:
        match = next((c for c in cards if c.uuid == d.uuid), None)
        if match is not None:
            return match
    if d.pci:
        return next((c for c in cards if _card_pci(c) == d.pci and not (d.uuid and c.uuid)), None)
    return None


def _uuid_learn(s: _Sync, node: Node, card: Device, d: SliceDevice) -> None:
    """A card the ledger knows by PCI address only takes the UUID its driver publishes."""
    if card.uuid or not d.uuid or d.parent_uuid or Device.objects.filter(uuid=d.uuid).exists():
        return
    before = {"uuid": card.uuid}
    card.uuid = d.uuid
    card.save(update_fields=["uuid", "updated_at"])
    device_event_create(
        node=node,
        device=card,
        kind=DeviceEvent.Kind.UPDATED,
        message=(CARD_UUID % {"index": card.index, "name": node.name, "uuid": d.uuid, "slice": d.slice})[
            :500
        ],
        before=before,
        after={"uuid": d.uuid},
        actor_label=s.actor_label,
    )
    s.report.events += 1


def _mig_learn(s: _Sync, node: Node, card: Device, published: list[dict[str, Any]]) -> None:
    """Keep the MIG devices the NVIDIA DRA driver publishes for ``card`` (their own UUIDs, profiles and
    placements) so a MIG claim selects exactly the ledger's instance; an event when they change."""
    published = sorted(published, key=lambda m: (m["start"] is None, m["start"] or 0, m["uuid"]))
    if (card.dra_mig_devices or []) == published:
        return
    before = {"dra_mig_devices": card.dra_mig_devices or []}
    card.dra_mig_devices = published
    card.save(update_fields=["dra_mig_devices", "updated_at"])
    shown = ", ".join(f"{m['profile']}@{m['start']} {m['uuid']}" for m in published) or "-"
    device_event_create(
        node=node,
        device=card,
        kind=DeviceEvent.Kind.UPDATED,
        message=(CARD_MIG_DEVICES % {"index": card.index, "name": node.name, "devices": shown})[:500],
        before=before,
        after={"dra_mig_devices": published},
        actor_label=s.actor_label,
    )
    s.report.events += 1


def _amd_learn(s: _Sync, node: Node, card: Device, published: list[dict[str, Any]]) -> None:
    """Keep what the AMD GPU DRA driver publishes for ``card`` (the whole card, or its partitions and
    their mode) in ``Device.dra_mig_devices``, so a claim for a mode the card is not in is refused
    before it leaves a pod Pending (apps.clusters.manifests.amd_mode_refusal); an event on change."""
    published = sorted(published, key=lambda d: d["device"])
    if (card.dra_mig_devices or []) == published:
        return
    before = {"dra_mig_devices": card.dra_mig_devices or []}
    card.dra_mig_devices = published
    card.save(update_fields=["dra_mig_devices", "updated_at"])
    shown = ", ".join(f"{d['device']} {d['type']} {d['profile']}".strip() for d in published) or "-"
    device_event_create(
        node=node,
        device=card,
        kind=DeviceEvent.Kind.UPDATED,
        message=(CARD_AMD_DEVICES % {"index": card.index, "name": node.name, "devices": shown})[:500],
        before=before,
        after={"dra_mig_devices": published},
        actor_label=s.actor_label,
    )
    s.report.events += 1


def _sync_slices(s: _Sync, nodes: dict[str, Node], devices: list[SliceDevice]) -> None:
    by_node: dict[str, list[SliceDevice]] = {}
    for d in devices:
        by_node.setdefault(d.node, []).append(d)
    for name, items in sorted(by_node.items()):
        node = nodes.get(name)
        if node is None:
            continue  # a slice of a node Kubernetes does not list: nothing to file it under
        vendors = {driver_vendor(d.driver) for d in items} - {None}
        cards = list(
            Device.objects.filter(node=node, vendor__in=vendors)
            .exclude(health__in=[Device.Health.RETIRED, Device.Health.LOST])
            .order_by("vendor", "index")
        )
        # Cards the ledger cannot name (no UUID, no PCI address): a device of their vendor that
        # matches nothing may be one of them, so it is unknown rather than drift.
        unnamed = Counter(c.vendor for c in cards if not c.uuid and not _card_pci(c))
        published: set[int] = set()
        migs: dict[int, list[dict[str, Any]]] = {}
        for d in items:
            vendor = driver_vendor(d.driver)
            s.report.slices.append(
                {"node": name, "uuid": d.uuid, "pci": d.pci, "driver": d.driver, "device": d.device}
            )
            if vendor is None or not (
                d.uuid or d.pci or d.parent_uuid or d.parent_pci or d.physical_id is not None
            ):
                continue
            match = _slice_card(d, [c for c in cards if c.vendor == vendor])
            if match is not None:
                published.add(match.pk)
                _uuid_learn(s, node, match, d)
                record = d.mig_record() if match.vendor == "nvidia" else d.amd_record()
                mig_list = migs.setdefault(match.pk, [])
                if record is not None:
                    mig_list.append(record)
            elif unnamed[vendor] > 0 and not (d.parent_uuid or d.parent_pci):
                unnamed[vendor] -= 1
                continue
            s.drift(
                node,
                f"slice-device:{d.key}",
                {"in_ledger": match is not None},
                {"in_ledger": True},
                kind=DeviceEvent.Kind.CONFLICT,
                message=(
                    SLICE_UNKNOWN_DEVICE % {"slice": d.slice, "driver": d.driver, "uuid": d.key, "name": name}
                    if match is None
                    else SLICE_DEVICE_OK % {"uuid": d.key, "name": name}
                ),
            )
        for card in cards:
            if card.pk in migs and card.vendor == "nvidia":
                _mig_learn(s, node, card, migs[card.pk])
            elif card.pk in migs and card.vendor == "amd":
                _amd_learn(s, node, card, migs[card.pk])
            ident = card.uuid or _card_pci(card)
            if not ident:
                continue
            present = card.pk in published
            s.drift(
                node,
                f"ledger-device:{ident}",
                {"in_slice": present},
                {"in_slice": True},
                kind=DeviceEvent.Kind.CONFLICT,
                device=card,
                message=(
                    CARD_NOT_PUBLISHED % {"uuid": ident, "name": name}
                    if not present
                    else CARD_PUBLISHED % {"uuid": ident, "name": name}
                ),
            )


def cluster_sync_apply(
    *,
    cluster: Cluster,
    nodes: list[dict],
    slices: list[dict] | None = None,
    dry_run: bool = False,
    actor: Any = "cluster-sync",
) -> SyncReport:
    """Compare Kubernetes' Nodes (and ResourceSlices, when given) with the ledger of ``cluster``.

    Checks the input first (``ValidationFailed``, nothing written), then writes in one transaction
    (rolled back when ``dry_run``: the report says what a sync would do)."""
    views = nodes_parse(nodes)
    slice_devices = slices_parse(slices) if slices is not None else None
    report = SyncReport(cluster=cluster.slug, dry_run=dry_run)
    with transaction.atomic():
        locked = Cluster.objects.select_for_update().get(pk=cluster.pk)
        s = _Sync(locked, report, actor)
        ledger = {
            n.name: n for n in Node.objects.filter(cluster=locked).select_related("pool").order_by("pk")
        }
        seen: dict[str, Node] = {}
        for view in views:
            node = ledger.get(view.name)
            created = node is None
            if created:
                node = _node_create(s, view)
            seen[view.name] = node
            _sync_node(s, node, view, created)
            report.nodes.append(
                {
                    "name": view.name,
                    "ready": view.ready,
                    "ready_reason": view.ready_reason,
                    "capacity": view.capacity,
                    "allocatable": view.allocatable,
                    "pool": node.pool.slug if node.pool_id else None,
                    "created": created,
                }
            )
        for name, node in sorted(ledger.items()):
            if name in seen or node.status == Node.Status.RETIRED or node.pending_approval:
                continue
            s.drift(
                node,
                "presence",
                {"present": False},
                {"present": True},
                kind=DeviceEvent.Kind.STATUS_CHANGED,
                message=NODE_NOT_LISTED % {"name": name},
            )
        if slice_devices is not None:
            _sync_slices(s, seen, slice_devices)
        report.confirmed = [
            n.name for n in node_confirm_in_cluster(cluster=locked, node_names=list(seen), actor=actor)
        ]
        if dry_run:
            transaction.set_rollback(True)
        else:
            locked.last_synced_at = timezone.now()
            locked.last_sync = {**report.summary(), "error": ""}
            locked.save(update_fields=["last_synced_at", "last_sync", "updated_at"])
    return report


def outside_changes_take(*, cluster: Cluster, nodes: list[dict], actor: Any = "cluster-sync") -> None:
    """Take the labels and taints changed outside Suanchi on these live Nodes into the ledger now, as
    the next sync would (``_sync_labels``): e.g. the NoExecute taint whose eviction reconcile just
    saw, so that the engine keeps the job's next attempt off that node while the taint is there —
    and only while it is there."""
    views = nodes_parse(nodes)
    with transaction.atomic():
        s = _Sync(cluster, SyncReport(cluster=cluster.slug, dry_run=False), actor)
        ledger = {n.name: n for n in Node.objects.filter(cluster=cluster, name__in=[v.name for v in views])}
        for view in views:
            if view.name in ledger:
                _sync_labels(s, ledger[view.name], view)


def cluster_sync(*, cluster: Cluster, actor: Any = "cluster-sync") -> SyncReport:
    """Read the live cluster (outside any transaction), then apply. A simulated cluster has no
    Kubernetes API to read: ``ValidationFailed``."""
    from apps.clusters.backends.errors import BackendError

    if cluster.backend != Cluster.Backend.KUBERNETES:
        raise ValidationFailed(
            _("cluster %(slug)s is simulated: there is no Kubernetes API to sync from")
            % {"slug": cluster.slug}
        )
    previous = cluster.last_sync or {}
    try:
        nodes, slices = cluster_read(cluster)
    except BackendError as e:
        Cluster.objects.filter(pk=cluster.pk).update(
            last_sync={"error": e.message[:500]}, updated_at=timezone.now()
        )
        sync_outcome_log(cluster, previous=previous, error=e.message)  # one line per change
        raise
    report = cluster_sync_apply(cluster=cluster, nodes=nodes, slices=slices, actor=actor)
    sync_outcome_log(cluster, previous=previous, error="")
    return report
