"""Tier 2: node scoring policies.

A policy scores one feasible node for one request; higher keys win (tuples compare element-wise)
and the engine breaks exact ties (at random, or by snapshot order). Every policy here but
``sumsq`` is *node-local*: the score depends only on the node's own state and the request, so the
engine can cache scores and re-evaluate only the nodes that changed.

``random``    a uniformly random feasible node and card (the paper's Random-fit baseline)
``bestfit``   least CPU + accelerator left after placement, in integer points (the paper's Best-fit)
``packing``   shared cards first, then used nodes, then free nodes (the paper's GPU packing)
``binpack``   most allocated after placement over CPU, memory and accelerator compute
``spread``    least allocated after placement
``topology``  tightest device topology first (NVLink clique > PCIe switch > NUMA > cross-NUMA), then binpack
``fgd``       fragmentation gradient descent (Weng et al., ATC '23): least growth of the FGD
              fragmentation measure, scored as the paper does (sigmoid, integer points)
``slotfrag``  least growth of the slot-based fragmentation measure plus stranded compute (see
              ``frag``), exact deltas, then a packing tie-break
``lookahead`` Suanchi's live default (``BEST``): slotfrag plus the expected idle compute left after
              sampled futures of the workload; never worse than slotfrag on the trace's 17 pod lists
``sumsq``     slotfrag plus the Sum-of-Squares rule over the fleet's card gaps (a fleet-wide term:
              its cached scores are kept valid by bumping ``version`` when the gap histogram moves)
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence

from .assign import Choice
from .fleet import Snapshot
from .frag import FragModel, Shape, after_state, shape_of, typical_shapes
from .nodes import DeviceState, NodeState, Topology
from .request import Request
from .share import WHOLE

Option = tuple[Choice, str]


class Policy:
    """Base class. Subclasses implement ``score``; fragmentation policies also learn the workload."""

    name = ""
    randomized = False  # the engine picks a uniformly random feasible node
    needs_options = True  # False: the score ignores the device choice, tier 3 runs for the winner only
    version = 0  # bumped when cached node scores become stale (e.g. a new typical workload)

    def bind(self, snapshot: Snapshot) -> None:
        """Called when the snapshot's static version changes (fleet-wide constants)."""

    def score(
        self, snapshot: Snapshot, node: NodeState, req: Request, opts: Sequence[Option], rng: random.Random
    ) -> tuple[tuple, int]:
        raise NotImplementedError

    def set_workload(self, requests: Iterable[Request]) -> None:
        """The workload the fleet should expect (fragmentation policies derive typical shapes)."""

    def observe(self, req: Request) -> None:
        """Every request the engine sees (placed or not)."""

    def __repr__(self) -> str:
        return f"<Policy {self.name}>"


def _free_compute_total(snapshot: Snapshot, node: NodeState) -> int:
    return node.free_compute_total()


def _request_compute(req: Request) -> int:
    return req.compute_total


class RandomPolicy(Policy):
    name = "random"
    randomized = True
    needs_options = False

    def score(self, snapshot, node, req, opts, rng):
        return (0,), 0


class BestFitPolicy(Policy):
    """``int((1 - ½·cpu_left/max_cpu - ½·accel_left/max_accel) · 100)``, as the paper's simulator does."""

    name = "bestfit"
    needs_options = False

    def __init__(self) -> None:
        self.max_cpu = 1
        self.max_accel = 1

    def bind(self, snapshot):
        self.max_cpu = max((n.cpu_milli for n in snapshot.nodes), default=0) or 1
        self.max_accel = max((len(n.devices) * WHOLE for n in snapshot.nodes), default=0) or 1

    def score(self, snapshot, node, req, opts, rng):
        s = 0.0
        s += (node.cpu_milli - node.cpu_used - req.cpu_milli) / self.max_cpu * 0.5
        s += (_free_compute_total(snapshot, node) - _request_compute(req)) / self.max_accel * 0.5
        return (int((1.0 - s) * 100),), 0


class PackingPolicy(Policy):
    """Shared cards first (least free on them), then free cards of used nodes, then free nodes."""

    name = "packing"

    def score(self, snapshot, node, req, opts, rng):
        if not req.groups:
            return (0,), 0
        factor = snapshot.factor_pct(node)
        devs = node.devices
        n_dev = len(devs)
        fully_free = sum(1 for d in devs if d.whole_by is None and not d.slices)
        if fully_free == n_dev:
            return (max(100 // 3 - fully_free, fully_free),), 0
        choice = opts[0][0]
        used = [devs[i] for positions in choice for i in positions]
        free_used = sum(1 for d in used if d.whole_by is None and not d.slices)
        if free_used:
            return (max(100 // 2 - free_used, 100 // 3),), 0
        ratio = sum(d.free_compute(factor) * 100 // WHOLE for d in used)
        return (max(100 - ratio // 10, 100 // 2),), 0


def _utilization_after(snapshot: Snapshot, node: NodeState, req: Request) -> float:
    dims = []
    if node.cpu_milli:
        dims.append((node.cpu_used + req.cpu_milli) / node.cpu_milli)
    if node.memory_mib:
        dims.append((node.mem_used + req.memory_mib) / node.memory_mib)
    if node.devices:
        cap = len(node.devices) * WHOLE
        dims.append((cap - _free_compute_total(snapshot, node) + _request_compute(req)) / cap)
    return sum(dims) / len(dims) if dims else 0.0


class BinpackPolicy(Policy):
    name = "binpack"
    needs_options = False

    def score(self, snapshot, node, req, opts, rng):
        return (round(_utilization_after(snapshot, node, req), 9),), 0


class SpreadPolicy(Policy):
    name = "spread"
    needs_options = False

    def score(self, snapshot, node, req, opts, rng):
        return (-round(_utilization_after(snapshot, node, req), 9),), 0


class TopologyScorePolicy(Policy):
    """Nodes where the request gets the tightest device coupling win; binpack breaks ties."""

    name = "topology"

    def score(self, snapshot, node, req, opts, rng):
        tier = opts[0][1]
        rank = Topology.RANK.get(tier, 3) if tier else 0
        return (-rank, round(_utilization_after(snapshot, node, req), 9)), 0


class _FragmentationPolicy(Policy):
    """Shared machinery: typical shapes from a given workload or learned online from requests."""

    mode = "slots"
    threshold = 1.0
    include_cpu_only = False
    use_memory = False
    supply_weighting = False
    capability_weighting = False
    strand_cpu_weight = 0.0
    strand_mem_weight = 0.0
    fill_weight = 0.0  # the lookahead term (``FragModel._fill``): weight, futures, pods per future
    fill_paths = 16
    fill_horizon = 64

    def __init__(
        self,
        *,
        fill_weight: float | None = None,
        fill_paths: int | None = None,
        fill_horizon: int | None = None,
        threshold: float | None = None,
        use_memory: bool | None = None,
        strand_cpu_weight: float | None = None,
        strand_mem_weight: float | None = None,
    ) -> None:
        overrides = {
            "threshold": threshold,
            "use_memory": use_memory,
            "strand_cpu_weight": strand_cpu_weight,
            "strand_mem_weight": strand_mem_weight,
            "fill_weight": fill_weight,
            "fill_paths": fill_paths,
            "fill_horizon": fill_horizon,
        }
        for attr, value in overrides.items():  # None: the class's value
            if value is not None:
                setattr(self, attr, value)
        # CPU, memory, compute of the accelerator requests seen; CPU of the requests without one
        self._ratio_sums = [0, 0, 0, 0]
        self._fleet_cpu_per_compute = 0.0  # the fleet's CPU per milli-card (``bind``)
        self.scarce_cpu = False  # ``cpu_scarce()`` when the model was last built or bound
        self._seen: list[Shape] = []
        self._snapshot: Snapshot | None = None
        self._fixed = False
        self._next_refresh = 64
        self.model = self._model(self._default_shapes())

    def _default_shapes(self) -> list[tuple[Shape, float]]:
        # before any workload is known: whole cards ×1/2/4/8 and half / quarter slices, equally likely
        shapes = [Shape(count=n) for n in (1, 2, 4, 8)] + [
            Shape(count=1, compute=c, whole=False) for c in (250, 500)
        ]
        return [(s, 1 / len(shapes)) for s in shapes]

    def _count_ratio(self, req: Request) -> None:
        compute = req.compute_total
        if compute:
            sums = self._ratio_sums
            sums[0] += req.cpu_milli
            sums[1] += req.memory_mib
            sums[2] += compute
        else:
            self._ratio_sums[3] += req.cpu_milli

    def cpu_scarce(self) -> bool:
        """Whether the workload asks for at least as much CPU per milli-card (its CPU-only requests
        included) as the fleet has: CPU then binds before the accelerators do."""
        cpu, _mem, compute, cpu_only = self._ratio_sums
        fleet = self._fleet_cpu_per_compute
        return bool(compute and fleet) and (cpu + cpu_only) / compute >= fleet

    def _model(self, typical: Sequence[tuple[Shape, float]]) -> FragModel:
        cpu, mem, compute, _cpu_only = self._ratio_sums
        self.scarce_cpu = self.cpu_scarce()
        return FragModel(
            typical,
            self.mode,
            self.use_memory,
            strand_cpu=(self.strand_cpu_weight, cpu / compute if compute else 0.0),
            strand_mem=(self.strand_mem_weight, mem / compute if compute else 0.0),
            fill=(self.fill_weight, self.fill_horizon, self.fill_paths),
        )

    def _rebuild(self, shapes: Sequence[Shape]) -> None:
        typical = typical_shapes(shapes, self.threshold, self.include_cpu_only)
        if typical:
            self.model = self._model(typical)
            if self.supply_weighting and self._snapshot is not None:
                self.model.set_supply(self._snapshot, self.capability_weighting)
            self.version += 1

    def bind(self, snapshot):
        self._snapshot = snapshot
        cards = sum(1 for n in snapshot.nodes for d in n.devices if d.healthy and d.schedulable)
        cpu = sum(n.cpu_milli for n in snapshot.nodes)
        self._fleet_cpu_per_compute = cpu / (cards * WHOLE) if cards else 0.0
        if self.scarce_cpu != self.cpu_scarce():  # cached scores of CPU-only requests go stale
            self.scarce_cpu = not self.scarce_cpu
            self.version += 1
        if self.supply_weighting and self.model.set_supply(snapshot, self.capability_weighting):
            self.version += 1

    def set_workload(self, requests):
        requests = list(requests)
        self._ratio_sums = [0, 0, 0, 0]
        for req in requests:
            self._count_ratio(req)
        self._fixed = True
        self._rebuild([shape_of(r, self.use_memory) for r in requests])

    def observe(self, req):
        if self._fixed:
            return
        self._count_ratio(req)
        self._seen.append(shape_of(req, self.use_memory))
        if len(self._seen) >= self._next_refresh:
            if len(self._seen) > 20_000:
                del self._seen[: len(self._seen) - 20_000]
            self._next_refresh = len(self._seen) + min(2048, max(64, len(self._seen)))
            self._rebuild(self._seen)

    def deltas(
        self, snapshot: Snapshot, node: NodeState, req: Request, opts: Sequence[Option], strand: bool = True
    ) -> tuple[list[float], int]:
        """Growth of the fragmentation measure for each option, and the node's idle compute
        (``strand=False``: without the stranded compute)."""
        model = self.model
        devs, key, before = model.node_states(snapshot, node)
        if not strand:
            before = model.value(key, strand=False)
        idle = sum(d[1] for d in devs)
        cpu_after = node.cpu_milli - node.cpu_used - req.cpu_milli
        mem_after = node.memory_mib - node.mem_used - req.memory_mib
        factor = snapshot.factor_pct(node)
        hw = node.hw_key
        out = []
        for choice, _tier in opts:
            after = list(devs)
            for k, positions in enumerate(choice):
                g = req.groups[k]
                for i in positions:
                    after[i] = after_state(
                        node.devices[i], devs[i][0], factor, g.whole, g.compute, g.memory_mib, g.isolation
                    )
            out.append(model.value(model.key(hw, cpu_after, mem_after, after), strand) - before)
        return out, idle


class FGDPolicy(_FragmentationPolicy):
    """The paper's score: ``int(sigmoid(-Δfrag / 1000) · 100)``; the first card with the best score."""

    name = "fgd"
    mode = "fgd"
    threshold = 0.95
    include_cpu_only = True

    def score(self, snapshot, node, req, opts, rng):
        deltas, _idle = self.deltas(snapshot, node, req, opts)
        best = -1
        best_i = 0
        order = sorted(range(len(opts)), key=lambda k: [i for c in opts[k][0] for i in c])
        for k in order:
            x = -deltas[k] / 1000.0
            s = int(100.0 / (1.0 + math.exp(-x)))
            if s > best:
                best, best_i = s, k
        return (best,), best_i


class SlotFragPolicy(_FragmentationPolicy):
    """Suanchi's fragmentation-aware policy (the project's best on the Alibaba GPU trace).

    The node (and, for a slice, the card) where the placement grows this measure the least wins:

    * **slot fragmentation** — for every request shape seen (all of them), the idle compute that
      pods of that shape could not fill if they came one after another (cards, CPU and memory all
      limit how many fit), weighted by demand per supply: the shape's frequency × all cards ÷ the
      cards whose type and node size can serve it at all — so the few nodes that can take the largest
      pods (or one vendor's pods) are kept for them;
    * **stranded compute** — the idle compute the node's free CPU could not feed at the workload's
      average CPU per card (weight 4): cards left behind an exhausted CPU, whatever comes next. It
      assumes the free CPU is there for accelerator pods; where the workload asks for at least as much
      CPU per card as the fleet has (``cpu_scarce``: CPU-only pods compete for it), it is left out and
      the slot measure alone decides (the trace's cpu250 variant: 6.38 → 5.66 % unallocated).

    Deltas are exact (no rounding into points); ties go to the node with the least idle compute (fill
    used nodes first), then the least free CPU.
    """

    name = "slotfrag"
    mode = "slots"
    threshold = 1.0
    include_cpu_only = False
    supply_weighting = True
    capability_weighting = True
    strand_cpu_weight = 4.0
    strand_mem_weight = 0.0

    def score(self, snapshot, node, req, opts, rng):
        deltas, idle = self.deltas(snapshot, node, req, opts, not self.scarce_cpu)
        best_i = 0
        if len(deltas) > 1:
            best_i = min(range(len(deltas)), key=lambda k: (round(deltas[k], 6), k))
        return (-round(deltas[best_i], 6), -idle, -(node.cpu_milli - node.cpu_used)), best_i


class LookaheadPolicy(SlotFragPolicy):
    """``slotfrag`` plus a lookahead on the known workload: the expected idle compute a node keeps
    after the next pods of the workload's distribution (16 fixed futures of 64 pods each; a pod that
    fits goes on the best-fitting cards, one that does not is skipped) — FGD's fragment weighed by
    the probability that a pod fitting it comes before the node fills (``FragModel._fill``).

    Left out (the policy is then slotfrag) where CPU is scarce, like the stranded term, and where
    shapes are pinned to vendors or models: the futures do not see those pods compete for the few
    nodes that serve them (gpuspec33: 7.35 → 12.19 % unallocated with it).

    Deterministic (the futures are drawn from a fixed seed, the same for every node state) and still
    node-local, so the engine's score caches hold. About 4× slotfrag's CPU time per decision where
    it is on (the trace's unpinned shapes); the engine's mixed fleet pins its shapes to models, so
    there it decides as fast as slotfrag. The live default since issue 31 (seeds 42–51: lower
    unallocated % than slotfrag on 12 of the 17 pod lists, the same on the other 5, where it is off).
    """

    name = "lookahead"
    fill_weight = 1.0


def card_gap(d: DeviceState, factor: int) -> int:
    """A partly used card's free compute (its *gap*); 0 for empty, full, whole-held or unusable cards."""
    if not (d.healthy and d.schedulable) or d.whole_by is not None or not d.slices:
        return 0
    return max(d.free_compute(factor), 0)


class GapHistogram:
    """N(h): how many partly used cards have free gap h (in ``unit`` milli) over the fleet.

    Kept current from the snapshot's change log (each changed node's cards are recounted, so apply and
    release are both covered); a new snapshot, a static change or a trimmed log recounts every node.
    """

    def __init__(self, unit: int = 10) -> None:
        self.unit = unit
        self.counts: dict[int, int] = {}
        self._per_node: dict[int, tuple[int, ...]] = {}
        self._at: tuple[int, int, int] = (-1, -1, -1)  # (snapshot uid, static version, change seq)

    def _gaps(self, node: NodeState) -> tuple[int, ...]:
        factor = node.factor
        return tuple(g // self.unit for d in node.devices if (g := card_gap(d, factor)) > 0)

    def _set(self, node: NodeState) -> None:
        counts = self.counts
        for g in self._per_node.get(node.pos, ()):
            n = counts[g] - 1
            if n:
                counts[g] = n
            else:
                del counts[g]
        gaps = self._gaps(node)
        self._per_node[node.pos] = gaps
        for g in gaps:
            counts[g] = counts.get(g, 0) + 1

    def sync(self, snapshot: Snapshot) -> int:
        """Bring the histogram up to ``snapshot``; returns how many node changes were read."""
        uid, static, seq = self._at
        now = snapshot.change_seq
        start = seq - snapshot.log_offset
        if uid != snapshot.uid or static != snapshot.static_version or start < 0:
            self.counts, self._per_node = {}, {}
            for node in snapshot.nodes:
                self._set(node)
            changed = len(snapshot.nodes)
        else:
            changed = now - seq
            for pos in set(snapshot.change_log[start:]):
                self._set(snapshot.nodes[pos])
        self._at = (snapshot.uid, snapshot.static_version, now)
        return changed

    @staticmethod
    def recount(snapshot: Snapshot, unit: int = 10) -> dict[int, int]:
        """The histogram counted from scratch (for checks)."""
        fresh = GapHistogram(unit)
        fresh.sync(snapshot)
        return fresh.counts


class SumSqPolicy(SlotFragPolicy):
    """``slotfrag`` plus the Sum-of-Squares rule for the cards' free gaps (Csirik, Johnson, Kenyon,
    Orlin, Shor, Weber, "On the Sum-of-Squares algorithm for bin packing", J. ACM 53(1), 2006).

    Cards are the bins: N(L) counts the partly used cards whose free gap falls in level L over the
    fleet. A slice that moves a card from level a to level b changes Σ N(L)² by 2·(N(b) − N(a)) + 2
    (level 0, a gap under one level, counts as a closed card; an empty card opens into the
    histogram), so the rule closes gaps many cards have and avoids gaps many cards already have.
    Levels are coarse (``ss_bin`` milli each, 100 by default): on the Alibaba trace exact gaps (10
    milli) make the rule keep an inventory of open gaps at every level and lose to slotfrag, and so
    do levels of 50, 80, 150 or 200 milli, or one level per common slice size; 100 wins. The node
    score is slotfrag's delta plus ``ss_weight`` × that change, so the rule decides slices and
    slotfrag decides whole cards and breaks the rule's ties.

    The exact histogram (:class:`GapHistogram`) follows the snapshot's change log (apply and
    release); scores read a copy by level frozen for ``ss_epoch`` node changes, and each new copy
    bumps ``version``, so the engine's cached node scores never outlive the copy they were computed
    with. Deterministic.
    """

    name = "sumsq"
    ss_weight = 10.0
    ss_epoch = 128
    ss_bin = 100

    def __init__(
        self,
        *,
        ss_weight: float | None = None,
        ss_epoch: int | None = None,
        ss_bin: int | None = None,
        **options,
    ) -> None:
        super().__init__(**options)
        for attr, value in (("ss_weight", ss_weight), ("ss_epoch", ss_epoch), ("ss_bin", ss_bin)):
            if value is not None:  # None: the class's value
                setattr(self, attr, value)
        self.ss_epoch, self.ss_bin = max(1, int(self.ss_epoch)), max(1, int(self.ss_bin))
        self.gaps = GapHistogram(10)
        self.frozen: dict[int, int] = {}  # level -> partly used cards
        self._pending = 0

    def level(self, gap: int) -> int:
        """A free gap's level (milli in, 0 for a closed card)."""
        return gap // self.ss_bin

    def _refresh(self, force: bool = False) -> None:
        snapshot = self._snapshot
        if snapshot is None:
            return
        self._pending += self.gaps.sync(snapshot)
        if not (force or self._pending >= self.ss_epoch):
            return
        self._pending = 0
        unit = self.gaps.unit
        frozen: dict[int, int] = {}
        for gap, n in self.gaps.counts.items():
            lv = self.level(gap * unit)
            if lv:
                frozen[lv] = frozen.get(lv, 0) + n
        if frozen != self.frozen:
            self.frozen = frozen
            self.version += 1

    def bind(self, snapshot):
        super().bind(snapshot)
        self._refresh(force=True)

    def observe(self, req):
        super().observe(req)
        self._refresh()

    def ss_delta(self, before: int, after: int) -> int:
        """Change of Σ N(L)² when one card goes from level ``before`` to ``after`` (0: not counted)."""
        if before == after:
            return 0
        n = self.frozen
        d = 0
        if before:
            d -= 2 * n.get(before, 0) - 1
        if after:
            d += 2 * n.get(after, 0) + 1
        return d

    def score(self, snapshot, node, req, opts, rng):
        deltas, idle = self.deltas(snapshot, node, req, opts, not self.scarce_cpu)
        factor = node.factor
        level = self.level
        best = 0.0
        best_i = -1
        for k, (choice, _tier) in enumerate(opts):
            ss = 0
            for gi, positions in enumerate(choice):
                g = req.groups[gi]
                if g.whole:
                    continue
                for i in positions:
                    d = node.devices[i]
                    free = d.free_compute(factor)
                    before = level(card_gap(d, factor))
                    ss += self.ss_delta(before, level(max(free - g.compute, 0)))
            total = round(deltas[k] + self.ss_weight * ss, 6)
            if best_i < 0 or total < best:
                best, best_i = total, k
        return (-best, -idle, -(node.cpu_milli - node.cpu_used)), best_i


REGISTRY: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (
        RandomPolicy,
        BestFitPolicy,
        PackingPolicy,
        BinpackPolicy,
        SpreadPolicy,
        TopologyScorePolicy,
        FGDPolicy,
        SlotFragPolicy,
        LookaheadPolicy,
        SumSqPolicy,
    )
}
BEST = LookaheadPolicy.name


def policy_names() -> list[str]:
    return list(REGISTRY)


def get_policy(name: str | Policy, **options) -> Policy:
    if isinstance(name, Policy):
        return name
    try:
        cls = REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(REGISTRY)}") from None
    return cls(**options)
