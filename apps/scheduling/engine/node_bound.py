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
GPU milli the packing allocates), ``Σ_{p of class c} y_p ≤ N_c`` per class and ``Σ_p a_tp y_p ≤ n_t``
per pod type. Every placement gives an integer solution (each node's pods are one column), so the LP's
value bounds every placement.

Columns come by column generation, priced per class by an exact small MIP (``scipy.optimize.milp``,
HiGHS, https://docs.scipy.org/doc/scipy/reference/generated/scipy.optimize.milp.html): the most
``Σ (v_t − π_t) a_t`` one node of the class holds at the master's type duals ``π``. The bound reported is
never the restricted master's value but the Lagrangian (dual) value ``Σ_c N_c μ_c + Σ_t n_t π_t`` with
``μ_c`` the pricing optimum of class ``c`` (or the MIP's proven dual bound when it stopped early):
``(μ, π)`` is then a feasible dual of the full LP, so by weak duality the value bounds it — valid
whenever the column generation stops, converged or not.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .share import WHOLE


def node_lp_bound(
    nodes: Sequence, pods: Sequence, *, time_limit: float = 60.0, mip_seconds: float = 10.0, type_duals=None
) -> dict:
    """Upper bound on allocatable GPU milli for ``pods`` (PodSpecs) on ``nodes`` (NodeSpecs), over
    whole-node packings (see the module docstring). ``allocated`` is the valid (Lagrangian) bound.
    ``type_duals``: prices per pod type to try first (``card_lp_bound``'s ``type_duals``)."""
    from .offline import _node_classes, _pod_types

    t0 = time.perf_counter()
    types = _pod_types(pods)
    classes = [(key, len(ns)) for key, ns in _node_classes(nodes)]
    total = float(sum(p.gpu for p in pods))
    lp = _NodeLP(types, classes)
    pi0 = None
    if type_duals is not None and len(type_duals) == len(types):
        import numpy as np

        pi0 = np.maximum(np.asarray(type_duals, dtype=float), 0.0)
    best, lp_value, rounds, converged = lp.solve(total, t0 + time_limit, mip_seconds, pi0)
    return {
        "allocated": min(total, best),
        "lp_value": lp_value,
        "requested": int(total),
        "status": "optimal" if converged else "time limit",
        "rounds": rounds,
        "node_patterns": len(lp.columns),
        "pod_types": len(types),
        "node_classes": len(classes),
        "seconds": time.perf_counter() - t0,
    }


def _value(tkey: tuple) -> float:
    return float(tkey[2] * tkey[3])  # num_gpu × gpu_milli


class _NodeLP:
    """The master LP's columns and the per-class pricing MIP."""

    def __init__(self, types: list[tuple[tuple, int]], classes: list[tuple[tuple, int]]) -> None:
        from .offline import _fits_alone

        self.types = types
        self.classes = classes
        self.fits = [[t for t, (tk, _n) in enumerate(types) if _fits_alone(tk, ck)] for ck, _size in classes]
        self.columns: list[tuple[int, dict[int, int]]] = []  # (class, {type: count})
        self.seen: set[tuple] = set()
        for c, (ckey, _size) in enumerate(classes):  # to start: as many pods of one type as one node holds
            for t in self.fits[c]:
                self.add(c, {t: alone_count(ckey, types[t])})

    def add(self, c: int, counts: dict[int, int]) -> bool:
        key = (c, tuple(sorted(counts.items())))
        if not counts or key in self.seen:
            return False
        self.seen.add(key)
        self.columns.append((c, counts))
        return True

    def master(self):
        """Solve the restricted master: (value, type duals π ≥ 0)."""
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
        return -float(res.fun), duals[n_c:]

    def lagrangian(self, pi, deadline: float, mip_seconds: float) -> tuple[float, bool, bool]:
        """``Σ_t n_t π_t + Σ_c N_c max(0, best packing's reduced value)`` at ``pi`` (≥ 0): a valid bound
        whatever ``pi`` is; the best packings found join the master. ``(bound, added, exact)``."""
        import numpy as np

        bound = float(pi @ np.array([float(n) for _k, n in self.types]))
        added, exact = False, True
        for c, (ckey, size) in enumerate(self.classes):
            # the time left shared by the classes still to price (a stopped MIP gives its proven bound)
            share = (deadline - time.perf_counter()) / (len(self.classes) - c)
            worth, proven, counts = price_node(ckey, self.types, self.fits[c], pi, min(mip_seconds, share))
            exact &= proven <= worth + 1e-6
            bound += size * max(0.0, proven)
            if counts and worth > 1e-6:
                added |= self.add(c, counts)
        return bound, added, exact

    def solve(
        self, total: float, deadline: float, mip_seconds: float, pi0=None
    ) -> tuple[float, float, int, bool]:
        """Column generation until no column prices out, or ``deadline``: ``(valid bound, last master
        value, rounds, converged)``. Prices first at ``pi0`` (e.g. the card-pattern LP's type duals, whose
        bound is then never above that LP's), then at the master's duals smoothed toward the prices of the
        best bound so far (Wentges' smoothing; any prices ≥ 0 give a valid bound)."""
        if not self.columns:
            return 0.0, 0.0, 0, True  # no pod fits any node alone
        lp_value, pi_m = self.master()
        best, best_pi, rounds, converged = total, pi0, 0, False
        pure = pi0 is None  # price at the master's own duals (only they can prove convergence)
        pi = pi0 if pi0 is not None else pi_m
        while True:
            rounds += 1
            bound, added, exact = self.lagrangian(pi, deadline, mip_seconds)
            if bound < best:
                best, best_pi = bound, pi
            if not added and pure:
                converged = exact
                break
            if time.perf_counter() > deadline:
                break
            if added:
                lp_value, pi_m = self.master()
            pure = not added or best_pi is None
            pi = pi_m if pure else SMOOTHING * best_pi + (1.0 - SMOOTHING) * pi_m
        return max(best, lp_value), lp_value, rounds, converged


SMOOTHING = 0.5  # Wentges' weight on the best-bound prices (0.8 tried on cpu250: inconclusive under load)
EXACT_CARD_VARS = 240  # per-card slice variables up to which pricing packs each card exactly


def alone_count(ckey: tuple, tcount: tuple[tuple, int]) -> int:
    """How many pods of one type one node of class ``ckey`` holds with nothing else (≥ 1 when it fits)."""
    (cpu, mem, num, milli, _models), n = tcount
    ccpu, cmem, cgpus, _model = ckey
    cards = cgpus // num if milli >= WHOLE else (cgpus // num) * (WHOLE // milli)
    return max(0, min(n, cards, ccpu // cpu if cpu else n, cmem // mem if mem else n))


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


def price_node(ckey: tuple, types: list[tuple[tuple, int]], fits: list[int], pi, seconds: float):
    """The most valuable packing of one node of class ``ckey`` at type prices ``pi``: an exact MIP over
    pod counts ``a_t``, per-card sharing slices ``z_tk`` and whole-card flags ``w_k``. Past
    :data:`EXACT_CARD_VARS` slice variables the cards are kept only as totals (GPU milli within the cards,
    whole-card pods and slices above 500 milli a card each): the MIP then prices a superset of the
    packings, so its optimum still bounds theirs and the Lagrangian bound stays valid. Returns
    ``(value found, proven upper bound on the value, {type: count})``."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp

    ccpu, cmem, cgpus, _model = ckey
    cand = [t for t in fits if _value(types[t][0]) - pi[t] > 1e-9]
    if not cand:
        return 0.0, 0.0, {}
    share = [t for t in cand if types[t][0][3] < WHOLE]
    whole = [t for t in cand if types[t][0][3] >= WHOLE]
    relaxed = len(share) * cgpus > EXACT_CARD_VARS
    if relaxed:  # the cards as totals only: a superset of packings, so the bound stays valid
        share, whole = [], []
    n_a, n_z = len(cand), len(share) * cgpus
    n_w = cgpus if whole else 0
    n = n_a + n_z + n_w
    pos = {t: i for i, t in enumerate(cand)}
    z = {(t, k): n_a + j * cgpus + k for j, t in enumerate(share) for k in range(cgpus)}
    w = [n_a + n_z + k for k in range(n_w)]
    rows: list[tuple[dict[int, float], float, float]] = []
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
        card = {z[(t, k)]: float(types[t][0][3]) for t in share}
        if whole:
            card[w[k]] = float(WHOLE)
        if card:
            rows.append((card, -np.inf, float(WHOLE)))
            loads.append(card)
    for k in range(len(loads) - 1):  # cards are alike: the loads decrease (symmetry)
        rows.append(({**loads[k], **{i: -v for i, v in loads[k + 1].items()}}, 0.0, np.inf))
    for t in share:  # num slices per pod, at most one of each pod per card (distinct cards)
        rows.append(({**{z[(t, k)]: 1.0 for k in range(cgpus)}, pos[t]: -float(types[t][0][2])}, 0.0, 0.0))
        if types[t][0][2] > 1:
            rows += [({z[(t, k)]: 1.0, pos[t]: -1.0}, -np.inf, 0.0) for k in range(cgpus)]
    a = np.zeros((len(rows), n))
    for r, (coef, _lo, _hi) in enumerate(rows):
        for i, v in coef.items():
            a[r, i] = v
    lo = np.array([r[1] for r in rows])
    hi = np.array([r[2] for r in rows])
    ub = np.zeros(n)
    for t in cand:
        cpu, mem, num, _milli, _models = types[t][0]
        cap = min(cgpus // num, ccpu // cpu if cpu else cgpus * WHOLE, cmem // mem if mem else cgpus * WHOLE)
        ub[pos[t]] = min(types[t][1], cap)
    for (t, _k), i in z.items():
        ub[i] = WHOLE // types[t][0][3]
    for i in w:
        ub[i] = 1
    c = np.zeros(n)
    for t in cand:
        c[pos[t]] = -(_value(types[t][0]) - pi[t])
    res = milp(
        c,
        constraints=LinearConstraint(a, lo, hi),
        integrality=np.ones(n),
        bounds=Bounds(np.zeros(n), ub),
        options={"time_limit": max(0.1, seconds)},
    )
    # stopped early, only what HiGHS proved counts (else each count at its upper bound)
    trivial = float(sum((_value(types[t][0]) - pi[t]) * ub[pos[t]] for t in cand))
    dual = getattr(res, "mip_dual_bound", None)
    proven = trivial if dual is None or not np.isfinite(dual) else min(trivial, -float(dual))
    if res.x is None:
        return 0.0, proven, {}
    found = -float(res.fun)
    proven = found if res.status == 0 else max(found, proven)
    counts = {t: int(round(res.x[pos[t]])) for t in cand if round(res.x[pos[t]]) > 0}
    return found, proven, counts
