"""What a job asks the engine for: a :class:`Request` of :class:`DeviceGroup` parts and a topology policy.

Immutable dataclasses; ``Request`` precomputes the keys the engine's caches group requests by
(``static_key`` for filter results, ``shape_key`` for fit results) and its compute in milli-cards.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .nodes import Isolation, Toleration
from .share import WHOLE


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
