"""How a fraction of a card reaches the pod: in the sharing mode the cluster's plugin has for that
card's vendor, or not at all (never as a whole card billed as a slice).

A *fraction* is an allocation that is not a whole card and names no partition profile (MIG, vNPU
template, AMD partition: those are rendered by their own resource names or DRA claims). Per vendor and
device-plugin mode (``Cluster.device_plugin_modes``):

* NVIDIA: ``hami`` (memory / cores limits), ``dra`` (the driver's ``GpuConfig`` sharing: TimeSlicing
  for shared isolation, MPS for hard; each needs its alpha feature gate, off by default — where Test
  connection recorded it off, the fraction is refused: :func:`dra_gate_refusal`), and
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
* Hygon HCU: ``hcu-dra``, a vHCU of the ``dra.hygon.com`` driver (a ResourceClaim asking the card's
  ``cores`` / ``memory`` capacity, ``apps.clusters.hygon``); the HCU device plugin's ``hcu`` mode
  gives whole cards only.
* Moore Threads: ``hami`` only (Project-HAMi/HAMi @ 4707fb02 ``pkg/device/mthreads/device.go``;
  Project-HAMi/website @ 22ec2772 ``docs/installation/how-to-use-mthreads-s5000.md``):
  ``mthreads.com/vgpu`` (sliced cards), ``mthreads.com/sgpu-memory`` in 512 MiB units (MemoryFactor)
  and one of HAMi's legal sizes (``legalMemoryslices`` 2, 4, 8, 16, 32, 64, 96: else the webhook
  refuses the pod), ``mthreads.com/sgpu-core`` in sixteenths of a card (``coresPerMthreadsGPU`` 16),
  both *totals over the container's cards* (GenerateResourceRequests divides them by the count), and
  a slice only on one card ("Multi-card tasks request whole cards only": MutateAdmission overwrites a
  count > 1 with whole cards). Pinned by ``mthreads.ai/use-gpuuuid`` with HAMi's own device id
  ``<node>-mthreads-<i>`` (GetNodeDevices numbers the sliced cards 0..n-1; that is the card's index
  when the sliced cards are the first n, ``sgpu_km total_gpu_num=n``, not with ``gpu_ids=``).
* Huawei Ascend: ``ascend-dra``, a share of a chip under HAMi's ascend-dra-driver (HAMivNPUCore: a
  ResourceClaim asking the chip's ``memory`` / ``cores`` capacity, ``apps.clusters.ascend``); the
  Ascend device plugin shares only by vNPU template (``ascend-vnpu``, a partition profile).
* Every other vendor and mode (Huawei without a vNPU template, AMD without a partition, Hygon in
  ``plain`` or ``hcu``, Cambricon in ``plain``): no way to share, so the fraction is refused with
  the reason and the modes that would work (:func:`fraction_refusal`).
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
    # Moore Threads (module docstring): cores per whole card, the memory sizes HAMi accepts (in its
    # units; () = any), limits summed over the container's cards, fractions on one card only, and
    # HAMi's device id in place of the card's UUID ("{node}" / "{index}").
    cores_per_card: int = 100
    memory_values: tuple[int, ...] = ()
    totals: bool = False
    device_id: str = ""


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
    "mthreads": HamiShare(
        "mthreads.com/vgpu",
        "mthreads.com/sgpu-memory",
        "mthreads.com/sgpu-core",
        512,
        "mthreads.ai/use-gpuuuid",
        cores_per_card=16,
        memory_values=(2, 4, 8, 16, 32, 64, 96),
        totals=True,
        device_id="{node}-mthreads-{index}",
    ),
}
# The modes that render a fraction, per vendor (see the module docstring).
FRACTION_MODES: dict[str, tuple[str, ...]] = {
    "nvidia": ("plain", "mig-single", "mig-mixed", "hami", "dra"),
    "hygon": ("hami", "hcu-dra"),
    "huawei": ("ascend-dra",),
    "cambricon": ("hami",),
    "mthreads": ("hami",),
}


def is_fraction(allocation: Any) -> bool:
    return not allocation.whole_card and not (allocation.partition_profile or "")


def hami_limits(share: HamiShare, allocs: list[Any]) -> dict[str, int]:
    """HAMi's limits for one replica's cards of one vendor: a count, and per card the largest memory
    (in the vendor's unit, rounded up) and core share (percent) any of them was given; for a vendor
    whose HAMi counts totals (Moore Threads) the sums, in its units (:func:`_totals_limits`)."""
    if share.totals:
        return _totals_limits(share, allocs)
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


def amd_partition_refusal(mode: str, profile: str) -> str:
    """Why an AMD partition (``cpx_nps4`` …, apps.catalog.partitions) cannot be given in ``mode``
    ("" in ``dra``). Suanchi asks for a partition only through the AMD GPU DRA driver, which publishes
    each partition of a card as its own device (``type: amdgpu-partition``, ``parentPciAddr``,
    ``partitionProfile``; ROCm/k8s-gpu-dra-driver cmd/gpu-kubeletplugin/deviceinfo.go); a plain
    ``amd.com/gpu`` count would not say which card's partition the ledger chose."""
    if mode == "dra":
        return ""
    return _(
        "The AMD partition %(profile)s cannot be given in the cluster's %(mode)s device-plugin mode: "
        "Suanchi asks for AMD partitions only through the AMD GPU DRA driver (gpu.amd.com), so it would "
        "run on a whole card billed as a slice. Set the cluster's mode for amd to dra (with that driver "
        "installed), or ask for whole cards."
    ) % {"profile": profile, "mode": mode}


def _totals_limits(share: HamiShare, allocs: list[Any]) -> dict[str, int]:
    """Moore Threads under HAMi: whole cards as the count alone (HAMi's webhook fills in the full
    card), a slice as count 1 + memory units + core sixteenths (HAMi's totals over the container's
    cards). A fraction on more than one card, or a memory size HAMi does not accept, is refused
    (``ValidationFailed``, code ``fraction_not_shareable``): HAMi would give whole cards, or refuse
    the pod at admission.
    """
    from apps.core.errors import ValidationFailed

    fractions = [a for a in allocs if is_fraction(a)]
    if not fractions:  # "request mthreads.com/vgpu alone. The webhook fills in the full card"
        return {share.count: len(allocs)}
    if len(allocs) > 1:
        raise ValidationFailed(
            _(
                "A fraction of a %(vendor)s card can only be given on one card: HAMi gives a container "
                "that asks for %(count)d cards whole cards (it would run on whole cards billed as "
                "slices). Ask for one slice, or for whole cards."
            )
            % {"vendor": "mthreads", "count": len(allocs)},
            code="fraction_not_shareable",
        )
    (alloc,) = allocs
    memory = math.ceil(int(alloc.memory_mib) / share.memory_unit_mib)
    if share.memory_values and memory not in share.memory_values:
        sizes = ", ".join(f"{v * share.memory_unit_mib} MiB" for v in share.memory_values)
        raise ValidationFailed(
            _(
                "A slice of %(memory)d MiB of a %(vendor)s card cannot be given: HAMi accepts only "
                "these memory sizes: %(sizes)s. Ask for one of them, or for a whole card."
            )
            % {"memory": int(alloc.memory_mib), "vendor": "mthreads", "sizes": sizes},
            code="fraction_not_shareable",
        )
    cores = max(1, int(alloc.compute_milli) * share.cores_per_card // 1000)
    return {share.count: 1, share.memory: memory, share.cores: cores}


def hami_device_ids(share: HamiShare, allocs: list[Any]) -> list[str]:
    """The ids HAMi's ``use-gpuuuid`` annotation matches for these cards: the card UUIDs, or HAMi's own
    device id where the vendor's HAMi numbers cards itself (Moore Threads)."""
    if share.device_id:
        return [share.device_id.format(node=a.node.name, index=a.device.index) for a in allocs]
    return [a.device.uuid for a in allocs if a.device.uuid]


# NVIDIA DRA driver: the sharing strategy Suanchi renders for a fraction (apps.clusters.manifests
# _request_shape: shared isolation → TimeSlicing, hard → MPS) and the feature gate the driver's
# api/nvidia.com/resource/v1beta1/validate.go validateSharingStrategy requires for it (sigs.k8s.io/
# dra-driver-nvidia-gpu @ 22407113785e78c7763b4637689a201eb39c6199; the gates: apps.clusters.connect).
NVIDIA_DRA_STRATEGY_GATE: dict[str, tuple[str, str]] = {
    "shared": ("TimeSlicing", "TimeSlicingSettings"),
    "hard": ("MPS", "MPSSupport"),
}


def recorded_gates(cluster: Any, vendor: str = "nvidia") -> tuple[dict[str, bool] | None, str]:
    """The DRA driver feature gates Test connection recorded for ``cluster`` (None: not known) and the
    DaemonSet they were read from."""
    check = getattr(cluster, "last_check", None) or {}
    entry = (check.get("dra_gates") or {}).get(vendor) if isinstance(check, dict) else None
    if not isinstance(entry, dict) or not isinstance(entry.get("gates"), dict):
        return None, ""
    return entry["gates"], str(entry.get("daemonset") or "")


def dra_gate_refusal(vendor: str, mode: str, isolation: str, cluster: Any) -> str:
    """Why a fraction of a ``vendor`` card with ``isolation`` cannot be given through the NVIDIA DRA
    driver of ``cluster`` ("" when it can, or when the gates were never read: unknown is no refusal).

    The driver refuses a claim whose GpuConfig strategy's gate is off when the kubelet prepares it
    ("%q is selected as the GPU sharing strategy, but the %q feature gate is not enabled"); the pod
    then stays in ContainerCreating. So the submit is refused instead, naming what would work."""
    if vendor != "nvidia" or mode != "dra":
        return ""
    gates, daemonset = recorded_gates(cluster)
    strategy, gate = NVIDIA_DRA_STRATEGY_GATE.get(str(isolation), NVIDIA_DRA_STRATEGY_GATE["hard"])
    if gates is None or gates.get(gate):
        return ""
    other = next(
        (
            (iso, s, g)
            for iso, (s, g) in NVIDIA_DRA_STRATEGY_GATE.items()
            if g != gate and gates.get(g) and not (g == "MPSSupport" and gates.get("DynamicMIG"))
        ),
        None,
    )
    text = _(
        "A fraction of an NVIDIA card through DRA is shared by the driver's %(strategy)s, but its "
        "%(gate)s feature gate is off (DaemonSet %(daemonset)s): the driver would refuse the claim and "
        "the pod would hang in ContainerCreating. Enable the gate (Helm value featureGates.%(gate)s=true, "
        "then test the connection again), or ask for whole cards or a MIG profile."
    ) % {"strategy": strategy, "gate": gate, "daemonset": daemonset or "?"}
    if other is not None:
        text += " " + _("Or ask for %(isolation)s isolation: %(strategy)s is enabled.") % {
            "isolation": other[0],
            "strategy": other[1],
        }
    return text
