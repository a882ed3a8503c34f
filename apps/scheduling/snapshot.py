"""The ledger as an engine Snapshot: nodes, devices, pools and the active allocations."""

from __future__ import annotations

import gc
import json
import threading
import time
from collections import defaultdict, namedtuple
from contextlib import contextmanager, suppress

from django.db import connection
from django.db.models import TextField
from django.db.models.functions import Cast

from apps.catalog.mig import device_geometry
from apps.clusters.models import ClusterPreference
from apps.core.bulk import among
from apps.core.process_state import register_reset
from apps.inventory.models import Device, Node, Pool
from apps.jobs.models import Allocation
from apps.scheduling.engine.model import (
    WHOLE,
    CapacityError,
    DeviceState,
    NodeState,
    Placement,
    PoolInfo,
    Snapshot,
    Taint,
)
from apps.scheduling.engine.share import overcommit_pct

# Vendor device kinds, for cards whose model the catalog does not know.
_KIND_BY_VENDOR = {
    "nvidia": "gpu",
    "amd": "gpu",
    "huawei": "npu",
    "hygon": "dcu",
    "cambricon": "mlu",
    "intel": "hpu",
}
_LINK_FEATURES = {"nvidia": "nvlink", "huawei": "hccs", "amd": "xgmi", "cambricon": "mlulink"}


def _card_static(device: _DeviceRow, rdma: bool, memo: dict) -> tuple:
    """``(kind, model, memory_mib, features, mig)`` of one card: what its catalog model, vendor,
    topology group, node's RDMA and MIG listing make of it. Cards alike share one answer (``memo``, one
    per snapshot build): at 80,000 cards, working it out card by card was a third of a rebuild."""
    key = (
        device.device_model_id,
        device.vendor,
        device.raw_model_name,
        device.memory_mib,
        rdma,
        bool(device.topology_group),
        device.mig_profiles,
    )
    known = memo.get(key)
    if known is not None:
        return known
    model = device.device_model
    listing = [] if device.mig_profiles == "[]" else _json_text(device.mig_profiles)  # most cards: none
    features = set(model.features or []) if model else set()
    if rdma:
        features.add("rdma")
    if device.topology_group and device.vendor in _LINK_FEATURES:
        features.add(_LINK_FEATURES[device.vendor])
    name = model.name if model else device.raw_model_name
    known = memo[key] = (
        model.kind if model else _KIND_BY_VENDOR.get(device.vendor, "gpu"),
        name,
        (model.memory_mib if model and model.memory_mib else device.memory_mib) or 0,
        frozenset(features),
        # MIG geometry (placements) of the card: its model's sourced data, overridden by the card's own
        # nvidia-smi mig -lgipp listing; None keeps sizing by share and memory (apps/catalog/mig.py).
        device_geometry(name, listing) if (model and model.mig_profiles) or listing else None,
    )
    return known


def _device_state(
    device: _DeviceRow, *, gray_opt_in: bool, empty: bool, rdma: bool, memo: dict
) -> DeviceState:
    kind, model, memory, features, mig = _card_static(device, rdma, memo)
    # Quarantined and cordoned cards take nothing new (running work on them continues); gray cards
    # (gray-release soak) only serve jobs that opted in — the engine checks the request's flag.
    schedulable = device.pool_status != Device.PoolStatus.QUARANTINE and not device.cordoned
    gray = device.pool_status == Device.PoolStatus.GRAY and not gray_opt_in
    healthy = device.health == Device.Health.HEALTHY
    if empty:  # "could this ever fit": ignore transient state, keep what is permanent
        schedulable, healthy, gray = True, True, False
    return DeviceState(
        str(device.pk),
        device.index,
        kind=kind,
        vendor=device.vendor,
        model=model,
        memory_mib=memory,
        features=features,
        topology_group=device.topology_group,
        pcie_switch=device.pcie_switch,
        numa_node=device.numa_node,
        owner_project=device.owner_slug,
        healthy=healthy,
        schedulable=schedulable,
        gray=gray,
        mig=mig,
    )


def _node_state(
    node: _NodeRow, devices: list[_DeviceRow], *, empty: bool, gray_opt_in: bool, memo: dict
) -> NodeState:
    """The engine's state of one node and its cards, built from the rows directly (no record dicts in
    between: ``Snapshot.from_records`` reading them back was a third of a 10,000-node rebuild)."""
    rdma = bool(node.rdma_nics)
    return NodeState(
        node.name,
        cpu_milli=(node.cpu_cores or 0) * 1000,
        memory_mib=node.memory_mib or 0,
        devices=[
            _device_state(d, gray_opt_in=gray_opt_in, empty=empty, rdma=rdma, memo=memo) for d in devices
        ],
        pool=(node.pool_slug if node.pool_id else "") or "",
        status="ready" if empty else node.status,
        status_reason=node.status_reason,
        labels=node.labels or {},
        # Maintenance / quarantine taints are transient: a feasibility check ignores them.
        taints=[
            Taint(t.get("key", ""), t.get("value", ""), t.get("effect", "NoSchedule"))
            for t in node.taints or []
            if not (empty and t.get("key", "").startswith("suanchi.io/"))
        ],
        switch=node.switch or "",
        zone=node.zone or "",
        cluster=node.cluster_slug or "",  # a hard boundary for one job (engine/clusters.py)
        owner_project=None,
    )


def _fleet_states(nodes: list[_NodeRow], *, empty: bool, gray_opt_in: bool) -> Snapshot:
    """A snapshot of ``nodes`` and their cards (no placements), with the pools and cluster preferences."""
    by_node = _devices_by_node([n.pk for n in nodes], empty=empty)
    snapshot = Snapshot(pools=[PoolInfo(**p) for p in _pool_records()])
    memo: dict = {}
    with collector_paused():
        for node in nodes:
            snapshot.add_node(
                _node_state(node, by_node.get(node.pk, []), empty=empty, gray_opt_in=gray_opt_in, memo=memo)
            )
    snapshot.cluster_preference = cluster_preferences()
    return snapshot


@contextmanager
def collector_paused():
    """The garbage collector off for a while (the state it was in restored after): while the cards'
    states are built, and for a whole scheduling cycle (``services``). Hundreds of thousands of new,
    long-lived objects with no cycles among them set off full collections that traversed all of them
    again and again (a fifth of a 10,000-node rebuild). Objects in cycles made meanwhile are
    collected by the next collection after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def cluster_preferences() -> dict[str, int]:
    """Cluster slug -> dispatch preference (lower first; a cluster without a row is 0)."""
    return dict(ClusterPreference.objects.values_list("cluster__slug", "preference"))


def _pool_records() -> list[dict]:
    return [
        {
            "name": pool.slug,
            "overcommit_pct": overcommit_pct(pool.overcommit_factor),
            "owner_project": pool.owner_project.slug if pool.owner_project_id else None,
        }
        for pool in Pool.objects.select_related("owner_project")
    ]


def _json_text(text: str | None):
    """A JSON column read as text (``_rows``), decoded only when it holds something: Django decoding
    every card's empty MIG listing (and its converter per row) was a sixth of a 10,000-node rebuild."""
    if text is None:
        return None
    if text == "[]":
        return []
    if text == "{}":
        return {}
    return json.loads(text)


def _rows(queryset, fields: tuple[str, ...], json_fields: tuple[str, ...]):
    """``values_list(*fields)``, the ``json_fields`` among them as their text (``_json_text``)."""
    texts = {f: f"{f}_text" for f in json_fields}
    queryset = queryset.annotate(**{texts[f]: Cast(f, TextField()) for f in json_fields})
    return queryset.values_list(*(texts.get(f, f) for f in fields))


class _NodeRow:
    """The columns of one node the snapshot reads (``_node_state``), without a model instance: at
    10,000 nodes, building ``Node`` instances with their pool, the pool's project and the cluster joined
    was a quarter of a rebuild."""

    FIELDS = (
        "pk",
        "name",
        "cpu_cores",
        "memory_mib",
        "pool_id",
        "pool__slug",
        "status",
        "status_reason",
        "labels",
        "taints",
        "rdma_nics",
        "switch",
        "zone",
        "cluster__slug",
    )
    JSON = ("labels", "taints", "rdma_nics")
    __slots__ = tuple(f.replace("__", "_") for f in FIELDS)

    def __init__(self, row: tuple) -> None:
        for name, value in zip(self.__slots__, row, strict=True):
            setattr(self, name, value)
        self.labels, self.taints = _json_text(self.labels), _json_text(self.taints)
        self.rdma_nics = _json_text(self.rdma_nics)


def _schedulable_nodes(node_ids=None, *, cluster=None) -> list[_NodeRow]:
    # A node pending approval (registered by an agent, not yet admitted) takes no job at all.
    nodes = Node.objects.exclude(status=Node.Status.RETIRED).exclude(pending_approval=True)
    if node_ids is not None:
        nodes = nodes.filter(among("pk", node_ids))
    if cluster is not None:
        nodes = nodes.filter(cluster=cluster)
    # Node's default ordering (its Meta), as the model instances were read in.
    return [_NodeRow(row) for row in _rows(nodes, _NodeRow.FIELDS, _NodeRow.JSON)]


# The columns of one card the snapshot reads (``_device_state``), as a tuple, not a model instance: at
# 80,000 cards, building ``Device`` instances with their model and project joined (and the model's JSON
# columns decoded once per card) was most of a rebuild, and an object with slots set one by one a
# tenth. ``mig_profiles`` is the column's text (``_json_text``); ``device_model`` the catalog row.
_DEVICE_COLUMNS = (
    "pk",
    "node_id",
    "vendor",
    "index",
    "raw_model_name",
    "memory_mib",
    "health",
    "pool_status",
    "cordoned",
    "topology_group",
    "pcie_switch",
    "numa_node",
    "mig_profiles",
    "device_model_id",
    "owner_project__slug",
)
_DeviceRow = namedtuple("_DeviceRow", (*_DEVICE_COLUMNS[:-1], "owner_slug", "device_model"))


def _devices_by_node(node_ids, *, empty: bool) -> dict[int, list[_DeviceRow]]:
    from apps.catalog.models import DeviceModel

    models = DeviceModel.objects.in_bulk()  # the catalog: tens of rows, read once
    devices = (
        Device.objects.filter(among("node_id", node_ids))
        .exclude(health=Device.Health.RETIRED)
        .order_by("node_id", "vendor", "index")
    )
    if empty:
        devices = devices.exclude(health=Device.Health.LOST)
    by_node: dict[int, list[_DeviceRow]] = defaultdict(list)
    make, model_of = _DeviceRow._make, models.get
    for row in _rows(devices, _DEVICE_COLUMNS, ("mig_profiles",)):
        by_node[row[1]].append(make((*row, model_of(row[13]))))
    return by_node


def fleet_snapshot(*, empty: bool = False, gray_opt_in: bool = False, cluster=None) -> Snapshot:
    """Every non-retired node with its cards. ``empty``: no allocations, every node ready (feasibility)."""
    nodes = _schedulable_nodes(cluster=cluster)
    snapshot = _fleet_states(nodes, empty=empty, gray_opt_in=gray_opt_in)
    if not empty:
        for placement in active_placements(node_names={n.pk: n.name for n in nodes}):
            snapshot.apply(placement)
    return snapshot


def active_placements(*, node_names: dict[int, str], job_ids=None) -> list[Placement]:
    """Active allocations grouped into one placement per job attempt (the engine's unit); only those of
    ``job_ids`` when given."""
    rows = Allocation.objects.filter(released_at__isnull=True)
    if job_ids is not None:
        rows = rows.filter(job_id__in=list(job_ids))
    rows = rows.values_list(
        "job_id",
        "replica",
        "node_id",
        "device_id",
        "device__index",
        "whole_card",
        "memory_mib",
        "compute_milli",
        "isolation",
        "partition_profile",
        "mig_start",
        "releasing_since",
    ).order_by("job_id", "replica", "device_id")
    grouped: dict[str, dict] = {}
    for (
        job_id,
        replica,
        node_id,
        device_id,
        index,
        whole,
        memory,
        compute,
        isolation,
        profile,
        start,
        releasing,
    ) in rows:
        if node_id not in node_names:
            continue
        key = placement_key(job_id, releasing is not None)
        placement = grouped.setdefault(key, {"request_id": key, "parts": {}})
        part = placement["parts"].setdefault(
            (replica, node_id), {"node": node_names[node_id], "replica": replica, "devices": []}
        )
        part["devices"].append(
            {
                "device_id": str(device_id),
                "index": index,
                "whole": whole,
                "memory_mib": memory,
                "compute": WHOLE if whole else compute,
                "isolation": isolation,
                # a MIG instance the engine placed on the card's geometry comes back at its start slot;
                # older rows (no start) come back as plain slices, as they were placed
                **({"profile": profile, "mig_start": start} if start is not None else {}),
            }
        )
    return [
        Placement.from_dict({"request_id": p["request_id"], "parts": list(p["parts"].values())})
        for p in grouped.values()
    ]


# --------------------------------------------------------------------------------------------------
# the cycle's snapshot, kept between cycles (per process) and brought up to date incrementally
#
# Like kube-scheduler's scheduler cache (pkg/scheduler/backend/cache, "UpdateSnapshot" copies only the
# nodes whose generation moved), the cycle does not rebuild the fleet from the database every time.
# Before each cycle ``SnapshotCache.refresh`` reads three version checks in one round trip:
#   - per node, a hash of the node row and the sum of its devices' row hashes (health, pool status,
#     cordon, model, topology…): only nodes whose hash moved are reloaded and patched;
#   - the active allocations' (count, sum of ids, max id): when it moved, the active ids are listed and
#     diffed, and only the jobs whose allocations appeared or disappeared are released and re-applied;
#   - a hash over the small tables the records depend on (pools, catalog, projects): any change
#     rebuilds the whole snapshot.
# Anything the patch cannot account for (a node retired or removed, a card added or removed, a
# hardware attribute changed, a placement that does not apply, the placements not matching the
# database's active jobs) rebuilds from the database; so does a snapshot older than MAX_AGE_S.
# The engine's answer is still only a proposal: persistence re-checks every card under row locks
# (services._persist), so a stale cache can cost a conflict, never an over-allocated card.

MAX_AGE_S = 600.0

_NODE_SIG_SQL = """
SELECT n.id,
       hashtext(ROW(n.name, n.status, n.pending_approval, n.pool_id, n.cpu_cores, n.memory_mib,
                    n.status_reason, n.labels::text, n.taints::text, n.rdma_nics::text, n.switch,
                    n.zone, n.cluster_id, n.driver_version, n.cuda_version, n.cann_version,
                    n.rocm_version, n.dtk_version)::text),
       COALESCE(d.h, 0), COALESCE(d.c, 0)
FROM inventory_node n
LEFT JOIN (
    SELECT node_id,
           SUM(hashtext(ROW(id, vendor, device_model_id, raw_model_name, index, memory_mib,
                            topology_group, pcie_switch, numa_node, owner_project_id, health,
                            pool_status, cordoned)::text)::bigint) AS h,
           COUNT(*) AS c
    FROM inventory_device GROUP BY node_id
) d ON d.node_id = n.id
"""
_ALLOC_FP_SQL = (
    "SELECT COUNT(*), COALESCE(SUM(id), 0), COALESCE(MAX(id), 0), COUNT(releasing_since) "
    "FROM scheduling_allocation WHERE released_at IS NULL"
)

# Allocations a job let go of whose objects may still run ("releasing", apps.scheduling.releasing)
# still take their cards, as a placement of their own: the job's next attempt is a new placement.
RELEASING_SUFFIX = ".releasing"


def placement_key(job_id: int, releasing: bool) -> str:
    return f"{job_id}{RELEASING_SUFFIX}" if releasing else str(job_id)


def _table_hash_sql(tables) -> str:
    """One text value that changes when any row of ``tables`` (model, or (model, columns)) changes."""
    parts = []
    for table in tables:
        model, columns = table if isinstance(table, tuple) else (table, None)
        row = f"ROW({', '.join('t.' + c for c in columns)})" if columns else "t"
        parts.append(
            f"(SELECT COALESCE(SUM(hashtext({row}::text)::bigint), 0) || ':' || COUNT(*) "  # noqa: S608 - model names
            f"FROM {model._meta.db_table} t)"
        )
    return " || '/' || ".join(parts)


def _static_tables():
    """Tables the snapshot's records read besides nodes and devices: a change rebuilds it."""
    from django.apps import apps

    from apps.accounts.models import Project

    # Projects: only the slug is read (owner of pools and cards); other columns change often.
    return [Pool, (Project, ("id", "slug")), *apps.get_app_config("catalog").get_models()]


def _hint_tables():
    """Tables that change what a pending job may get without touching the fleet (quotas, lending
    windows, compute coefficients): a change wakes every pending job (services' queueing hints)."""
    from django.apps import apps

    return list(apps.get_app_config("quotas").get_models())


class SnapshotChanges:
    """What ``SnapshotCache.refresh`` found changed since the last cycle, for the queueing hints."""

    def __init__(self) -> None:
        self.rebuilt = False  # built from the database (first use, or something unaccounted for)
        self.reason = ""
        self.nodes_patched: list[str] = []  # status / taints / labels / pool / card health changed
        self.nodes_added: list[str] = []
        self.freed: set[tuple[str, str]] = set()  # (vendor, model) of cards whose allocations ended
        self.released_jobs: set[str] = set()
        self.applied_jobs: set[str] = set()  # jobs whose allocations were (re)applied from the database
        self.hints_changed = False  # quotas or lending changed

    @property
    def wakes_all(self) -> bool:
        return self.rebuilt or bool(self.nodes_patched or self.nodes_added) or self.hints_changed


class SnapshotCache:
    """The scheduling cycle's snapshot, kept per process (see the comment above)."""

    def __init__(self) -> None:
        self.snapshot: Snapshot | None = None
        self.built_at = 0.0
        self.node_sigs: dict[int, tuple] = {}
        self.node_names: dict[int, str] = {}
        self.alloc_fp: tuple | None = None
        self.seen_change_seq = -1
        self.allocs: dict[int, tuple[str, int]] = {}  # active allocation id -> (job id, device id)
        self.static_fp = ""
        self.hint_fp = ""
        self.stats = {"rebuilds": 0, "refreshes": 0, "patched_nodes": 0, "reapplied_jobs": 0}

    def invalidate(self) -> None:
        self.snapshot = None

    @staticmethod
    def supported() -> bool:
        return connection.vendor == "postgresql"

    def _read_versions(self):
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT ({_table_hash_sql(_static_tables())}), ({_table_hash_sql(_hint_tables())})"
            )
            static_fp, hint_fp = cursor.fetchone()
            cursor.execute(_ALLOC_FP_SQL)
            alloc_fp = tuple(cursor.fetchone())
            cursor.execute(_NODE_SIG_SQL)
            sigs = {row[0]: tuple(row[1:]) for row in cursor.fetchall()}
        return static_fp, hint_fp, alloc_fp, sigs

    def _active_allocs(self) -> dict[int, tuple[str, int]]:
        known = self.node_names
        # A row that becomes releasing changes its key (-id): its job's placements are re-applied.
        return {
            (-pk if releasing else pk): (placement_key(job_id, releasing is not None), device_id)
            for pk, job_id, device_id, node_id, releasing in Allocation.objects.filter(
                released_at__isnull=True
            ).values_list("id", "job_id", "device_id", "node_id", "releasing_since")
            if node_id in known
        }

    def rebuild(self, changes: SnapshotChanges, reason: str, versions=None) -> Snapshot:
        # Versions first, then the data: a change in between shows as a moved version next cycle.
        static_fp, hint_fp, alloc_fp, sigs = versions or self._read_versions()
        self.snapshot = None
        nodes = list(_schedulable_nodes())
        snapshot = _fleet_states(nodes, empty=False, gray_opt_in=False)
        self.node_names = {n.pk: n.name for n in nodes}
        # The ids before the placements: an allocation made or ended in between is diffed next cycle.
        self.allocs = self._active_allocs()
        for placement in active_placements(node_names=self.node_names):
            snapshot.apply(placement)
        self.snapshot = snapshot
        self.seen_change_seq = snapshot.change_seq
        self.node_sigs = sigs
        self.static_fp, self.hint_fp, self.alloc_fp = static_fp, hint_fp, alloc_fp
        self.built_at = time.monotonic()
        self.stats["rebuilds"] += 1
        changes.rebuilt, changes.reason = True, reason
        return snapshot

    def refresh(self) -> tuple[Snapshot, SnapshotChanges]:
        """The snapshot, brought up to date with the database, and what changed."""
        changes = SnapshotChanges()
        if self.snapshot is None:
            return self.rebuild(changes, "first use"), changes
        if time.monotonic() - self.built_at > MAX_AGE_S:
            return self.rebuild(changes, "periodic rebuild"), changes
        versions = self._read_versions()
        static_fp, hint_fp, alloc_fp, sigs = versions
        if static_fp != self.static_fp:
            return self.rebuild(changes, "pools, catalog or projects changed", versions), changes
        changes.hints_changed = hint_fp != self.hint_fp
        self.hint_fp = hint_fp
        self.stats["refreshes"] += 1
        try:
            self._apply_node_changes(sigs, changes)
            # The last cycle's own placements and releases moved the snapshot (change_seq) since it
            # was checked: diff then too, even if the database's totals happen to match.
            moved = self.snapshot.change_seq != self.seen_change_seq
            if alloc_fp != self.alloc_fp or moved or changes.nodes_added:
                self._apply_allocation_changes(changes)
            self.alloc_fp = alloc_fp
            self._verify()
            self.seen_change_seq = self.snapshot.change_seq
        except _Unaccounted as exc:
            changes = SnapshotChanges()
            return self.rebuild(changes, str(exc)), changes
        return self.snapshot, changes

    # ---- node and card changes -------------------------------------------------------------------

    def _apply_node_changes(self, sigs: dict[int, tuple], changes: SnapshotChanges) -> None:
        old = self.node_sigs
        if sigs == old:
            return
        if old.keys() - sigs.keys():
            raise _Unaccounted("a node was removed")
        moved = [pk for pk, sig in sigs.items() if old.get(pk) != sig]
        fresh = {n.pk: n for n in _schedulable_nodes(moved)}
        if any(pk in self.node_names and pk not in fresh for pk in moved):
            raise _Unaccounted("a node was retired or is pending approval again")
        by_node = _devices_by_node(list(fresh), empty=False)
        snap = self.snapshot
        memo: dict = {}
        for pk in moved:
            node = fresh.get(pk)
            if node is None:  # still not schedulable (retired, pending approval): nothing to do
                continue
            built = _node_state(node, by_node.get(pk, []), empty=False, gray_opt_in=False, memo=memo)
            if pk not in self.node_names:
                if built.name in snap.by_name:
                    raise _Unaccounted(f"node name {built.name} reused")
                snap.add_node(built)
                self.node_names[pk] = built.name
                changes.nodes_added.append(built.name)
                continue
            current = snap.by_name.get(self.node_names[pk])
            if current is None or current.name != built.name or _hardware(current) != _hardware(built):
                raise _Unaccounted(f"node {built.name}: hardware or name changed")
            current.pool, current.status, current.status_reason = (
                built.pool,
                built.status,
                built.status_reason,
            )
            current.labels, current.taints = built.labels, built.taints
            for dev, new in zip(current.devices, built.devices, strict=True):
                dev.healthy, dev.schedulable, dev.gray = new.healthy, new.schedulable, new.gray
            changes.nodes_patched.append(built.name)
        snap.static_changed()  # one pass: pool factors, cached filters and indexes
        self.node_sigs = sigs
        self.stats["patched_nodes"] += len(changes.nodes_patched) + len(changes.nodes_added)

    # ---- allocation changes -------------------------------------------------------------------

    def _apply_allocation_changes(self, changes: SnapshotChanges) -> None:
        snap = self.snapshot
        current = self._active_allocs()
        before = self.allocs
        added = current.keys() - before.keys()
        gone = before.keys() - current.keys()
        touched = {current[pk][0] for pk in added} | {before[pk][0] for pk in gone}
        # Rows this cache never saw come and go (a cycle's own rows deleted before the next diff):
        # the snapshot's placements are compared with the jobs that hold rows, not only the ids.
        held = {job for job, _device in current.values()}
        stale = snap.placements.keys() - held
        for job in stale:
            changes.freed.update(placement_cards(snap, snap.placements[job]))
        touched |= stale | (held - snap.placements.keys())
        gone_devices = {before[pk][1] for pk in gone}
        if gone_devices:
            for vendor, model_id, raw in Device.objects.filter(pk__in=gone_devices).values_list(
                "vendor", "device_model__name", "raw_model_name"
            ):
                changes.freed.add((vendor, model_id or raw))
        touched_ids = {int(j.split(".")[0]) for j in touched}
        for job_id in touched_ids:
            for job in (placement_key(job_id, False), placement_key(job_id, True)):
                if job in snap.placements:
                    snap.release(job)
                    changes.released_jobs.add(job)
        if touched:
            for placement in active_placements(node_names=self.node_names, job_ids=sorted(touched_ids)):
                try:
                    snap.apply(placement)
                except CapacityError as exc:
                    raise _Unaccounted(
                        f"allocation of job {placement.request_id} does not apply: {exc}"
                    ) from exc
                changes.applied_jobs.add(placement.request_id)
        self.allocs = current
        self.stats["reapplied_jobs"] += len(touched)

    def _verify(self) -> None:
        """The snapshot's placements are exactly the jobs with active allocations on its nodes."""
        expected = {job for job, _device in self.allocs.values()}
        if set(self.snapshot.placements) != expected:
            raise _Unaccounted("placements differ from the active allocations")


def placement_cards(snapshot: Snapshot, placement: Placement) -> set[tuple[str, str]]:
    """(vendor, model) of every card a placement holds on the snapshot's nodes."""
    out = set()
    for part in placement.parts:
        node = snapshot.by_name.get(part.node)
        if node is None:
            continue
        for a in part.devices:
            with suppress(KeyError):
                dev = node.device(a.device_id)
                out.add((dev.vendor, dev.model))
    return out


class _Unaccounted(Exception):
    """A change the incremental refresh cannot apply: rebuild from the database."""


def _hardware(node) -> tuple:
    return (
        node.cpu_milli,
        node.memory_mib,
        node.switch,
        node.zone,
        node.owner_project,
        tuple(
            (
                d.id,
                d.index,
                d.kind,
                d.vendor,
                d.model,
                d.memory_mib,
                d.features,
                d.topology_group,
                d.pcie_switch,
                d.numa_node,
                d.owner_project,
            )
            for d in node.devices
        ),
    )


_CACHE = SnapshotCache()
register_reset(_CACHE.invalidate)  # per-process state: one reset hook (apps.core.process_state)
_CACHE_LOCK = threading.Lock()


def snapshot_cache() -> SnapshotCache:
    return _CACHE


@contextmanager
def cycle_snapshot():
    """``(snapshot, changes, cached)`` for one scheduling cycle. The process's cached snapshot when
    it is free (one cycle at a time uses it; a concurrent cycle in another thread builds its own and
    gets ``changes=None``). If the cycle fails, the cache is dropped: the snapshot may hold
    placements the database rolled back."""
    if not SnapshotCache.supported() or not _CACHE_LOCK.acquire(blocking=False):
        yield fleet_snapshot(), None
        return
    try:
        snapshot, changes = _CACHE.refresh()
        ok = False
        try:
            yield snapshot, changes
            ok = True
        finally:
            if not ok:
                _CACHE.invalidate()
    finally:
        _CACHE_LOCK.release()
