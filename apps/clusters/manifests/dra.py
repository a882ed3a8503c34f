"""Dynamic Resource Allocation (resource.k8s.io/v1, GA in Kubernetes 1.34): the vendors' DRA drivers,
the DeviceClasses Suanchi ships, and a pod's ResourceClaim / a Deployment's ResourceClaimTemplate
selecting each allocated device by CEL on its driver's attributes."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from apps.clusters import ascend, hygon
from apps.clusters.manifests.names import (
    ANN_TRACE,
    LABEL_ATTEMPT,
    MANAGED_BY,
    MANAGED_BY_KEY,
    common_labels,
    project_namespace,
)

DRA_API_VERSION = "resource.k8s.io/v1"
# The name under which a pod lists its claim (``spec.resourceClaims[].name``) and its container
# consumes it (``resources.claims[].name``): Kubernetes docs "Dynamic Resource Allocation" →
# "Workload … ResourceClaim / ResourceClaimTemplate".
POD_CLAIM_NAME = "devices"
ANN_DRA_FALLBACK = "suanchi.io/dra-fallback"


@dataclass(frozen=True)
class DraDriver:
    """A vendor's DRA driver as it publishes devices in its ResourceSlices.

    ``driver`` is the driver name and the domain of its device attributes (CEL
    ``device.attributes["<driver>"].<name>``); ``classes`` the DeviceClasses its Helm chart installs
    (Suanchi ships identical ones in ``platform/kubernetes/dra/``, so applying both is a no-op).
    """

    vendor: str
    driver: str
    classes: tuple[tuple[str, str], ...]  # (DeviceClass name, its CEL selector)
    source: str
    mode: str = "dra"  # the Cluster.PluginMode that renders claims for this driver


DRA_DRIVERS: dict[str, DraDriver] = {
    # NVIDIA/k8s-dra-driver-gpu: deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-gpu.yaml
    # and deviceclass-mig.yaml (the classes); cmd/gpu-kubelet-plugin/deviceinfo.go GpuInfo.Attributes
    # (a GPU: type "gpu", uuid, productName, …) and cmd/gpu-kubelet-plugin/mig.go CommonAttributesMig
    # (a MIG device: type "mig", parentUUID, profile, …), all under the driver's domain.
    "nvidia": DraDriver(
        vendor="nvidia",
        driver="gpu.nvidia.com",
        classes=(
            (
                "gpu.nvidia.com",
                "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
            ),
            (
                "mig.nvidia.com",
                "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
            ),
        ),
        source="https://github.com/NVIDIA/k8s-dra-driver-gpu",
    ),
    # ROCm/k8s-gpu-dra-driver: helm-charts-k8s/templates/deviceclass.yaml (one class, gpu.amd.com);
    # docs/driver-attributes.md: type "amdgpu" / "amdgpu-partition", pciAddr (a partition:
    # parentPciAddr), partitionProfile. The driver publishes no UUID: a card is selected by its PCI
    # address in the driver's spelling (:func:`pci_address_sysfs`).
    "amd": DraDriver(
        vendor="amd",
        driver="gpu.amd.com",
        classes=(("gpu.amd.com", "device.driver == 'gpu.amd.com'"),),
        source="https://github.com/ROCm/k8s-gpu-dra-driver",
    ),
    # HYGON-AI/k8s-hcu-dra-driver (apps.clusters.hygon): one class, dra.hygon.com, as its
    # deployments/static/hcu-dra-driver.yaml creates it; a card is pinned by its ``uuid`` (the driver
    # publishes no PCI attribute), a vHCU asks the card's ``cores`` / ``memory`` capacity. Its mode is
    # ``hcu-dra`` (the DCU names stay in ``plain`` / ``hami``).
    "hygon": DraDriver(
        vendor="hygon",
        driver=hygon.DRA_DRIVER,
        classes=((hygon.DRA_DRIVER, hygon.DEVICE_CLASS_SELECTOR),),
        source="https://github.com/HYGON-AI/k8s-hcu-dra-driver",
        mode=hygon.HCU_DRA_MODE,
    ),
    # HAMi's Project-HAMi/ascend-dra-driver (apps.clusters.ascend): HAMi-DRA's class
    # hami-vnpu-core.project-hami.io (type HAMivNPUCore, the chart's default mode); a chip is pinned
    # by its ``physicalID``, a share asks the chip's ``memory`` / ``cores`` capacity. Mode ``ascend-dra``.
    "huawei": DraDriver(
        vendor="huawei",
        driver=ascend.DRA_DRIVER,
        classes=((ascend.DRA_DEVICE_CLASS, ascend.DRA_DEVICE_CLASS_SELECTOR),),
        source=ascend.DRA_SOURCE,
        mode=ascend.ASCEND_DRA_MODE,
    ),
    # Cambricon MLU and the others: no DRA driver is published (their device plugins only); a
    # cluster set to ``dra`` for them gets plain counts and the ``suanchi.io/dra-fallback``
    # annotation says so.
}

# NVIDIA's opaque per-claim configuration: api/nvidia.com/resource/v1beta1 (api.go: group
# resource.nvidia.com, version v1beta1, kind GpuConfig; sharing.go: strategy TimeSlicing | MPS,
# timeSlicingConfig.interval Default|Short|Medium|Long, mpsConfig.defaultActiveThreadPercentage and
# defaultPinnedDeviceMemoryLimit).
NVIDIA_CONFIG_API = "resource.nvidia.com/v1beta1"


# The extended resource a DeviceClass stands for (resource.k8s.io/v1 DeviceClassSpec
# ``extendedResourceName``, Kubernetes 1.34+, used by the scheduler under the DRAExtendedResource
# gate): NVIDIA's chart sets ``nvidia.com/gpu`` on gpu.nvidia.com only when it renders
# resource.k8s.io/v1, and nothing on mig.nvidia.com (NVIDIA/k8s-dra-driver-gpu @ 22407113785e78c7763b4637689a201eb39c6199
# deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-gpu.yaml, deviceclass-mig.yaml).
# AMD's chart sets one only from its optional ``deviceClass.extendedResourceName`` value
# (ROCm/k8s-gpu-dra-driver @ b52b585bc35c43074c94dce44f8f9155d48a5e66 helm-charts-k8s/templates/
# deviceclass.yaml), so Suanchi's copy of gpu.amd.com carries none.
DRA_EXTENDED_RESOURCE: dict[str, str] = {"gpu.nvidia.com": "nvidia.com/gpu"}


def uses_dra(vendor: str, cluster: Any) -> bool:
    """DRA claims are rendered for ``vendor`` (it has a DRA driver and the cluster's mode for it is
    that driver's: ``dra``, Hygon's ``hcu-dra``)."""
    driver = DRA_DRIVERS.get(vendor)
    return cluster is not None and driver is not None and cluster.plugin_mode(vendor) == driver.mode


def device_class_manifests() -> list[dict[str, Any]]:
    """Every DeviceClass Suanchi's claims name (``platform/kubernetes/dra/deviceclasses.yaml``)."""
    return [
        {
            "apiVersion": DRA_API_VERSION,
            "kind": "DeviceClass",
            "metadata": {"name": name, "labels": {MANAGED_BY_KEY: MANAGED_BY}},
            "spec": {
                "selectors": [{"cel": {"expression": expression}}],
                **(
                    {"extendedResourceName": DRA_EXTENDED_RESOURCE[name]}
                    if name in DRA_EXTENDED_RESOURCE
                    else {}
                ),
            },
        }
        for driver in DRA_DRIVERS.values()
        for name, expression in driver.classes
    ]


class CelInt(str):
    """An id the driver publishes as an ``int`` attribute (HAMi's Ascend ``physicalID``): rendered as
    a CEL int literal (an int attribute never equals a string), kept a ``str`` so that 0 is an id."""


def _cel(value: str) -> str:
    if isinstance(value, CelInt):
        return str(int(value))
    return json.dumps(str(value))  # a CEL double-quoted string literal (same escapes as JSON)


_PCI_ADDRESS = re.compile(r"^(?:([0-9a-f]{4,8}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")


def pci_address_sysfs(value: str | None) -> str:
    """A PCI address as the DRA drivers publish it, the kernel's sysfs device name
    ``dddd:bb:dd.f`` in lower-case hex ("" when ``value`` is not a PCI address).

    AMD's driver publishes ``pciAddr`` = the basename of ``/sys/module/amdgpu/drivers/pci:amdgpu/…``
    (ROCm/k8s-gpu-dra-driver pkg/amdgpu/amdgpu.go); NVIDIA's publishes
    ``resource.kubernetes.io/pciBusID``, which k8s.io/dynamic-resource-allocation/deviceattribute
    (pci_linux.go verifyPCIBDFFormat) only accepts in lower-case hex (its BDF regexp ``[0-9a-f]``).
    The ledger may hold nvidia-smi's ``00000000:C1:00.0`` or ``0000:C1:00.0``: CEL ``==`` is
    case-sensitive, so every comparison with a slice goes through this one spelling."""
    m = _PCI_ADDRESS.match(str(value or "").strip().lower())
    if m is None:
        return ""
    domain = m.group(1) or "0000"
    if len(domain) == 8 and domain.startswith("0000"):
        domain = domain[4:]  # NVML's 8-digit domain, as go-nvlib's GetPCIBusID shortens it
    if len(domain) != 4:
        return ""
    return f"{domain}:{m.group(2)}:{m.group(3)}.{m.group(4)}"


def mig_device_uuid(allocation: Any) -> str:
    """The uuid of the MIG device the ledger allocated ("" when cluster sync has not learned it).

    The NVIDIA DRA driver publishes each MIG device with its own ``uuid`` and one ``memorySlice<i>``
    capacity per memory slice of its placement (cmd/gpu-kubelet-plugin/deviceinfo.go
    MigDeviceInfo.GetDevice); cluster sync keeps them on the card (``Device.dra_mig_devices``). The
    allocation's instance is the one of its profile at its start slot (``Allocation.mig_start``), or
    the card's only instance of that profile when the ledger chose no start."""
    known = [
        m
        for m in getattr(allocation.device, "dra_mig_devices", None) or []
        if isinstance(m, dict) and m.get("uuid") and m.get("profile") == allocation.partition_profile
    ]
    start = getattr(allocation, "mig_start", None)
    if start is not None:
        return next((str(m["uuid"]) for m in known if m.get("start") == start), "")
    return str(known[0]["uuid"]) if len(known) == 1 else ""


def _request_shape(allocation: Any) -> tuple[str, tuple[str, ...], str, str, dict | None]:
    """(DeviceClass, fixed CEL terms, identifying attribute, this device's id, opaque sharing config)."""
    device = allocation.device
    vendor = device.vendor
    profile = allocation.partition_profile or ""
    if vendor == "nvidia":
        attrs = 'device.attributes["gpu.nvidia.com"]'
        if profile:
            mig_uuid = mig_device_uuid(allocation)
            if mig_uuid:  # the MIG instance the ledger allocated, by its own uuid (MigDeviceInfo.GetDevice)
                return "mig.nvidia.com", (), f"{attrs}.uuid", mig_uuid, None
            # Its instance is not known (no sync yet): its parent card and its profile (CommonAttributesMig);
            # with two instances of the profile on the card the allocator picks one of them.
            return (
                "mig.nvidia.com",
                (f"{attrs}.profile == {_cel(profile)}",),
                f"{attrs}.parentUUID",
                (device.uuid or ""),
                None,
            )
        sharing = None
        if not allocation.whole_card:
            # A fraction of a card: the driver's sharing configuration (GpuSharing). Shared isolation
            # time-slices the card; hard isolation uses MPS with the decided compute and memory caps.
            if str(allocation.isolation) == "shared":
                sharing = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}}
            else:
                sharing = {
                    "strategy": "MPS",
                    "mpsConfig": {
                        "defaultActiveThreadPercentage": max(1, min(100, allocation.compute_milli // 10)),
                        "defaultPinnedDeviceMemoryLimit": f"{int(allocation.memory_mib)}Mi",
                    },
                }
        return "gpu.nvidia.com", (), f"{attrs}.uuid", device.uuid or "", sharing
    if vendor == "huawei":  # HAMi's ascend-dra-driver: the chip by its physicalID (apps.clusters.ascend)
        attrs = ascend.DRA_ATTRS
        return ascend.DRA_DEVICE_CLASS, (), f"{attrs}.{ascend.DRA_PIN_ATTRIBUTE}", CelInt(device.index), None
    if vendor == "hygon":  # dra.hygon.com: the card by its uuid (apps.clusters.hygon)
        return hygon.DRA_DRIVER, (), f"{hygon.ATTRS}.uuid", device.uuid or "", None
    # AMD (driver-attributes.md): whole GPUs and partitions told apart by ``type``. A GPU carries its
    # own ``pciAddr``; a partition its parent's as ``parentPciAddr`` (cmd/gpu-kubeletplugin/
    # deviceinfo.go AmdPartitionInfo.GetDevice; the doc's "pciAddr" for partitions is not what ships).
    attrs = 'device.attributes["gpu.amd.com"]'
    pci = pci_address_sysfs(device.pci_bus_id)
    if profile:
        terms = (f'{attrs}.type == "amdgpu-partition"', f"{attrs}.partitionProfile == {_cel(profile)}")
        return "gpu.amd.com", terms, f"{attrs}.parentPciAddr", pci, None
    return "gpu.amd.com", (f'{attrs}.type == "amdgpu"',), f"{attrs}.pciAddr", pci, None


def claim_devices(units: Sequence[Sequence[Any]], *, exact: bool) -> dict[str, Any]:
    """``spec.devices`` of a claim. ``units``: the allocations of each pod the claim (template) serves.

    ``exact`` (a ResourceClaim for one pod): one request per allocated device, its id compared with
    ``==``. Otherwise (a ResourceClaimTemplate for interchangeable Deployment replicas on one node):
    one request per device shape with the per-pod count, its ids restricted to the allocated set
    with ``in`` — each pod gets devices the ledger allocated, which replica gets which is the
    allocator's choice. A device without an id (no UUID / PCI address known) is asked for by class.
    """
    groups: dict[tuple, dict[str, Any]] = {}
    hygon.models_load([a.device for allocs in units for a in allocs])  # vHCU cores: one query
    for index, allocs in enumerate(units):
        for a in allocs:
            cls, terms, id_attr, ident, sharing = _request_shape(a)
            # A Hygon vHCU: the card's consumable cores / memory it takes (apps.clusters.hygon).
            capacity = hygon.capacity_requests(a) if a.device.vendor == hygon.VENDOR else None
            if a.device.vendor == "huawei":  # an Ascend share: the chip's memory / cores (HAMivNPUCore)
                capacity = ascend.dra_capacity_requests(a)
            key = (cls, terms, id_attr, json.dumps(sharing, sort_keys=True), bool(ident))
            if capacity is not None:
                key = (*key, json.dumps(capacity, sort_keys=True))
            if exact:
                key = (*key, len(groups))
            group = groups.setdefault(
                key, {"ids": [], "per_unit": Counter(), "sharing": sharing, "capacity": capacity}
            )
            if ident and ident not in group["ids"]:
                group["ids"].append(ident)
            group["per_unit"][index] += 1
    requests, configs = [], []
    by_sharing: dict[str, list[str]] = defaultdict(list)
    for number, (key, group) in enumerate(groups.items()):
        cls, terms, id_attr = key[0], key[1], key[2]
        name = f"d{number}"
        expression = list(terms)
        ids = group["ids"]
        if ids:
            if exact or len(ids) == 1:
                expression.append(f"{id_attr} == {_cel(ids[0])}")
            else:
                expression.append(f"{id_attr} in [{', '.join(_cel(i) for i in sorted(ids))}]")
        request: dict[str, Any] = {
            "deviceClassName": cls,
            "allocationMode": "ExactCount",
            "count": max(group["per_unit"].values()),
        }
        if expression:
            request["selectors"] = [{"cel": {"expression": " && ".join(expression)}}]
        if group["capacity"] is not None:
            request["capacity"] = {"requests": group["capacity"]}
        requests.append({"name": name, "exactly": request})
        if group["sharing"] is not None:
            by_sharing[json.dumps(group["sharing"], sort_keys=True)].append(name)
    for sharing, names in by_sharing.items():
        configs.append(
            {
                "requests": names,
                "opaque": {
                    "driver": "gpu.nvidia.com",
                    "parameters": {
                        "apiVersion": NVIDIA_CONFIG_API,
                        "kind": "GpuConfig",
                        "sharing": json.loads(sharing),
                    },
                },
            }
        )
    devices: dict[str, Any] = {"requests": requests}
    if configs:
        devices["config"] = configs
    return devices


def claim_manifest(
    job: Any, name: str, units: Sequence[Sequence[Any]], cluster: Any, *, attempt: int | None, template: bool
) -> dict[str, Any] | None:
    """A ResourceClaim (one pod) or ResourceClaimTemplate (a Deployment's pods on one node) for the
    DRA-mode devices of ``units``; None when none of them is rendered through DRA."""
    dra_units = [[a for a in allocs if uses_dra(a.device.vendor, cluster)] for allocs in units]
    if not any(dra_units):
        return None
    labels = common_labels(job)
    if attempt is not None:
        labels[LABEL_ATTEMPT] = str(attempt)
    trace = next((str(a.trace_id) for allocs in units for a in allocs if a.trace_id), "")
    meta = {"name": name, "namespace": project_namespace(job.project), "labels": labels}
    if trace:
        meta["annotations"] = {ANN_TRACE: trace}
    spec = {"devices": claim_devices(dra_units, exact=not template)}
    if template:
        return {
            "apiVersion": DRA_API_VERSION,
            "kind": "ResourceClaimTemplate",
            "metadata": meta,
            "spec": {"metadata": {"labels": dict(labels)}, "spec": spec},
        }
    return {"apiVersion": DRA_API_VERSION, "kind": "ResourceClaim", "metadata": meta, "spec": spec}
