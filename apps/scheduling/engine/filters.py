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

from .fleet import Snapshot
from .nodes import DeviceState, NodeState, NodeStatus
from .request import DeviceGroup, Request

# static reasons
STATUS_REASONS = {
    NodeStatus.NOT_READY: "node not ready",
    NodeStatus.MAINTENANCE: "node in maintenance",
    NodeStatus.QUARANTINED: "node quarantined",
    NodeStatus.DRAINING: "node draining",
    NodeStatus.RETIRED: "node retired",
}
OTHER_POOL = "node not in the requested pool"
OTHER_CLUSTER = "node in another cluster"
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
MIG_PLACEMENT = "no free MIG placement for {}"
NO_SWITCH = "no switch domain can host every part"


class StaticResult:
    """The nodes that pass the static filter, with the eligible device positions per group.

    Built per node (``static_filter``) or per static node class (``static_filter_classes``, see
    ``index.NodeClasses``): then ``cls_elig`` / ``cls_reason`` hold the result per class and the per-node
    views (``eligible``, ``elig_by_pos``, ``rejected``) are only built when something reads them.
    """

    __slots__ = (
        "_eligible",
        "_elig_by_pos",
        "_rejected",
        "total",
        "_counts",
        "classes",
        "cls_elig",
        "cls_reason",
        "n_eligible",
        "_nodes",
    )

    def __init__(self, total: int, classes=None, nodes=()) -> None:
        self.total = total
        self._counts: dict[str, int] | None = None
        self.classes = classes
        self.cls_elig: dict[int, tuple[tuple[int, ...], ...]] = {}  # class id -> eligible positions
        self.cls_reason: dict[int, str] = {}  # class id -> static reason
        self.n_eligible = 0
        self._nodes = nodes
        if classes is None:
            self._eligible: list | None = []
            self._elig_by_pos: dict | None = {}
            self._rejected: dict | None = {}
        else:
            self._eligible = self._elig_by_pos = self._rejected = None

    @property
    def eligible(self) -> list[tuple[NodeState, tuple[tuple[int, ...], ...]]]:
        if self._eligible is None:
            cls_elig, class_of = self.cls_elig, self.classes.class_of
            nodes = self._nodes
            self._eligible = [(nodes[p], cls_elig[c]) for p, c in enumerate(class_of) if c in cls_elig]
        return self._eligible

    @property
    def elig_by_pos(self) -> dict[int, tuple[tuple[int, ...], ...]]:
        if self._elig_by_pos is None:
            cls_elig = self.cls_elig
            self._elig_by_pos = {p: cls_elig[c] for p, c in enumerate(self.classes.class_of) if c in cls_elig}
        return self._elig_by_pos

    @property
    def rejected(self) -> dict[str, str]:
        if self._rejected is None:
            reasons, nodes = self.cls_reason, self._nodes
            self._rejected = {
                nodes[p].name: reasons[c] for p, c in enumerate(self.classes.class_of) if c in reasons
            }
        return self._rejected

    def counts(self) -> dict[str, int]:
        if self._counts is None:
            if self.classes is None:
                self._counts = dict(Counter(self.rejected.values()))
            else:
                counts: Counter = Counter()
                sizes = self.classes.sizes
                for c, reason in self.cls_reason.items():
                    counts[reason] += sizes[c]
                self._counts = dict(counts)
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
    if req.cluster is not None and node.cluster != req.cluster:  # one job, one cluster (engine/clusters.py)
        return OTHER_CLUSTER, ()
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
    result.n_eligible = len(result.eligible)
    return result


def static_filter_classes(snapshot: Snapshot, req: Request, classes) -> StaticResult:
    """``static_filter`` evaluated once per static node class (``index.NodeClasses``).

    Only for requests without per-node precheck failures (those name single nodes).
    """
    result = StaticResult(len(snapshot.nodes), classes, snapshot.nodes)
    sizes = classes.sizes
    for cid, rep in enumerate(classes.reps):
        reason, elig = static_reason(snapshot, rep, req)
        if reason is None:
            result.cls_elig[cid] = elig
            result.n_eligible += sizes[cid]
        else:
            result.cls_reason[cid] = reason
    return result


def group_reason(
    node: NodeState, g: DeviceGroup, positions: Iterable[int], factor: int, taken=()
) -> str | None:
    """Why group ``g`` cannot be served by the free capacity of ``positions`` (``None`` if it can)."""
    devs = node.devices
    if g.whole:
        free = sum(1 for i in positions if i not in taken and devs[i].whole_by is None and not devs[i].slices)
        return None if free >= g.count else CARDS
    if g.profile and any(devs[i].mig is not None for i in positions):  # MIG geometry (engine/mig.py)
        from . import mig

        n = sum(1 for i in positions if i not in taken and mig.accepts(devs[i], g, factor))
        return None if n >= g.count else MIG_PLACEMENT.format(g.profile)
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
    return explain_counts(total, Counter(reasons), available)


def explain_counts(total: int, counts: dict[str, int], available: int = 0) -> str:
    """``explain`` from reason counts (what the engine's class index yields without a per-node pass)."""
    counts = {r: n for r, n in counts.items() if n}
    parts = ", ".join(f"{n} {r}" for r, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return (
        f"{available}/{total} nodes are available: {parts}."
        if parts
        else f"{available}/{total} nodes are available."
    )
