"""What the engine answers: placements (which node, which cards, which share) and decisions with a trace.

Immutable results, except :class:`Decision`, which the engine fills step by step while it places one
request. ``Placement.to_dict`` / ``from_dict`` are the shape stored on Allocation rows and read back
into a snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .nodes import Isolation, Topology
from .share import WHOLE


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
