"""MIG geometry: where NVIDIA's GPU-instance profiles can be placed on a card (pure Python, no Django).

A MIG card has a row of memory slices (8 on A100 / H100, 4 on A30) and a number of compute slices
(7 / 4). A GPU-instance profile occupies ``size`` consecutive memory slices starting at one of its
allowed start slots and ``compute`` compute slices; two instances may not overlap (NVML
``nvmlGpuInstancePlacement_t``; ``nvidia-smi mig -lgipp`` prints ``{starts}:size`` per profile). The
data, with a source per model, is ``data/mig-geometry.yaml``; a card's own ``nvidia-smi mig -lgipp`` /
``-lgip`` listing (``Device.mig_profiles``) overrides it (:func:`device_geometry`).

* :func:`find_start` - a free start slot for one more instance of a profile next to the ones already
  on the card (``None`` when the hardware cannot carve it);
* :func:`carve` / :func:`layout_problem_text` - whether a set of profiles fits one card together, and
  why not (the latter translated, for the template editor).

The scheduling engine (``apps/scheduling/engine/mig.py``) uses these to place MIG slices only where a
real placement is free; the catalog's template editor uses them to refuse impossible templates.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATA_FILE = Path(__file__).resolve().parent / "data" / "mig-geometry.yaml"
_NAME = re.compile(r"^(?P<g>\d+)g\.(?P<gb>\d+)gb")


@dataclass(frozen=True)
class MigProfile:
    name: str
    id: int | None
    compute: int  # compute slices
    size: int  # memory slices of a placement
    max: int  # instances per card
    starts: tuple[int, ...]  # allowed start slots (memory-slice index)


@dataclass(frozen=True)
class Geometry:
    key: str
    memory_slices: int
    compute_slices: int
    profiles: Mapping[str, MigProfile]
    source: tuple[str, ...] = ()
    models: tuple[str, ...] = field(default=(), compare=False)

    def profile(self, name: str) -> MigProfile | None:
        return self.profiles.get(name)

    def __hash__(self) -> int:  # geometries are shared by many cards; identity is their key + shape
        return hash((self.key, self.memory_slices, tuple(sorted(self.profiles))))


Occupied = Iterable[tuple[str, int]]  # (profile name, start slot) of the instances already on a card


def _mask(p: MigProfile, start: int) -> int:
    return ((1 << p.size) - 1) << start


def _state(geometry: Geometry, occupied: Occupied) -> tuple[int, int, Counter]:
    used, compute, counts = 0, 0, Counter()
    for name, start in occupied:
        p = geometry.profiles[name]
        used |= _mask(p, start)
        compute += p.compute
        counts[name] += 1
    return used, compute, counts


def _free_starts(geometry: Geometry, used: int, compute: int, counts: Counter, p: MigProfile) -> list[int]:
    if counts[p.name] >= p.max or compute + p.compute > geometry.compute_slices:
        return []
    return [s for s in p.starts if not used & _mask(p, s)]


def _room(geometry: Geometry, used: int, compute: int, counts: Counter) -> int:
    """How many (profile, start) placements are still free: what a choice of start should keep high."""
    return sum(len(_free_starts(geometry, used, compute, counts, p)) for p in geometry.profiles.values())


def find_start(geometry: Geometry, occupied: Occupied, profile: str) -> int | None:
    """A start slot for one more ``profile`` instance given the instances ``occupied``, or ``None``.

    Among the free starts the one that leaves the most placements of every profile free wins (a 1g
    slice goes where it blocks the fewest larger instances), then the highest start - so 1g/2g slices
    fill from the top and keep slot 0, the only start of 4g / 7g, free as long as possible.
    """
    p = geometry.profiles.get(profile)
    if p is None:
        return None
    used, compute, counts = _state(geometry, occupied)
    starts = _free_starts(geometry, used, compute, counts, p)
    if not starts:
        return None
    if len(starts) == 1:
        return starts[0]
    counts[p.name] += 1
    return max(starts, key=lambda s: (_room(geometry, used | _mask(p, s), compute + p.compute, counts), s))


def valid_layout(geometry: Geometry, layout: Occupied) -> str | None:
    """Why the given (profile, start) instances cannot coexist on one card (``None`` when they can)."""
    used, compute, counts = 0, 0, Counter()
    for name, start in layout:
        p = geometry.profiles.get(name)
        if p is None:
            return f"{geometry.key} has no MIG profile {name}"
        if start not in p.starts:
            return f"MIG {name} cannot start at memory slice {start} (allowed: {list(p.starts)})"
        if used & _mask(p, start):
            return f"MIG {name} at slice {start} overlaps another instance"
        counts[name] += 1
        if counts[name] > p.max:
            return f"at most {p.max} × MIG {name} per card"
        used |= _mask(p, start)
        compute += p.compute
    if compute > geometry.compute_slices:
        return f"{compute} compute slices requested, the card has {geometry.compute_slices}"
    return None


def carve(geometry: Geometry, profiles: Iterable[str], occupied: Occupied = ()) -> list[int] | None:
    """Start slots for every profile in ``profiles`` (in the given order) next to ``occupied``, or ``None``.

    Exhaustive (backtracking over the allowed starts, largest instances first): ``None`` means no
    placement of this mix exists on the hardware.
    """
    names = list(profiles)
    if any(n not in geometry.profiles for n in names):
        return None
    used, compute, counts = _state(geometry, occupied)
    order = sorted(range(len(names)), key=lambda i: -geometry.profiles[names[i]].size)
    result: list[int | None] = [None] * len(names)

    def place(k: int, used: int, compute: int) -> bool:
        if k == len(order):
            return True
        i = order[k]
        p = geometry.profiles[names[i]]
        for s in _free_starts(geometry, used, compute, counts, p):
            counts[p.name] += 1
            result[i] = s
            if place(k + 1, used | _mask(p, s), compute + p.compute):
                return True
            counts[p.name] -= 1
        return False

    return [s for s in result] if place(0, used, compute) else None  # type: ignore[misc]


def max_instances(geometry: Geometry, profile: str) -> int:
    """How many instances of ``profile`` alone one card can carve."""
    p = geometry.profiles.get(profile)
    if p is None:
        return 0
    n = 0
    while n < p.max and carve(geometry, [profile] * (n + 1)) is not None:
        n += 1
    return n


# ---- data -----------------------------------------------------------------------------------------


def _profile(name: str, spec: Mapping[str, Any]) -> MigProfile:
    return MigProfile(
        name=name,
        id=spec.get("id"),
        compute=int(spec["compute"]),
        size=int(spec["size"]),
        max=int(spec["max"]),
        starts=tuple(int(s) for s in spec["starts"]),
    )


def geometry_from_dict(key: str, data: Mapping[str, Any]) -> Geometry:
    profiles = {name: _profile(name, spec) for name, spec in (data.get("profiles") or {}).items()}
    geometry = Geometry(
        key=key,
        memory_slices=int(data["memory_slices"]),
        compute_slices=int(data["compute_slices"]),
        profiles=profiles,
        source=tuple(data.get("source") or ()),
        models=tuple(data.get("models") or ()),
    )
    problem = check_geometry(geometry)
    if problem:
        raise ValueError(f"MIG geometry {key}: {problem}")
    return geometry


def check_geometry(geometry: Geometry) -> str | None:
    for p in geometry.profiles.values():
        if p.size < 1 or p.compute < 1 or p.max < 1 or not p.starts:
            return f"profile {p.name} needs size, compute, max and starts"
        for s in p.starts:
            if s < 0 or s + p.size > geometry.memory_slices:
                return (
                    f"profile {p.name} start {s} + size {p.size} leaves the {geometry.memory_slices} slices"
                )
        if p.compute > geometry.compute_slices:
            return f"profile {p.name} needs {p.compute} of {geometry.compute_slices} compute slices"
    return None


@functools.cache
def _load(path: str) -> dict[str, Geometry]:
    import yaml

    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    return {key: geometry_from_dict(key, spec) for key, spec in (data.get("geometries") or {}).items()}


def geometries() -> dict[str, Geometry]:
    return _load(str(DATA_FILE))


@functools.cache
def _by_model() -> dict[str, Geometry]:
    out: dict[str, Geometry] = {}
    for geometry in geometries().values():
        for model in geometry.models:
            out[model] = geometry
    return out


def model_geometry(model_name: str) -> Geometry | None:
    """The sourced geometry of a catalog model (by its name), or ``None`` (geometry unknown)."""
    return _by_model().get(model_name)


def device_geometry(model_name: str, mig_profiles: list[Mapping[str, Any]] | None) -> Geometry | None:
    """The geometry of one card: its model's, with placements its own ``-lgipp`` listing printed.

    ``mig_profiles`` is ``Device.mig_profiles`` (entries ``{"id", "name", "placements": [{"start",
    "size"}], "max_instances", ...}`` from ``nvidia-smi mig -lgip`` / ``-lgipp``). A profile id the
    card listed with placements gets exactly those starts and size; when every listed profile has a
    name and placements, the card's listing alone defines the geometry (a model the data file lacks).
    """
    base = model_geometry(model_name)
    entries = [e for e in mig_profiles or [] if isinstance(e, Mapping) and e.get("placements")]
    if not entries:
        return base
    by_id = {p.id: p for p in base.profiles.values()} if base else {}
    profiles: dict[str, MigProfile] = dict(base.profiles) if base else {}
    own = True
    for e in entries:
        placements = [pl for pl in e["placements"] if isinstance(pl, Mapping)]
        sizes = {int(pl["size"]) for pl in placements}
        if len(sizes) != 1:
            continue
        size = sizes.pop()
        starts = tuple(sorted(int(pl["start"]) for pl in placements))
        known = by_id.get(e.get("id"))
        name = e.get("name") or (known.name if known else None)
        match = _NAME.match(name or "")
        if not match:
            own = False
            continue
        profiles[name] = MigProfile(
            name=name,
            id=e.get("id"),
            compute=int(match.group("g")),
            size=size,
            max=int(e.get("max_instances") or (known.max if known else len(starts))),
            starts=starts,
        )
    if not profiles:
        return base
    memory = max(max(p.starts) + p.size for p in profiles.values())
    compute = max(p.compute for p in profiles.values())
    if base is not None:
        memory, compute = max(memory, base.memory_slices), base.compute_slices
    elif not own:
        return None
    geometry = Geometry(
        key=f"{base.key if base else model_name} (card listing)",
        memory_slices=memory,
        compute_slices=compute,
        profiles=profiles,
        source=(*(base.source if base else ()), "the card's nvidia-smi mig -lgipp listing"),
    )
    return None if check_geometry(geometry) else geometry


def layout_problem_text(geometry: Geometry, profiles: Iterable[str]) -> str | None:
    """Why ``profiles`` cannot share one card, as a translated sentence (``None`` when they can)."""
    from django.utils.translation import gettext as _

    names = list(profiles)
    unknown = sorted({n for n in names if n not in geometry.profiles})
    if unknown:
        return _("%(model)s has no MIG profile %(profiles)s (known: %(known)s).") % {
            "model": geometry.key,
            "profiles": ", ".join(unknown),
            "known": ", ".join(geometry.profiles),
        }
    if carve(geometry, names) is not None:
        return None
    counts = Counter(names)
    for name, n in sorted(counts.items()):
        p = geometry.profiles[name]
        if n > p.max:
            return _(
                "At most %(max)s × MIG %(profile)s fit one %(model)s card; the layout asks for %(count)s."
            ) % {
                "max": p.max,
                "profile": name,
                "model": geometry.key,
                "count": n,
            }
    compute = sum(geometry.profiles[n].compute for n in names)
    if compute > geometry.compute_slices:
        return _("The layout needs %(need)s compute slices; a %(model)s card has %(have)s.") % {
            "need": compute,
            "model": geometry.key,
            "have": geometry.compute_slices,
        }
    mix = " + ".join(f"{n} × {name}" for name, n in sorted(counts.items()))
    return _(
        "No placement of %(mix)s exists on a %(model)s card: the profiles' allowed start slots overlap "
        "within its %(slices)s memory slices (NVIDIA MIG placements, nvidia-smi mig -lgipp)."
    ) % {"mix": mix, "model": geometry.key, "slices": geometry.memory_slices}
