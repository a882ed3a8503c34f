"""The fleet snapshot: nodes, pools and active placements that placements are applied to and released from.

:class:`Snapshot` is built from plain records (``from_records``, what a ledger query returns) or node
by node, copied for what-if checks, and changed only through ``apply`` / ``release`` (capacity) and the
``set_*`` methods (static attributes). ``apply`` refuses a placement that breaks an invariant of the
data model (``model``'s module docstring; the compute rule is ``share.share_fits``), so no sequence of
placements can over-allocate a card; ``check_invariants`` re-verifies them all.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping

from . import mig as _mig
from .decision import DeviceAssignment, Placement
from .nodes import DEFAULT_POOL, DEVICE_ATTRS, DeviceState, Isolation, NodeState, NodeStatus, PoolInfo, Taint
from .share import WHOLE, share_fits

_SNAPSHOT_IDS = itertools.count(1)


class CapacityError(ValueError):
    """A placement no longer fits the snapshot (or releases something that is not there)."""


class Snapshot:
    """A mutable, in-memory view of the fleet that placements are applied to and released from.

    Static changes (status, labels, taints, health, nodes added) bump ``static_version`` so cached
    filter results are rebuilt; capacity changes append the node to a change log so score indexes only
    re-evaluate nodes that changed.
    """

    def __init__(self, nodes: Iterable[NodeState] = (), pools: Iterable[PoolInfo] = ()) -> None:
        self.uid = next(_SNAPSHOT_IDS)  # unique for the process (``id()`` of a dead snapshot is reused)
        self.nodes: list[NodeState] = []
        self.by_name: dict[str, NodeState] = {}
        self.pools: dict[str, PoolInfo] = {p.name: p for p in pools}
        self.placements: dict[str, Placement] = {}
        self.static_version = 0
        self.change_log: list[int] = []
        self.log_offset = 0
        self.log_limit = 200_000  # change-log entries kept; past it the oldest half goes (indexes re-read)
        self.indexes: dict = {}  # engine-owned caches, dropped when static_version changes
        self.cluster_preference: dict[str, int] = {}  # cluster -> order (lower first), engine/clusters.py
        for node in nodes:
            self.add_node(node)

    # ---- construction ----------------------------------------------------------------------------

    def add_node(self, node: NodeState) -> NodeState:
        if node.name in self.by_name:
            raise ValueError(f"duplicate node {node.name}")
        ids = [d.id for d in node.devices]
        if len(set(ids)) != len(ids):
            raise ValueError(f"node {node.name}: duplicate device ids")
        node.pos = len(self.nodes)
        self.nodes.append(node)
        self.by_name[node.name] = node
        pool = self.pools.get(node.pool)
        node.factor = pool.overcommit_pct if pool is not None else 100
        self.static_version += 1
        self.indexes.clear()
        return node

    def add_pool(self, pool: PoolInfo) -> None:
        self.pools[pool.name] = pool
        self.static_changed()

    @classmethod
    def from_records(
        cls,
        nodes: Iterable[Mapping],
        pools: Iterable[Mapping] = (),
        allocations: Iterable[Mapping] = (),
    ) -> Snapshot:
        """Build a snapshot from plain dicts (what a ledger query returns).

        ``nodes``: ``{"name", "cpu_milli", "memory_mib", "pool", "status", "labels", "taints": [{"key",
        "value", "effect"}], "switch", "zone", "owner_project", "devices": [{"id", "index", "kind",
        "vendor", "model", "memory_mib", "features", "topology_group", "pcie_switch", "numa_node",
        "owner_project", "healthy", "schedulable"}]}``; ``pools``: ``{"name", "overcommit_pct",
        "owner_project"}``; ``allocations``: ``Placement.to_dict()`` shapes of the active allocations.
        """
        snap = cls(pools=[PoolInfo(**dict(p)) for p in pools])
        for rec in nodes:
            devices = [
                DeviceState(d["id"], int(d.get("index", i)), **{k: d[k] for k in DEVICE_ATTRS if k in d})
                for i, d in enumerate(rec.get("devices", ()))
            ]
            taints = [Taint(**dict(t)) if isinstance(t, Mapping) else t for t in rec.get("taints", ())]
            snap.add_node(
                NodeState(
                    rec["name"],
                    cpu_milli=int(rec.get("cpu_milli", 0)),
                    memory_mib=int(rec.get("memory_mib", 0)),
                    devices=devices,
                    pool=rec.get("pool", "") or "",
                    status=rec.get("status", NodeStatus.READY),
                    status_reason=rec.get("status_reason", ""),
                    labels=rec.get("labels") or {},
                    taints=taints,
                    switch=rec.get("switch", "") or "",
                    zone=rec.get("zone", "") or "",
                    owner_project=rec.get("owner_project"),
                    cluster=rec.get("cluster", "") or "",
                )
            )
        for alloc in allocations:
            snap.apply(Placement.from_dict(alloc) if isinstance(alloc, Mapping) else alloc)
        return snap

    def copy(self) -> Snapshot:
        """An independent copy (for what-if checks); caches are not copied."""
        clone = Snapshot(pools=self.pools.values())
        for node in self.nodes:
            devices = []
            for d in node.devices:
                c = DeviceState(
                    d.id,
                    d.index,
                    kind=d.kind,
                    vendor=d.vendor,
                    model=d.model,
                    memory_mib=d.memory_mib,
                    features=d.features,
                    topology_group=d.topology_group,
                    pcie_switch=d.pcie_switch,
                    numa_node=d.numa_node,
                    owner_project=d.owner_project,
                    healthy=d.healthy,
                    schedulable=d.schedulable,
                    gray=d.gray,
                    mig=d.mig,
                )
                c.mem_used, c.hard_used, c.shared_used = d.mem_used, d.hard_used, d.shared_used
                c.whole_by, c.slices = d.whole_by, dict(d.slices)
                c.mig_used = dict(d.mig_used)
                devices.append(c)
            n = NodeState(
                node.name,
                cpu_milli=node.cpu_milli,
                memory_mib=node.memory_mib,
                devices=devices,
                pool=node.pool,
                status=node.status,
                status_reason=node.status_reason,
                labels=node.labels,
                taints=node.taints,
                switch=node.switch,
                zone=node.zone,
                owner_project=node.owner_project,
                cluster=node.cluster,
            )
            n.cpu_used, n.mem_used = node.cpu_used, node.mem_used
            clone.add_node(n)
        clone.placements = dict(self.placements)
        clone.cluster_preference = dict(self.cluster_preference)
        return clone

    # ---- static changes -----------------------------------------------------------------------

    def static_changed(self) -> None:
        self.static_version += 1
        self.indexes.clear()
        pools = self.pools
        for node in self.nodes:
            pool = pools.get(node.pool)
            node.factor = pool.overcommit_pct if pool is not None else 100
            node._free_cache = (-1, 0)
            node._refresh_hw_key()

    def set_node_status(self, name: str, status: str, reason: str = "") -> None:
        if status not in NodeStatus.ALL:
            raise ValueError(f"unknown status {status!r}")
        node = self.by_name[name]
        node.status, node.status_reason = status, reason
        self.static_changed()

    def set_node_labels(self, name: str, labels: Mapping[str, str]) -> None:
        self.by_name[name].labels = dict(labels)
        self.static_changed()

    def set_node_taints(self, name: str, taints: Iterable[Taint]) -> None:
        self.by_name[name].taints = tuple(taints)
        self.static_changed()

    def set_device_health(self, node: str, device_id: str, healthy: bool, schedulable: bool = True) -> None:
        dev = self.by_name[node].device(device_id)
        dev.healthy, dev.schedulable = healthy, schedulable
        self.static_changed()

    # ---- lookups ---------------------------------------------------------------------------------

    def node(self, name: str) -> NodeState:
        return self.by_name[name]

    def pool_of(self, node: NodeState) -> PoolInfo:
        return self.pools.get(node.pool, DEFAULT_POOL)

    def factor_pct(self, node: NodeState) -> int:
        return node.factor

    def __iter__(self) -> Iterator[NodeState]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def change_seq(self) -> int:
        return self.log_offset + len(self.change_log)

    def _touch(self, node: NodeState) -> None:
        node.version += 1
        self.change_log.append(node.pos)
        if len(self.change_log) > self.log_limit:  # indexes behind the trimmed log re-read every node
            drop = len(self.change_log) - self.log_limit // 2
            del self.change_log[:drop]
            self.log_offset += drop

    # ---- apply / release -------------------------------------------------------------------------

    def check_placement(self, placement: Placement) -> str | None:
        """Why ``placement`` cannot be applied now (``None`` when it can)."""
        if placement.request_id in self.placements:
            return f"request {placement.request_id} is already placed"
        cpu: dict[str, int] = {}
        mem: dict[str, int] = {}
        seen: dict[tuple[str, str], list[DeviceAssignment]] = {}
        for part in placement.parts:
            node = self.by_name.get(part.node)
            if node is None:
                return f"unknown node {part.node}"
            cpu[part.node] = cpu.get(part.node, 0) + part.cpu_milli
            mem[part.node] = mem.get(part.node, 0) + part.memory_mib
            for a in part.devices:
                seen.setdefault((part.node, a.device_id), []).append(a)
        for name, c in cpu.items():
            node = self.by_name[name]
            if node.cpu_used + c > node.cpu_milli:
                return f"node {name}: insufficient cpu"
            if node.mem_used + mem[name] > node.memory_mib:
                return f"node {name}: insufficient memory"
        for (name, dev_id), assigns in seen.items():
            node = self.by_name[name]
            try:
                dev = node.device(dev_id)
            except KeyError:
                return f"node {name}: unknown device {dev_id}"
            factor = self.factor_pct(node)
            if any(a.whole for a in assigns):
                if len(assigns) > 1 or not dev.empty:
                    return f"device {dev_id}: a whole card must be free and exclusive"
                continue
            if dev.mig is not None and (dev.mig_used or any(a.profile for a in assigns)):
                problem = _mig.check_device(dev, assigns)  # the card's MIG geometry decides
                if problem is not None:
                    return problem
                continue
            m = sum(a.memory_mib for a in assigns)
            hard = sum(a.compute for a in assigns if a.isolation == Isolation.HARD)
            shared = sum(a.compute for a in assigns if a.isolation != Isolation.HARD)
            if dev.whole_by is not None:
                return f"device {dev_id}: held as a whole card"
            if dev.mem_used + m > dev.memory_mib:
                return f"device {dev_id}: insufficient device memory"
            if not share_fits(dev.hard_used + hard, dev.shared_used + shared, factor):
                return f"device {dev_id}: insufficient device compute"
        return None

    def apply(self, placement: Placement) -> None:
        """Reserve ``placement``; raises :class:`CapacityError` if it does not fit (invariants hold)."""
        problem = self.check_placement(placement)
        if problem is not None:
            raise CapacityError(problem)
        rid = placement.request_id
        for part in placement.parts:
            node = self.by_name[part.node]
            node.cpu_used += part.cpu_milli
            node.mem_used += part.memory_mib
            for a in part.devices:
                dev = node.device(a.device_id)
                if a.whole:
                    dev.whole_by = rid
                    dev.mem_used = dev.memory_mib
                    dev.hard_used = WHOLE
                else:
                    key = f"{rid}#{part.replica}#{a.group}"
                    if key in dev.slices:
                        key = f"{key}#{len(dev.slices)}"
                    mem, comp, iso = a.memory_mib, a.compute, a.isolation
                    if dev.mig is not None and a.profile:  # a GPU instance: its slot share of the card
                        mem, comp = _mig.reserve(dev, key, a)
                        iso = Isolation.HARD
                    dev.slices[key] = (mem, comp, iso)
                    dev.mem_used += mem
                    if iso == Isolation.HARD:
                        dev.hard_used += comp
                    else:
                        dev.shared_used += comp
            self._touch(node)
        self.placements[rid] = placement

    def release(self, request_id: str) -> Placement:
        placement = self.placements.pop(request_id, None)
        if placement is None:
            raise CapacityError(f"request {request_id} holds nothing")
        for part in placement.parts:
            node = self.by_name[part.node]
            node.cpu_used -= part.cpu_milli
            node.mem_used -= part.memory_mib
            for a in part.devices:
                dev = node.device(a.device_id)
                if a.whole:
                    dev.whole_by = None
                    dev.mem_used = 0
                    dev.hard_used = 0
                else:
                    prefix = f"{request_id}#{part.replica}#{a.group}"
                    key = next(k for k in dev.slices if k == prefix or k.startswith(prefix + "#"))
                    m, c, iso = dev.slices.pop(key)
                    if dev.mig_used:
                        dev.mig_used.pop(key, None)
                    dev.mem_used -= m
                    if iso == Isolation.HARD:
                        dev.hard_used -= c
                    else:
                        dev.shared_used -= c
            self._touch(node)
        return placement

    # ---- checks and summaries ------------------------------------------------------------------

    def check_invariants(self) -> list[str]:
        """Every violated invariant, as text (empty when the snapshot is consistent)."""
        problems = []
        for node in self.nodes:
            if not 0 <= node.cpu_used <= node.cpu_milli:
                problems.append(f"{node.name}: cpu {node.cpu_used}/{node.cpu_milli}")
            if not 0 <= node.mem_used <= node.memory_mib:
                problems.append(f"{node.name}: memory {node.mem_used}/{node.memory_mib}")
            factor = self.factor_pct(node)
            for d in node.devices:
                if d.whole_by is not None:
                    if d.slices:
                        problems.append(f"{d.id}: whole card shared with {len(d.slices)} slices")
                    continue
                mem = sum(s[0] for s in d.slices.values())
                hard = sum(s[1] for s in d.slices.values() if s[2] == Isolation.HARD)
                shared = sum(s[1] for s in d.slices.values() if s[2] != Isolation.HARD)
                if (mem, hard, shared) != (d.mem_used, d.hard_used, d.shared_used):
                    problems.append(f"{d.id}: counters out of sync")
                if mem > d.memory_mib:
                    problems.append(f"{d.id}: memory {mem}/{d.memory_mib}")
                if hard > WHOLE:
                    problems.append(f"{d.id}: hard compute {hard}")
                if not share_fits(hard, shared, factor):
                    problems.append(f"{d.id}: compute {hard}+{shared} over {factor}%")
                if shared and factor == 100 and hard + shared > WHOLE:
                    problems.append(f"{d.id}: compute {hard + shared} without overcommit")
                if d.mig_used:
                    problems.extend(_mig.invariant_problems(d))
        return problems

    def gpu_totals(self) -> tuple[int, int]:
        """(allocated compute, capacity) in milli-cards over schedulable devices."""
        used = cap = 0
        for node in self.nodes:
            for d in node.devices:
                cap += WHOLE
                used += WHOLE if d.whole_by is not None else min(WHOLE, d.hard_used + d.shared_used)
        return used, cap
