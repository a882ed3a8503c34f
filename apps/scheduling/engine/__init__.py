"""Suanchi's placement engine: pure Python, no Django.

Build a :class:`Snapshot` (nodes, devices, pools, active placements), then::

    engine = Engine(policy="slotfrag", seed=42)
    decision = engine.place(snapshot, Request("job-1", cpu_milli=8000, groups=(DeviceGroup(count=4),)))
    decision.placement          # Placement (applied to the snapshot) or None
    decision.explanation        # "0/40 nodes are available: ..." when nothing fits
    engine.release(snapshot, "job-1")

Tier 1 lives in ``filters``, tier 2 in ``policies``, tier 3 in ``assign``; ``simulate`` replays the
Alibaba GPU trace benchmark through the same engine.
"""

from .engine import Engine
from .filters import explain
from .model import (
    WHOLE,
    CapacityError,
    Decision,
    DeviceAssignment,
    DeviceGroup,
    DeviceState,
    Isolation,
    NodePart,
    NodeState,
    NodeStatus,
    Placement,
    PoolInfo,
    Request,
    Snapshot,
    Taint,
    Toleration,
    Topology,
    TopologyPolicy,
)
from .policies import BEST, Policy, get_policy, policy_names

__all__ = [
    "BEST",
    "WHOLE",
    "CapacityError",
    "Decision",
    "DeviceAssignment",
    "DeviceGroup",
    "DeviceState",
    "Engine",
    "Isolation",
    "NodePart",
    "NodeState",
    "NodeStatus",
    "Placement",
    "Policy",
    "PoolInfo",
    "Request",
    "Snapshot",
    "Taint",
    "Toleration",
    "Topology",
    "TopologyPolicy",
    "explain",
    "get_policy",
    "policy_names",
]
