"""Fragmentation measures over the workload's typical request shapes.

Two measures of how much of a node's idle accelerator compute the common request shapes cannot use:

* ``fgd`` — the measure of Weng et al. (USENIX ATC '23, "Beware of Fragmentation"): for each typical
  shape, if one more pod of that shape fits on the node, the idle compute on cards with less free than
  the shape asks for is fragment; if it does not fit (GPU, CPU or type), all idle compute is fragment.
  The shapes are weighted by their frequency.
* ``slots`` — Suanchi's measure: for each typical shape, how many pods of that shape the node could
  still host *all together* (limited by cards, by CPU, optionally by memory); the idle compute those
  pods could not fill is fragment. Counting every pod the node can host, not just one, makes the
  measure feel CPU or memory being eaten away before the last pod stops fitting. On top of it, the
  idle compute that the node's free CPU (memory) cannot feed at the workload's average CPU (memory)
  per card counts as *stranded* — what is left behind on CPU-poor nodes whatever comes next.
  Optionally (``fill``, the ``lookahead`` policy) a lookahead term: the idle compute left after a few
  fixed futures of pods drawn from the workload are played on the node.

Both are evaluated on a compact node state key (hardware, free CPU, free memory, per-card free compute)
and memoized, so identical node states are computed once.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .fleet import Snapshot
from .nodes import DeviceState, Isolation, NodeState
from .request import Request
from .share import WHOLE, free_shared

DevState = tuple[int, int, int, bool]  # (type index, free compute, free memory, empty)


@dataclass(frozen=True, slots=True)
class Shape:
    """One typical request shape (a replica of a request, first device group)."""

    cpu_milli: int = 0
    memory_mib: int = 0
    count: int = 0  # devices per pod, 0 for CPU-only
    compute: int = WHOLE  # milli of a card per device
    whole: bool = True
    device_memory: int = 0
    kind: str | None = None
    vendors: frozenset[str] = frozenset()
    models: frozenset[str] = frozenset()

    @property
    def gpu(self) -> int:
        return self.count * self.compute

    def sort_key(self) -> tuple:
        return (
            self.cpu_milli,
            self.compute,
            self.count,
            self.memory_mib,
            sorted(self.models),
            sorted(self.vendors),
            self.kind or "",
        )


def shape_of(req: Request, use_memory: bool = True) -> Shape:
    mem = req.memory_mib if use_memory else 0
    if not req.groups:
        return Shape(cpu_milli=req.cpu_milli, memory_mib=mem, count=0, compute=0)
    g = max(req.groups, key=lambda x: x.count * x.compute)
    return Shape(
        cpu_milli=req.cpu_milli,
        memory_mib=mem,
        count=g.count,
        compute=g.compute,
        whole=g.whole,
        device_memory=0 if g.whole else g.memory_mib,
        kind=g.kind,
        vendors=g.vendors,
        models=g.models,
    )


def typical_shapes(
    shapes: Iterable[Shape], threshold: float = 0.95, include_cpu_only: bool = True
) -> list[tuple[Shape, float]]:
    """The most frequent shapes that together make up ``threshold`` of all, with normalized weights."""
    counts = Counter(s for s in shapes if include_cpu_only or s.count > 0)
    total = sum(counts.values())
    if not total:
        return []
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0].sort_key()))
    chosen: list[tuple[Shape, int]] = []
    cum = 0
    for shape, n in ordered:
        chosen.append((shape, n))
        cum += n
        if cum >= threshold * total:
            break
    return [(s, n / cum) for s, n in chosen]


def device_state(d: DeviceState, type_idx: int, factor: int) -> DevState:
    if not (d.healthy and d.schedulable):
        return (type_idx, 0, 0, False)
    return (type_idx, d.free_compute(factor), d.memory_mib - d.mem_used, d.whole_by is None and not d.slices)


def after_state(
    d: DeviceState, type_idx: int, factor: int, whole: bool, compute: int, memory: int, isolation: str
) -> DevState:
    """The card's state once a whole card / a slice is placed on it (nothing is mutated)."""
    if whole:
        return (type_idx, 0, 0, False)
    hard = d.hard_used + (compute if isolation == Isolation.HARD else 0)
    shared = d.shared_used + (compute if isolation != Isolation.HARD else 0)
    free = free_shared(hard, shared, factor)
    return (type_idx, max(free, 0), d.memory_mib - d.mem_used - memory, False)


class FragModel:
    """Memoized fragmentation value of node states for one set of typical shapes."""

    def __init__(
        self,
        shapes: Sequence[tuple[Shape, float]],
        mode: str = "slots",
        use_memory: bool = False,
        *,
        strand_cpu: tuple[float, float] = (0.0, 0.0),
        strand_mem: tuple[float, float] = (0.0, 0.0),
        fill: tuple[float, int, int] = (0.0, 0, 0),
    ) -> None:
        """``strand_cpu`` / ``strand_mem``: (weight, milli-cores or MiB per milli-card of the workload).

        With a weight, the slots measure also counts the idle compute that the node's free CPU
        (memory) could not feed at the workload's average ratio — cards stranded behind an exhausted
        CPU or memory, whichever pod shapes come next.
        """
        if mode not in ("fgd", "slots"):
            raise ValueError(f"unknown fragmentation mode {mode!r}")
        self.mode = mode
        self.use_memory = use_memory
        self.strand_cpu = strand_cpu if strand_cpu[0] > 0 and strand_cpu[1] > 0 else (0.0, 0.0)
        self.strand_mem = strand_mem if strand_mem[0] > 0 and strand_mem[1] > 0 else (0.0, 0.0)
        self.key_memory = use_memory or self.strand_mem[0] > 0
        self.shapes = list(shapes)
        self.fill_weight, self.fill_horizon, self.fill_paths = fill if fill[0] > 0 else (0.0, 0, 0)
        self._memo: dict[
            tuple, tuple[float, float, float | None]
        ] = {}  # key -> (slots or FGD, stranded, fill)
        self._allowed: dict[tuple, tuple] = {}
        self._nodes: dict[int, tuple[int, list[DevState], tuple, float]] = {}
        self._snap_id = 0
        self._snap_static = -1
        # shapes that ask for the same cards are evaluated together (their CPU / memory differ)
        self.cpu_only_weight = sum(w for shape, w in self.shapes if shape.count == 0)
        self._members: dict[tuple, list[tuple[int, int, float]]] = {}
        for shape, w in self.shapes:
            if shape.count == 0:
                continue
            gkey = (
                shape.whole,
                shape.count,
                shape.compute,
                shape.device_memory,
                shape.kind,
                shape.vendors,
                shape.models,
            )
            self._members.setdefault(gkey, []).append((shape.cpu_milli, shape.memory_mib, w))
        self.scale: dict[tuple, float] = {}
        self._build_groups()

    def _build_groups(self) -> None:
        self.groups = []
        for gkey, base in self._members.items():
            members = sorted(
                (cpu, mem, w * self.scale.get((gkey, i), 1.0)) for i, (cpu, mem, w) in enumerate(base)
            )
            cpus = [m[0] for m in members]
            prefix = [0.0]
            for m in members:
                prefix.append(prefix[-1] + m[2])
            whole, count, compute, dmem, kind, vendors, models = gkey
            self.groups.append(
                (whole, count, compute, dmem, (kind, vendors, models), members, cpus, prefix, prefix[-1])
            )
        self._paths = self._draw_paths()
        self._allowed.clear()
        self._memo.clear()
        self._nodes.clear()

    def set_supply(self, snapshot: Snapshot, capability: bool = True) -> bool:
        """Weight each shape by demand per supply: frequency × (all cards ÷ cards that can serve it).

        A card can serve a shape when its type matches and, with ``capability``, when its node is ready
        and big enough for one pod of the shape at all (enough such cards, CPU, memory). A shape that only
        a small part of the fleet can serve (one vendor or model, or pods only the largest nodes can
        hold) then counts more on exactly those nodes, so requests that could run anywhere leave scarce
        hardware to the requests that need it. Returns whether the weights changed.
        """
        from .index import NodeClasses  # local import: index builds on the model like this module

        # Static node classes (identical nodes) are counted once, times their size: O(classes).
        classes = NodeClasses.of(snapshot)
        nodes = []
        total = 0
        for node, size in zip(classes.reps, classes.sizes, strict=True):
            cards = [d for d in node.devices if d.healthy and d.schedulable]
            total += len(cards) * size
            if cards and (not capability or node.status == "ready"):
                nodes.append((node, cards, size))
        scale: dict[tuple, float] = {}
        raw = weight = 0.0
        for gkey, base in self._members.items():
            _whole, count, _c, dmem, kind, vendors, models = gkey
            per_node = []
            for node, cards, size in nodes:
                n = sum(
                    1
                    for d in cards
                    if (kind is None or d.kind == kind)
                    and (not vendors or d.vendor in vendors)
                    and (not models or d.model in models)
                    and (not dmem or d.memory_mib >= dmem)
                )
                if n >= count:
                    per_node.append((node, n * size))
            for i, (cpu, mem, w) in enumerate(base):
                usable = sum(
                    n
                    for node, n in per_node
                    if not capability or (node.cpu_milli >= cpu and (not mem or node.memory_mib >= mem))
                )
                f = total / usable if usable else 1.0
                scale[(gkey, i)] = f
                raw += w * f
                weight += w
        if raw > 0:
            norm = weight / raw
            scale = {k: v * norm for k, v in scale.items()}
        if all(abs(v - self.scale.get(k, 1.0)) < 1e-9 for k, v in scale.items()) and len(scale) == len(
            self.scale
        ):
            return False
        self.scale = scale
        self._build_groups()
        return True

    # ---- node states ---------------------------------------------------------------------------

    def _types(self, hw_key: tuple) -> tuple:
        """Per group: ``None`` when every card type of the node qualifies, else the allowed type set."""
        allowed = self._allowed.get(hw_key)
        if allowed is None:
            out = []
            for group in self.groups:
                kind, vendors, models = group[4]
                ok = frozenset(
                    i
                    for i, (k, vendor, model) in enumerate(hw_key)
                    if (kind is None or k == kind)
                    and (not vendors or vendor in vendors)
                    and (not models or model in models)
                )
                out.append(None if len(ok) == len(hw_key) else ok)
            allowed = tuple(out)
            self._allowed[hw_key] = allowed
        return allowed

    def node_states(self, snapshot: Snapshot, node: NodeState) -> tuple[list[DevState], tuple, float]:
        """(per-card states in node order, state key, fragmentation value), cached per node version."""
        if self._snap_id != snapshot.uid or self._snap_static != snapshot.static_version:
            self._nodes.clear()
            self._snap_id, self._snap_static = snapshot.uid, snapshot.static_version
        hit = self._nodes.get(node.pos)
        if hit is not None and hit[0] == node.version:
            return hit[1], hit[2], hit[3]
        factor = snapshot.factor_pct(node)
        hw = node.hw_key
        index = {t: i for i, t in enumerate(hw)}
        devs = [device_state(d, index[(d.kind, d.vendor, d.model)], factor) for d in node.devices]
        key = self.key(hw, node.cpu_milli - node.cpu_used, node.memory_mib - node.mem_used, devs)
        value = self.value(key)
        self._nodes[node.pos] = (node.version, devs, key, value)
        return devs, key, value

    def key(self, hw_key: tuple, cpu_free: int, mem_free: int, devs: Iterable[DevState]) -> tuple:
        return (hw_key, cpu_free, mem_free if self.key_memory else 0, tuple(sorted(devs)))

    # ---- the measures --------------------------------------------------------------------------

    def value(self, key: tuple, strand: bool = True) -> float:
        """The measure of one node state; ``strand=False`` leaves the stranded compute out, and the
        lookahead too (both assume the node's free CPU is there for accelerator pods)."""
        v = self._memo.get(key)
        if v is None:
            v = (
                (self._fgd(key), 0.0, 0.0)
                if self.mode == "fgd"
                else (self._slots(key), self._stranded(key), None)
            )
            if len(self._memo) > 2_000_000:
                self._memo.clear()
            self._memo[key] = v
        if not strand:
            return v[0]
        fill = v[2]
        if fill is None:  # the lookahead, computed on first use
            fill = self._fill(key) if self.fill_weight else 0.0
            self._memo[key] = (v[0], v[1], fill)
        return v[0] + v[1] + self.fill_weight * fill

    def _fgd(self, key: tuple) -> float:
        hw, cpu_free, _mem, devs = key
        total = 0
        partial = 0
        for d in devs:
            total += d[1]
            if not d[3]:
                partial += d[1]
        if total <= 0:
            return 0.0
        frag = self.cpu_only_weight * total
        for (whole, count, compute, _dm, _f, _members, cpus, prefix, weight), types in zip(
            self.groups, self._types(hw), strict=True
        ):
            if types is not None and not types:
                frag += weight * total
                continue
            if whole:
                n = sum(1 for d in devs if d[3] and (types is None or d[0] in types))
                part = partial
            else:
                n = sum(1 for d in devs if d[1] >= compute and (types is None or d[0] in types))
                part = sum(d[1] for d in devs if d[1] < compute)
            if n < count:
                frag += weight * total
                continue
            fits = prefix[bisect_right(cpus, cpu_free)]  # shapes whose CPU still fits
            frag += fits * part + (weight - fits) * total
        return frag

    def _slots(self, key: tuple) -> float:
        hw, cpu_free, mem_free, devs = key
        total = sum(d[1] for d in devs)
        if total <= 0:
            return 0.0
        use_mem = self.use_memory
        frag = 0.0
        for (whole, count, compute, dmem, _f, members, _c, _p, weight), types in zip(
            self.groups, self._types(hw), strict=True
        ):
            if types is not None and not types:
                frag += weight * total
                continue
            if whole:
                slots = sum(1 for d in devs if d[3] and (types is None or d[0] in types)) // count
            else:
                slots = 0
                for d in devs:
                    if d[1] >= compute and (types is None or d[0] in types):
                        s = d[1] // compute
                        if dmem:
                            s = min(s, d[2] // dmem)
                        slots += s
                if count > 1:
                    slots //= count
            if not slots:
                frag += weight * total
                continue
            unit = count * compute
            for cpu, mem, w in members:
                s = slots
                if cpu:
                    c = cpu_free // cpu
                    if c < s:
                        s = c
                if use_mem and mem:
                    m = mem_free // mem
                    if m < s:
                        s = m
                usable = s * unit
                if usable < total:
                    frag += w * (total - usable)
        return frag

    def _stranded(self, key: tuple) -> float:
        """The weighted idle compute the node's free CPU (memory) cannot feed at the workload's ratio."""
        _hw, cpu_free, mem_free, devs = key
        total = sum(d[1] for d in devs)
        frag = 0.0
        for (weight, ratio), free in ((self.strand_cpu, cpu_free), (self.strand_mem, mem_free)):
            if weight:
                stranded = total - free / ratio
                if stranded > 0:
                    frag += weight * stranded
        return frag

    def _draw_paths(self) -> list[list[tuple[int, int, int]]]:
        """``fill_paths`` futures of ``fill_horizon`` pods each, drawn by frequency (fixed seed: the
        same futures for every node state, so the differences between states are not noise)."""
        if not self.fill_weight or any(g[5] or g[6] for g in self._members):
            # vendor / model constrained shapes: the futures do not see them compete for the few
            # nodes that serve them (the lookahead would hand those nodes to anyone): left out
            return []
        draws = [
            (gi, cpu, mem) for gi, (_g, base) in enumerate(self._members.items()) for cpu, mem, _w in base
        ]
        weights = [w for base in self._members.values() for _cpu, _mem, w in base]
        if not draws:
            return []
        rng = random.Random(0)
        return [rng.choices(draws, weights, k=self.fill_horizon) for _ in range(self.fill_paths)]

    def _fill(self, key: tuple) -> float:
        """Lookahead: the node's idle compute left after each drawn future (a pod that fits goes on
        the best-fitting cards, one that does not is skipped), averaged over the futures — fragments
        weighed by how likely pods that fit them come before the horizon."""
        hw, cpu_free, mem_free, devs = key
        total = sum(d[1] for d in devs)
        if total <= 0 or not self._paths:
            return 0.0
        types = self._types(hw)
        groups = self.groups
        use_mem = self.use_memory
        acc = 0.0
        for path in self._paths:
            cards = [[d[1], d[2], d[3], d[0]] for d in devs if d[1] > 0]
            cpu, mem, idle = cpu_free, mem_free, total
            most = max(c[0] for c in cards)  # the most free on one card, and the empty cards
            empty = sum(1 for c in cards if c[2])
            for gi, pcpu, pmem in path:
                if pcpu > cpu or (use_mem and pmem > mem):
                    continue
                whole, count, compute, dmem = groups[gi][:4]
                if (empty < count) if whole else (compute > most):
                    continue
                ty = types[gi]
                if whole:
                    fit = [c for c in cards if c[2] and (ty is None or c[3] in ty)]
                    if len(fit) < count:
                        continue
                    for c in fit[:count]:
                        idle -= c[0]
                        c[0] = 0
                        c[2] = False
                else:
                    fit = [
                        c for c in cards if c[0] >= compute and c[1] >= dmem and (ty is None or c[3] in ty)
                    ]
                    if len(fit) < count:
                        continue
                    fit.sort(key=lambda c: (c[2], c[0]))  # shared cards first, least free first
                    for c in fit[:count]:
                        c[0] -= compute
                        c[1] -= dmem
                        c[2] = False
                        idle -= compute
                cpu -= pcpu
                mem -= pmem
                if idle <= 0:
                    break
                most = max(c[0] for c in cards)
                empty = sum(1 for c in cards if c[2])
            acc += idle
        return acc / len(self._paths)

    # ---- cluster level (the simulator's optional fragmentation metric) -------------------------

    def cluster(self, snapshot: Snapshot) -> tuple[float, float]:
        """(fragmented idle compute, idle compute) over the whole snapshot, in milli-cards."""
        frag = idle = 0.0
        for node in snapshot.nodes:
            devs, _key, value = self.node_states(snapshot, node)
            frag += value
            idle += sum(d[1] for d in devs)
        return frag, idle
