"""How a fraction of a card reaches the pod: in the sharing mode the cluster's plugin has for that
card's vendor, or not at all (never as a whole card billed as a slice).

A *fraction* is an allocation that is not a whole card and names no partition profile (MIG, vNPU
template, AMD partition: those are rendered by their own resource names or DRA claims). Per vendor and
device-plugin mode (``Cluster.device_plugin_modes``):

* NVIDIA: ``hami`` (memory / cores limits), ``dra`` (the driver's ``GpuConfig`` sharing), and
  ``plain`` / ``mig-single`` / ``mig-mixed``: ``nvidia.com/gpu`` of a plugin that may be configured
  for time-slicing (the NVIDIA path renders what it always did).
* Hygon DCU and Cambricon MLU: ``hami`` only, with HAMi's resource names, read from HAMi's source
  (Project-HAMi/HAMi @ 4707fb02c91c545bc7343ce26dba4c32919f9a3e):
  - Hygon: ``hygon.com/dcunum`` (vDCUs), ``hygon.com/dcumem`` (MiB: ``examples/hygon/default_use.yaml``
    "each vDCU require 2000 MiB device memory"; ``memoryFactor`` 1 unless the deployment sets one),
    ``hygon.com/dcucores`` (percent of the card's cores), pinned by ``hygon.com/use-gpuuuid``
    (``pkg/device/hygon/device.go`` DCUUseUUID; ``charts/hami/values.yaml`` dcuResource*);
  - Cambricon: ``cambricon.com/vmlu``, ``cambricon.com/mlu.smlu.vmemory`` in units of 256 MiB
    (``pkg/device/cambricon/device.go`` MemoryFactor = 256), ``cambricon.com/mlu.smlu.vcore``
    (percent; 100 when absent), pinned by ``cambricon.com/use-gpuuuid`` (MLUUseUUID;
    ``charts/hami/values.yaml`` mluResource*).
* Every other vendor and mode (Huawei without a vNPU template, AMD without a partition, Hygon or
  Cambricon in ``plain``): no way to share, so the fraction is refused with the reason and the modes
  that would work (:func:`fraction_refusal`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext as _


@dataclass(frozen=True)
class HamiShare:
    count: str
    memory: str
    cores: str
    memory_unit_mib: int
    uuid_annotation: str


HAMI_SHARES: dict[str, HamiShare] = {
    "nvidia": HamiShare(
        "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores", 1, "nvidia.com/use-gpuuuid"
    ),
    "hygon": HamiShare(
        "hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores", 1, "hygon.com/use-gpuuuid"
    ),
    "cambricon": HamiShare(
        "cambricon.com/vmlu",
        "cambricon.com/mlu.smlu.vmemory",
        "cambricon.com/mlu.smlu.vcore",
        256,
        "cambricon.com/use-gpuuuid",
    ),
}
# The modes that render a fraction, per vendor (see the module docstring).
FRACTION_MODES: dict[str, tuple[str, ...]] = {
    "nvidia": ("plain", "mig-single", "mig-mixed", "hami", "dra"),
    "hygon": ("hami",),
    "cambricon": ("hami",),
}


def is_fraction(allocation: Any) -> bool:
    return not allocation.whole_card and not (allocation.partition_profile or "")


def hami_limits(share: HamiShare, allocs: list[Any]) -> dict[str, int]:
    """HAMi's limits for one replica's cards of one vendor: a count, and per card the largest memory
    (in the vendor's unit, rounded up) and core share (percent) any of them was given."""
    return {
        share.count: len(allocs),
        share.memory: max(math.ceil(int(a.memory_mib) / share.memory_unit_mib) for a in allocs),
        share.cores: max(max(1, int(a.compute_milli) // 10) for a in allocs),
    }


def fraction_refusal(vendor: str, mode: str) -> str:
    """Why a fraction of a ``vendor`` card cannot be rendered in ``mode`` ("" when it can)."""
    modes = FRACTION_MODES.get(vendor, ())
    if mode in modes:
        return ""
    if modes:
        return _(
            "A fraction of a %(vendor)s card cannot be given in the cluster's %(mode)s device-plugin "
            "mode: it would run on a whole card billed as a slice. Set the cluster's mode for "
            "%(vendor)s to %(modes)s (with that plugin installed), or ask for whole cards."
        ) % {"vendor": vendor, "mode": mode, "modes": " / ".join(modes)}
    return _(
        "A fraction of a %(vendor)s card cannot be given: Suanchi knows no sharing mode of its device "
        "plugin (it would run on a whole card billed as a slice). Ask for whole cards, or for a "
        "partition template of the card where the catalog has one."
    ) % {"vendor": vendor}
