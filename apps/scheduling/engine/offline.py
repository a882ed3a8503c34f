"""Offline references for the trace simulator: how far from the limit is an online policy?

For one trace and seed, the *arrived workload at 100 %* is the prefix of the seed's pod order whose GPU
request stays within the cluster's GPU capacity (the pods an online policy has seen when arrival reaches
100 %). Two references are computed for it, both in unallocated GPU % of capacity, like the online
figures (lower is better):

* **bound** — an upper bound on what any placement can allocate, from an LP relaxation solved with
  HiGHS (``scipy.optimize.linprog``, https://docs.scipy.org/doc/scipy/reference/generated/scipy.optimize.linprog.html).
  Pods are aggregated into identical types (CPU, memory, cards, milli per card, allowed models) and
  nodes into identical classes (CPU, memory, cards, model); ``x[t, c]`` pods of type ``t`` go to class
  ``c`` (only where one pod fits one node of the class and the model is allowed), at most the type's
  count. Per class: CPU, memory and GPU milli within the class's totals, and the sharing rule (a pod with
  ``gpu_milli`` < 1000 sits on one card) in its strongest linear form we use here: whole cards taken plus
  the sharing pods above 500 milli (no two of them fit one card) stay within the class's card count.
  The objective is the GPU milli allocated. No online policy — nor any exact packing — can allocate
  more, so its unallocated % is a floor.
* **hindsight** — the best packing found knowing the whole workload in advance: the pods sorted by GPU
  request (then CPU, then memory) decreasing and placed by the engine with best fit and with Suanchi's
  policy, and the arrival order placed by Suanchi's policy (a packing hindsight may simply keep); the
  best of these, then a time-bounded local search that moves up to two placed pods off a node to make
  room for a pod left out, keeping the move only when every moved pod finds a place again (so the
  allocation grows). Every packing found is achievable, so the limit lies between the bound and this.

The gap of an online policy to each is its unallocated % minus the reference's, in percentage points.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .model import WHOLE, Placement, Request


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
        key = (p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.models)
        types[key] = types.get(key, 0) + 1
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
            cards = num if milli >= WHOLE else (1 if milli > WHOLE // 2 else 0)
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


def hindsight(
    make_snapshot,
    pods: Sequence,
    to_request,
    *,
    policies: Sequence[str] = ("slotfrag", "bestfit"),
    time_limit: float = 5.0,
) -> dict:
    """Best packing found with full hindsight: the pods sorted decreasing (GPU, CPU, memory) and placed
    by each of ``policies`` (best fit and Suanchi's policy by default); the best of those, then a
    time-bounded local search. ``make_snapshot()`` returns a fresh, empty fleet."""
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

    deadline = t0 + time_limit
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
    problems = snapshot.check_invariants()
    if problems:  # pragma: no cover - the snapshot refuses over-allocation on apply
        raise RuntimeError(f"hindsight packing broke an invariant: {problems[0]}")
    return {
        "allocated": allocated,
        "greedy_allocated": greedy,
        "greedy_by_policy": tried,
        "moves": moves,
        "requested": sum(p.gpu for p in pods),
        "seconds": time.perf_counter() - t0,
    }
