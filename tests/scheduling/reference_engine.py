"""A plain reference for the engine's filters: no index, no caches, no incremental counters.

Used by ``test_engine_differential.py``. It reads only the static attributes of a snapshot's nodes and
cards and keeps its own ledger of placements; every capacity question is answered from that ledger by
recomputing each card's usage from scratch and searching every device assignment exhaustively. It is
meant to be small and obviously right, not fast (fleets of a few nodes of up to eight cards).

The rules, as ``../shared/DESIGN.md`` states them: memory is never overcommitted; hard slices take at
most 100 % of a card and shared slices at most 100 % × the pool's overcommit factor of what the hard
slices leave (``hard + shared × 100 / factor ≤ 1000``); a whole card excludes every other allocation.
MIG geometry is not modelled here (the generators do not use it).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations

from apps.scheduling.engine.model import (
    WHOLE,
    DeviceGroup,
    DeviceState,
    Isolation,
    NodeState,
    NodeStatus,
    Placement,
    Request,
    Snapshot,
)


@dataclass
class CardUse:
    whole: bool = False
    slices: int = 0
    memory: int = 0
    hard: int = 0
    shared: int = 0


class ReferenceLedger:
    """Placements applied so far, and the usage they add up to (recomputed on every question)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot  # read for static attributes only
        self.placements: dict[str, Placement] = {}

    def add(self, placement: Placement) -> None:
        assert placement.request_id not in self.placements
        self.placements[placement.request_id] = placement

    def remove(self, request_id: str) -> None:
        del self.placements[request_id]

    # ---- usage from the ledger -----------------------------------------------------------------

    def usage(self, extra: tuple[Placement, ...] = ()) -> tuple[dict, dict]:
        """(node name -> [cpu, memory], (node, device id) -> CardUse) of the ledger plus ``extra``."""
        nodes: dict[str, list[int]] = {}
        cards: dict[tuple[str, str], CardUse] = {}
        for placement in (*self.placements.values(), *extra):
            for part in placement.parts:
                used = nodes.setdefault(part.node, [0, 0])
                used[0] += part.cpu_milli
                used[1] += part.memory_mib
                for a in part.devices:
                    use = cards.setdefault((part.node, a.device_id), CardUse())
                    if a.whole:
                        use.whole = True
                    else:
                        use.slices += 1
                        use.memory += a.memory_mib
                        if a.isolation == Isolation.HARD:
                            use.hard += a.compute
                        else:
                            use.shared += a.compute
        return nodes, cards

    def problems(self, extra: tuple[Placement, ...] = ()) -> list[str]:
        """Every rule the ledger (plus ``extra``) breaks, as text (empty when none)."""
        nodes, cards = self.usage(extra)
        out = []
        for name, (cpu, mem) in nodes.items():
            node = self.snapshot.by_name.get(name)
            if node is None:
                out.append(f"unknown node {name}")
                continue
            if cpu > node.cpu_milli or mem > node.memory_mib:
                out.append(f"{name}: cpu or memory over capacity")
        for (name, dev_id), use in cards.items():
            node = self.snapshot.by_name.get(name)
            devs = {d.id: d for d in node.devices} if node is not None else {}
            dev = devs.get(dev_id)
            if dev is None:
                out.append(f"{name}: unknown card {dev_id}")
                continue
            if use.whole and use.slices:
                out.append(f"{dev_id}: a whole card shared")
            if not use.whole and not _within(dev, use, node.factor):
                out.append(f"{dev_id}: over capacity")
        for placement in (*self.placements.values(), *extra):
            seen = set()
            for part in placement.parts:
                for a in part.devices:
                    if a.whole and (part.node, a.device_id) in seen:
                        out.append(f"{a.device_id}: a whole card twice in one placement")
                    seen.add((part.node, a.device_id))
        return out

    # ---- feasibility -----------------------------------------------------------------------------

    def feasible(self, req: Request) -> bool:
        """Whether every replica of ``req`` fits somewhere (exact for the shapes the generators make)."""
        nodes, cards = self.usage()
        capacity = 0
        for node in self.snapshot.nodes:
            elig = static_eligible(self.snapshot, node, req)
            if elig is None:
                continue
            capacity += replicas_on(node, req, elig, nodes.get(node.name, [0, 0]), cards, req.replicas)
            if capacity >= req.replicas:
                return True
        return False


def _within(dev: DeviceState, use: CardUse, factor: int) -> bool:
    return use.memory <= dev.memory_mib and use.hard + Fraction(use.shared * 100, factor) <= WHOLE


def _type_ok(dev: DeviceState, g: DeviceGroup) -> bool:
    return (
        (g.kind is None or dev.kind == g.kind)
        and (not g.vendors or dev.vendor in g.vendors)
        and (not g.models or dev.model in g.models)
    )


def _tolerated(taint, tolerations) -> bool:
    for t in tolerations:
        if t.effect and t.effect != taint.effect:
            continue
        if not t.key:
            if t.operator == "Exists":
                return True
            continue
        if t.key == taint.key and (t.operator == "Exists" or t.value == taint.value):
            return True
    return False


def static_eligible(snapshot: Snapshot, node: NodeState, req: Request) -> list[list[int]] | None:
    """Per group, the card positions that may serve it on ``node`` (``None``: the node is out)."""
    if req.cluster is not None and node.cluster != req.cluster:
        return None
    if node.status != NodeStatus.READY:
        return None
    if req.pool is not None and node.pool != req.pool:
        return None
    pool = snapshot.pools.get(node.pool)
    if pool is not None and pool.owner_project not in (None, req.project):
        return None
    if node.owner_project not in (None, req.project):
        return None
    for taint in node.taints:
        if taint.effect != "PreferNoSchedule" and not _tolerated(taint, req.tolerations):
            return None
    if any(node.labels.get(k) != v for k, v in req.node_selector):
        return None
    if any(name == node.name for name, _reason in req.precheck_failures):
        return None
    out = []
    for g in req.groups:
        cards = [
            i
            for i, d in enumerate(node.devices)
            if _type_ok(d, g)
            and g.features <= d.features
            and d.memory_mib >= g.memory_mib
            and d.healthy
            and d.schedulable
            and (req.gray_opt_in or not d.gray)
            and d.owner_project in (None, req.project)
        ]
        if len(cards) < g.count:
            return None
        out.append(cards)
    return out


def _card_takes(dev: DeviceState, use: CardUse, g: DeviceGroup, factor: int) -> bool:
    """Whether one more device of group ``g`` goes on this card."""
    if use.whole:
        return False
    if g.whole:
        return use.slices == 0
    after = CardUse(
        slices=use.slices + 1,
        memory=use.memory + g.memory_mib,
        hard=use.hard + (g.compute if g.isolation == Isolation.HARD else 0),
        shared=use.shared + (g.compute if g.isolation != Isolation.HARD else 0),
    )
    return _within(dev, after, factor)


def _take(use: CardUse, g: DeviceGroup) -> CardUse:
    if g.whole:
        return CardUse(whole=True)
    hard = g.compute if g.isolation == Isolation.HARD else 0
    return CardUse(
        False, use.slices + 1, use.memory + g.memory_mib, use.hard + hard, use.shared + g.compute - hard
    )


def one_replica(node: NodeState, req: Request, elig, uses: list[CardUse]) -> list[CardUse] | None:
    """The cards' usage after one replica on ``node`` (exhaustive search), or ``None``."""

    def place(k: int, uses: list[CardUse], taken: frozenset[int]) -> list[CardUse] | None:
        if k == len(req.groups):
            return uses
        g = req.groups[k]
        ok = [i for i in elig[k] if i not in taken and _card_takes(node.devices[i], uses[i], g, node.factor)]
        for chosen in combinations(ok, g.count):
            after = list(uses)
            for i in chosen:
                after[i] = _take(uses[i], g)
            found = place(k + 1, after, taken | frozenset(chosen))
            if found is not None:
                return found
        return None

    return place(0, uses, frozenset())


def replicas_on(node: NodeState, req: Request, elig, used: list[int], cards: dict, want: int) -> int:
    """How many replicas of ``req`` fit on ``node`` one after another (up to ``want``).

    Exact for one replica; for gangs the generators only make single-group requests of whole cards or
    of one slice per replica, where every way of placing a replica leaves the same room for the next.
    """
    cpu_left, mem_left = node.cpu_milli - used[0], node.memory_mib - used[1]
    uses = [cards.get((node.name, d.id), CardUse()) for d in node.devices]
    n = 0
    while n < want and cpu_left >= req.cpu_milli and mem_left >= req.memory_mib:
        after = one_replica(node, req, elig, uses)
        if after is None:
            break
        uses, n = after, n + 1
        cpu_left -= req.cpu_milli
        mem_left -= req.memory_mib
    return n
