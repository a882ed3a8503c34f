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
  and only shared slices can use the overcommit headroom (the rule's one home: ``share``);
* a whole card excludes every other allocation on it;
* on a card with a MIG geometry (``DeviceState.mig``) the MIG instances are valid, non-overlapping
  GPU-instance placements and share the card with nothing else (``engine/mig.py``).

The model is split by topic; this module keeps the names importable from one place:

* ``share`` — the share-fit rule (``WHOLE``, ``share_fits``, ``free_shared``, ``free_hard``);
* ``nodes`` — nodes and cards (mutable state), taints, tolerations, pools, constants;
* ``request`` — what a job asks for (``Request``, ``DeviceGroup``, ``TopologyPolicy``);
* ``decision`` — what the engine answers (``Placement`` and its parts, ``Decision`` and its trace);
* ``fleet`` — the ``Snapshot`` placements are applied to and released from.
"""

from __future__ import annotations

from .decision import (
    Candidate,
    Decision,
    DeviceAssignment,
    LazyMapping,
    NodePart,
    Placement,
    TraceStep,
)
from .fleet import CapacityError, Snapshot
from .nodes import (
    DEFAULT_POOL,
    MAX_OVERCOMMIT_PCT,
    DeviceState,
    Isolation,
    NodeState,
    NodeStatus,
    PoolInfo,
    Taint,
    Toleration,
    Topology,
)
from .request import DeviceGroup, Request, TopologyPolicy
from .share import WHOLE, free_hard, free_shared, share_fits

__all__ = [
    "DEFAULT_POOL",
    "MAX_OVERCOMMIT_PCT",
    "WHOLE",
    "CapacityError",
    "Candidate",
    "Decision",
    "DeviceAssignment",
    "DeviceGroup",
    "DeviceState",
    "Isolation",
    "LazyMapping",
    "NodePart",
    "NodeState",
    "NodeStatus",
    "Placement",
    "PoolInfo",
    "Request",
    "Snapshot",
    "Taint",
    "Toleration",
    "Topology",
    "TopologyPolicy",
    "TraceStep",
    "free_hard",
    "free_shared",
    "share_fits",
]
