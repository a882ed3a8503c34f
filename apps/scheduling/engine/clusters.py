"""The cluster boundary: one job (all replicas, every part of a request) lands in one cluster.

Each Kubernetes cluster schedules its own pods, so a job whose parts sat in two clusters could never
start as one gang. ``NodeState.cluster`` names a node's cluster; ``Request.cluster`` pins a request to
one (the static filter rejects other clusters' nodes: "node in another cluster").

Invariant (``Engine.place`` hook, keep it when restructuring): when the snapshot spans more than one
cluster and the request names none, the request is placed by :func:`place` - tried in each cluster
alone, never across clusters. The choice, like MultiKueue's dispatcher order, goes by
``Snapshot.cluster_preference`` (cluster -> integer, lower first; missing = 0: e.g. on-prem 0, cloud
10), then, among clusters of the same preference, by the placement policy's score of the best node
(the policy's own ordering), then by name. The decision's trace gets a ``cluster`` step saying
which cluster was chosen and why, and which were not feasible with their reasons.

Single-cluster snapshots (every node with the same ``cluster``, e.g. the trace simulator) never go
through here: their decisions are exactly what they were.
"""

from __future__ import annotations

import dataclasses

from .decision import Decision, TraceStep
from .fleet import Snapshot
from .request import Request

_KEY = "clusters"


def names(snapshot: Snapshot) -> tuple[str, ...]:
    """The clusters the snapshot's nodes belong to (cached until a static change)."""
    cached = snapshot.indexes.get(_KEY)
    if cached is None or cached[0] != len(snapshot.nodes):
        cached = snapshot.indexes[_KEY] = (len(snapshot.nodes), tuple(sorted({n.cluster for n in snapshot})))
    return cached[1]


def spans_clusters(snapshot: Snapshot) -> bool:
    return len(names(snapshot)) > 1


def _label(name: str) -> str:
    return name or "(no cluster)"


def place(engine, snapshot: Snapshot, req: Request, *, commit: bool, trace_id: str | None) -> Decision:
    """Place ``req`` inside exactly one cluster of ``snapshot`` (see the module docstring)."""
    prefs = snapshot.cluster_preference
    order = sorted(names(snapshot), key=lambda c: (prefs.get(c, 0), c))
    tiers: dict[int, list[str]] = {}
    for c in order:
        tiers.setdefault(prefs.get(c, 0), []).append(c)
    failures: list[tuple[str, str]] = []
    last: Decision | None = None
    for pref, members in sorted(tiers.items()):
        feasible: list[tuple[tuple, int, str, Decision]] = []
        for pos, c in enumerate(members):
            sub = dataclasses.replace(req, cluster=c)
            decision = engine.place(snapshot, sub, commit=False, trace_id=trace_id)
            last = decision
            if decision.placed:
                score = tuple(decision.candidates[0].score) if decision.candidates else ()
                feasible.append((score, -pos, c, decision))
            else:
                failures.append((c, decision.explanation or "does not fit"))
        if not feasible:
            continue
        feasible.sort(key=lambda item: (item[0], item[1]), reverse=True)
        _score, _pos, chosen, decision = feasible[0]
        others = [c for _s, _p, c, _d in feasible[1:]]
        why = [f"preference {pref}"]
        if others:
            why.append(
                f"best policy score among feasible clusters of that preference ({', '.join(map(_label, others))})"
            )
        text = f"cluster {_label(chosen)}: " + "; ".join(why)
        if failures:
            text += "; not feasible: " + "; ".join(f"{_label(c)}: {r}" for c, r in failures)
        decision.steps.insert(
            0,
            TraceStep(
                "cluster",
                text,
                {"cluster": chosen, "preference": pref, "rejected": dict(failures), "also_feasible": others},
            ),
        )
        if commit:
            assert decision.placement is not None  # a feasible cluster's decision placed the job
            snapshot.apply(decision.placement)
        return decision
    decision = Decision(trace_id or (last.trace_id if last else ""), req.id, engine.policy.name)
    decision.explanation = (
        "no single cluster can hold the whole job (a job never spans clusters): "
        + "; ".join(f"{_label(c)}: {r}" for c, r in failures)
    )
    decision.rejections = {}
    for c, r in failures:
        decision.rejections[f"cluster {_label(c)}"] = r
    decision.step("cluster", decision.explanation, rejected=dict(failures))
    decision.step("result", decision.explanation)
    return decision
