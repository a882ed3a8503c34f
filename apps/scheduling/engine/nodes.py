"""The fleet's mutable state: nodes and their cards, with the attributes filters read.

:class:`DeviceState` is one accelerator card and what is allocated on it (memory, hard and shared
compute milli, a whole-card holder, slices, MIG instances); :class:`NodeState` is one node with its
cards, CPU and memory, status, labels, taints, pool and topology. Both are plain ``__slots__`` classes:
the engine reads their counters in its inner loops; only the snapshot (``fleet.Snapshot``) writes
them. Taints, tolerations and pools (with their overcommit factor) live here too,
as do the constant sets (node statuses, slice isolation, topology tiers).

How much compute a card can still give is the share-fit rule of ``share``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .share import free_hard, free_shared, share_fits

MAX_OVERCOMMIT_PCT = 150

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


# a card's static attributes, the keyword arguments of DeviceState (``Snapshot.from_records`` reads them)
DEVICE_ATTRS = (
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


class DeviceState:
    """One accelerator card and what is allocated on it."""

    __slots__ = (
        "id",
        "index",
        *DEVICE_ATTRS,
        "mem_used",
        "hard_used",
        "shared_used",
        "whole_by",
        "slices",
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
        return free_shared(self.hard_used, self.shared_used, factor_pct)

    def hard_free_compute(self, factor_pct: int = 100) -> int:
        if self.whole_by is not None:
            return 0
        return free_hard(self.hard_used, self.shared_used, factor_pct)

    def fits_slice(self, memory_mib: int, compute: int, isolation: str, factor_pct: int = 100) -> bool:
        if self.whole_by is not None or self.mig_used or self.mem_used + memory_mib > self.memory_mib:
            return False
        if isolation == Isolation.HARD:
            return share_fits(self.hard_used + compute, self.shared_used, factor_pct)
        return share_fits(self.hard_used, self.shared_used + compute, factor_pct)

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
                free = free_shared(d.hard_used, d.shared_used, factor)
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
