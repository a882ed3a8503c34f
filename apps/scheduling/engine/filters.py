"""Tier 1: the node filter.

Two stages, both returning a reason per rejected node:

* **static** — what does not change when capacity is allocated: node status (health, maintenance,
  quarantine, draining), pool and project ownership, taints vs tolerations, node selector labels, the
  caller's runtime precheck and the devices' type, features, health and ownership. The result is cached
  per request signature until the snapshot's static version changes.
* **capacity** — CPU, memory and device capacity right now.

Reasons are short constant phrases so that they can be counted across nodes for a kube-scheduler style
explanation: ``0/40 nodes are available: 12 insufficient device memory, 8 untolerated taint
accelerator=huawei-npu.``
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from .model import DeviceGroup, DeviceState, NodeState, NodeStatus, Request, Snapshot

# static reasons
STATUS_REASONS = {
    NodeStatus.NOT_READY: "node not ready",
    NodeStatus.MAINTENANCE: "node in maintenance",
    NodeStatus.QUARANTINED: "node quarantined",
    NodeStatus.DRAINING: "node draining",
    NodeStatus.RETIRED: "node retired",
}
OTHER_POOL = "node not in the requested pool"
POOL_RESERVED = "pool reserved for another project"
NODE_RESERVED = "node reserved for another project"
SELECTOR = "node selector mismatch"
TAINT = "untolerated taint {}"
PRECHECK = "runtime precheck failed: {}"
NO_DEVICE = "no {}"
MISSING_FEATURE = "missing required feature {}"
CARD_TOO_SMALL = "card memory below request"
UNHEALTHY = "matching devices unhealthy or not schedulable"
GRAY_ONLY = "matching devices are on gray-release soak (the job did not opt in)"
DEVICE_RESERVED = "matching devices reserved for another project"
TOO_FEW = "too few matching devices"
# capacity reasons
CPU = "insufficient cpu"
MEMORY = "insufficient memory"
CARDS = "insufficient free cards"
DEVICE_MEMORY = "insufficient device memory"
DEVICE_COMPUTE = "insufficient device compute"
DEVICES = "insufficient free devices"
NO_SWITCH = "no switch domain can host every part"


class StaticResult:
    """The nodes that pass the static filter, with the eligible device positions per group."""

    __slots__ = ("eligible", "elig_by_pos", "rejected", "total", "_counts")

    def __init__(self, total: int) -> None:
        self.eligible: list[tuple[NodeState, tuple[tuple[int, ...], ...]]] = []
        self.elig_by_pos: dict[int, tuple[tuple[int, ...], ...]] = {}
        self.rejected: dict[str, str] = {}
        self.total = total
        self._counts: dict[str, int] | None = None

    def counts(self) -> dict[str, int]:
        if self._counts is None:
            self._counts = dict(Counter(self.rejected.values()))
        return self._counts


def _type_matches(d: DeviceState, g: DeviceGroup) -> bool:
    return (
        (g.kind is None or d.kind == g.kind)
        and (not g.vendors or d.vendor in g.vendors)
        and (not g.models or d.model in g.models)
    )


def _what(g: DeviceGroup) -> str:
    what = g.kind or "device"
    if g.models:
        return f"{what} of model {'|'.join(sorted(g.models))}"
    if g.vendors:
        return f"{what} from {'|'.join(sorted(g.vendors))}"
    return what


def eligible_devices(
    node: NodeState, g: DeviceGroup, project: str | None, gray_ok: bool = False
) -> tuple[tuple[int, ...], str | None]:
    """Positions of the node's devices that may serve group ``g`` (ignoring usage), or a reason."""
    devs = node.devices
    cand = [i for i, d in enumerate(devs) if _type_matches(d, g)]
    if not cand:
        return (), NO_DEVICE.format(_what(g))
    if g.features:
        with_f = [i for i in cand if g.features <= devs[i].features]
        if not with_f:
            have = frozenset().union(*(devs[i].features for i in cand))
            return (), MISSING_FEATURE.format(
                ",".join(sorted(g.features - have)) or ",".join(sorted(g.features))
            )
        cand = with_f
    if g.memory_mib:
        big = [i for i in cand if devs[i].memory_mib >= g.memory_mib]
        if not big:
            return (), CARD_TOO_SMALL
        cand = big
    ok = [i for i in cand if devs[i].healthy and devs[i].schedulable]
    if not ok:
        return (), UNHEALTHY
    if not gray_ok:  # cards on gray-release (canary) soak serve only jobs that opted in
        ok = [i for i in ok if not devs[i].gray]
        if not ok:
            return (), GRAY_ONLY
    mine = [i for i in ok if devs[i].owner_project is None or devs[i].owner_project == project]
    if not mine:
        return (), DEVICE_RESERVED
    if len(mine) < g.count:
        return (), TOO_FEW
    return tuple(mine), None


def static_reason(snapshot: Snapshot, node: NodeState, req: Request) -> tuple[str | None, tuple]:
    """The first static filter a node fails (kube-scheduler reports one reason per node)."""
    if node.status != NodeStatus.READY:
        return STATUS_REASONS.get(node.status, "node not ready"), ()
    if req.pool is not None and node.pool != req.pool:
        return OTHER_POOL, ()
    pool = snapshot.pools.get(node.pool)
    if pool is not None and pool.owner_project is not None and pool.owner_project != req.project:
        return POOL_RESERVED, ()
    if node.owner_project is not None and node.owner_project != req.project:
        return NODE_RESERVED, ()
    for taint in node.taints:
        if taint.effect == "PreferNoSchedule":
            continue
        if not any(t.tolerates(taint) for t in req.tolerations):
            return TAINT.format(taint), ()
    if req.node_selector:
        labels = node.labels
        for key, value in req.node_selector:
            if labels.get(key) != value:
                return SELECTOR, ()
    for name, reason in req.precheck_failures:
        if name == node.name:
            return PRECHECK.format(reason), ()
    elig = []
    for g in req.groups:
        positions, reason = eligible_devices(node, g, req.project, req.gray_opt_in)
        if reason is not None:
            return reason, ()
        elig.append(positions)
    if len(req.groups) > 1:
        union = set().union(*elig)
        if len(union) < req.device_count:
            return TOO_FEW, ()
    return None, tuple(elig)


def static_filter(snapshot: Snapshot, req: Request, nodes: Iterable[NodeState] | None = None) -> StaticResult:
    nodes = snapshot.nodes if nodes is None else list(nodes)
    result = StaticResult(len(nodes))
    for node in nodes:
        reason, elig = static_reason(snapshot, node, req)
        if reason is None:
            result.eligible.append((node, elig))
            result.elig_by_pos[node.pos] = elig
        else:
            result.rejected[node.name] = reason
    return result


def group_reason(
    node: NodeState, g: DeviceGroup, positions: Iterable[int], factor: int, taken=()
) -> str | None:
    """Why group ``g`` cannot be served by the free capacity of ``positions`` (``None`` if it can)."""
    devs = node.devices
    if g.whole:
        free = sum(1 for i in positions if i not in taken and devs[i].whole_by is None and not devs[i].slices)
        return None if free >= g.count else CARDS
    n = 0
    mem_ok = False
    for i in positions:
        if i in taken:
            continue
        d = devs[i]
        if d.whole_by is not None or d.mem_used + g.memory_mib > d.memory_mib:
            continue
        mem_ok = True
        if d.fits_slice(g.memory_mib, g.compute, g.isolation, factor):
            n += 1
            if n >= g.count:
                return None
    return DEVICE_COMPUTE if mem_ok else DEVICE_MEMORY


def capacity_reason(snapshot: Snapshot, node: NodeState, req: Request, elig: tuple) -> str | None:
    """Why the whole request (one replica) does not fit on ``node`` right now."""
    if node.cpu_milli - node.cpu_used < req.cpu_milli:
        return CPU
    if node.memory_mib - node.mem_used < req.memory_mib:
        return MEMORY
    if not req.groups:
        return None
    factor = snapshot.factor_pct(node)
    if len(req.groups) == 1:
        return group_reason(node, req.groups[0], elig[0], factor)
    from .assign import choose_devices  # local import: assign depends on this module

    if choose_devices(node, req, elig, factor) is not None:
        return None
    for g, positions in zip(req.groups, elig, strict=True):
        reason = group_reason(node, g, positions, factor)
        if reason is not None:
            return reason
    return DEVICES


def explain(total: int, reasons: Iterable[str], available: int = 0) -> str:
    """kube-scheduler style: ``0/40 nodes are available: 12 insufficient cpu, 3 node quarantined.``"""
    counts = Counter(reasons)
    parts = ", ".join(f"{n} {r}" for r, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return (
        f"{available}/{total} nodes are available: {parts}."
        if parts
        else f"{available}/{total} nodes are available."
    )
