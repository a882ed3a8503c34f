"""Hardware partition profiles of a device model: NVIDIA MIG profiles, Ascend vNPU templates and AMD
Instinct spatial partitions.

Pure functions over a DeviceModel's catalog data (no queries). A profile fixes what a slice of the
card gets, so a compute template that names a profile must agree with it:

MIG (``mig_profiles``: profile name -> max instances per card, from NVIDIA mig-parted)
    ``3g.40gb`` = 3 compute slices and "40gb" of memory. The card's number of compute slices is the
    most slices any of its profiles fills (g x max instances): 7 on A100/H100/H200/H20, 4 on A30.
    Compute share = g / slices. Memory = the figure in the name x 1024 MiB. NVIDIA's names round
    the instance memory up to whole GB (an A100 80GB ``3g.40gb`` instance has a little under
    40 GiB usable), so this figure is the nominal size, the same nominal unit the catalog uses for
    the card (80 GB x 1024 MiB). Where the rounding makes instances x memory exceed the card
    (H100 NVL ``1g.24gb`` x 4 = 96 of 94 GiB, H200 ``3g.71gb`` x 2 = 142 of 141 GiB) the fitting
    count is lower than NVIDIA's: a template never promises more memory than the card has.
    Where the instances may sit on the card (start slots of each profile, NVIDIA's -lgipp placements)
    is ``apps.catalog.mig`` (data ``data/mig-geometry.yaml``): the engine places MIG slices only on
    free placements there, and the template editor refuses counts or layouts no placement can carve.

vNPU (``vnpu_templates``: name -> {aicore, aicpu, mem_gb?}, from Ascend MindCluster)
    Compute share = aicore / the model's ai_cores. Memory = mem_gb x 1024 MiB when the catalog
    gives it; otherwise the template does not fix memory. Max instances = ai_cores // aicore.

AMD partition (``data/amd-partitions.yaml``: model name -> {xcds, profiles: name -> {partitions}})
    ``cpx_nps4`` = the AMD GPU DRA driver's ``partitionProfile`` ("<compute>_<memory>", lower case) of
    a card in that mode; ``partitions`` logical GPUs per card. Compute share = 1 / partitions. Memory =
    the catalog memory / partitions in whole GiB (nominal; the driver publishes KFD's slightly lower
    figure), unknown when the catalog lacks the card's memory. A card runs in one mode at a time.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

MIB_PER_GIB = 1024
SHARE_QUANTUM = Decimal("0.01")
CU_QUANTUM = Decimal("0.0001")

MIG = "mig"
VNPU = "vnpu"
AMD_PARTITION = "amd-partition"

AMD_PARTITIONS_FILE = Path(__file__).resolve().parent / "data" / "amd-partitions.yaml"

_MIG_NAME = re.compile(r"^(?P<g>\d+)g\.(?P<gb>\d+)gb(?P<extra>(\+[a-z]+)*)$")


class ProfileError(ValueError):
    """The profile is unknown for the model, or the catalog lacks what is needed to size it."""


@dataclass(frozen=True)
class PartitionProfile:
    kind: str  # MIG, VNPU or AMD_PARTITION
    name: str
    compute_share: Decimal  # percent, 2 decimals
    memory_mib: int | None  # None: the profile does not fix memory
    max_instances: int  # per card, as the vendor allows
    fitting_instances: int | None  # how many fit the card's memory; None when memory is unknown
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def default_instances(self) -> int:
        """What a template for this profile allows per card: the vendor's count, lowered to what fits."""
        if self.fitting_instances is None:
            return self.max_instances
        return max(1, min(self.max_instances, self.fitting_instances))

    def basis(self) -> str:
        """One English sentence saying where the numbers come from (shown in the description)."""
        d = self.detail
        if self.kind == MIG:
            text = (
                f"MIG {self.name}: {d['g']} of {d['slices']} compute slices ({self.compute_share} %); "
                f"memory {d['gb']} GiB = the figure in the profile name x 1024 MiB (nominal, the "
                f"instance has slightly less usable); NVIDIA allows {self.max_instances} per card"
            )
        elif self.kind == AMD_PARTITION:
            text = (
                f"AMD partition {self.name}: 1 of {self.max_instances} logical GPUs of the card in "
                f"{d['compute'].upper()}/{d['memory'].upper()} mode ({self.compute_share} %); "
                + (
                    f"memory {self.memory_mib // MIB_PER_GIB} GiB = the card's memory / {self.max_instances} "
                    "in whole GiB (nominal; the driver publishes KFD's slightly lower figure)"
                    if self.memory_mib is not None
                    else "memory unknown (the catalog lacks the card's memory)"
                )
                + "; the card must run in this mode"
            )
        else:
            text = (
                f"vNPU {self.name}: {d['aicore']} of {d['ai_cores']} AI cores ({self.compute_share} %), "
                f"{d['aicpu']} AI CPU; "
                + (
                    f"memory {d['mem_gb']} GiB from the catalog"
                    if self.memory_mib is not None
                    else "memory not fixed by the template"
                )
                + f"; at most {self.max_instances} per card by AI cores"
            )
        if self.fitting_instances is not None and self.fitting_instances < self.max_instances:
            text += (
                f"; only {self.fitting_instances} fit the card's memory at this nominal size, "
                f"so templates allow {self.default_instances}"
            )
        return text


def mig_compute_milli(profile: PartitionProfile) -> int:
    """The compute (in thousandths of a card) one MIG instance of ``profile`` takes: its compute slices
    of the card's, rounded down — what the scheduler holds for it (apps/scheduling/engine/mig.py
    ``share``), so a request is priced at submit as it is held (3g of 7: 428, not 42.86 % → 429)."""
    return 1000 * int(profile.detail["g"]) // int(profile.detail["slices"])


def share_percent(part: int, whole: int) -> Decimal:
    """part / whole as a percentage with 2 decimals (3/7 -> 42.86)."""
    return (Decimal(part) * 100 / Decimal(whole)).quantize(SHARE_QUANTUM, rounding=ROUND_HALF_UP)


def whole_gib_mib(memory_mib: int, divisor: int = 1) -> int:
    """memory / divisor rounded down to whole GiB, in MiB (141 GiB / 2 -> 70 GiB)."""
    return (memory_mib // divisor // MIB_PER_GIB) * MIB_PER_GIB


def mig_slices(mig_profiles: dict[str, Any]) -> int | None:
    """The card's compute slices: the most slices any profile fills (g x max instances)."""
    best = 0
    for name, count in (mig_profiles or {}).items():
        match = _MIG_NAME.match(str(name))
        if match and isinstance(count, int) and count > 0:
            best = max(best, int(match.group("g")) * count)
    return best or None


def _fitting(card_mib: int | None, memory_mib: int | None) -> int | None:
    if not card_mib or not memory_mib:
        return None
    return card_mib // memory_mib


def _mig_profile(model, name: str) -> PartitionProfile:
    match = _MIG_NAME.match(name)
    count = model.mig_profiles.get(name)
    if not match or not isinstance(count, int) or count < 1:
        raise ProfileError(f"the catalog's MIG profile {name!r} of {model.name} cannot be read")
    slices = mig_slices(model.mig_profiles)
    g, gb = int(match.group("g")), int(match.group("gb"))
    if not slices or g > slices:
        raise ProfileError(f"MIG profile {name!r}: {g} compute slices do not fit {model.name}")
    memory = gb * MIB_PER_GIB
    return PartitionProfile(
        kind=MIG,
        name=name,
        compute_share=share_percent(g, slices),
        memory_mib=memory,
        max_instances=count,
        fitting_instances=_fitting(model.memory_mib, memory),
        detail={"g": g, "slices": slices, "gb": gb, "media_extensions": "+me" in match.group("extra")},
    )


def _vnpu_profile(model, name: str) -> PartitionProfile:
    spec = model.vnpu_templates.get(name)
    if not isinstance(spec, dict) or not isinstance(spec.get("aicore"), int) or spec["aicore"] < 1:
        raise ProfileError(f"the catalog's vNPU template {name!r} of {model.name} has no AI core count")
    if not model.ai_cores:
        raise ProfileError(
            f"the catalog does not know how many AI cores {model.name} has, so the share of "
            f"vNPU template {name!r} cannot be computed"
        )
    aicore = spec["aicore"]
    if aicore > model.ai_cores:
        raise ProfileError(
            f"vNPU template {name!r} needs {aicore} AI cores; {model.name} has {model.ai_cores}"
        )
    mem_gb = spec.get("mem_gb")
    memory = mem_gb * MIB_PER_GIB if isinstance(mem_gb, int) and mem_gb > 0 else None
    return PartitionProfile(
        kind=VNPU,
        name=name,
        compute_share=share_percent(aicore, model.ai_cores),
        memory_mib=memory,
        max_instances=model.ai_cores // aicore,
        fitting_instances=_fitting(model.memory_mib, memory),
        detail={
            "aicore": aicore,
            "ai_cores": model.ai_cores,
            "aicpu": spec.get("aicpu"),
            "mem_gb": mem_gb if memory is not None else None,
        },
    )


@functools.cache
def _amd_data(path: str) -> dict[str, dict[str, Any]]:
    import yaml

    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    return {str(k): v for k, v in (data.get("models") or {}).items() if isinstance(v, dict)}


def amd_partition_profiles(model) -> dict[str, Any]:
    """The AMD partition profiles of ``model`` (name -> {partitions}); {} for any other card."""
    if getattr(model, "vendor", None) != "amd":
        return {}
    entry = _amd_data(str(AMD_PARTITIONS_FILE)).get(getattr(model, "name", ""))
    return dict((entry or {}).get("profiles") or {})


_AMD_NAME = re.compile(r"^(?P<compute>[a-z]+px)_(?P<memory>nps\d+)$")


def _amd_profile(model, name: str) -> PartitionProfile:
    spec = amd_partition_profiles(model).get(name)
    match = _AMD_NAME.match(name)
    count = spec.get("partitions") if isinstance(spec, dict) else None
    if not match or not isinstance(count, int) or count < 2:
        raise ProfileError(f"the catalog's AMD partition profile {name!r} of {model.name} cannot be read")
    memory = whole_gib_mib(model.memory_mib, count) if model.memory_mib else None
    return PartitionProfile(
        kind=AMD_PARTITION,
        name=name,
        compute_share=share_percent(1, count),
        memory_mib=memory or None,
        max_instances=count,
        fitting_instances=_fitting(model.memory_mib, memory),
        detail={"compute": match.group("compute"), "memory": match.group("memory"), "partitions": count},
    )


def profile_kind(model, name: str) -> str | None:
    """MIG, VNPU, AMD_PARTITION or None (not a profile of this model)."""
    if name in (model.mig_profiles or {}):
        return MIG
    if name in (model.vnpu_templates or {}):
        return VNPU
    if name and name in amd_partition_profiles(model):
        return AMD_PARTITION
    return None


def _mig_order(name: str) -> tuple:
    match = _MIG_NAME.match(str(name))
    if not match:
        return (1 << 30, 0, str(name))
    return (int(match.group("g")), int(match.group("gb")), match.group("extra"))


def _vnpu_order(templates: dict[str, Any], name: str) -> tuple:
    spec = templates.get(name)
    aicore = spec.get("aicore") if isinstance(spec, dict) else None
    return (aicore if isinstance(aicore, int) else 1 << 30, name)


def known_profile_names(model) -> list[str]:
    """MIG profiles by size (1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, ...), then vNPU templates by AI cores,
    then AMD partitions by size (dpx_nps1, qpx_nps1, qpx_nps4, cpx_nps1, cpx_nps4).

    The JSON column does not keep the catalog file's key order (PostgreSQL jsonb sorts keys)."""
    vnpu = model.vnpu_templates or {}
    amd = amd_partition_profiles(model)
    return [
        *sorted(model.mig_profiles or {}, key=_mig_order),
        *sorted(vnpu, key=lambda name: _vnpu_order(vnpu, name)),
        *sorted(amd, key=lambda name: ((amd[name] or {}).get("partitions") or 0, name)),
    ]


def partition_profile(model, name: str) -> PartitionProfile:
    """The profile ``name`` of ``model``; ProfileError when unknown or not sizeable."""
    kind = profile_kind(model, name)
    if kind == MIG:
        return _mig_profile(model, name)
    if kind == VNPU:
        return _vnpu_profile(model, name)
    if kind == AMD_PARTITION:
        return _amd_profile(model, name)
    known = known_profile_names(model)
    if known:
        raise ProfileError(
            f"{model.name} has no partition profile {name!r}; the catalog lists: {', '.join(known)}"
        )
    raise ProfileError(
        f"{model.name} has no hardware partition profiles in the catalog (no MIG, no vNPU, no AMD "
        "partition): "
        "leave the profile blank for a soft slice"
    )


def partition_profiles(model) -> list[PartitionProfile | ProfileError]:
    """Every profile of the model in catalog order: MIG, vNPU, AMD partitions; errors where not sizeable."""
    result: list[PartitionProfile | ProfileError] = []
    for name in known_profile_names(model):
        try:
            result.append(partition_profile(model, name))
        except ProfileError as exc:
            result.append(exc)
    return result


def compute_units(coefficient: Decimal | None, compute_share: Decimal | None) -> Decimal | None:
    """coefficient x share (a Decimal with 4 decimals), or None when either is unknown."""
    if coefficient is None or compute_share is None:
        return None
    return (Decimal(coefficient) * Decimal(compute_share) / 100).quantize(CU_QUANTUM, rounding=ROUND_HALF_UP)
