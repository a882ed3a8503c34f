"""MIG geometry in the engine: a MIG slice goes only where a real GPU-instance placement is free.

Hooks (kept small so the rest of the engine can change around them):

* ``DeviceState.mig`` is the card's :class:`apps.catalog.mig.Geometry` (``None``: not modelled, the
  card's slices are sized by compute share and memory as before); ``DeviceState.mig_used`` maps each
  MIG slice key on the card to ``(profile, start slot)``.
* ``DeviceGroup.profile`` names the MIG profile of a slice group; ``Request.mig`` is true when any
  group does. ``DeviceAssignment.profile`` / ``mig_start`` record the profile and the chosen start
  slot on the placement (persisted as ``Allocation.mig_start`` so a release frees exactly that
  instance and a restored snapshot holds the same layout).

Invariant (``Snapshot.check_placement`` refuses, ``Snapshot.check_invariants`` reports): on a card
with a geometry, the MIG instances in ``mig_used`` are valid placements of their profiles (start in
the profile's allowed starts, no two overlapping in memory slices, at most ``max`` per profile, compute
slices within the card), and no non-MIG slice or whole-card allocation shares a card that holds a
MIG instance. Whatever index of free capacity the engine keeps must treat a geometry card's free
room as ``fits_profile`` says, not as free compute/memory: a card can have compute and memory left
and still no free placement (e.g. 3g + 3g on an A100 leaves one compute slice no profile can use).

Counters: a MIG instance adds its slot share of the card to the card's counters (memory =
size / memory slices of the card's memory, compute = compute slices / compute slices of 1000 milli),
so the counters stay within the card while geometry, not counters, decides what fits.
"""

from __future__ import annotations

from collections.abc import Sequence

from apps.catalog.mig import find_start, valid_layout

from .share import WHOLE


def occupied(dev) -> list[tuple[str, int]]:
    return list(dev.mig_used.values())


def fits_profile(dev, profile: str) -> bool:
    """Whether one more ``profile`` instance can be carved on ``dev`` now (``dev.mig`` is set)."""
    if dev.whole_by is not None or len(dev.slices) != len(dev.mig_used):
        return False  # a whole card, or soft (non-MIG) slices on it: not a MIG card now
    return find_start(dev.mig, dev.mig_used.values(), profile) is not None


def accepts(dev, g, factor: int) -> bool:
    """Whether ``dev`` can take one slice of group ``g`` (MIG-aware ``DeviceState.fits_slice``)."""
    if g.profile and dev.mig is not None:
        return fits_profile(dev, g.profile)
    return dev.fits_slice(g.memory_mib, g.compute, g.isolation, factor)


def choose_start(dev, profile: str) -> int | None:
    """The start slot for one more ``profile`` instance on ``dev`` (``None`` when not modelled)."""
    if dev.mig is None or not profile:
        return None
    return find_start(dev.mig, dev.mig_used.values(), profile)


def share(dev, profile: str) -> tuple[int, int]:
    """(memory MiB, compute milli) one ``profile`` instance takes of ``dev``: its slot share."""
    geometry = dev.mig
    p = geometry.profiles[profile]
    return dev.memory_mib * p.size // geometry.memory_slices, WHOLE * p.compute // geometry.compute_slices


def check_device(dev, assigns: Sequence) -> str | None:
    """Why ``assigns`` (one placement's slices on ``dev``, a card with a geometry) cannot be applied."""
    soft = [a for a in assigns if not a.profile]
    if soft:
        return f"device {dev.id}: a soft slice cannot share a card in MIG mode"
    if len(dev.slices) != len(dev.mig_used):
        return f"device {dev.id}: holds soft slices, so no MIG instance can be created on it"
    layout = list(dev.mig_used.values())
    for a in assigns:
        if a.profile not in dev.mig.profiles:
            return f"device {dev.id}: {dev.mig.key} has no MIG profile {a.profile}"
        start = a.mig_start
        if start is None:
            start = find_start(dev.mig, layout, a.profile)
            if start is None:
                return f"device {dev.id}: no free MIG placement for {a.profile}"
        layout.append((a.profile, start))
    problem = valid_layout(dev.mig, layout)
    return None if problem is None else f"device {dev.id}: {problem}"


def reserve(dev, key: str, a) -> tuple[int, int]:
    """Record the GPU instance of ``a`` on ``dev`` under ``key``; its (memory, compute) counter share."""
    start = a.mig_start
    if start is None:  # e.g. an allocation from before geometry was modelled: take a free placement
        start = find_start(dev.mig, dev.mig_used.values(), a.profile)
    dev.mig_used[key] = (a.profile, start)
    return share(dev, a.profile)


def invariant_problems(dev) -> list[str]:
    if dev.mig is None:
        return [f"{dev.id}: MIG instances on a card without a geometry"]
    problems = []
    if len(dev.slices) != len(dev.mig_used) or set(dev.slices) != set(dev.mig_used):
        problems.append(f"{dev.id}: MIG instances share the card with soft slices")
    problem = valid_layout(dev.mig, dev.mig_used.values())
    if problem is not None:
        problems.append(f"{dev.id}: {problem}")
    return problems
