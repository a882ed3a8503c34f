"""An upper bound over whole-*node* packings: CPU, memory and every card of one node kept exactly.

The card-pattern LP (``offline.card_lp_bound``) packs cards exactly but counts CPU and memory only as
totals per node class, so where CPU or memory bind it is loose: one node with 26,000 mCPU and 2 cards
and two whole-card pods of 24,200 and 3,152 mCPU — that LP says 2.79 % unallocated (it splits CPU
across the class), the best placement leaves 50 %. This bound is the configuration LP over *node
patterns* instead (Gilmore & Gomory's cutting-stock LP, Operations Research 9(6), 1961, with nodes as
the stock): a column is a feasible packing of ONE node of a class — pod counts per pod type whose CPU
and memory fit the node, whose whole-card pods take distinct free cards and whose sharing pods fit
card by card (a pod asking ``num`` cards at ``milli`` each on ``num`` distinct cards).

Master (an LP, HiGHS via ``scipy.optimize.linprog``): ``max Σ v_p y_p`` over columns ``p`` (``v_p`` the
GPU milli the packing allocates), ``Σ_{p of class c} y_p ≤ N_c`` per class (duals ``μ_c``) and
``Σ_p a_tp y_p ≤ n_t`` per pod type (duals ``π_t``). Every placement gives an integer solution (each
node's pods are one column), so the LP's value bounds every placement. Every column the master holds
is a packing that fits (checked card by card), so its value ``lp_value`` is a point of this LP: the LP
optimum lies between ``lp_value`` and the bound, and the bound can tighten by at most their difference.

Columns come by column generation. The master starts from one-type packings and, given the card LP's
solution, from its pods per class put first-fit on the class's nodes. Cheap columns next: per class,
greedy packings in several orders (by reduced value, by it per unit of CPU, of GPU, of the node's
resources together) at the master's duals, while any of them improves the master. Then a pricing
round: per class an exact small MIP (``scipy.optimize.milp``, HiGHS,
https://docs.scipy.org/doc/scipy/reference/generated/scipy.optimize.milp.html) for the most
``Σ (v_t − π_t) a_t`` one node holds, at prices smoothed between the master's duals and those of the
best bound so far (Wentges' smoothing, Math. Programming 77, 1997: the duals of a restricted master
swing, and each class's reduced value is multiplied by its hundreds of nodes) with short MIPs whose
incumbent and its greedy variants (each type left out in turn) join the master; after a round that
improves nothing, at the master's own duals with full MIPs (only these can prove convergence). The
bound reported is never the restricted master's value but the best Lagrangian (dual) value seen,
``Σ_c N_c max(0, μ_c) + Σ_t n_t π_t`` with ``μ_c`` the pricing optimum of class ``c`` (or the MIP's
proven dual bound when it stopped early): ``(μ, π)`` is then a feasible dual of the full LP, so by weak
duality the value bounds it — valid whenever the column generation stops, converged or not.

Farley's bound (``lp_value × max_c max_p v_p / (μ_c + π a_p)``) is not used: it is the dual
``θ (μ, π)``, whose Lagrangian ``L(θ π)`` is never above it, and with the ratio bounded through the
ordinary pricing (``≤ P_c / μ_c``) it is never below ``L(π)`` — the Lagrangian at the smoothed prices
already takes its place.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .share import WHOLE

SMOOTHING = 0.5  # Wentges' weight on the best-bound prices (0.8 tried on cpu250: inconclusive under load)
EXACT_CARD_VARS = 240  # per-card slice variables up to which pricing packs each card exactly
GREEDY_SHARE = 0.4  # of the time left, at most this much per stretch of greedy columns
FAST_SECONDS = 0.3  # per class in a smoothed round: the MIP's incumbent is a column, its proven bound counts
IMPROVES = 1e-4  # reduced value (GPU milli) above the class's dual for a column to count as improving


def node_lp_bound(
    nodes: Sequence,
    pods: Sequence,
    *,
    time_limit: float = 60.0,
    mip_seconds: float = 10.0,
    type_duals=None,
    class_mix=None,
) -> dict:
    """Upper bound on allocatable GPU milli for ``pods`` (PodSpecs) on ``nodes`` (NodeSpecs), over
    whole-node packings (see the module docstring). ``allocated`` is the valid (Lagrangian) bound,
    ``lp_value`` the restricted master's value (a feasible point of the same LP, so the LP optimum lies
    between the two). ``type_duals``: prices per pod type to try first; ``class_mix``: pods per type and
    node class to start the master from, put first-fit on the class's nodes (both ``card_lp_bound``'s)."""
    from .offline import _node_classes, _pod_types

    t0 = time.perf_counter()
    types = _pod_types(pods)
    classes = [(key, len(ns)) for key, ns in _node_classes(nodes)]
    total = float(sum(p.gpu for p in pods))
    lp = _NodeLP(types, classes)
    if class_mix is not None and len(class_mix) == len(classes):
        for c, ((ckey, size), mix) in enumerate(zip(classes, class_mix, strict=True)):
            want = {int(t): int(x + 1e-6) for t, x in mix.items() if x >= 1 - 1e-6}  # rounded down
            for _room, _free, counts in first_fit(ckey, types, want, size):
                lp.add(c, counts)
    pi0 = None
    if type_duals is not None and len(type_duals) == len(types):
        import numpy as np

        pi0 = np.maximum(np.asarray(type_duals, dtype=float), 0.0)
    best, lp_value, converged = lp.solve(total, t0 + time_limit, mip_seconds, pi0)
    return {
        "allocated": min(total, best),
        "lp_value": min(total, lp_value),
        "requested": int(total),
        "status": "optimal" if converged else "time limit",
        "rounds": lp.exact_rounds,
        "greedy_rounds": lp.greedy_rounds,
        "node_patterns": len(lp.columns),
        "pod_types": len(types),
        "node_classes": len(classes),
        "seconds": time.perf_counter() - t0,
    }


def _value(tkey: tuple) -> float:
    return float(tkey[2] * tkey[3])  # num_gpu × gpu_milli


class _NodeLP:
    """The master LP's columns, the greedy and the exact pricing per class."""

    def __init__(self, types: list[tuple[tuple, int]], classes: list[tuple[tuple, int]]) -> None:
        from .offline import _fits_alone

        self.types = types
        self.classes = classes
        self.fits = [[t for t, (tk, _n) in enumerate(types) if _fits_alone(tk, ck)] for ck, _size in classes]
        self.caps = [
            {t: alone_count(ck, types[t]) for t in self.fits[c]} for c, (ck, _s) in enumerate(classes)
        ]
        self.columns: list[tuple[int, dict[int, int]]] = []  # (class, {type: count})
        self.seen: set[tuple] = set()
        self.exact_rounds = self.greedy_rounds = 0
        for c, caps in enumerate(self.caps):  # to start: as many pods of one type as one node holds
            for t, q in caps.items():
                self.add(c, {t: q})

    def add(self, c: int, counts: dict[int, int]) -> bool:
        key = (c, tuple(sorted(counts.items())))
        if not counts or key in self.seen:
            return False
        self.seen.add(key)
        self.columns.append((c, counts))
        return True

    def reduced(self, counts: dict[int, int], pi) -> float:
        return sum((_value(self.types[t][0]) - pi[t]) * q for t, q in counts.items())

    def master(self):
        """Solve the restricted master: ``(value, type duals π ≥ 0, class duals μ ≥ 0)``."""
        import numpy as np
        from scipy.optimize import linprog
        from scipy.sparse import coo_matrix

        n_c, n_t = len(self.classes), len(self.types)
        rows, cols, vals, obj = [], [], [], []
        for k, (c, counts) in enumerate(self.columns):
            rows.append(c)
            cols.append(k)
            vals.append(1.0)
            for t, q in counts.items():
                rows.append(n_c + t)
                cols.append(k)
                vals.append(float(q))
            obj.append(-sum(_value(self.types[t][0]) * q for t, q in counts.items()))
        a = coo_matrix((vals, (rows, cols)), shape=(n_c + n_t, len(obj))).tocsr()
        b = np.array([float(s) for _k, s in self.classes] + [float(n) for _k, n in self.types])
        res = linprog(np.array(obj), A_ub=a, b_ub=b, bounds=(0, None), method="highs")
        if res.status != 0:  # pragma: no cover - feasible (all zero) and bounded (type counts)
            raise RuntimeError(f"node-pattern master LP: {res.message}")
        duals = np.maximum(-np.asarray(res.ineqlin.marginals), 0.0)
        return -float(res.fun), duals[n_c:], duals[:n_c]

    def greedy(self, pi, mu) -> bool:
        """Greedy packings per class at ``pi``; those that improve the master (reduced value above the
        class's dual ``mu``) join it. True if any did."""
        added = False
        for c, (ckey, _size) in enumerate(self.classes):
            gain = {t: _value(self.types[t][0]) - pi[t] for t in self.fits[c]}
            for counts in greedy_patterns(ckey, self.types, self.caps[c], gain):
                if self.reduced(counts, pi) > mu[c] + IMPROVES:
                    added |= self.add(c, counts)
        return added

    def lagrangian(self, pi, deadline: float, seconds: float, pi_m, mu_m) -> tuple[float, bool, bool]:
        """``Σ_t n_t π_t + Σ_c N_c max(0, best packing's reduced value)`` at ``pi`` (≥ 0): a valid bound
        whatever ``pi`` is (each class's pricing MIP given up to ``seconds``; stopped, its proven bound
        counts). The best packings found, and greedy variants of them, join the master: ``(bound,
        improving, exact)``, ``improving`` whether any improves the master at its own duals."""
        import numpy as np

        bound = float(pi @ np.array([float(n) for _k, n in self.types]))
        improving, exact = False, True
        for c, (ckey, size) in enumerate(self.classes):
            # the time left shared by the classes still to price (a stopped MIP gives its proven bound)
            share = (deadline - time.perf_counter()) / (len(self.classes) - c)
            worth, proven, counts, sure = price_node(ckey, self.types, self.fits[c], pi, min(seconds, share))
            exact &= proven <= worth + 1e-6
            bound += size * max(0.0, proven)
            if not counts or worth <= 1e-6:
                continue
            counts = counts if sure else fitting(ckey, self.types, counts, pi)  # keep what packs
            gain = {t: _value(self.types[t][0]) - pi_m[t] for t in self.fits[c]}
            for found in [counts, *variants(ckey, self.types, self.caps[c], gain, counts)]:
                self.add(c, found)
                improving |= self.reduced(found, pi_m) > mu_m[c] + IMPROVES
        return bound, improving, exact

    def solve(self, total: float, deadline: float, mip_seconds: float, pi0=None) -> tuple[float, float, bool]:
        """Column generation until no column prices out exactly, or ``deadline``: ``(valid bound, last
        master value, converged)``. Prices first at ``pi0`` (e.g. the card-pattern LP's type duals, whose
        bound is then never above that LP's); before each pricing round, greedy columns while they
        improve the master; each round at the master's duals smoothed toward the prices of the best
        bound so far with short MIPs (:data:`FAST_SECONDS`), or, after a round that improved nothing (a
        *mispricing*), at the master's own duals with full MIPs: only they can prove convergence."""
        if not self.columns:
            return 0.0, 0.0, True  # no pod fits any node alone
        lp_value, pi_m, mu_m = self.master()
        best, best_pi, pure = total, None, pi0 is None
        pi = pi_m if pi0 is None else pi0
        while True:
            self.exact_rounds += 1
            seconds = mip_seconds if pure or best_pi is None else FAST_SECONDS
            bound, improving, exact = self.lagrangian(pi, deadline, seconds, pi_m, mu_m)
            if bound < best:
                best, best_pi = bound, pi
            if pure and not improving:
                return max(best, lp_value), lp_value, exact
            if time.perf_counter() > deadline:
                break
            lp_value, pi_m, mu_m = self.master()
            until = time.perf_counter() + GREEDY_SHARE * (deadline - time.perf_counter())
            while time.perf_counter() < until and self.greedy(pi_m, mu_m):
                self.greedy_rounds += 1
                lp_value, pi_m, mu_m = self.master()
            pure = not improving or best_pi is None
            pi = pi_m if pure or best_pi is None else SMOOTHING * best_pi + (1.0 - SMOOTHING) * pi_m
        return max(best, lp_value), lp_value, False


def alone_count(ckey: tuple, tcount: tuple[tuple, int]) -> int:
    """How many pods of one type one node of class ``ckey`` holds with nothing else (≥ 1 when it fits)."""
    (cpu, mem, num, milli, _models), n = tcount
    ccpu, cmem, cgpus, _model = ckey
    cards = cgpus // num if milli >= WHOLE else (cgpus // num) * (WHOLE // milli)
    return max(0, min(n, cards, ccpu // cpu if cpu else n, cmem // mem if mem else n))


# ---- greedy packings of one node ------------------------------------------------------------------


def pack(ckey: tuple, types: list[tuple[tuple, int]], order: Sequence[int], caps: dict[int, int]) -> dict:
    """Pods of the types in ``order`` (up to ``caps[t]`` each) put on one node of class ``ckey`` while
    they fit: CPU, memory, whole-card pods on idle cards, each sharing pod's ``num`` slices on distinct
    cards (the fullest that fits first). What it returns always fits the node."""
    ccpu, cmem, cgpus, _model = ckey
    cpu, mem, free = ccpu, cmem, [WHOLE] * cgpus
    counts: dict[int, int] = {}
    for t in order:
        tcpu, tmem, num, milli, _models = types[t][0]
        k = 0
        while k < caps.get(t, 0) and tcpu <= cpu and tmem <= mem:
            need = WHOLE if milli >= WHOLE else milli
            room = sorted((f, i) for i, f in enumerate(free) if f >= need)
            if len(room) < num:
                break
            for _f, i in room[:num]:
                free[i] -= need
            cpu, mem, k = cpu - tcpu, mem - tmem, k + 1
        if k:
            counts[t] = k
    return counts


def first_fit(
    ckey: tuple, types: list[tuple[tuple, int]], want: dict[int, int], nodes: int, used=None
) -> list:
    """The pods ``want`` (per type, taken from it) put first-fit, most GPU first, on up to ``nodes``
    nodes of class ``ckey`` (cards as in :func:`pack`), after those already ``used``: per node ``([cpu,
    memory] left, free milli per card, {type: count})``."""
    ccpu, cmem, cgpus, _model = ckey
    used = [] if used is None else used
    for t in sorted(want, key=lambda t: (-_value(types[t][0]), -types[t][0][0], -types[t][0][1])):
        tcpu, tmem, num, milli, _models = types[t][0]
        need = min(milli, WHOLE)
        while want[t] > 0:
            spot = None
            for room, free, counts in used:
                if room[0] >= tcpu and room[1] >= tmem:
                    cards = sorted((f, i) for i, f in enumerate(free) if f >= need)
                    if len(cards) >= num:
                        spot = (room, free, counts, cards)
                        break
            if spot is None and len(used) < nodes and tcpu <= ccpu and tmem <= cmem and num <= cgpus:
                used.append(([ccpu, cmem], [WHOLE] * cgpus, {}))
                room, free, counts = used[-1]
                spot = (room, free, counts, [(WHOLE, i) for i in range(cgpus)])
            if spot is None:
                break  # no node holds one more of this type
            room, free, counts, cards = spot
            for _f, i in cards[:num]:
                free[i] -= need
            room[0] -= tcpu
            room[1] -= tmem
            counts[t] = counts.get(t, 0) + 1
            want[t] -= 1
    return used


def _share_of_node(ckey: tuple, tkey: tuple) -> float:
    """One pod's CPU, memory and GPU as shares of one node's, summed (the greedy packings' size)."""
    ccpu, cmem, cgpus, _model = ckey
    cpu, mem, num, milli, _models = tkey
    return cpu / max(ccpu, 1) + mem / max(cmem, 1) + num * min(milli, WHOLE) / (cgpus * WHOLE)


def greedy_patterns(ckey: tuple, types: list[tuple[tuple, int]], caps: dict[int, int], gain: dict) -> list:
    """Greedy packings of one node at reduced values ``gain`` per type: the types worth something in
    decreasing order of their gain, of it per unit of CPU, of GPU, and of the node's CPU, memory and
    GPU together; the best of them once more with each of its types tried first."""
    cand = [t for t, g in gain.items() if g > 1e-9 and caps.get(t, 0)]
    if not cand:
        return []

    keys = (
        lambda t: -gain[t],
        lambda t: -gain[t] / max(types[t][0][0], 1),
        lambda t: -gain[t] / _value(types[t][0]),
        lambda t: -gain[t] / _share_of_node(ckey, types[t][0]),
    )
    found = [pack(ckey, types, sorted(cand, key=key), caps) for key in keys]
    top = max(found, key=lambda counts: sum(gain[t] * q for t, q in counts.items()))
    rest = sorted(cand, key=keys[3])
    found += [pack(ckey, types, [t] + [u for u in rest if u != t], caps) for t in top]
    return found


def variants(ckey: tuple, types: list[tuple[tuple, int]], caps: dict[int, int], gain: dict, counts: dict):
    """Packings near ``counts``: each of its types left out in turn, the rest kept first, the node then
    filled greedily (by gain per unit of the node's resources)."""
    rest = sorted(
        (t for t, g in gain.items() if g > 1e-9 and caps.get(t, 0)),
        key=lambda t: -gain[t] / _share_of_node(ckey, types[t][0]),
    )
    out = []
    for drop in counts:
        keep = [t for t in counts if t != drop]
        limits = {**caps, **{t: counts[t] for t in keep}, drop: 0}
        out.append(pack(ckey, types, keep + [t for t in rest if t not in counts], limits))
    return out


def fitting(ckey: tuple, types: list[tuple[tuple, int]], counts: dict[int, int], pi) -> dict:
    """``counts`` if they fit one node of class ``ckey`` as :func:`pack` places them (largest slices
    first), else the most it places in that order, the most valuable at ``pi`` kept first."""
    order = sorted(counts, key=lambda t: (-min(types[t][0][3], WHOLE), -(_value(types[t][0]) - pi[t])))
    got = pack(ckey, types, order, counts)
    if got == counts:
        return counts
    order = sorted(counts, key=lambda t: -(_value(types[t][0]) - pi[t]))
    return pack(ckey, types, order, counts)


# ---- exact pricing of one node ----------------------------------------------------------------------


def _card_value_cut(types, cand: list[int], pos: dict[int, int], pi, cgpus: int):
    """Each card holding sharing pods holds one card pattern, worth at most ``W`` at the reduced prices
    (the best pattern, an exact knapsack: ``offline._best_card``): the sharing pods' reduced value is at
    most ``W`` × the cards not taken whole. Valid for every packing; it keeps the relaxed pricing within
    what single cards allow (without it, fragments of several cards would pool)."""
    from .offline import _best_card

    slot: dict[int, float] = {}
    for t in cand:
        _cpu, _mem, num, milli, _models = types[t][0]
        if milli < WHOLE:
            slot[milli] = max(slot.get(milli, 0.0), (_value(types[t][0]) - pi[t]) / num)
    millis = sorted(slot)
    worth = _best_card(millis, [slot[m] for m in millis])[0] if millis else 0.0
    coef = {}
    for t in cand:
        _cpu, _mem, num, milli, _models = types[t][0]
        coef[pos[t]] = float(_value(types[t][0]) - pi[t]) if milli < WHOLE else worth * num
    return coef, -float("inf"), worth * cgpus


def _slices(types, share: list[int], pos: dict[int, int], cgpus: int, first: int):
    """The per-card slice variables of the exact pricing: one integer per (milli value, card) for the
    one-card sharing pods of that value (their count on the card), one per (type, card) for pods asking
    several cards (at most one slice of each pod per card). Returns ``(slice var → (milli, upper
    bound)) per card, linking rows)``."""
    groups: dict[tuple, list[int]] = {}
    for t in share:
        _cpu, _mem, num, milli, _models = types[t][0]
        groups.setdefault(("m", milli) if num == 1 else ("t", t), []).append(t)
    cards: list[dict[int, tuple[int, int]]] = [{} for _ in range(cgpus)]
    rows: list[tuple[dict[int, float], float, float]] = []
    i = first
    for (kind, _key), ts in groups.items():
        milli, num = types[ts[0]][0][3], types[ts[0]][0][2]
        own = list(range(i, i + cgpus))
        i += cgpus
        for k, v in enumerate(own):
            cards[k][v] = (milli, WHOLE // milli)
        # the slices on the cards are the pods' slices: num per pod
        rows.append(({**{v: 1.0 for v in own}, **{pos[t]: -float(num) for t in ts}}, 0.0, 0.0))
        if kind == "t":  # distinct cards: at most one slice of each pod per card
            rows += [({v: 1.0, pos[ts[0]]: -1.0}, -float("inf"), 0.0) for v in own]
    return cards, rows, i


def slice_vars(types, cand: list[int], cgpus: int) -> int:
    """How many per-card slice variables the exact pricing of :func:`price_node` needs."""
    groups = set()
    for t in cand:
        _cpu, _mem, num, milli, _models = types[t][0]
        if milli < WHOLE:
            groups.add((milli, t if num > 1 else -1))
    return len(groups) * cgpus


def price_node(ckey: tuple, types: list[tuple[tuple, int]], fits: list[int], pi, seconds: float):
    """The most valuable packing of one node of class ``ckey`` at type prices ``pi``: an exact MIP over
    pod counts ``a_t`` (each at most what one node holds of it alone), per-card slices (one integer per
    sharing milli value and card, see :func:`_slices`) and whole-card flags ``w_k``. Past
    :data:`EXACT_CARD_VARS` slice variables the cards are kept only as totals (GPU milli within the cards,
    whole-card pods and slices above 500 milli a card each): the MIP then prices a superset of the
    packings, so its optimum still bounds theirs and the Lagrangian bound stays valid. Returns
    ``(value found, proven upper bound on the value, {type: count}, whether the counts surely fit)``."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp

    ccpu, cmem, cgpus, _model = ckey
    cand = [t for t in fits if _value(types[t][0]) - pi[t] > 1e-9]
    if not cand:
        return 0.0, 0.0, {}, True
    relaxed = slice_vars(types, cand, cgpus) > EXACT_CARD_VARS
    share = [] if relaxed else [t for t in cand if types[t][0][3] < WHOLE]
    whole = [] if relaxed else [t for t in cand if types[t][0][3] >= WHOLE]
    pos = {t: i for i, t in enumerate(cand)}
    cards, rows, n = _slices(types, share, pos, cgpus, len(cand))
    w = list(range(n, n + (cgpus if whole else 0)))
    n += len(w)
    rows.append(({pos[t]: types[t][0][0] for t in cand}, -np.inf, ccpu))
    rows.append(({pos[t]: types[t][0][1] for t in cand}, -np.inf, cmem))
    if relaxed:  # GPU milli within the cards; whole-card pods and slices above half a card take a card each
        rows.append(({pos[t]: float(_value(types[t][0])) for t in cand}, -np.inf, float(cgpus * WHOLE)))
        big = {pos[t]: float(types[t][0][2]) for t in cand if types[t][0][3] > WHOLE // 2}
        if big:
            rows.append((big, -np.inf, float(cgpus)))
        rows.append(_card_value_cut(types, cand, pos, pi, cgpus))
    if whole:  # whole-card pods take num cards each, marked whole
        rows.append(({**{pos[t]: types[t][0][2] for t in whole}, **{i: -1.0 for i in w}}, 0.0, 0.0))
    loads = []
    for k in range(cgpus):  # a card: its sharing milli, or whole
        card = {v: float(milli) for v, (milli, _ub) in cards[k].items()}
        if whole:
            card[w[k]] = float(WHOLE)
        if card:
            rows.append((card, -np.inf, float(WHOLE)))
            loads.append(card)
    for k in range(len(loads) - 1):  # cards are alike: the loads decrease (symmetry)
        rows.append(({**loads[k], **{i: -v for i, v in loads[k + 1].items()}}, 0.0, np.inf))
    a = np.zeros((len(rows), n))
    for r, (coef, _lo, _hi) in enumerate(rows):
        for i, v in coef.items():
            a[r, i] += v
    ub = np.ones(n)
    for t in cand:
        ub[pos[t]] = alone_count(ckey, types[t])
    for card in cards:
        for v, (_milli, top) in card.items():
            ub[v] = top
    c = np.zeros(n)
    for t in cand:
        c[pos[t]] = -(_value(types[t][0]) - pi[t])
    res = milp(
        c,
        constraints=LinearConstraint(a, np.array([r[1] for r in rows]), np.array([r[2] for r in rows])),
        integrality=np.ones(n),
        bounds=Bounds(np.zeros(n), ub),
        options={"time_limit": max(0.1, seconds)},
    )
    # stopped early, only what HiGHS proved counts (else each count at its upper bound)
    trivial = float(sum((_value(types[t][0]) - pi[t]) * ub[pos[t]] for t in cand))
    dual = getattr(res, "mip_dual_bound", None)
    proven = trivial if dual is None or not np.isfinite(dual) else min(trivial, -float(dual))
    if res.x is None:
        return 0.0, proven, {}, True
    found = -float(res.fun)
    proven = found if res.status == 0 else max(found, proven)
    counts = {t: int(round(res.x[pos[t]])) for t in cand if round(res.x[pos[t]]) > 0}
    return found, proven, counts, not relaxed
