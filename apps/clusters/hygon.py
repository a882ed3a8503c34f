"""Hygon HCU (the renamed DCU) on Kubernetes: the HCU device plugin and the ``dra.hygon.com`` driver.

Everything here was read in Hygon's own repositories (not run: no HCU is at hand):

* **Device plugin** (HYGON-AI/k8s-hcu-device-plugin @ 42b18bd893d308704e8c9b0e0c95e981b79886dd):
  every resource is under ``util.ResourceNamespace = "hygon.com"`` (internal/pkg/util/util.go); a
  whole card is ``hygon.com/hcu`` (``GetResourceNamePrefix`` returns ``"hcu"`` for the default
  ``POLICY=0``, internal/pkg/util/hcu.go; cmd/main.go strategies ``hcu`` and ``mixed``;
  demo/pytorch-hcu.yaml asks ``hygon.com/hcu: 1``). Its other resources are slices of a card, never
  cards: pre-partitioned vHCUs ``hygon.com/hcu-share-<CUs>c-<GB>g``, MIG instances
  ``hygon.com/hcu-mig-<profile>``, HAMi mode ``hygon.com/hcunum`` / ``hcucores`` / ``hcumem``.
  ``GetPreferredAllocation`` returns nothing and a whole-card ``Allocate`` takes the kubelet's
  device IDs (the PCI bus numbers): the plugin has no pinning annotation, so the card a pod gets in
  this mode is only known by read-back (``apps.telemetry.readback``). The plugin gives whole cards
  only; a fraction in mode ``hcu`` is refused (``apps.clusters.sharing``). (The DRA driver's
  README compares itself with the plugin's "``hygon.cn/hcu``"; the plugin's source and README say
  ``hygon.com``, and that is what a node advertises.)
* **DRA driver** (HYGON-AI/k8s-hcu-dra-driver @ 643ba6d5d1844c6673510d7fa7512a6e65157d53 /
  cbc4e9dd09e2d22bef5c150a9e883ddc00d46fab): driver name and DeviceClass ``dra.hygon.com``
  (internal/driver/const.go; deployments/static/hcu-dra-driver.yaml, selector
  ``device.driver == "dra.hygon.com" && device.attributes["dra.hygon.com"].type == "hcu"``). One
  device per physical card (internal/driver/allocatable_device.go ``GetDevice``): attributes
  ``type`` ("hcu"), ``uuid``, ``productName``, ``architecture``, ``brand`` — no PCI attribute; the
  device name is ``"hcu-"`` + the PCI bus number with ``:`` and ``.`` replaced by ``-``
  (``canonicalNameFromPCI``); consumable capacity ``cores`` (the card's compute units, DCGM
  ``ComputeUnit``), ``memory`` (bytes, step 1Mi) and ``slices`` (4 = ``MaxVDevicesPerHCU``,
  default 1 per allocation) with ``allowMultipleAllocations: true`` — it needs the
  ``DRAConsumableCapacity`` feature gate (Kubernetes 1.34+) on the API server, scheduler and
  kubelet. ``requestCapacityFor`` (internal/driver/driver.go): a request without ``cores`` and
  ``memory`` capacity requests is the whole card passed through; otherwise a vHCU is created with
  ``cores`` compute units (at least 1) and ``memory`` MiB (bytes ÷ 2^20), the missing one taking
  the card's whole value (deployments/examples/resourceclaim-hcu-physical.yaml and
  resourceclaim-hcu-basic.yaml). So Suanchi pins the card by its ``uuid`` and asks a fraction for
  both: cores = the share of the card's compute units (rounded up), memory = the allocation's MiB.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from django.utils.translation import gettext as _

from apps.core.errors import ValidationFailed
from apps.inventory.vendors.resource_names import MODE_RESOURCE_NAMES

VENDOR = "hygon"
HCU_MODE = "hcu"  # the HCU device plugin: whole cards as hygon.com/hcu
HCU_DRA_MODE = "hcu-dra"  # the dra.hygon.com driver: whole cards and vHCUs by ResourceClaim
HCU_RESOURCE = MODE_RESOURCE_NAMES[(VENDOR, HCU_MODE)]  # "hygon.com/hcu"
DRA_DRIVER = "dra.hygon.com"
DEVICE_TYPE = "hcu"
DEVICE_CLASS_SELECTOR = (
    f'device.driver == "{DRA_DRIVER}" && device.attributes["{DRA_DRIVER}"].type == "{DEVICE_TYPE}"'
)
ATTRS = f'device.attributes["{DRA_DRIVER}"]'
# The driver's device name: "hcu-" + PCI bus number with ":" and "." replaced by "-".
_DEVICE_NAME = re.compile(r"^hcu-([0-9a-fA-F]{4,8})-([0-9a-fA-F]{2})-([0-9a-fA-F]{2})-([0-7])$")


def device_name_pci(name: str) -> str:
    """The PCI address a ``dra.hygon.com`` device name encodes (``hcu-0000-3b-00-0`` →
    ``0000:3b:00.0``), "" for any other name."""
    m = _DEVICE_NAME.match(str(name or ""))
    if m is None:
        return ""
    return f"{m.group(1)}:{m.group(2)}:{m.group(3)}.{m.group(4)}".lower()


def card_compute_units(device: Any) -> int | None:
    """The compute units of ``device``'s card (the driver's ``cores`` capacity): the catalog model's
    ``ai_cores`` (for Hygon the CU count), None when the catalog does not know it."""
    model = getattr(device, "device_model", None) if getattr(device, "device_model_id", None) else None
    value = getattr(model, "ai_cores", None)
    return int(value) if value else None


def models_load(devices: Sequence[Any]) -> None:
    """Attach, in one query, the catalog models of the Hygon cards whose vHCU size needs them."""
    from apps.clusters.ascend import _load_models

    _load_models([d for d in devices if d.vendor == VENDOR and d.device_model_id])


def capacity_requests(allocation: Any) -> dict[str, str] | None:
    """``exactly.capacity.requests`` of one allocation's request: None for a whole card (the driver
    passes the card through), else ``cores`` (the share of the card's compute units, rounded up, at
    least 1) and ``memory`` (``<MiB>Mi``). ``ValidationFailed`` when the fraction cannot be given
    as a vHCU of the size the ledger decided."""
    if allocation.whole_card:
        return None
    device = allocation.device
    units = card_compute_units(device)
    name = getattr(getattr(device, "device_model", None), "name", "") if device.device_model_id else ""
    if units is None:
        raise ValidationFailed(
            _(
                "A fraction of Hygon card %(card)s cannot be given as a vHCU: the dra.hygon.com driver is "
                "asked for compute units, and the catalog does not say how many the card%(model)s has. "
                "Ask for whole cards, or record the model's compute units (ai_cores) in the catalog."
            )
            % {"card": device.uuid or device.index, "model": f" ({name})" if name else ""},
            code="fraction_not_shareable",
        )
    if not allocation.memory_mib:
        raise ValidationFailed(
            _(
                "A fraction of Hygon card %(card)s cannot be given as a vHCU without a memory size: the "
                "dra.hygon.com driver would give it all of the card's memory. Ask for memory, or for "
                "whole cards."
            )
            % {"card": device.uuid or device.index},
            code="fraction_not_shareable",
        )
    cores = max(1, math.ceil(int(allocation.compute_milli) * units / 1000))
    return {"cores": str(min(cores, units)), "memory": f"{int(allocation.memory_mib)}Mi"}
