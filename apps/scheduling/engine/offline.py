"""Offline references for the trace simulator: how far from the limit is an online policy?

For one trace and seed, the *arrived workload at 100 %* is the prefix of the seed's pod order whose GPU
request stays within the cluster's GPU capacity (the pods an online policy has seen when arrival reaches
100 %). Two references are computed for it, both in unallocated GPU % of capacity, like the online
figures (lower is better):

* **bound** — an upper bound on what any placement can allocate: the lesser of two LP relaxations solved
  with HiGHS (``scipy.optimize.linprog``,
  https://docs.scipy.org/doc/scipy/reference/generated/scipy.optimize.linprog.html). Pods are
  aggregated into identical types (CPU, memory, cards, milli per card, allowed models) and nodes into
  identical classes (CPU, memory, cards, model).

  - :func:`card_lp_bound`, the bound reported: per class, CPU and memory within the class's totals, and
    the cards packed exactly — a configuration (cutting-stock) LP over *card patterns*, sets of sharing
    milli values that fit one card — by column generation with an exact knapsack pricing. It sees that
    an 810-milli pod leaves room only for pods of ≤ 190 milli, which the aggregated form cannot.
  - :func:`lp_bound`, the aggregated form (kept for comparison, ``bound_aggregate``): ``x[t, c]`` pods
    of type ``t`` on class ``c``, per class CPU, memory and GPU milli within the totals, and whole cards
    plus sharing pods above 500 milli within the class's cards. When a trace's arrived workload is by
    construction within the GPU capacity, this is nearly trivial.

  Neither keeps the per-node knapsack (CPU and memory of one node, a multi-card pod's cards on one
  node) beyond the class totals, so the true limit may lie above the bound. No online policy — nor any
  exact packing — can allocate more, so its unallocated % is a floor.
* **hindsight** — the best packing found knowing the whole workload in advance: the pods sorted by GPU
  request (then CPU, then memory) decreasing and placed by the engine with best fit and with Suanchi's
  policy, and the arrival order placed by Suanchi's policy (a packing hindsight may simply keep); the
  best of these, then a local search bounded by ``time_limit`` (``--hindsight-seconds``) whose moves
  only ever grow the allocation (:func:`_repack`): a left-out whole-card pod takes the cards with the
  least sharing milli where it then fits, and a card's sharing pods are re-chosen among its own and the
  left-out ones (a knapsack: e.g. an 810-milli pod makes way for two of 470), the pods moved off placed
  again where they fit; then moves of up to two placed pods off a node to make room for a pod left
  out. Every packing found is achievable (each placement goes through the snapshot, which refuses
  anything that does not fit), so the limit lies between the bound and this.

The gap of an online policy to each is its unallocated % minus the reference's, in percentage points.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from .decision import Placement
from .request import Request
from .share import WHOLE


def arrived_at_100(order: Sequence, capacity: int) -> list:
    """The prefix of ``order`` (PodSpecs) whose cumulative GPU request stays ≤ ``capacity``."""
    out = []
    total = 0
    for pod in order:
        if total + pod.gpu > capacity:
            break
        total += pod.gpu
        out.append(pod)
    return out


def lp_bound(nodes: Sequence, pods: Sequence) -> dict:
    """LP upper bound on allocatable GPU milli for ``pods`` (PodSpecs) on ``nodes`` (NodeSpecs)."""
    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    classes: dict[tuple, int] = {}
    for n in nodes:
        key = (n.cpu_milli, n.memory_mib, n.gpus, n.model)
        classes[key] = classes.get(key, 0) + 1
    types: dict[tuple, int] = {}
    for p in pods:
        if p.gpu <= 0:
            continue  # CPU-only pods allocate no GPU: an upper bound may leave them out
        tkey = (p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.models)
        types[tkey] = types.get(tkey, 0) + 1
    cls = list(classes.items())
    typ = list(types.items())
    rows, cols, vals = [], [], []
    obj, upper = [], []
    var = 0
    n_c = len(cls)
    # rows: per type (count), then per class: cpu, memory, gpu milli, cards
    for t, ((cpu, mem, num, milli, models), count) in enumerate(typ):
        for c, ((ccpu, cmem, cgpus, cmodel), _size) in enumerate(cls):
            if cpu > ccpu or mem > cmem or num > cgpus or (models and cmodel not in models):
                continue
            base = len(typ) + 4 * c
            entries = [(t, 1), (base, cpu), (base + 1, mem), (base + 2, num * milli)]
            cards = num if milli >= WHOLE or milli > WHOLE // 2 else 0  # > 500 milli: a card each
            if cards:
                entries.append((base + 3, cards))
            for r, v in entries:
                if v:
                    rows.append(r)
                    cols.append(var)
                    vals.append(v)
            obj.append(-float(num * milli))
            upper.append(count)
            var += 1
    total = sum(p.gpu for p in pods)
    if not var:
        return {"allocated": 0, "requested": total, "status": "no variable", "seconds": 0.0}
    b = [count for _key, count in typ]
    for (ccpu, cmem, cgpus, _model), size in cls:
        b += [ccpu * size, cmem * size, cgpus * WHOLE * size, cgpus * size]
    a = coo_matrix((vals, (rows, cols)), shape=(len(typ) + 4 * n_c, var)).tocsr()
    t0 = time.perf_counter()
    res = linprog(
        np.array(obj),
        A_ub=a,
        b_ub=np.array(b, dtype=float),
        bounds=list(zip([0] * var, upper, strict=True)),
        method="highs",
    )
    seconds = time.perf_counter() - t0
    if res.status != 0:
        return {"allocated": None, "requested": total, "status": res.message, "seconds": seconds}
    allocated = min(float(total), -float(res.fun))
    return {
        "allocated": allocated,
        "requested": total,
        "status": "optimal",
        "seconds": seconds,
        "variables": var,
        "pod_types": len(typ),
        "node_classes": n_c,
    }


def _best_card(millis: Sequence[int], price: Sequence[float]) -> tuple[float, list[int]]:
    """The most valuable multiset of sharing slots on one card (milli sum ≤ 1000): an unbounded
    knapsack solved exactly by dynamic programming over the card's milli. Returns (value, slot counts)."""
    step = 0
    for m in millis:
        step = math.gcd(step, m)
    step = math.gcd(step, WHOLE) or 1
    cap = WHOLE // step
    best = [0.0] * (cap + 1)
    take = [-1] * (cap + 1)
    for w in range(1, cap + 1):
        best[w] = best[w - 1]
        take[w] = -1
        for i, m in enumerate(millis):
            q = m // step
            if q <= w and price[i] > 0 and best[w - q] + price[i] > best[w] + 1e-12:
                best[w] = best[w - q] + price[i]
                take[w] = i
    counts = [0] * len(millis)
    w = cap
    while w > 0:
        if take[w] < 0:
            w -= 1
        else:
            counts[take[w]] += 1
            w -= millis[take[w]] // step
    return best[cap], counts


def card_lp_bound(nodes: Sequence, pods: Sequence, *, time_limit: float = 60.0) -> dict:
    """Upper bound on allocatable GPU milli: the aggregated LP of :func:`lp_bound` with the sharing rule
    kept exactly card by card, through a configuration LP over the cards.

    Per node class ``c`` (CPU, memory, cards, model) and pod type ``t``: ``w[t, c]`` whole-card pods and
    ``s[t, c]`` sharing pods (only where one pod fits one node of the class and the model is allowed);
    ``y[c, p]`` cards of the class filled with the *card pattern* ``p`` — a multiset of sharing milli
    values summing to ≤ 1000 — each offering one slot per value. Rows per class: cards (whole-card pods'
    cards plus pattern cards ≤ the class's cards), CPU and memory (≤ the class's totals) and, per milli
    value, sharing pods ≤ slots offered; per type, pods ≤ its count. Every placement gives such a
    solution in integers (each card with sharing pods is one pattern: they sit on one card and their milli
    stays within it; whole-card pods hold cards alone), so the LP value bounds what any placement
    allocates. It is the cutting-stock LP of Gilmore & Gomory ("A linear programming approach to the
    cutting-stock problem", Operations Research 9(6), 1961) for the cards, beside the node class's
    CPU and memory.

    Patterns come by column generation: the best card pattern at the LP's slot prices (``_best_card``,
    exact) enters while it is worth more than the price of a card. Stopped on time, the bound is the
    dual value with each class's card price raised to the best pattern's worth (still a feasible dual,
    so still an upper bound by weak duality).
    """
    t0 = time.perf_counter()
    types = _pod_types(pods)
    classes = _node_classes(nodes)
    total = sum(p.gpu for p in pods)
    lp = _CardLP(types, classes)
    best, lp_value, rounds, converged = lp.solve(float(total), t0 + time_limit)
    return {
        "allocated": min(float(total), best),
        "lp_value": lp_value,
        "requested": total,
        "status": "optimal" if converged else "time limit",
        "rounds": rounds,
        "card_patterns": len(lp.patterns),
        "pod_types": lp.n_t,
        "node_classes": lp.n_c,
        "type_duals": lp.type_duals,  # per pod type (``_pod_types`` order): prices for node_bound
        "class_mix": lp.class_mix(),  # per node class, pods per type in the last LP: node_bound's seed
        "seconds": time.perf_counter() - t0,
    }


class _CardLP:
    """:func:`card_lp_bound`'s configuration LP as sparse columns.

    Rows: one per pod type, then per node class its cards, CPU and memory, then one per (class, sharing
    milli value) for the slots the class's card patterns offer. Columns: per (type, class) where one pod
    fits one node, its pods (whole-card or sharing); then the card patterns, added as they are found."""

    def __init__(self, types: list[tuple[tuple, int]], classes: list[tuple[tuple, list]]) -> None:
        self.n_t, self.n_c = n_t, n_c = len(types), len(classes)
        self.slot_row: dict[tuple[int, int], int] = {}
        self.millis_of: list[list[int]] = []
        for c, (ck, _ns) in enumerate(classes):
            ms = sorted({tk[3] for tk, _n in types if tk[3] < WHOLE and _fits_alone(tk, ck)})
            self.millis_of.append(ms)
            for m in ms:
                self.slot_row[(c, m)] = n_t + 3 * n_c + len(self.slot_row)
        self.n_rows = n_t + 3 * n_c + len(self.slot_row)
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.obj: list[float] = []
        self.patterns: set[tuple] = set()
        self.type_duals: list[float] = [0.0] * n_t
        self.pod_cols: list[tuple[int, int]] = []  # (type, class) of the first columns
        self.x: Any = None  # the last LP's solution
        self._pod_columns(types, classes)
        for c, ms in enumerate(self.millis_of):
            for i, m in enumerate(ms):  # one value per card, as many as fit
                counts = [0] * len(ms)
                counts[i] = WHOLE // m
                self.add_pattern(c, counts)
        self.b = self._bounds(types, classes)

    def column(self, entries: list[tuple[int, float]], value: float) -> None:
        k = len(self.obj)
        for r, v in entries:
            if v:
                self.rows.append(r)
                self.cols.append(k)
                self.vals.append(v)
        self.obj.append(value)

    def add_pattern(self, c: int, counts: Sequence[int]) -> bool:
        key = (c, tuple(counts))
        if key in self.patterns or not any(counts):
            return False
        self.patterns.add(key)
        entries: list[tuple[int, float]] = [(self.n_t + 3 * c, 1)]
        entries += [(self.slot_row[(c, m)], -q) for m, q in zip(self.millis_of[c], counts, strict=True) if q]
        self.column(entries, 0.0)
        return True

    def _pod_columns(self, types: list[tuple[tuple, int]], classes: list[tuple[tuple, list]]) -> None:
        for t, ((cpu, mem, num, milli, _models), _n) in enumerate(types):
            for c, (ck, _ns) in enumerate(classes):
                if not _fits_alone(types[t][0], ck):
                    continue
                base = self.n_t + 3 * c
                entries: list[tuple[int, float]] = [(t, 1), (base + 1, cpu), (base + 2, mem)]
                # a sharing pod asks ``num`` slots of ``milli`` (on distinct cards, which the LP relaxes)
                entries.append((base, num) if milli >= WHOLE else (self.slot_row[(c, milli)], num))
                self.column(entries, float(num * milli))
                self.pod_cols.append((t, c))

    def class_mix(self) -> list[dict[int, float]]:
        """Per node class, ``{type: pods}`` in the last LP solved (fractional)."""
        mix: list[dict[int, float]] = [{} for _ in range(self.n_c)]
        if self.x is not None:
            for (t, c), x in zip(self.pod_cols, self.x, strict=False):
                if x > 1e-9:
                    mix[c][t] = float(x)
        return mix

    def _bounds(self, types: list[tuple[tuple, int]], classes: list[tuple[tuple, list]]) -> Any:
        import numpy as np

        b = np.zeros(self.n_rows)
        b[: self.n_t] = [n for _k, n in types]
        for c, ((ccpu, cmem, cgpus, _model), ns) in enumerate(classes):
            b[self.n_t + 3 * c : self.n_t + 3 * c + 3] = [cgpus * len(ns), ccpu * len(ns), cmem * len(ns)]
        return b

    def solve(self, total: float, deadline: float) -> tuple[float, float, int, bool]:
        """Column generation until no pattern is worth more than its card, or ``deadline``:
        ``(bound, last LP value, rounds, converged)``."""
        import numpy as np
        from scipy.optimize import linprog
        from scipy.sparse import coo_matrix

        obj, b, n_t = self.obj, self.b, self.n_t
        best = total if obj else 0.0  # no pod fits any node alone: nothing can be placed
        rounds = 0
        lp_value = 0.0
        converged = not obj
        while obj:
            a = coo_matrix((self.vals, (self.rows, self.cols)), shape=(self.n_rows, len(obj))).tocsr()
            res = linprog(-np.array(obj), A_ub=a, b_ub=b, bounds=(0, None), method="highs")
            if res.status != 0:  # pragma: no cover - feasible (all zero) and bounded (type counts)
                break
            rounds += 1
            lp_value, self.x = -float(res.fun), res.x
            duals = np.maximum(-np.asarray(res.ineqlin.marginals), 0.0)
            self.type_duals = [float(x) for x in duals[:n_t]]
            dual_value = float(b @ duals)
            added = False
            for c, ms in enumerate(self.millis_of):
                if not ms:
                    continue
                card_price = duals[n_t + 3 * c]
                worth, counts = _best_card(ms, [duals[self.slot_row[(c, m)]] for m in ms])
                if worth > card_price + 1e-9:
                    dual_value += b[n_t + 3 * c] * (worth - card_price)
                    added |= self.add_pattern(c, counts)
            best = min(best, dual_value)
            if not added:
                converged = True
                break
            if time.perf_counter() > deadline:
                break
        return max(best, lp_value), lp_value, rounds, converged


# ---- shared helpers ---------------------------------------------------------------------------------


def _pod_types(pods: Sequence) -> list[tuple[tuple, int]]:
    types: dict[tuple, int] = {}
    for p in pods:
        if p.gpu <= 0:
            continue  # CPU-only pods allocate no GPU: an upper bound may leave them out
        key = (p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.models)
        types[key] = types.get(key, 0) + 1
    return sorted(types.items(), key=lambda item: (-item[0][2] * item[0][3], item[0][:4], sorted(item[0][4])))


def _node_classes(nodes: Sequence) -> list[tuple[tuple, list]]:
    classes: dict[tuple, list] = {}
    for n in nodes:
        classes.setdefault((n.cpu_milli, n.memory_mib, n.gpus, n.model), []).append(n)
    return list(classes.items())


def _fits_alone(tkey: tuple, ckey: tuple) -> bool:
    cpu, mem, num, _milli, models = tkey
    ccpu, cmem, cgpus, cmodel = ckey
    return cpu <= ccpu and mem <= cmem and num <= cgpus and (not models or cmodel in models)


def _greedy(make_snapshot, pods: Sequence, requests: dict, order: Sequence[int], policy: str):
    from .engine import Engine

    snapshot = make_snapshot()
    engine = Engine(policy, seed=0, explain=False, top_k=0, tie_break="order", workload=requests.values())
    allocated = 0
    left: list[int] = []
    where: dict[str, list[str]] = {}  # node -> request ids placed there
    for n in order:
        req = requests[n]
        d = engine.place(snapshot, req)
        if d.placement is not None:
            allocated += pods[n].gpu
            where.setdefault(d.placement.parts[0].node, []).append(req.id)
        elif pods[n].gpu:
            left.append(n)
    return allocated, snapshot, engine, left, where


def card_count_problems(snapshot, requests: dict) -> list[str]:
    """Placements holding fewer distinct cards than their request asks, per group (``requests``: id →
    Request). The snapshot's own check sees each card's load, not whether a pod asking for three cards at
    650 milli each sits on three cards; this does."""
    problems = []
    for rid, placement in snapshot.placements.items():
        req = requests.get(rid)
        if req is None:
            continue
        for part in placement.parts:
            for j, g in enumerate(req.groups):
                ids = [a.device_id for a in part.devices if a.group == j]
                if len(set(ids)) != g.count:
                    problems.append(f"{rid}: group {j} on {len(set(ids))} distinct cards, asks {g.count}")
    return problems


def _best_refill(units: list[tuple[int, int]], room: int, step: int) -> tuple[float, list[int]]:
    """0/1 knapsack over ``units`` ((milli, tag) each; tag 1 = already on the card) into ``room`` milli:
    the most milli, then the fewest pods moved off the card. Returns (value, chosen positions)."""
    cap = room // step
    best = [0.0] * (cap + 1)
    keep: list[list[bool]] = []
    for m, tag in units:
        q = m // step
        worth = m + (1e-3 if tag else 0.0)  # keeping a pod where it is wins ties
        row = [False] * (cap + 1)
        for w in range(cap, q - 1, -1):
            if best[w - q] + worth > best[w] + 1e-9:
                best[w] = best[w - q] + worth
                row[w] = True
        keep.append(row)
    chosen = []
    w = cap
    for i in range(len(units) - 1, -1, -1):
        if keep[i][w]:
            chosen.append(i)
            w -= units[i][0] // step
    return best[cap], chosen


class _Repacker:
    """The state of :func:`_repack`'s local search: which sharing pods sit on which card and which pods
    are left out (``pool``); moves go through the snapshot, so each one is achievable."""

    def __init__(self, snapshot, engine, pods: Sequence, requests: dict, left: list[int]) -> None:
        from . import assign

        self.assign = assign
        self.snapshot = snapshot
        self.engine = engine
        self.pods = pods
        self.requests = requests
        self.rid_of = {n: requests[n].id for n in requests}
        n_of = {rid: n for n, rid in self.rid_of.items()}
        self.on_card: dict[str, list[int]] = {}  # device id -> sharing pods on it
        for rid, placement in snapshot.placements.items():
            for part in placement.parts:
                for a in part.devices:
                    if not a.whole:
                        self.on_card.setdefault(a.device_id, []).append(n_of[rid])
        self.pool = {n for n in left if self.rid_of[n] not in snapshot.placements}

    # ---- one pod on or off a card ---------------------------------------------------------------

    def place_on(self, node, n: int, devs: tuple[int, ...]) -> None:
        req = self.requests[n]
        tier = self.assign.topology_tier([node.devices[i] for i in devs])
        self.snapshot.apply(Placement(req.id, (self.assign.build_part(node, req, (devs,), tier),)))
        if self.pods[n].gpu_milli < WHOLE:
            self.on_card.setdefault(node.devices[devs[0]].id, []).append(n)
        self.pool.discard(n)

    def take_off(self, n: int) -> None:
        placement = self.snapshot.release(self.rid_of[n])
        for part in placement.parts:
            for a in part.devices:
                if not a.whole:
                    self.on_card[a.device_id].remove(n)
        self.pool.add(n)

    def settle(self, moved: list[int]) -> None:
        """Place the pods moved off again where the engine finds room (else they stay left out)."""
        pods = self.pods
        for n in sorted(moved, key=lambda k: -pods[k].gpu):
            d = self.engine.place(self.snapshot, self.requests[n])
            if d.placement is not None:
                self.pool.discard(n)
                for part in d.placement.parts:
                    for a in part.devices:
                        if not a.whole:
                            self.on_card.setdefault(a.device_id, []).append(n)

    def room_after(self, node, moved: list[int]) -> tuple[int, int]:
        """The node's free CPU and memory once the pods ``moved`` are off it."""
        pods = self.pods
        cpu = node.cpu_milli - node.cpu_used + sum(pods[k].cpu_milli for k in moved)
        mem = node.memory_mib - node.mem_used + sum(pods[k].memory_mib for k in moved)
        return cpu, mem

    # ---- the two kinds of move --------------------------------------------------------------------

    def whole_card_moves(self, deadline: float) -> int:
        """Whole-card pods left out, most GPU first, each onto the cards with the least sharing milli."""
        pods = self.pods
        moves = 0
        for n in sorted(
            (k for k in self.pool if pods[k].gpu_milli >= WHOLE), key=lambda k: (-pods[k].gpu, k)
        ):
            if time.perf_counter() > deadline:
                break
            pod = pods[n]
            best = None
            for node in self.snapshot.nodes:
                if len(node.devices) < pod.num_gpu or not _fits_model(node, pod):
                    continue
                cards = sorted((_load(d), d.index) for d in node.devices if d.whole_by is None)
                if len(cards) < pod.num_gpu:
                    continue
                chosen = cards[: pod.num_gpu]
                milli = sum(c[0] for c in chosen)
                if milli >= pod.gpu or (best is not None and milli >= best[0]):
                    continue
                # a multi-card sharing pod moved off leaves all its cards: count what it holds
                moved = list(
                    dict.fromkeys(k for _l, i in chosen for k in self.on_card.get(node.devices[i].id, ()))
                )
                milli = sum(self.pods[k].gpu for k in moved)
                if milli >= pod.gpu or (best is not None and milli >= best[0]):
                    continue
                cpu, mem = self.room_after(node, moved)
                if cpu < pod.cpu_milli or mem < pod.memory_mib:
                    continue
                best = (milli, node, tuple(sorted(i for _l, i in chosen)), moved)
            if best is None:
                continue
            _milli, node, devs, moved = best
            for k in moved:
                self.take_off(k)
            self.place_on(node, n, devs)
            self.settle(moved)
            moves += 1
        return moves

    def card_refills(self, deadline: float) -> int:
        """Cards whose sharing pods are re-chosen among their own and the left-out sharing pods."""
        spare: dict[int, list[int]] = {}
        for k in self.pool:
            if 0 < self.pods[k].gpu_milli < WHOLE and self.pods[k].num_gpu == 1:  # one card each
                spare.setdefault(self.pods[k].gpu_milli, []).append(k)
        if not spare:
            return 0
        moves = 0
        tried: set[tuple] = set()
        for node in self.snapshot.nodes:
            if time.perf_counter() > deadline:
                break
            for dev in node.devices:
                if dev.whole_by is None and self.refill(node, dev, spare, tried):
                    moves += 1
        return moves

    def refill(self, node, dev, spare: dict[int, list[int]], tried: set[tuple]) -> bool:
        """Re-choose ``dev``'s sharing pods (a knapsack over its own and ``spare``); whether it moved."""
        pods = self.pods
        on = self.on_card.get(dev.id, [])
        # pods sharing several cards stay where they are: the knapsack is over one card's pods only
        fixed = sum(pods[k].gpu_milli for k in on if pods[k].num_gpu > 1)
        mine = [k for k in on if pods[k].num_gpu == 1]
        sig = (
            tuple(sorted(pods[k].gpu_milli for k in on)),
            fixed,
            node.devices[0].model if node.devices else "",
        )
        if sig in tried:
            return False
        units = [(pods[k].gpu_milli, 1) for k in mine]
        for m, ks in spare.items():
            fitting = [k for k in ks if _fits_model(node, pods[k])]
            units += [(m, 0)] * min(len(fitting), WHOLE // m)
        value, chosen = _best_refill(units, WHOLE - fixed, _REFILL_STEP)
        if value <= _load(dev) - fixed + 0.5:
            tried.add(sig)  # no gain for this content here; others with it neither
            return False
        own = [units[i][0] for i in chosen if units[i][1]]
        new = [units[i][0] for i in chosen if not units[i][1]]
        moved = []
        for k in sorted(mine, key=lambda k: -pods[k].gpu_milli):
            if pods[k].gpu_milli in own:
                own.remove(pods[k].gpu_milli)
            else:
                moved.append(k)
        incoming: list[int] = []
        for m in new:
            cand = [k for k in spare.get(m, ()) if _fits_model(node, pods[k]) and k not in incoming]
            if not cand:
                break
            incoming.append(cand[0])
        if len(incoming) != len(new):
            return False
        cpu, mem = self.room_after(node, moved)
        if cpu < sum(pods[k].cpu_milli for k in incoming) or mem < sum(pods[k].memory_mib for k in incoming):
            return False
        for k in moved:
            self.take_off(k)
        for k in incoming:
            self.place_on(node, k, (dev.index,))
            spare[pods[k].gpu_milli].remove(k)
        self.settle(moved)
        for k in moved:
            if k in self.pool:
                spare.setdefault(pods[k].gpu_milli, []).append(k)
        return True


_REFILL_STEP = 10  # milli: the refill knapsack's granularity


def _load(dev) -> int:
    return dev.hard_used + dev.shared_used


def _fits_model(node, pod) -> bool:
    return not pod.models or (bool(node.devices) and node.devices[0].model in pod.models)


def _repack(snapshot, engine, pods: Sequence, requests: dict, left: list[int], deadline: float) -> int:
    """Ejection moves that only ever grow the allocation, until none is found or time is up:

    * a whole-card pod left out takes the cards with the least sharing milli on a node where it then
      fits, when that milli is below its own; the pods moved off are placed again by the engine where
      they fit, else join the left-out pods;
    * a card's sharing pods are re-chosen among its own and the left-out ones (the most milli within
      1,000, a knapsack), when that is more than the card holds and CPU and memory still fit; pods moved
      off are placed again or join the left-out pods.

    Returns the number of moves kept."""
    search = _Repacker(snapshot, engine, pods, requests, left)
    moves = 0
    improved = True
    while improved and time.perf_counter() < deadline:
        found = search.whole_card_moves(deadline)
        found += search.card_refills(deadline)
        moves += found
        improved = found > 0
    left[:] = sorted(search.pool)
    return moves


def hindsight(
    make_snapshot,
    pods: Sequence,
    to_request,
    *,
    policies: Sequence[str] = ("slotfrag", "bestfit"),
    time_limit: float = 5.0,
) -> dict:
    """Best packing found with full hindsight: the pods sorted decreasing (GPU, CPU, memory) and placed
    by each of ``policies`` (best fit and Suanchi's policy by default), and the arrival order by
    Suanchi's policy; the best of those, then a local search of ``time_limit`` seconds (ejection moves,
    :func:`_repack`, then moves of up to two pods). ``make_snapshot()`` returns a fresh, empty fleet."""
    from . import assign, filters

    t0 = time.perf_counter()
    order = [
        n
        for n, _pod in sorted(
            enumerate(pods), key=lambda item: (-item[1].gpu, -item[1].cpu_milli, -item[1].memory_mib, item[0])
        )
    ]
    requests = {n: to_request(pods[n], f"{pods[n].name}#h{n}") for n in order}
    best = None
    tried = {}
    # sorted decreasing by each policy, and the arrival order by Suanchi's policy (what it does online
    # is a packing hindsight may keep, so the reference is never worse than that policy)
    runs = [(f"sorted/{p}", order, p) for p in policies] + [
        ("arrival/slotfrag", list(range(len(pods))), "slotfrag")
    ]
    for label, sequence, policy in runs:
        got = _greedy(make_snapshot, pods, requests, sequence, policy)
        tried[label] = got[0]
        if best is None or got[0] > best[0]:
            best = got
    assert best is not None  # runs is never empty
    allocated, snapshot, engine, left, where = best
    gpu_of = {req.id: pods[n].gpu for n, req in requests.items()}
    greedy = allocated
    by_id = {req.id: req for req in requests.values()}
    moves = 0

    def put_on(node, req: Request) -> Placement | None:
        reason, elig = filters.static_reason(snapshot, node, req)
        if reason is not None:
            return None
        got = assign.choose_devices(node, req, elig, snapshot.factor_pct(node))
        if got is None or not assign.fits(node, req, elig, snapshot.factor_pct(node)):
            return None
        placement = Placement(req.id, (assign.build_part(node, req, got[0], got[1]),))
        snapshot.apply(placement)
        return placement

    deadline = time.perf_counter() + time_limit  # the local search's own time
    moves += _repack(snapshot, engine, pods, requests, left, deadline)
    allocated = sum(gpu_of.get(rid, 0) for rid in snapshot.placements)
    where = {}
    for rid, placement in snapshot.placements.items():
        where.setdefault(placement.parts[0].node, []).append(rid)
    for n in left:
        if time.perf_counter() > deadline:
            break
        req = requests[n]
        pod = pods[n]
        for node in snapshot.nodes:
            if time.perf_counter() > deadline:
                break
            if node.cpu_milli < req.cpu_milli or node.memory_mib < req.memory_mib:
                continue
            if len(node.devices) < pod.num_gpu or (pod.models and node.devices[0].model not in pod.models):
                continue
            victims = sorted(where.get(node.name, ()), key=lambda rid: (gpu_of[rid], rid))[:2]
            if not victims:
                continue
            held = [snapshot.placements[rid] for rid in victims]
            if sum(gpu_of[rid] for rid in victims) >= pod.gpu:
                continue  # moving as much GPU as the pod brings cannot grow the allocation
            for rid in victims:
                snapshot.release(rid)
            mine = put_on(node, req)
            replaced: list[Placement] = []
            if mine is not None:
                for rid in victims:
                    d = engine.place(snapshot, by_id[rid])
                    if d.placement is None:
                        break
                    replaced.append(d.placement)
            if mine is not None and len(replaced) == len(victims):
                moves += 1
                allocated += pod.gpu
                where[node.name] = [r for r in where[node.name] if r not in victims] + [req.id]
                gpu_of[req.id] = pod.gpu
                for p in replaced:
                    where.setdefault(p.parts[0].node, []).append(p.request_id)
                break
            for p in replaced:
                snapshot.release(p.request_id)
            if mine is not None:
                snapshot.release(req.id)
            for p in held:
                snapshot.apply(p)
    allocated = sum(gpu_of.get(rid, 0) for rid in snapshot.placements)
    problems = snapshot.check_invariants() + card_count_problems(snapshot, by_id)
    if problems:  # pragma: no cover - the snapshot refuses over-allocation on apply
        raise RuntimeError(f"hindsight packing broke an invariant: {problems[0]}")
    return {
        "allocated": allocated,
        "greedy_allocated": greedy,
        "greedy_by_policy": tried,
        "start": max(tried, key=lambda k: tried[k]),
        "moves": moves,
        "requested": sum(p.gpu for p in pods),
        "seconds": time.perf_counter() - t0,
    }
