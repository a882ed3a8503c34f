"""The engine's data model: a fleet snapshot, requests, placements and decisions.

Everything here is plain Python (no Django). A caller builds a :class:`Snapshot` from the ledger
(nodes, devices, pools and the allocations that are already active), hands :class:`Request` objects to
``Engine.place`` and gets :class:`Decision` objects back. Placements are applied to / released from the
snapshot incrementally, so one snapshot can serve a whole scheduling cycle or a trace replay.

Units: CPU in milli-cores, memory in MiB, device compute in milli of one card (1000 = the whole card).

Invariants the snapshot enforces on every ``apply`` (and ``check_invariants`` re-verifies):

* device memory is never overcommitted;
* a card's compute is never over-sold: ``hard × F + shared × 100 ≤ 1000 × F`` where ``F`` is the pool's
  overcommit factor in percent (100 … 150). Hard-isolated slices therefore always fit in the real card
  and only shared slices can use the overcommit headroom;
* a whole card excludes every other allocation on it;
* on a card with a MIG geometry (``DeviceState.mig``) the MIG instances are valid, non-overlapping
  GPU-instance placements and share the card with nothing else (``engine/mig.py``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import mig as _mig

WHOLE = 1000  # compute milli of one whole card
_SNAPSHOT_IDS = itertools.count(1)
MAX_OVERCOMMIT_PCT = 150


class CapacityError(ValueError):
    """A placement no longer fits the snapshot (or releases something that is not there)."""


# --------------------------------------------------------------------------------------------------
# constants


class NodeStatus:
    READY = "ready"
    NOT_READY = "not-ready"
    MAINTENANCE = "maintenance"
    QUARANTINED = "quarantined"
    DRAINING = "draining"
    RETIRED = "retired"

    ALL = (READY, NOT_READY, MAINTENANCE, QUARANTINED, DRAINING, RETIRED)


class Isolation:
    HARD = "hard"
    SHARED = "shared"


class Topology:
    """How tightly the cards of one multi-card group are coupled (best first)."""

    SINGLE = "single-device"
    CLIQUE = "nvlink-clique"  # NVLink / NVSwitch / HCCS / xGMI group
    SWITCH = "pcie-switch"
    NUMA = "same-numa"
    CROSS_NUMA = "cross-numa"
    UNKNOWN = "unknown"

    RANK = {SINGLE: 0, CLIQUE: 0, SWITCH: 1, NUMA: 2, CROSS_NUMA: 3, UNKNOWN: 3}


# --------------------------------------------------------------------------------------------------
# taints, tolerations, pools


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | NoExecute | PreferNoSchedule

    def __str__(self) -> str:
        return f"{self.key}={self.value}" if self.value else self.key


@dataclass(frozen=True, slots=True)
class Toleration:
    """Kubernetes semantics: an empty key with ``Exists`` tolerates everything; an empty effect matches all."""

    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True, slots=True)
class PoolInfo:
    name: str
    overcommit_pct: int = 100  # compute overcommit for shared slices, 100 … 150 (never memory)
    owner_project: str | None = None  # a pool reserved for one project

    def __post_init__(self) -> None:
        if not 100 <= self.overcommit_pct <= MAX_OVERCOMMIT_PCT:
            raise ValueError(f"pool {self.name}: overcommit must be 100–{MAX_OVERCOMMIT_PCT} %")


DEFAULT_POOL = PoolInfo("")


# --------------------------------------------------------------------------------------------------
# devices and nodes (mutable state)


class DeviceState:
    """One accelerator card and what is allocated on it."""

    __slots__ = (
        "id",
        "index",
        "kind",
        "vendor",
        "model",
        "memory_mib",
        "features",
        "topology_group",
        "pcie_switch",
        "numa_node",
        "owner_project",
        "healthy",
        "schedulable",
        "gray",
        "mem_used",
        "hard_used",
        "shared_used",
        "whole_by",
        "slices",
        "mig",
        "mig_used",
    )

    def __init__(
        self,
        id: str,
        index: int = 0,
        *,
        kind: str = "gpu",
        vendor: str = "",
        model: str = "",
        memory_mib: int = 0,
        features: Iterable[str] = (),
        topology_group: str = "",
        pcie_switch: str = "",
        numa_node: int | None = None,
        owner_project: str | None = None,
        healthy: bool = True,
        schedulable: bool = True,
        gray: bool = False,
        mig: Any = None,
    ) -> None:
        self.id = id
        self.index = index
        self.kind = kind
        self.vendor = vendor
        self.model = model
        self.memory_mib = int(memory_mib)
        self.features = frozenset(features)
        self.topology_group = topology_group
        self.pcie_switch = pcie_switch
        self.numa_node = numa_node
        self.owner_project = owner_project
        self.healthy = healthy  # lost / failed cards are not healthy
        self.schedulable = schedulable  # quarantined or cordoned cards are not schedulable
        self.gray = gray  # on gray-release soak: only for requests that opted in
        self.mem_used = 0
        self.hard_used = 0
        self.shared_used = 0
        self.whole_by: str | None = None
        self.slices: dict[str, tuple[int, int, str]] = {}
        # MIG (engine/mig.py): the card's geometry (apps.catalog.mig.Geometry, None = not modelled) and
        # its GPU instances, slice key -> (profile, start slot); only MIG slices share such a card.
        self.mig = mig
        self.mig_used: dict[str, tuple[str, int]] = {}

    # ---- queries -------------------------------------------------------------------------------

    @property
    def empty(self) -> bool:
        return self.whole_by is None and not self.slices

    def free_memory(self) -> int:
        return self.memory_mib - self.mem_used

    def free_compute(self, factor_pct: int = 100) -> int:
        """Headroom for a *shared* slice (hard slices see ``hard_free_compute``)."""
        if self.whole_by is not None:
            return 0
        return ((WHOLE - self.hard_used) * factor_pct) // 100 - self.shared_used

    def hard_free_compute(self, factor_pct: int = 100) -> int:
        if self.whole_by is not None:
            return 0
        return WHOLE - self.hard_used - math.ceil(self.shared_used * 100 / factor_pct)

    def fits_slice(self, memory_mib: int, compute: int, isolation: str, factor_pct: int = 100) -> bool:
        if self.whole_by is not None or self.mig_used or self.mem_used + memory_mib > self.memory_mib:
            return False
        if isolation == Isolation.HARD:
            return (self.hard_used + compute) * factor_pct + self.shared_used * 100 <= WHOLE * factor_pct
        return self.hard_used * factor_pct + (self.shared_used + compute) * 100 <= WHOLE * factor_pct

    def __repr__(self) -> str:
        state = "whole" if self.whole_by else f"{len(self.slices)} slices"
        return f"<Device {self.id} {self.vendor} {self.model} {state}>"


class NodeState:
    """One node: static attributes (status, labels, taints, pool, topology) and free capacity."""

    __slots__ = (
        "name",
        "pos",
        "pool",
        "status",
        "status_reason",
        "labels",
        "taints",
        "switch",
        "zone",
        "cluster",
        "owner_project",
        "cpu_milli",
        "memory_mib",
        "devices",
        "cpu_used",
        "mem_used",
        "version",
        "hw_key",
        "topo_known",
        "factor",
        "_free_cache",
    )

    def __init__(
        self,
        name: str,
        *,
        cpu_milli: int = 0,
        memory_mib: int = 0,
        devices: Iterable[DeviceState] = (),
        pool: str = "",
        status: str = NodeStatus.READY,
        status_reason: str = "",
        labels: Mapping[str, str] | None = None,
        taints: Iterable[Taint] = (),
        switch: str = "",
        zone: str = "",
        owner_project: str | None = None,
        cluster: str = "",
    ) -> None:
        if status not in NodeStatus.ALL:
            raise ValueError(f"node {name}: unknown status {status!r}")
        self.name = name
        self.pos = -1  # position in the snapshot, set by Snapshot.add_node
        self.pool = pool
        self.status = status
        self.status_reason = status_reason
        self.labels = dict(labels or {})
        self.taints = tuple(taints)
        self.switch = switch
        self.zone = zone
        self.cluster = cluster  # a hard boundary for one job (engine/clusters.py)
        self.owner_project = owner_project
        self.cpu_milli = int(cpu_milli)
        self.memory_mib = int(memory_mib)
        self.devices = list(devices)
        self.cpu_used = 0
        self.mem_used = 0
        self.version = 0
        self.hw_key: tuple = ()
        self.topo_known = False
        self.factor = 100  # the pool's overcommit factor in percent, kept current by the snapshot
        self._free_cache = (-1, 0)
        self._refresh_hw_key()

    def _refresh_hw_key(self) -> None:
        self.hw_key = tuple(sorted({(d.kind, d.vendor, d.model) for d in self.devices}))
        self.topo_known = any(
            d.topology_group or d.pcie_switch or d.numa_node is not None for d in self.devices
        )

    @property
    def cpu_free(self) -> int:
        return self.cpu_milli - self.cpu_used

    def free_compute_total(self) -> int:
        """Idle compute (shared-slice headroom) over the node's usable cards, cached per version."""
        cached = self._free_cache
        if cached[0] == self.version:
            return cached[1]
        factor = self.factor
        total = 0
        for d in self.devices:
            if d.healthy and d.schedulable and d.whole_by is None:
                free = ((WHOLE - d.hard_used) * factor) // 100 - d.shared_used
                if free > 0:
                    total += free
        self._free_cache = (self.version, total)
        return total

    @property
    def mem_free(self) -> int:
        return self.memory_mib - self.mem_used

    def device(self, device_id: str) -> DeviceState:
        for d in self.devices:
            if d.id == device_id:
                return d
        raise KeyError(device_id)

    def __repr__(self) -> str:
        return f"<Node {self.name} {self.status} cpu {self.cpu_free}/{self.cpu_milli} {len(self.devices)} devices>"


# --------------------------------------------------------------------------------------------------
# requests


def _fs(values: Iterable[str] | str | None) -> frozenset[str]:
    if values is None:
        return frozenset()
    if isinstance(values, str):
        return frozenset(v for v in values.split("|") if v)
    return frozenset(values)


@dataclass(frozen=True, slots=True)
class DeviceGroup:
    """A homogeneous part of a request: ``count`` devices of one kind.

    ``whole`` cards are exclusive; otherwise each of the ``count`` devices receives one slice of
    ``memory_mib`` (hard limit) and ``compute`` milli (1–1000) with the given isolation. For whole cards
    ``memory_mib`` is a minimum card memory.
    """

    count: int = 1
    whole: bool = True
    memory_mib: int = 0
    compute: int = WHOLE
    isolation: str = Isolation.HARD
    kind: str | None = None
    vendors: frozenset[str] = frozenset()
    models: frozenset[str] = frozenset()
    features: frozenset[str] = frozenset()
    name: str = ""
    profile: str = ""  # a MIG profile (e.g. "3g.40gb"): placed by the card's geometry (engine/mig.py)

    def __post_init__(self) -> None:
        object.__setattr__(self, "vendors", _fs(self.vendors))
        object.__setattr__(self, "models", _fs(self.models))
        object.__setattr__(self, "features", _fs(self.features))
        if self.count < 1:
            raise ValueError("a device group needs at least one device")
        if self.whole:
            object.__setattr__(self, "compute", WHOLE)
        elif not 1 <= self.compute <= WHOLE:
            raise ValueError("slice compute must be 1–1000 milli of a card")
        if self.memory_mib < 0:
            raise ValueError("memory must be ≥ 0")
        if self.isolation not in (Isolation.HARD, Isolation.SHARED):
            raise ValueError(f"unknown isolation {self.isolation!r}")

    def label(self) -> str:
        what = self.kind or "device"
        filt = "|".join(sorted(self.models or self.vendors))
        if filt:
            what = f"{what} ({filt})"
        if self.whole:
            return f"{self.count}× whole {what}"
        return f"{self.count}× {self.isolation} slice {self.compute}m/{self.memory_mib}MiB of {what}"


@dataclass(frozen=True, slots=True)
class TopologyPolicy:
    """Where the parts of a multi-group or multi-replica request may go.

    ``placement`` is the requirement (``sameNode`` | ``sameSwitch`` | ``any``); ``preferred`` is the
    fallback tried when the requirement cannot be met (seed 000 §3.2: sameNode, else sameSwitch with the
    decision marked cross-node).
    """

    placement: str = "sameNode"
    preferred: str | None = None

    def __post_init__(self) -> None:
        allowed = ("sameNode", "sameSwitch", "any")
        if self.placement not in allowed or (self.preferred is not None and self.preferred not in allowed):
            raise ValueError(f"topology placement must be one of {allowed}")


@dataclass(frozen=True, slots=True)
class Request:
    """What one job asks for. ``replicas`` > 1 is a multi-node gang: all replicas or none."""

    id: str
    cpu_milli: int = 0
    memory_mib: int = 0
    groups: tuple[DeviceGroup, ...] = ()
    replicas: int = 1
    project: str | None = None
    pool: str | None = None
    node_selector: Any = ()  # Mapping[str, str] or pairs; stored as sorted pairs
    tolerations: tuple[Toleration, ...] = ()
    topology: TopologyPolicy = TopologyPolicy()
    precheck_failures: Any = ()  # Mapping[node name, reason] from the caller's runtime precheck
    priority: int = 0
    gray_opt_in: bool = False  # may use cards on gray-release soak
    cluster: str | None = None  # only nodes of this cluster (engine/clusters.py picks one when None)
    static_key: tuple = field(init=False, repr=False, compare=False, default=())
    shape_key: tuple = field(init=False, repr=False, compare=False, default=())
    compute_total: int = field(init=False, repr=False, compare=False, default=0)
    mig: bool = field(init=False, repr=False, compare=False, default=False)  # a group names a MIG profile

    def __post_init__(self) -> None:
        sel = self.node_selector
        sel = tuple(sorted((sel.items() if isinstance(sel, Mapping) else sel) or ()))
        object.__setattr__(self, "node_selector", sel)
        pre = self.precheck_failures
        pre = tuple(sorted((pre.items() if isinstance(pre, Mapping) else pre) or ()))
        object.__setattr__(self, "precheck_failures", pre)
        object.__setattr__(self, "groups", tuple(self.groups))
        object.__setattr__(self, "tolerations", tuple(self.tolerations))
        if self.replicas < 1:
            raise ValueError("replicas must be ≥ 1")
        if self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValueError("cpu and memory must be ≥ 0")
        static = (
            self.project,
            self.pool,
            sel,
            self.tolerations,
            pre,
            self.gray_opt_in,
            tuple(
                (g.kind, g.vendors, g.models, g.features, g.count, g.whole, g.memory_mib) for g in self.groups
            ),
            self.cluster,
        )
        object.__setattr__(self, "static_key", static)
        shape = (
            self.cpu_milli,
            self.memory_mib,
            tuple((g.count, g.whole, g.memory_mib, g.compute, g.isolation, g.profile) for g in self.groups),
        )
        object.__setattr__(self, "shape_key", shape)
        object.__setattr__(self, "mig", any(g.profile for g in self.groups))
        # requested compute of one replica in milli-cards (a whole card counts 1000)
        object.__setattr__(self, "compute_total", sum(g.count * g.compute for g in self.groups))

    @property
    def device_count(self) -> int:
        return sum(g.count for g in self.groups)


# --------------------------------------------------------------------------------------------------
# placements and decisions (immutable results)


@dataclass(frozen=True, slots=True)
class DeviceAssignment:
    device_id: str
    index: int
    group: int
    whole: bool
    memory_mib: int
    compute: int
    isolation: str
    profile: str = ""  # MIG profile of the slice ("" = none)
    mig_start: int | None = None  # its GPU instance's start slot (None: not modelled / chosen on apply)


@dataclass(frozen=True, slots=True)
class NodePart:
    node: str
    cpu_milli: int
    memory_mib: int
    devices: tuple[DeviceAssignment, ...] = ()
    replica: int = 0
    topology: str = ""


@dataclass(frozen=True, slots=True)
class Placement:
    request_id: str
    parts: tuple[NodePart, ...]
    cross_node: bool = False

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.node for p in self.parts))

    @property
    def topology(self) -> str:
        tiers = [p.topology for p in self.parts if p.topology]
        return max(tiers, key=lambda t: Topology.RANK.get(t, 3)) if tiers else ""

    def to_dict(self) -> dict:
        return {
            "request_id": self.request_id,
            "cross_node": self.cross_node,
            "parts": [
                {
                    "node": p.node,
                    "replica": p.replica,
                    "cpu_milli": p.cpu_milli,
                    "memory_mib": p.memory_mib,
                    "topology": p.topology,
                    "devices": [
                        {
                            "device_id": d.device_id,
                            "index": d.index,
                            "group": d.group,
                            "whole": d.whole,
                            "memory_mib": d.memory_mib,
                            "compute": d.compute,
                            "isolation": d.isolation,
                            **({"profile": d.profile, "mig_start": d.mig_start} if d.profile else {}),
                        }
                        for d in p.devices
                    ],
                }
                for p in self.parts
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> Placement:
        parts = tuple(
            NodePart(
                node=p["node"],
                cpu_milli=int(p.get("cpu_milli", 0)),
                memory_mib=int(p.get("memory_mib", 0)),
                replica=int(p.get("replica", 0)),
                topology=p.get("topology", ""),
                devices=tuple(
                    DeviceAssignment(
                        device_id=d["device_id"],
                        index=int(d.get("index", 0)),
                        group=int(d.get("group", 0)),
                        whole=bool(d.get("whole", True)),
                        memory_mib=int(d.get("memory_mib", 0)),
                        compute=int(d.get("compute", WHOLE)),
                        isolation=d.get("isolation", Isolation.HARD),
                        profile=d.get("profile") or "",
                        mig_start=d.get("mig_start"),
                    )
                    for d in p.get("devices", ())
                ),
            )
            for p in data["parts"]
        )
        return cls(request_id=data["request_id"], parts=parts, cross_node=bool(data.get("cross_node")))


@dataclass(slots=True)
class TraceStep:
    tier: str  # filter | score | assign | gang | fallback | result
    message: str
    data: dict = field(default_factory=dict)


@dataclass(slots=True)
class Candidate:
    node: str
    score: tuple


class LazyMapping(Mapping):
    """A read-only mapping computed on first access (per-node reasons nobody may ever read).

    Compares equal to a dict with the same items; ``dict(m)`` copies it.
    """

    __slots__ = ("_fn", "_data")

    def __init__(self, fn) -> None:
        self._fn = fn
        self._data: dict | None = None

    @property
    def data(self) -> dict:
        if self._data is None:
            self._data = self._fn()
            self._fn = None
        return self._data

    def __getitem__(self, key):
        return self.data[key]

    def __iter__(self):
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        return repr(self.data) if self._data is not None else "<LazyMapping (not computed)>"


@dataclass(slots=True)
class Decision:
    """The outcome of placing one request, with an ordered trace (one trace id per decision)."""

    trace_id: str
    request_id: str
    policy: str
    placement: Placement | None = None
    steps: list[TraceStep] = field(default_factory=list)
    explanation: str = ""
    # node -> reason; may be a LazyMapping built on first read (the explanation already has the counts)
    rejections: Mapping[str, str] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)

    @property
    def placed(self) -> bool:
        return self.placement is not None

    @property
    def cross_node(self) -> bool:
        return bool(self.placement and self.placement.cross_node)

    def step(self, tier: str, message: str, **data: Any) -> None:
        self.steps.append(TraceStep(tier, message, data))

    def to_dict(self, rejections: bool = True) -> dict:
        """``rejections=False`` leaves out the per-node reasons (O(nodes); the explanation counts them)."""
        return {
            "trace_id": self.trace_id,
            "request_id": self.request_id,
            "policy": self.policy,
            "placed": self.placed,
            "cross_node": self.cross_node,
            "placement": self.placement.to_dict() if self.placement else None,
            "explanation": self.explanation,
            "steps": [{"tier": s.tier, "message": s.message, "data": s.data} for s in self.steps],
            "candidates": [{"node": c.node, "score": list(c.score)} for c in self.candidates],
            "rejections": dict(self.rejections) if rejections else {},
        }


# --------------------------------------------------------------------------------------------------
# the snapshot


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
        dev_keys = (
            "kind",
            "vendor",
            "model",
            "memory_mib",
            "features",
            "topology_group",
            "pcie_switch",
            "numa_node",
            "owner_project",
            "healthy",
            "schedulable",
            "gray",
            "mig",
        )
        for rec in nodes:
            devices = [
                DeviceState(d["id"], int(d.get("index", i)), **{k: d[k] for k in dev_keys if k in d})
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
            if (dev.hard_used + hard) * factor + (dev.shared_used + shared) * 100 > WHOLE * factor:
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
                if hard * factor + shared * 100 > WHOLE * factor:
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
