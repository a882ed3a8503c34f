"""Tier 3: device assignment on one node.

* Multi-card whole groups take the tightest topology group that can hold them: an NVLink / NVSwitch /
  HCCS clique, else one PCIe switch, else one NUMA node, else the fewest NUMA nodes (cross-NUMA). Among
  groups of the same tier the one with the fewest free cards is used (best fit), so large intact
  cliques stay available for large requests. A single card is taken from the tightest group as well.
* Slices go to a card where they fit the hard memory limit and the compute rule (compute share
  ≤ 100 % × the pool's overcommit factor for shared slices, ≤ 100 % for hard ones). Compute-only
  slices use best fit (least compute left afterwards). Slices that ask for both memory and compute
  prefer co-location that pairs compute-heavy with memory-heavy tenants: the card whose compute and
  memory usage are most balanced afterwards wins, then best fit.
* A request with several groups (e.g. 1 GPU + 2 NPUs) is assigned all or nothing, whole groups first,
  each group on distinct devices.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import mig
from .decision import DeviceAssignment, NodePart
from .nodes import DeviceState, Isolation, NodeState, Topology
from .request import DeviceGroup, Request
from .share import WHOLE, free_shared, share_fits

Choice = tuple[tuple[int, ...], ...]  # per group: device positions on the node


def topology_tier(devs: Sequence[DeviceState]) -> str:
    """How tightly ``devs`` are coupled (best tier first)."""
    if len(devs) <= 1:
        return Topology.SINGLE
    first = devs[0]
    if first.topology_group and all(d.topology_group == first.topology_group for d in devs):
        return Topology.CLIQUE
    if first.pcie_switch and all(d.pcie_switch == first.pcie_switch for d in devs):
        return Topology.SWITCH
    if first.numa_node is not None and all(d.numa_node == first.numa_node for d in devs):
        return Topology.NUMA
    if all(d.numa_node is not None for d in devs):
        return Topology.CROSS_NUMA
    return Topology.UNKNOWN


def _tightest(devs: list[DeviceState], free: list[int], n: int, attr: str) -> list[int] | None:
    """The group (by ``attr``) with the fewest free cards that still holds ``n`` of them."""
    groups: dict[object, list[int]] = {}
    for i in free:
        key = getattr(devs[i], attr)
        if key is None or key == "":
            continue
        groups.setdefault(key, []).append(i)
    best = None
    for members in groups.values():
        if len(members) >= n and (
            best is None or len(members) < len(best) or (len(members) == len(best) and members[0] < best[0])
        ):
            best = members
    if best is None:
        return None
    # inside the group, keep the chosen cards close: same PCIe switch / NUMA first
    best = sorted(
        best,
        key=lambda i: (devs[i].numa_node if devs[i].numa_node is not None else -1, devs[i].pcie_switch, i),
    )
    return best[:n]


def pick_whole(
    node: NodeState, positions: Sequence[int], n: int, taken: frozenset[int] | set[int] = frozenset()
) -> tuple[tuple[int, ...], str] | None:
    devs = node.devices
    free = [i for i in positions if i not in taken and devs[i].whole_by is None and not devs[i].slices]
    if len(free) < n:
        return None
    if not node.topo_known:
        return tuple(free[:n]), (Topology.SINGLE if n == 1 else Topology.UNKNOWN)
    for attr, tier in (
        ("topology_group", Topology.CLIQUE),
        ("pcie_switch", Topology.SWITCH),
        ("numa_node", Topology.NUMA),
    ):
        tight = _tightest(devs, free, n, attr)
        if tight is not None:
            return tuple(sorted(tight)), (Topology.SINGLE if n == 1 else tier)
    if n == 1:
        return (free[0],), Topology.SINGLE
    # cross-NUMA: fill from the NUMA nodes with the most free cards, so the job spans as few as possible
    by_numa: dict[object, list[int]] = {}
    for i in free:
        by_numa.setdefault(devs[i].numa_node, []).append(i)
    chosen: list[int] = []
    for members in sorted(by_numa.values(), key=lambda m: (-len(m), m[0])):
        chosen.extend(members[: n - len(chosen)])
        if len(chosen) == n:
            break
    chosen_t = tuple(sorted(chosen))
    return chosen_t, topology_tier([devs[i] for i in chosen_t])


def _slice_key(d: DeviceState, g: DeviceGroup, factor: int) -> tuple:
    if g.isolation == Isolation.HARD:
        left = d.hard_free_compute(factor) - g.compute
    else:
        left = d.free_compute(factor) - g.compute
    if g.memory_mib and d.memory_mib:
        used_c = (d.hard_used + d.shared_used + g.compute) / WHOLE
        used_m = (d.mem_used + g.memory_mib) / d.memory_mib
        in_use = 0 if d.slices else 1
        return (in_use, round(abs(used_c - used_m), 3), left, d.index)
    return (left, d.index)


def slice_candidates(
    node: NodeState, positions: Sequence[int], g: DeviceGroup, factor: int, taken=frozenset()
) -> list[int]:
    """Devices that can take one slice of ``g``, most preferred first."""
    devs = node.devices
    if g.profile:  # MIG: a free GPU-instance placement on the card's geometry (engine/mig.py)
        fits = [i for i in positions if i not in taken and mig.accepts(devs[i], g, factor)]
    else:
        fits = [
            i
            for i in positions
            if i not in taken and devs[i].fits_slice(g.memory_mib, g.compute, g.isolation, factor)
        ]
    if len(fits) > 1:
        fits.sort(key=lambda i: _slice_key(devs[i], g, factor))
    return fits


def choose_devices(node: NodeState, req: Request, elig: tuple, factor: int) -> tuple[Choice, str] | None:
    """One replica's devices on ``node`` (all groups or nothing) and the topology tier."""
    groups = req.groups
    choice: list[tuple[int, ...] | None] = [None] * len(groups)
    taken: set[int] = set()
    tiers: list[str] = []
    order = sorted(range(len(groups)), key=lambda k: (not groups[k].whole, -groups[k].count))
    for k in order:
        g = groups[k]
        if g.whole:
            got = pick_whole(node, elig[k], g.count, taken)
            if got is None:
                return None
            chosen, tier = got
        else:
            cands = slice_candidates(node, elig[k], g, factor, taken)
            if len(cands) < g.count:
                return None
            chosen = tuple(cands[: g.count])
            tier = topology_tier([node.devices[i] for i in chosen])
        taken.update(chosen)
        choice[k] = chosen
        tiers.append(tier)
    if not tiers:
        return (), ""
    if len(groups) > 1:
        everything = [node.devices[i] for c in choice for i in c]  # type: ignore[union-attr]
        tier = topology_tier(everything)
    else:
        tier = tiers[0]
    return tuple(choice), tier  # type: ignore[arg-type]


def fits(node: NodeState, req: Request, elig: tuple, factor: int) -> bool:
    """Whether one replica fits on ``node`` now (cheaper than ``options``: no device choice)."""
    if node.cpu_milli - node.cpu_used < req.cpu_milli or node.memory_mib - node.mem_used < req.memory_mib:
        return False
    groups = req.groups
    if not groups:
        return True
    if len(groups) > 1 or req.mig:
        return choose_devices(node, req, elig, factor) is not None
    g = groups[0]
    devs = node.devices
    need = g.count
    if g.whole:
        for i in elig[0]:
            d = devs[i]
            if d.whole_by is None and not d.slices:
                need -= 1
                if not need:
                    return True
        return False
    mem, comp = g.memory_mib, g.compute
    hard = g.isolation == Isolation.HARD
    for i in elig[0]:
        d = devs[i]
        if d.whole_by is not None or d.mig_used or d.mem_used + mem > d.memory_mib:
            continue
        if hard:
            if not share_fits(d.hard_used + comp, d.shared_used, factor):
                continue
        elif not share_fits(d.hard_used, d.shared_used + comp, factor):
            continue
        need -= 1
        if not need:
            return True
    return False


def options(node: NodeState, req: Request, elig: tuple, factor: int) -> list[tuple[Choice, str]] | None:
    """Feasible device choices for one replica on ``node`` (``None`` when the request does not fit).

    For the common single-slice request every distinct candidate card is an option (policies such as
    fragmentation descent pick among them); otherwise tier 3's own choice is the only option.
    """
    if node.cpu_milli - node.cpu_used < req.cpu_milli or node.memory_mib - node.mem_used < req.memory_mib:
        return None
    groups = req.groups
    if not groups:
        return [((), "")]
    if len(groups) == 1 and not req.mig:
        g = groups[0]
        if g.whole:
            whole = pick_whole(node, elig[0], g.count)
            return None if whole is None else [((whole[0],), whole[1])]
        if g.count == 1:
            devs = node.devices
            if g.memory_mib == 0 and g.isolation == Isolation.SHARED:
                # compute-only shared slice (the trace's GPU-sharing pods): best fit on free compute
                need = g.compute
                found = []
                for i in elig[0]:
                    d = devs[i]
                    if d.whole_by is None and not d.mig_used:
                        left = free_shared(d.hard_used, d.shared_used, factor) - need
                        if left >= 0:
                            found.append((left, i))
                if not found:
                    return None
                found.sort()
                out: list[tuple[Choice, str]] = []
                last = None
                for left, i in found:
                    if left != last:
                        out.append((((i,),), Topology.SINGLE))
                        last = left
                return out
            # one candidate per distinct card state (identical cards score identically), best first
            firsts: dict[tuple, int] = {}
            mem, comp = g.memory_mib, g.compute
            hard = g.isolation == Isolation.HARD
            for i in elig[0]:
                d = devs[i]
                if d.whole_by is not None or d.mig_used or d.mem_used + mem > d.memory_mib:
                    continue
                if hard:
                    if not share_fits(d.hard_used + comp, d.shared_used, factor):
                        continue
                elif not share_fits(d.hard_used, d.shared_used + comp, factor):
                    continue
                state = (d.hard_used, d.shared_used, d.mem_used, bool(d.slices), d.memory_mib)
                if state not in firsts:
                    firsts[state] = i
            if not firsts:
                return None
            cands = list(firsts.values())
            if len(cands) > 1:
                cands.sort(key=lambda i: _slice_key(devs[i], g, factor))
            return [(((i,),), Topology.SINGLE) for i in cands]
    got = choose_devices(node, req, elig, factor)
    return None if got is None else [got]


def build_part(
    node: NodeState,
    req: Request,
    choice: Choice,
    tier: str,
    replica: int = 0,
    groups: Sequence[int] | None = None,
    cpu: int | None = None,
    mem: int | None = None,
) -> NodePart:
    """A :class:`NodePart` for ``choice`` (``groups`` relabels the groups, e.g. for a split request)."""
    assigns = []
    labels = list(range(len(req.groups))) if groups is None else list(groups)
    for j, positions in enumerate(choice):
        g = req.groups[j]
        k = labels[j]
        for i in positions:
            d = node.devices[i]
            profile = "" if g.whole else g.profile
            memory, compute = (d.memory_mib, WHOLE) if g.whole else (g.memory_mib, g.compute)
            start = None
            if profile and d.mig is not None:  # a GPU instance: its start slot and slot share of the card
                start = mig.choose_start(d, profile)
                memory, compute = mig.share(d, profile)
            assigns.append(
                DeviceAssignment(
                    device_id=d.id,
                    index=d.index,
                    group=k,
                    whole=g.whole,
                    memory_mib=memory,
                    compute=compute,
                    isolation=Isolation.HARD if g.whole else g.isolation,
                    profile=profile,
                    mig_start=start,
                )
            )
    return NodePart(
        node=node.name,
        cpu_milli=req.cpu_milli if cpu is None else cpu,
        memory_mib=req.memory_mib if mem is None else mem,
        devices=tuple(assigns),
        replica=replica,
        topology=tier,
    )
