"""The engine: three tiers per request, gangs, fallbacks, traces and a scheduling cycle.

``Engine(policy=...).place(snapshot, request)`` runs tier 1 (node filter, reasons per rejected node),
tier 2 (node scoring by the policy) and tier 3 (device assignment) and returns a :class:`Decision`
with a trace id and ordered steps. With ``commit=True`` (default) the placement is applied to the
snapshot; ``Engine.release`` gives it back. ``Engine.schedule`` runs a queue in priority order.

Speed: nodes are grouped into classes of identical nodes in identical states (``index.NodeClasses``,
kept current from the snapshot's change log on apply / release). The static filter runs once per
class, the policy scores each (class, state) signature once per request shape, and a heap per request
shape holds the feasible signatures, so a decision costs O(changes + log signatures), not O(nodes);
"why pending" counts reasons per signature and builds per-node reasons only when read
(``Decision.rejections`` is lazy), and ``top_candidates`` gives a trace view the best nodes on demand.
Requests with per-node precheck failures and the random policy use the per-node index (node scores
cached in a heap, only changed nodes re-evaluated). Exact ties go to the first node in snapshot order
(``order``) or are broken with the engine's seeded random generator (``random``).
"""

from __future__ import annotations

import heapq
import itertools
import random
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from . import assign, clusters, filters
from .decision import Candidate, Decision, LazyMapping, NodePart, Placement
from .filters import StaticResult
from .fleet import CapacityError, Snapshot
from .index import NodeClasses
from .nodes import NodeState, Topology
from .policies import BEST, Policy, get_policy
from .request import Request

_STATIC = "static"
MAX_EVALS = 200_000  # memoized evaluations per signature index before it starts over
_TOKENS = itertools.count(1)


class _Index:
    """Feasible nodes for one (request signature, shape, policy) with their cached scores."""

    __slots__ = ("heap", "entries", "seq", "static", "reasons")

    def __init__(self, static: StaticResult) -> None:
        self.heap: list[tuple] = []
        self.entries: dict[int, tuple] = {}  # pos -> (node version, key, option)
        self.seq = 0
        self.static = static
        self.reasons: dict[int, tuple[int, str | None]] = {}  # pos -> (node version, capacity reason)


class _ClassIndex:
    """Feasible node signatures (``index.NodeClasses``) for one (request signature, shape, policy).

    ``evals`` memoizes the policy's (score key, option) per signature (``None``: does not fit); the
    heap holds ``(negated key, tie, n, signature)`` and ``pushed`` the live tie per signature, so stale
    heap items are skipped. The tie is the signature's first node position (``order``: the first node
    in snapshot order wins exact ties, as a per-node scan would) or a random number (``random``).
    """

    __slots__ = ("heap", "evals", "pushed", "seqs", "seq", "static", "classes", "reasons", "count")

    def __init__(self, static: StaticResult, classes: NodeClasses) -> None:
        self.classes = classes  # the signature ids below are this index's (``index.NodeClasses``)
        self.heap: list[tuple] = []
        self.evals: dict[int, Any] = {}  # signature -> (score key, option); None: does not fit
        self.pushed: dict[int, float] = {}
        self.seqs: dict[int, int] = {}  # static class -> how much of its change log was read
        self.seq = -1  # the snapshot change sequence last synced
        self.static = static
        self.reasons: dict[int, str | None] = {}  # signature -> capacity reason
        self.count = 0


class Engine:
    def __init__(
        self,
        policy: str | Policy = BEST,
        *,
        seed: int | None = None,
        explain: bool = True,
        top_k: int = 3,
        workload: Iterable[Request] | None = None,
        tie_break: str = "random",
    ) -> None:
        """``tie_break``: exact score ties go to a random node (``random``, as kube-scheduler does) or to
        the first node in snapshot order (``order``, reproducible and packing-friendly)."""
        if tie_break not in ("random", "order"):
            raise ValueError("tie_break must be 'random' or 'order'")
        self.policy = get_policy(policy)
        self.rng = random.Random(seed)
        self.tie_break = tie_break
        self._token = next(_TOKENS)  # cached scores belong to this engine (ids of dead objects get reused)
        self.explain = explain
        self.top_k = top_k
        self._bound: tuple[int, int] | None = None
        if workload is not None:
            self.policy.set_workload(workload)

    # ---- public API ----------------------------------------------------------------------------

    def place(
        self, snapshot: Snapshot, req: Request, *, commit: bool = True, trace_id: str | None = None
    ) -> Decision:
        """Place one request (all replicas and groups, or nothing)."""
        if req.cluster is None and clusters.spans_clusters(snapshot):
            # a job never spans clusters: try each cluster alone (engine/clusters.py)
            return clusters.place(self, snapshot, req, commit=commit, trace_id=trace_id or uuid.uuid4().hex)
        decision = Decision(trace_id or uuid.uuid4().hex, req.id, self.policy.name)
        self.policy.observe(req)
        if req.id in snapshot.placements:
            decision.explanation = f"request {req.id} is already placed"
            decision.step("result", decision.explanation)
            return decision
        static = self._static(snapshot, req)
        if self.explain:
            decision.step(
                "filter",
                f"{static.n_eligible}/{static.total} nodes pass the static filters",
                rejected=static.counts(),
            )
        if req.replicas > 1:
            placement = self._place_gang(snapshot, req, static, decision)
        else:
            placement = self._place_single(snapshot, req, static, decision)
            if placement is None and len(req.groups) > 1 and self._may_split(req):
                placement = self._place_split(snapshot, req, decision)
        if placement is None:
            if self.explain:
                text, decision.rejections = self._reasons(snapshot, req, static)
                if not decision.explanation:
                    decision.explanation = text
            decision.step("result", decision.explanation or "no node fits")
            return decision
        decision.placement = placement
        if self.explain:
            decision.rejections = LazyMapping(lambda: dict(static.rejected))
        if commit:
            snapshot.apply(placement)
        if self.explain:
            nodes = ", ".join(placement.nodes)
            note = " (cross-node)" if placement.cross_node else ""
            decision.step("result", f"placed on {nodes}{note}", committed=commit)
        return decision

    def schedule(
        self, snapshot: Snapshot, requests: Iterable[Request], *, commit: bool = True
    ) -> list[Decision]:
        """One scheduling cycle over a queue: higher priority first, then the given order."""
        queue = sorted(enumerate(requests), key=lambda item: (-item[1].priority, item[0]))
        return [self.place(snapshot, req, commit=commit) for _i, req in queue]

    def apply(self, snapshot: Snapshot, placement: Placement) -> None:
        snapshot.apply(placement)

    def release(self, snapshot: Snapshot, request_id: str) -> Placement:
        return snapshot.release(request_id)

    def top_candidates(self, snapshot: Snapshot, req: Request, k: int | None = None) -> list[Candidate]:
        """The ``k`` best feasible nodes for one replica of ``req`` now, best first (nothing applied).

        For a trace view opened by a person: pending decisions do not compute candidates, and this costs
        O(k log signatures) on the engine's index instead of a pass over every node.
        """
        static = self._static(snapshot, req)
        k = max(1, self.top_k if k is None else k)
        _best, runners = self._best(snapshot, req, static, k)
        return [Candidate(snapshot.nodes[p].name, tuple(score)) for p, score in runners[:k]]

    def explain_failure(self, snapshot: Snapshot, req: Request, static: StaticResult | None = None) -> str:
        """Why no node can take one replica of ``req`` right now, kube-scheduler style."""
        return self._reasons(snapshot, req, static)[0]

    def _reasons(
        self, snapshot: Snapshot, req: Request, static: StaticResult | None = None
    ) -> tuple[str, Mapping[str, str]]:
        static = static or self._static(snapshot, req)
        if static.classes is not None:
            return self._reasons_classed(snapshot, req, static)
        idx = snapshot.indexes.get(("idx", self._token, self.policy.version, req.static_key, req.shape_key))
        cache = idx.reasons if idx is not None and idx.static is static else {}
        reasons = dict(static.rejected)
        available = 0
        for node, elig in static.eligible:
            hit = cache.get(node.pos)
            if hit is not None and hit[0] == node.version:
                reason = hit[1]
            else:
                reason = filters.capacity_reason(snapshot, node, req, elig)
                cache[node.pos] = (node.version, reason)
            if reason is None:
                available += 1
            else:
                reasons[node.name] = reason
        return filters.explain(static.total, reasons.values(), available), reasons

    # ---- tier 1 --------------------------------------------------------------------------------

    def _static(self, snapshot: Snapshot, req: Request) -> StaticResult:
        if self._bound != (snapshot.uid, snapshot.static_version):
            self.policy.bind(snapshot)
            self._bound = (snapshot.uid, snapshot.static_version)
        cache = snapshot.indexes.get(_STATIC)
        if cache is None:
            cache = snapshot.indexes[_STATIC] = {}
        result = cache.get(req.static_key)
        if result is None:
            if len(cache) > 4096:
                cache.clear()
            if req.precheck_failures:
                result = filters.static_filter(snapshot, req)
            else:
                result = filters.static_filter_classes(snapshot, req, NodeClasses.of(snapshot))
            cache[req.static_key] = result
        return result

    def _classed(self, static: StaticResult) -> bool:
        """Whether the signature index serves this request (the per-node index serves the rest)."""
        return static.classes is not None and not self.policy.randomized

    # ---- the signature index -------------------------------------------------------------------

    def _class_index(self, snapshot: Snapshot, req: Request, static: StaticResult) -> _ClassIndex:
        classes = NodeClasses.of(snapshot)
        ikey = ("cidx", self._token, self.policy.version, req.static_key, req.shape_key)
        idx = snapshot.indexes.get(ikey)
        if idx is not None and len(idx.evals) > MAX_EVALS:
            idx = None  # bound the memory: start over (every signature is offered again)
        if idx is None or idx.static is not static or idx.classes is not classes:
            idx = _ClassIndex(static, classes)
            indexes = snapshot.indexes
            if len(indexes) > 1024:  # bound the memory: forget the least recently created half
                for old in [k for k in indexes if isinstance(k, tuple)][:512]:
                    del indexes[old]
            indexes[ikey] = idx
        seq = snapshot.change_seq
        if idx.seq == seq:
            return idx
        members = classes.members
        seqs, logs, offsets = idx.seqs, classes.logs, classes.log_offsets
        for cid, elig in idx.static.cls_elig.items():
            log = logs[cid]
            end = offsets[cid] + len(log)
            done = seqs.get(cid, -1)
            if done == end:
                continue
            start = done - offsets[cid]
            # new, or fallen behind the trimmed log: every signature of the class with nodes
            sigs: Iterable[int] = classes.class_sigs[cid] if done < 0 or start < 0 else log[start:]
            for sid in sigs:
                lst = members.get(sid)
                if lst:
                    self._offer(snapshot, req, idx, sid, lst, elig)
            seqs[cid] = end
        if len(idx.heap) > 4 * len(idx.pushed) + 64:
            idx.heap = [h for h in idx.heap if idx.pushed.get(h[3]) == h[1]]
            heapq.heapify(idx.heap)
        idx.seq = seq
        return idx

    def _offer(
        self, snapshot: Snapshot, req: Request, idx: _ClassIndex, sig: int, members: list[int], elig: tuple
    ) -> None:
        """(Re)consider one signature that gained a node."""
        evals = idx.evals
        ev: Any = evals.get(sig, evals)  # the dict itself: not evaluated yet
        if ev is evals:
            ev = evals[sig] = self._evaluate(snapshot, snapshot.nodes[members[0]], req, elig)
        if ev is None:
            return
        cur = idx.pushed.get(sig)
        tie: float
        if self.tie_break == "order":
            tie = members[0]
            if cur is not None and cur <= tie:
                return
        else:
            if cur is not None:
                return
            tie = self.rng.random()
        idx.pushed[sig] = tie
        idx.count += 1
        heapq.heappush(idx.heap, (tuple(-x for x in ev[0]), tie, idx.count, sig))

    def _top(self, classes: NodeClasses, idx: _ClassIndex):
        """The valid heap item with the best key (``None`` when nothing fits); fixes stale ties."""
        heap, pushed, members = idx.heap, idx.pushed, classes.members
        order = self.tie_break == "order"
        while heap:
            item = heap[0]
            sig = item[3]
            if pushed.get(sig) != item[1]:
                heapq.heappop(heap)
                continue
            lst = members.get(sig)
            if not lst:
                heapq.heappop(heap)
                del pushed[sig]
                continue
            if order and lst[0] != item[1]:  # its first node left: requeue at the new first node
                heapq.heappop(heap)
                idx.count += 1
                pushed[sig] = lst[0]
                heapq.heappush(heap, (item[0], lst[0], idx.count, sig))
                continue
            return item
        return None

    def _best_classed(self, snapshot: Snapshot, req: Request, static: StaticResult, k: int = 0):
        idx = self._class_index(snapshot, req, static)
        classes = NodeClasses.of(snapshot)
        top = self._top(classes, idx)
        if top is None:
            return None, []
        sig = top[3]
        lst = classes.members[sig]
        pos = lst[0] if self.tie_break == "order" or len(lst) == 1 else self.rng.choice(lst)
        key, opt = idx.evals[sig]
        opt = self._choose(snapshot.nodes[pos], req, static.cls_elig[classes.sig_class[sig]], opt)
        runners: list[tuple[int, tuple]] = []
        if k:
            popped = []
            heap = idx.heap
            while len(runners) < k + 1:
                item = self._top(classes, idx)
                if item is None:
                    break
                heapq.heappop(heap)
                popped.append(item)
                s = item[3]
                score = idx.evals[s][0]
                if s == sig:
                    runners.append((pos, score))
                for p in itertools.islice(classes.members[s], k + 2):
                    if len(runners) > k:
                        break
                    if p != pos:
                        runners.append((p, score))
            for item in popped:
                heapq.heappush(heap, item)
        return (pos, key, opt), runners

    def _reasons_classed(
        self, snapshot: Snapshot, req: Request, static: StaticResult
    ) -> tuple[str, LazyMapping]:
        """Counts per reason class over signatures (O(signatures)); per-node reasons only on demand."""
        classes = NodeClasses.of(snapshot)
        idx = self._class_index(snapshot, req, static)
        cache = idx.reasons
        counts = dict(static.counts())
        available = 0
        cls_elig = static.cls_elig
        by_sig: dict[int, str] = {}
        sig_class = classes.sig_class
        for sig, members in classes.members.items():
            elig = cls_elig.get(sig_class[sig])
            if elig is None:
                continue
            reason: Any = cache.get(sig, cache)  # the dict itself: not computed yet
            if reason is cache:
                reason = cache[sig] = filters.capacity_reason(snapshot, snapshot.nodes[members[0]], req, elig)
            if reason is None:
                available += len(members)
            else:
                counts[reason] = counts.get(reason, 0) + len(members)
                by_sig[sig] = reason
        text = filters.explain_counts(static.total, counts, available)
        sig_of = list(classes.sig_of)  # the state now, for per-node reasons read later
        nodes = snapshot.nodes

        def per_node() -> dict[str, str]:
            out = dict(static.rejected)
            for p, sig in enumerate(sig_of):
                reason = by_sig.get(sig)
                if reason is not None:
                    out[nodes[p].name] = reason
            return out

        return text, LazyMapping(per_node)

    # ---- tiers 2 and 3 ---------------------------------------------------------------------------

    def _evaluate(self, snapshot: Snapshot, node: NodeState, req: Request, elig: tuple):
        """(score key, device option) for one node, or ``None`` when the request does not fit.

        Policies whose score ignores the device choice get ``None`` as the option; tier 3 then runs
        for the winning node only (``_choose``).
        """
        policy = self.policy
        if not policy.needs_options:
            if not assign.fits(node, req, elig, node.factor):
                return None
            return policy.score(snapshot, node, req, (), self.rng)[0], None
        opts = assign.options(node, req, elig, node.factor)
        if not opts:
            return None
        key, k = policy.score(snapshot, node, req, opts, self.rng)
        return key, opts[k]

    def _choose(self, node: NodeState, req: Request, elig: tuple, opt):
        """Tier 3 for the chosen node when scoring did not need it."""
        if opt is not None:
            return opt
        groups = req.groups
        if self.policy.randomized and len(groups) == 1 and not groups[0].whole and groups[0].count == 1:
            # random fit: any card the slice fits on, uniformly
            cards = assign.slice_candidates(node, elig[0], groups[0], node.factor)
            if cards:
                return (((self.rng.choice(cards),),), Topology.SINGLE)
        opts = assign.options(node, req, elig, node.factor)
        if not opts:  # cannot happen: the node was feasible a moment ago
            raise RuntimeError(f"{node.name} no longer fits {req.id}")
        return opts[self.rng.randrange(len(opts))] if self.policy.randomized else opts[0]

    def _index(self, snapshot: Snapshot, req: Request, static: StaticResult) -> _Index:
        policy = self.policy
        ikey = ("idx", self._token, policy.version, req.static_key, req.shape_key)
        idx = snapshot.indexes.get(ikey)
        seq = snapshot.change_seq
        if idx is not None and idx.static is static:
            start = idx.seq - snapshot.log_offset
            if start >= 0:
                if start < len(snapshot.change_log):
                    dirty = set(snapshot.change_log[start:])
                    if len(dirty) * 2 < len(static.eligible) + 8:
                        self._refresh(snapshot, req, idx, dirty)
                        idx.seq = seq
                        return idx
                else:
                    return idx
        idx = _Index(static)
        self._refresh(snapshot, req, idx, None)
        idx.seq = seq
        indexes = snapshot.indexes
        if len(indexes) > 1024:  # bound the memory: forget the least recently created half
            for old in [k for k in indexes if isinstance(k, tuple)][:512]:
                del indexes[old]
        indexes[ikey] = idx
        return idx

    def _refresh(self, snapshot: Snapshot, req: Request, idx: _Index, dirty: set[int] | None) -> None:
        entries = idx.entries
        heap = idx.heap
        nodes = snapshot.nodes
        rnd = self.rng.random if self.tie_break == "random" else None
        use_heap = not self.policy.randomized
        if dirty is None:
            items: Iterable = idx.static.eligible
            entries.clear()
            heap.clear()
        else:
            elig_by_pos = idx.static.elig_by_pos
            items = [(nodes[p], elig_by_pos[p]) for p in dirty if p in elig_by_pos]
        for node, elig in items:
            res = self._evaluate(snapshot, node, req, elig)
            pos = node.pos
            if res is None:
                entries.pop(pos, None)
                continue
            key, opt = res
            entries[pos] = (node.version, key, opt)
            if use_heap:
                item = (tuple(-x for x in key), rnd() if rnd else pos, pos, node.version)
                if dirty is None:
                    heap.append(item)
                else:
                    heapq.heappush(heap, item)
        if dirty is None:
            heapq.heapify(heap)
        elif len(heap) > 4 * len(entries) + 64:
            valid = [h for h in heap if (e := entries.get(h[2])) is not None and e[0] == h[3]]
            heapq.heapify(valid)
            idx.heap = valid

    def _best(self, snapshot: Snapshot, req: Request, static: StaticResult, k: int = 0):
        """(pos, key, option) of the best feasible node, plus up to ``k`` runner-up candidates."""
        if self._classed(static):
            return self._best_classed(snapshot, req, static, k)
        idx = self._index(snapshot, req, static)
        entries = idx.entries
        if not entries:
            return None, []
        if self.policy.randomized:
            pos = self.rng.choice(list(entries))
            _v, key, opt = entries[pos]
            opt = self._choose(snapshot.nodes[pos], req, idx.static.elig_by_pos[pos], opt)
            return (pos, key, opt), []
        heap = idx.heap
        while heap:
            top = heap[0]
            e = entries.get(top[2])
            if e is not None and e[0] == top[3]:
                break
            heapq.heappop(heap)
        else:
            return None, []
        pos = heap[0][2]
        _v, key, opt = entries[pos]
        opt = self._choose(snapshot.nodes[pos], req, idx.static.elig_by_pos[pos], opt)
        runners: list[tuple[int, tuple]] = []
        if k:
            popped = []
            while heap and len(runners) < k + 1:
                item = heapq.heappop(heap)
                e = entries.get(item[2])
                if e is not None and e[0] == item[3]:
                    popped.append(item)
                    runners.append((item[2], e[1]))
            for item in popped:
                heapq.heappush(heap, item)
        return (pos, key, opt), runners

    def _place_single(
        self, snapshot: Snapshot, req: Request, static: StaticResult, decision: Decision
    ) -> Placement | None:
        best, runners = self._best(snapshot, req, static, self.top_k if self.explain else 0)
        if best is None:
            return None
        pos, key, (choice, tier) = best
        node = snapshot.nodes[pos]
        part = assign.build_part(node, req, choice, tier)
        if self.explain:
            decision.candidates = [Candidate(snapshot.nodes[p].name, tuple(s)) for p, s in runners] or [
                Candidate(node.name, tuple(key))
            ]
            decision.step(
                "score",
                f"policy {self.policy.name}: {node.name} scores {tuple(key)}",
                candidates=len(runners),
            )
            decision.step(
                "assign",
                f"{node.name}: "
                + (", ".join(f"#{d.index}" for d in part.devices) or "no devices")
                + (f" ({tier})" if tier else ""),
                topology=tier,
                devices=[d.device_id for d in part.devices],
            )
        return Placement(req.id, (part,))

    # ---- gangs -----------------------------------------------------------------------------------

    def _candidates(self, snapshot: Snapshot, req: Request, nodes: Sequence[NodeState]):
        """Brute-force scoring of ``nodes`` (used inside switch domains, where no index applies)."""
        static = self._static(snapshot, req)
        best = None
        for node in nodes:
            elig = static.elig_by_pos.get(node.pos)
            if elig is None:
                continue
            res = self._evaluate(snapshot, node, req, elig)
            if res is None:
                continue
            key, opt = res
            rank = (tuple(key), self.rng.random() if self.tie_break == "random" else -node.pos)
            if best is None or rank > best[0]:
                best = (rank, node, opt)
        if best is not None:
            rank, node, opt = best
            best = (rank, node, self._choose(node, req, static.elig_by_pos[node.pos], opt))
        return best

    def _domains(self, snapshot: Snapshot) -> list[tuple[str, list[NodeState]]]:
        domains: dict[str, list[NodeState]] = {}
        for node in snapshot.nodes:
            if node.switch:
                domains.setdefault(node.switch, []).append(node)
        return sorted(domains.items())

    def _place_gang(
        self, snapshot: Snapshot, req: Request, static: StaticResult, decision: Decision
    ) -> Placement | None:
        """All replicas or none; ``sameSwitch`` keeps them under one switch."""
        wants_switch = req.topology.placement == "sameSwitch"
        domains: list[tuple[str | None, list[NodeState] | None]]
        domains = (
            [(name, nodes) for name, nodes in self._domains(snapshot)] if wants_switch else [(None, None)]
        )
        if wants_switch and req.topology.preferred == "any":
            domains.append((None, None))
        placed_max = 0
        for domain, nodes in domains:
            tentative: list[Placement] = []
            parts: list[NodePart] = []
            for r in range(req.replicas):
                if nodes is None:
                    best, _ = self._best(snapshot, req, static)
                    if best is None:
                        break
                    pos, _key, (choice, tier) = best
                    node = snapshot.nodes[pos]
                else:
                    found = self._candidates(snapshot, req, nodes)
                    if found is None:
                        break
                    _rank, node, (choice, tier) = found
                part = assign.build_part(node, req, choice, tier, replica=r)
                probe = Placement(f"{req.id}\x00gang{r}", (part,))
                self._probe(snapshot, probe, tentative)
                parts.append(part)
            for probe in tentative:
                snapshot.release(probe.request_id)
            placed_max = max(placed_max, len(parts))
            if len(parts) == req.replicas:
                where = f"switch {domain}" if domain else "any nodes"
                decision.step(
                    "gang", f"all {req.replicas} replicas fit on {where}", nodes=[p.node for p in parts]
                )
                return Placement(req.id, tuple(parts), cross_node=len({p.node for p in parts}) > 1)
        decision.step(
            "gang", f"only {placed_max}/{req.replicas} replicas fit; gang not placed (all or nothing)"
        )
        if self.explain:
            detail = self.explain_failure(snapshot, req, static)
            decision.explanation = f"gang of {req.replicas} replicas: only {placed_max} fit. {detail}"
        else:
            decision.explanation = f"gang of {req.replicas} replicas: only {placed_max} fit"
        return None

    @staticmethod
    def _probe(snapshot: Snapshot, probe: Placement, tentative: list[Placement]) -> None:
        """Apply one tentative part; when the snapshot refuses it, the parts applied before are given
        back first (the snapshot is left as it was) and the refusal is passed on."""
        try:
            snapshot.apply(probe)
        except CapacityError:
            for done in tentative:
                snapshot.release(done.request_id)
            raise
        tentative.append(probe)

    @staticmethod
    def _may_split(req: Request) -> bool:
        return req.topology.placement in ("sameSwitch", "any") or req.topology.preferred in (
            "sameSwitch",
            "any",
        )

    def _place_split(self, snapshot: Snapshot, req: Request, decision: Decision) -> Placement | None:
        """Fallback for multi-group requests: each group on its own node, all under one switch."""
        level = req.topology.placement if req.topology.placement != "sameNode" else req.topology.preferred
        decision.step("fallback", f"no single node holds every group; trying {level}")
        total_devices = req.device_count
        order = sorted(range(len(req.groups)), key=lambda k: -req.groups[k].count * req.groups[k].compute)
        domains: list[tuple[str | None, list[NodeState] | None]]
        if level == "sameSwitch":
            domains = [(name, nodes) for name, nodes in self._domains(snapshot)]
        else:
            domains = [(None, list(snapshot.nodes))]
        results = []
        for domain, nodes in domains:
            tentative: list[Placement] = []
            parts: list[NodePart] = []
            cpu_left, mem_left = req.cpu_milli, req.memory_mib
            ok = True
            for n, k in enumerate(order):
                g = req.groups[k]
                last = n == len(order) - 1
                cpu = cpu_left if last else req.cpu_milli * g.count // total_devices
                mem = mem_left if last else req.memory_mib * g.count // total_devices
                cpu_left -= cpu
                mem_left -= mem
                sub = Request(
                    id=f"{req.id}\x00g{k}",
                    cpu_milli=cpu,
                    memory_mib=mem,
                    groups=(g,),
                    project=req.project,
                    pool=req.pool,
                    node_selector=req.node_selector,
                    tolerations=req.tolerations,
                    precheck_failures=req.precheck_failures,
                    cluster=req.cluster,  # the parts stay in the request's cluster (engine/clusters.py)
                )
                found = self._candidates(snapshot, sub, nodes or [])
                if found is None:
                    ok = False
                    break
                _rank, node, (choice, tier) = found
                part = assign.build_part(node, sub, choice, tier, groups=[k])
                probe = Placement(sub.id, (part,))
                self._probe(snapshot, probe, tentative)
                parts.append(part)
            for probe in tentative:
                snapshot.release(probe.request_id)
            if ok:
                results.append((len({p.node for p in parts}), domain or "", parts))
                break
        if not results:
            decision.explanation = ""
            if self.explain:
                single = self.explain_failure(snapshot, req)
                decision.explanation = f"{single} Fallback {level}: {filters.NO_SWITCH}."
            return None
        n_nodes, domain, parts = results[0]
        where = f"switch {domain}" if domain else "any nodes"
        decision.step("fallback", f"placed across {n_nodes} node(s) under {where}; marked cross-node")
        return Placement(req.id, tuple(parts), cross_node=n_nodes > 1)
