"""Kubernetes manifests for what Suanchi decides: pure functions from loaded model instances to dicts.

Nothing here queries the database: pass instances (saved or not) whose related objects are already
loaded (``allocation.device``, ``allocation.node``, ``job.project``). Every function returns a plain
dict ready for ``yaml.safe_dump`` or the ``kubernetes`` client, and every rendered object passes
``kubernetes-validate --strict`` (see tests/kube).

Choices worth knowing:

* **Node binding** uses ``nodeSelector: {kubernetes.io/hostname: <node>}`` rather than ``nodeName``:
  the pod still goes through the scheduler (and HAMi / Volcano extenders, and the DRA allocator),
  so the device plugin's extended resources are accounted, claims allocated and taints honoured.
  It assumes ``Node.name`` equals the node's hostname label, which holds for kubeadm-style clusters.
* **No pod template spans nodes** (``workload_objects``): a multi-replica batch job becomes one
  batch/v1 Job per replica, each pinned to its node, plus a headless Service for the rendezvous
  (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, NODE_RANK); an inference service whose replicas sit
  on several nodes becomes one Deployment per node. The outbox applies and deletes the whole
  group; reconcile treats it as one job.
* **Visible-devices variables are never set** (``DEVICE_PLUGIN_ENV``): the device plugin or DRA
  driver decides them; a pod-set value is overwritten or, worse, honoured for cards the pod was
  not given (NVIDIA/nvidia-container-toolkit#27, bottlerocket-os/bottlerocket#3718).
* **Per-pod resources** are the largest per-replica request (replicas normally ask for the same).
* **Device-plugin modes** (``Cluster.plugin_mode(vendor)``):
  ``plain`` / ``mig-single`` → the vendor's whole-device resource count; ``mig-mixed`` →
  ``nvidia.com/mig-<profile>`` per allocation with a partition profile; ``hami`` (NVIDIA) →
  ``nvidia.com/gpu`` count + ``nvidia.com/gpumem`` (MiB per card) + ``nvidia.com/gpucores`` (percent
  per card) and the ``nvidia.com/use-gpuuuid`` annotation (the binding), and the same for Hygon
  (``hygon.com/dcunum`` …), Cambricon (``cambricon.com/vmlu`` …) and Moore Threads
  (``mthreads.com/vgpu`` …, pinned by HAMi's own device id) after HAMi's names; a fraction
  in a mode that cannot share its vendor's card is refused, never rendered as a whole card
  (``apps.clusters.sharing``); Huawei → the chip family's
  resource (``huawei.com/Ascend910`` / ``huawei.com/Ascend310P``) and in ``ascend-vnpu`` mode the
  device plugin's vNPU name for the template (``apps.clusters.ascend``); ``dra`` →
  a ``resource.k8s.io/v1`` ResourceClaim per pod (a ResourceClaimTemplate for a Deployment's
  interchangeable replicas on one node) selecting each allocated device by CEL on its driver's
  attributes (NVIDIA ``uuid``; MIG the MIG device's own ``uuid`` when cluster sync learned it, else
  ``parentUUID`` + ``profile``; AMD ``pciAddr``, a partition (an AMD partition profile, ``cpx_nps4``,
  apps.catalog.partitions) ``type == "amdgpu-partition"`` + ``partitionProfile`` + ``parentPciAddr``,
  in the driver's lower-case spelling: ``pci_address_sysfs``; an AMD partition outside ``dra`` is
  refused, and so is a claim for a mode the card is not in once cluster sync learned its mode:
  ``amd_mode_refusal``), fractions through
  NVIDIA's ``GpuConfig`` sharing (TimeSlicing / MPS), and no extended-resource count; a vendor
  without a DRA driver (``DRA_DRIVERS``) falls back to the plain count, noted in the
  ``suanchi.io/dra-fallback`` annotation. A mode that does not apply to a vendor (e.g. ``hami`` on
  Huawei) renders as plain. DRA allocates a device to one claim at a time: a fraction of a card
  shared by two *jobs* is only shared within a claim by NVIDIA's driver, so the second job's claim
  stays unallocated (the pod Pending) until the first releases the card. Hygon (``apps.clusters.hygon``):
  mode ``hcu`` → ``hygon.com/hcu`` counts (whole cards only); ``hcu-dra`` → claims of class
  ``dra.hygon.com`` pinning the card by ``uuid``, a fraction as a vHCU with ``capacity.requests``
  ``cores`` (compute units) / ``memory`` — the driver's devices allow multiple allocations
  (consumable capacity), so vHCUs of several jobs share a card.
  Huawei in ``ascend-dra`` (HAMi's ascend-dra-driver, ``apps.clusters.ascend``): claims of class
  ``hami-vnpu-core.project-hami.io`` pinning the chip by ``physicalID`` (a CEL int), a share with
  ``capacity.requests`` ``memory`` / ``cores`` (percent), a whole chip with none (the capacities'
  defaults are the whole chip); a template vNPU or a pod whose chips would consume different
  capacities is refused (the driver's Prepare refuses it).
* **Checkpoints**: ``SUANCHI_CHECKPOINT_DIR`` is the job's checkpoint directory; ``SUANCHI_RESUME_FROM``
  is the ``checkpoint`` argument, or — on a retry (attempt > 0) without one — the directory itself
  (the workload resumes from the newest checkpoint it finds there).
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext as _

from apps.clusters import ascend, hygon, sharing
from apps.clusters.deployment_names import deployment_names
from apps.core.errors import ValidationFailed
from apps.inventory.vendors import ADAPTERS
from apps.inventory.vendors.resource_names import device_resource_name

MANAGED_BY_KEY = "app.kubernetes.io/managed-by"
MANAGED_BY = "suanchi"
LABEL_JOB = "suanchi.io/job"
LABEL_PROJECT = "suanchi.io/project"
LABEL_ATTEMPT = "suanchi.io/attempt"
ANN_TRACE = "suanchi.io/trace-id"
ANN_UUIDS = "suanchi.io/device-uuids"
ANN_PLACEMENT = "suanchi.io/placement"
ANN_EXPECTED_DURATION = "suanchi.io/expected-duration-seconds"
LABEL_WORKLOAD = "suanchi.io/workload"
HAMI_UUID_ANNOTATION = sharing.HAMI_SHARES["nvidia"].uuid_annotation
QUOTA_NAME = "suanchi-quota"
HOSTNAME_LABEL = "kubernetes.io/hostname"

# Object kinds Suanchi applies, with their apiVersion (used by render_manifests and the tests).
API_VERSIONS = {
    "Namespace": "v1",
    "ResourceQuota": "v1",
    "Job": "batch/v1",
    "Deployment": "apps/v1",
    "Node": "v1",
    "Service": "v1",
    "ConfigMap": "v1",
    "ResourceClaim": "resource.k8s.io/v1",
    "ResourceClaimTemplate": "resource.k8s.io/v1",
    "DeviceClass": "resource.k8s.io/v1",
}

# ---------------------------------------------------------------------------------------------------
# Names and label values
# ---------------------------------------------------------------------------------------------------

_DNS_INVALID = re.compile(r"[^a-z0-9-]+")
_LABEL_INVALID = re.compile(r"[^A-Za-z0-9._-]+")
_LABEL_KEY_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")


def dns_label(text: object, *, max_length: int = 63, fallback: str = "x") -> str:
    """A DNS-1123 label: lowercase [a-z0-9-], alphanumeric at both ends, at most ``max_length``."""
    value = _DNS_INVALID.sub("-", str(text).lower())
    value = re.sub(r"-{2,}", "-", value)[:max_length].strip("-")
    return value or fallback


def label_value(text: object) -> str:
    """A valid label value: at most 63 of [A-Za-z0-9._-], alphanumeric at both ends ("" allowed)."""
    value = _LABEL_INVALID.sub("-", str(text))
    value = value[:63]
    return value.strip("-._")


def valid_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return bool(_LABEL_KEY_NAME.match(name))


def workload_name(job: Any, attempt: int | None = None) -> str:
    """``suanchi-<job id>`` (Deployment) or ``suanchi-<job id>-a<attempt>`` (batch Job)."""
    base = f"suanchi-{dns_label(job.pk, max_length=40)}"
    return base if attempt is None else f"{base}-a{int(attempt)}"


def _namespace(project: Any) -> str:
    return dns_label(project.namespace or project.slug)


def _common_labels(job: Any) -> dict[str, str]:
    return {
        MANAGED_BY_KEY: MANAGED_BY,
        LABEL_JOB: label_value(job.pk),
        LABEL_PROJECT: label_value(job.project.slug),
    }


# ---------------------------------------------------------------------------------------------------
# Namespace, quota, node patch
# ---------------------------------------------------------------------------------------------------


def namespace_manifest(project: Any) -> dict[str, Any]:
    """v1 Namespace for a project, labelled as Suanchi's."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": _namespace(project),
            "labels": {MANAGED_BY_KEY: MANAGED_BY, LABEL_PROJECT: label_value(project.slug)},
        },
    }


_STANDARD_QUOTA_KEYS = re.compile(r"^(requests\.|limits\.|count/)|^(pods|services|cpu|memory|configmaps)$")


def resource_quota_manifest(project: Any, hard: Mapping[str, Any]) -> dict[str, Any]:
    """v1 ResourceQuota (seed 004 §5): each vendor resource becomes ``requests.<r>`` only.

    Kubernetes counts an extended resource against a quota only as ``requests.<name>`` (docs
    "Resource Quotas" → "Resource quota for extended resources": overcommit is not allowed for
    them, so only the ``requests.`` prefix is meaningful; pkg/quota/v1/evaluator/core/pods.go never
    counts ``limits.<extended>``, a ``limits.`` entry would never be enforced).
    ``hard`` maps resource names (``nvidia.com/gpu``) to counts; keys already qualified
    (``requests.cpu``, ``count/jobs.batch``, ``pods``) are kept as given.
    """
    spec: dict[str, str] = {}
    for resource, amount in sorted(hard.items()):
        value = str(amount)
        if _STANDARD_QUOTA_KEYS.match(resource):
            spec[resource] = value
        else:
            spec[f"requests.{resource}"] = value
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": QUOTA_NAME,
            "namespace": _namespace(project),
            "labels": {MANAGED_BY_KEY: MANAGED_BY, LABEL_PROJECT: label_value(project.slug)},
        },
        "spec": {"hard": spec},
    }


def node_patch(node: Any) -> dict[str, Any]:
    """The body that brings a Node's labels and taints in line with the ledger.

    A full ``v1 Node`` shape (so it validates), meant for a strategic-merge / merge patch: labels are
    merged, ``spec.taints`` replaces the list. Invalid label keys are dropped; values are sanitised.
    """
    labels = {
        str(key): label_value(value)
        for key, value in (node.labels or {}).items()
        if valid_label_key(str(key))
    }
    taints = []
    for taint in node.taints or []:
        key = str(taint.get("key", ""))
        if not valid_label_key(key):
            continue
        item = {"key": key, "effect": taint.get("effect") or "NoSchedule"}
        if taint.get("value"):
            item["value"] = label_value(taint["value"])
        taints.append(item)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels},
        "spec": {"taints": taints},
    }


# ---------------------------------------------------------------------------------------------------
# Device resources per plugin mode
# ---------------------------------------------------------------------------------------------------

# Ascend names (whole-chip resource by catalog family, the plugin's vNPU template table, the
# AscendReal read-back) live in apps.clusters.ascend; ``vnpu_resource_name`` is re-exported here.
vnpu_resource_name = ascend.vnpu_resource_name


def _uses_dra(vendor: str, cluster: Any) -> bool:
    """DRA claims are rendered for ``vendor`` (it has a DRA driver and the cluster's mode for it is
    that driver's: ``dra``, Hygon's ``hcu-dra``)."""
    driver = DRA_DRIVERS.get(vendor)
    return cluster is not None and driver is not None and cluster.plugin_mode(vendor) == driver.mode


def _replica_resources(
    allocations: Sequence[Any], cluster: Any
) -> tuple[dict[str, int], set[str], list[str]]:
    """Extended resources for one replica's allocations; second value: the vendors HAMi pins by UUID;
    third: notes for vendors in ``dra`` mode without a DRA driver (plain counts instead). Devices
    of a vendor rendered as DRA claims add no extended resource here (the claim asks for them)."""
    limits: Counter[str] = Counter()
    hami: set[str] = set()
    notes: list[str] = []
    by_vendor: dict[str, list[Any]] = defaultdict(list)
    for allocation in allocations:
        by_vendor[allocation.device.vendor].append(allocation)
    for vendor, allocs in by_vendor.items():
        resource = device_resource_name(vendor)
        if resource is None:  # no documented device count: a guessed name would leave the pod Pending
            raise ValidationFailed(
                _(
                    "No device-plugin resource name is known for %(vendor)s cards: Suanchi cannot ask for them."
                )
                % {"vendor": vendor},
                code="no_resource_name",
            )
        mode = cluster.plugin_mode(vendor) if cluster is not None else "plain"
        resource = device_resource_name(vendor, mode) or resource  # Hygon ``hcu``: hygon.com/hcu
        refusal = next((sharing.fraction_refusal(vendor, mode) for a in allocs if sharing.is_fraction(a)), "")
        refusal = refusal or next(
            (
                r
                for a in allocs
                if sharing.is_fraction(a)
                and (r := sharing.dra_gate_refusal(vendor, mode, str(a.isolation), cluster))
            ),
            "",
        )
        if vendor == "amd" and not refusal:  # an AMD partition is a DRA device of its own
            refusal = next(
                (
                    r
                    for a in allocs
                    if a.partition_profile and (r := sharing.amd_partition_refusal(mode, a.partition_profile))
                ),
                "",
            )
        if refusal:  # never a whole card billed as a slice (apps.clusters.sharing)
            raise ValidationFailed(refusal, code="fraction_not_shareable")
        if _uses_dra(vendor, cluster):
            if vendor == "huawei":  # what HAMi's ascend-dra-driver would refuse at Prepare
                ascend.dra_check_claim(allocs, cluster)
            if vendor == "amd":  # a card in another mode than the claim's: no device would match
                mismatch = next((r for a in allocs if (r := amd_mode_refusal(a))), "")
                if mismatch:
                    raise ValidationFailed(mismatch, code="amd_partition_mode")
            continue  # the pod's ResourceClaim selects these devices
        if mode == "mig-mixed" and vendor == "nvidia":
            for a in allocs:
                if a.partition_profile:
                    limits[f"nvidia.com/mig-{label_value(a.partition_profile)}"] += 1
                else:
                    limits[resource] += 1
        elif mode == "hami" and vendor in sharing.HAMI_SHARES:
            hami.add(vendor)
            share = sharing.HAMI_SHARES[vendor]
            for name, amount in sharing.hami_limits(share, allocs).items():
                limits[name] = limits[name] + amount if name == share.count else max(limits[name], amount)
        elif vendor == "huawei":  # every mode: the chip family's names (apps.clusters.ascend)
            names = ascend.allocation_resources(allocs, resource, vnpu=mode == "ascend-vnpu")
            if mode == "dra":  # HAMi's Ascend DRA driver is mode ascend-dra
                counted = ",".join(sorted(set(names)))
                notes.append(
                    f"{vendor}: DRA driver {ascend.DRA_DRIVER} is mode {ascend.ASCEND_DRA_MODE}, "
                    f"plain device-plugin count {counted}"
                )
            limits.update(names)
            ascend.check_vnpu_count(limits)
        else:  # plain, mig-single, and dra for a vendor without a DRA driver: whole-device count
            if mode == "dra" and vendor in DRA_DRIVERS:  # Hygon: its driver is mode hcu-dra
                notes.append(
                    f"{vendor}: DRA driver {DRA_DRIVERS[vendor].driver} is mode {DRA_DRIVERS[vendor].mode}, "
                    f"plain device-plugin count {resource}"
                )
            elif mode == "dra":
                notes.append(f"{vendor}: no DRA driver known, plain device-plugin count {resource}")
            limits[resource] += len(allocs)
    return dict(limits), hami, notes


def amd_mode_refusal(allocation: Any) -> str:
    """Why the AMD card of ``allocation`` cannot give what it asks for, from what cluster sync learned
    the AMD GPU DRA driver publishes for it (``Device.dra_mig_devices``: ``type`` / ``profile`` per
    device, apps.clusters.sync ``_amd_learn``); "" when it can or nothing was learned (no guess).

    The driver publishes a card in SPX as one ``type: amdgpu`` device and a card in any other mode as
    its partitions only (ROCm/k8s-gpu-dra-driver cmd/gpu-kubeletplugin/discovery.go), so a claim for
    another mode's partition, or for the whole of a partitioned card, matches no device and its pod
    would stay Pending."""
    device = allocation.device
    learned = getattr(device, "dra_mig_devices", None) or []
    published = [d for d in learned if isinstance(d, dict) and d.get("type")]
    if getattr(device, "vendor", "") != "amd" or not published:
        return ""
    card = f"{device.pci_bus_id or device.index}"
    modes = ", ".join(sorted({d.get("profile") or "?" for d in published if d["type"] == "amdgpu-partition"}))
    profile = allocation.partition_profile or ""
    if profile:
        if any(d["type"] == "amdgpu-partition" and d.get("profile") == profile for d in published):
            return ""
        return _(
            "AMD card %(card)s runs in %(modes)s: its DRA driver publishes no %(profile)s partition of it, "
            "so the pod would stay Pending. Ask for a partition template of the card's mode, or change "
            "the card's mode on the node and let cluster sync see it."
        ) % {"card": card, "modes": modes or _("SPX (a whole card)"), "profile": profile}
    if any(d["type"] == "amdgpu" for d in published):
        return ""
    return _(
        "AMD card %(card)s is partitioned (%(modes)s): its DRA driver publishes only the partitions, not "
        "the whole card, so the pod would stay Pending. Ask for a partition template of that mode, or "
        "for a card in SPX mode."
    ) % {"card": card, "modes": modes}


def _device_ref(allocation: Any) -> str:
    device = allocation.device
    return device.uuid or f"{allocation.node.name}/{device.vendor}{device.index}"


# ---------------------------------------------------------------------------------------------------
# Dynamic Resource Allocation: DeviceClasses and claims (resource.k8s.io/v1, GA in Kubernetes 1.34)
# ---------------------------------------------------------------------------------------------------

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


def _claim_devices(units: Sequence[Sequence[Any]], *, exact: bool) -> dict[str, Any]:
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


def _claim_manifest(
    job: Any, name: str, units: Sequence[Sequence[Any]], cluster: Any, *, attempt: int | None, template: bool
) -> dict[str, Any] | None:
    """A ResourceClaim (one pod) or ResourceClaimTemplate (a Deployment's pods on one node) for the
    DRA-mode devices of ``units``; None when none of them is rendered through DRA."""
    dra_units = [[a for a in allocs if _uses_dra(a.device.vendor, cluster)] for allocs in units]
    if not any(dra_units):
        return None
    labels = _common_labels(job)
    if attempt is not None:
        labels[LABEL_ATTEMPT] = str(attempt)
    trace = next((str(a.trace_id) for allocs in units for a in allocs if a.trace_id), "")
    meta = {"name": name, "namespace": _namespace(job.project), "labels": labels}
    if trace:
        meta["annotations"] = {ANN_TRACE: trace}
    spec = {"devices": _claim_devices(dra_units, exact=not template)}
    if template:
        return {
            "apiVersion": DRA_API_VERSION,
            "kind": "ResourceClaimTemplate",
            "metadata": meta,
            "spec": {"metadata": {"labels": dict(labels)}, "spec": spec},
        }
    return {"apiVersion": DRA_API_VERSION, "kind": "ResourceClaim", "metadata": meta, "spec": spec}


# ---------------------------------------------------------------------------------------------------
# Pod template
# ---------------------------------------------------------------------------------------------------

# Variables a device plugin / container toolkit owns: never set by Suanchi, dropped from a job's env.
# The NVIDIA device plugin sets NVIDIA_VISIBLE_DEVICES to the cards it allocated and overwrites a
# pod's own value (NVIDIA/nvidia-container-toolkit#27); where the toolkit honours the variable from
# an unprivileged pod, a pod-set value reaches cards it was not allocated
# (bottlerocket-os/bottlerocket#3718). The other vendors' plugins set theirs the same way.
DEVICE_PLUGIN_ENV = frozenset(
    {adapter.visible_devices_env for adapter in ADAPTERS.values()}
    | {
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
        "ASCEND_VISIBLE_DEVICES",
        "ASCEND_RT_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "MLU_VISIBLE_DEVICES",
    }
)

# Rendezvous of a multi-replica batch job (the variables Kubeflow's PyTorchJob sets per pod:
# MASTER_ADDR, MASTER_PORT, WORLD_SIZE = number of pods, RANK = pod index; NODE_RANK as PyTorch
# Lightning reads it). 29500 is torch.distributed's default port.
MASTER_PORT = 29500
LABEL_REPLICA = "suanchi.io/replica"
# Ascend collective communication: HCCL Controller / Ascend Operator write the job's rank table into
# the ConfigMap ``rings-config-<job>`` mounted at /user/serverid/devindex/config (hccl.json) —
# hiascend.com MindX DL "hccl.json File Description" (mxdlug_appendices_009).
RANK_TABLE_DIR = "/user/serverid/devindex/config"
RANK_TABLE_FILE = f"{RANK_TABLE_DIR}/hccl.json"


def _tolerations(job: Any, vendors: Iterable[str]) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = []
    seen: set[str] = set()

    def add(item: dict[str, Any]) -> None:
        key = json.dumps(item, sort_keys=True)
        if key not in seen:
            seen.add(key)
            result.append(item)

    for vendor in sorted(vendors):
        adapter = ADAPTERS.get(vendor)
        for taint in adapter.taints() if adapter else []:
            add(
                {"key": taint["key"], "operator": "Equal", "value": taint["value"], "effect": taint["effect"]}
            )
    if getattr(job, "gray_opt_in", False):  # the gray-release pool's taint
        add({"key": "suanchi.io/gray", "operator": "Exists"})
    allowed = ("key", "operator", "value", "effect", "tolerationSeconds")
    for toleration in job.tolerations or []:
        if isinstance(toleration, Mapping):
            item = {k: toleration[k] for k in allowed if toleration.get(k) not in (None, "")}
            if item:
                add(item)
    return result


@dataclass
class _Gang:
    """One replica of a multi-replica batch job: its rank and the rendezvous service."""

    rank: int
    world_size: int
    node_rank: int
    service: str
    rank_table: str = ""  # the ConfigMap holding the Ascend rank table, when the job asks for one


def _pod_template(
    job: Any,
    allocations: Sequence[Any],
    cluster: Any,
    *,
    attempt: int | None,
    checkpoint: str | None,
    restart_policy: str,
    claim: dict[str, str] | None = None,
    gang: _Gang | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The pod template (for pods on exactly one node) and the object-level annotations.

    ``claim``: the pod's entry in ``spec.resourceClaims`` (``resourceClaimName`` or
    ``resourceClaimTemplateName``) when some of its devices come through DRA.
    """
    allocations = sorted(allocations, key=lambda a: (a.replica, a.node.name, a.device.index))
    replicas: dict[int, list[Any]] = defaultdict(list)
    for allocation in allocations:
        replicas[allocation.replica].append(allocation)
    if not replicas:
        raise ValueError(f"job {job.pk} has no allocations to render")
    nodes = sorted({a.node.name for a in allocations})
    if len(nodes) != 1:  # workload_objects splits per node; a template never spans nodes
        raise ValueError(f"job {job.pk}: one pod template cannot be pinned to {len(nodes)} nodes")

    limits: dict[str, int] = {}
    hami: set[str] = set()
    notes: list[str] = []
    for allocs in replicas.values():
        replica_limits, replica_hami, replica_notes = _replica_resources(allocs, cluster)
        hami |= replica_hami
        notes.extend(n for n in replica_notes if n not in notes)
        for name, amount in replica_limits.items():
            limits[name] = max(limits.get(name, 0), amount)

    vendors = sorted({a.device.vendor for a in allocations})
    uuids = [_device_ref(a) for a in allocations]
    trace = next((str(a.trace_id) for a in allocations if a.trace_id), "")

    annotations = {ANN_TRACE: trace, ANN_UUIDS: ",".join(uuids)}
    placement = {
        str(r): {"node": allocs[0].node.name, "devices": [_device_ref(a) for a in allocs]}
        for r, allocs in sorted(replicas.items())
    }
    annotations[ANN_PLACEMENT] = json.dumps(placement, separators=(",", ":"), sort_keys=True)
    if notes:
        annotations[ANN_DRA_FALLBACK] = "; ".join(notes)
    if getattr(job, "expected_duration_s", None):
        # Informative for people and the simulated cluster (which runs the pod this long).
        annotations[ANN_EXPECTED_DURATION] = str(int(job.expected_duration_s))
    pod_annotations = dict(annotations)
    for vendor in sorted(hami):
        # HAMi binds the pod to these cards by UUID (its scheduler extender reads the annotation).
        share = sharing.HAMI_SHARES[vendor]
        pod_annotations[share.uuid_annotation] = ",".join(
            sharing.hami_device_ids(share, [a for a in allocations if a.device.vendor == vendor])
        )

    env: list[dict[str, str]] = [
        {"name": str(k), "value": str(v)}
        for k, v in sorted((job.env or {}).items())
        if str(k) not in DEVICE_PLUGIN_ENV  # the device plugin's, never the pod's (see above)
    ]
    names = {e["name"] for e in env}

    def set_env(name: str, value: str) -> None:
        if name in names:
            env[:] = [e for e in env if e["name"] != name]
        names.add(name)
        env.append({"name": name, "value": value})

    set_env("SUANCHI_JOB_ID", str(job.pk))
    if attempt is not None:
        set_env("SUANCHI_ATTEMPT", str(attempt))
    if trace:
        set_env("SUANCHI_TRACE_ID", trace)
    if gang is not None:
        namespace = _namespace(job.project)
        # Replica 0's stable name: <hostname>.<subdomain>.<namespace>.svc (Kubernetes docs "DNS for
        # Services and Pods" → "Pod's hostname and subdomain fields", with a headless Service named
        # like the subdomain).
        set_env("MASTER_ADDR", f"r0.{gang.service}.{namespace}.svc")
        set_env("MASTER_PORT", str(MASTER_PORT))
        set_env("WORLD_SIZE", str(gang.world_size))
        set_env("RANK", str(gang.rank))
        set_env("NODE_RANK", str(gang.node_rank))
        if gang.rank_table:
            set_env("RANK_TABLE_FILE", RANK_TABLE_FILE)
    if job.checkpoint_dir:
        set_env("SUANCHI_CHECKPOINT_DIR", job.checkpoint_dir)
    # A retried or preempted attempt resumes from the checkpoint recorded when the last one ended.
    resume = checkpoint or getattr(job, "resume_from", "") or (job.checkpoint_dir if attempt else None)
    if resume:
        set_env("SUANCHI_RESUME_FROM", resume)

    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for vendor in vendors:
        adapter = ADAPTERS.get(vendor)
        for mount in adapter.mounts() if adapter else []:
            name = dns_label(mount["name"])
            if any(v["name"] == name for v in volumes):
                continue
            volumes.append({"name": name, "hostPath": {"path": mount["hostPath"], "type": "Directory"}})
            mounts.append(
                {"name": name, "mountPath": mount["mountPath"], "readOnly": bool(mount.get("readOnly", True))}
            )
    if gang is not None and gang.rank_table:
        volumes.append({"name": "rank-table", "configMap": {"name": gang.rank_table}})
        mounts.append({"name": "rank-table", "mountPath": RANK_TABLE_DIR, "readOnly": True})

    resources: dict[str, Any] = {}
    if limits:
        resources["limits"] = {k: str(v) for k, v in sorted(limits.items())}
    if claim is not None:
        resources["claims"] = [{"name": claim["name"]}]
    container: dict[str, Any] = {
        "name": dns_label(job.name, fallback="main"),
        "image": job.image,
        "env": env,
        "resources": resources,
    }
    if job.command:
        container["command"] = [str(c) for c in job.command]
    if mounts:
        container["volumeMounts"] = mounts

    # Pinned with a nodeSelector on the hostname label, not ``spec.nodeName``: the pod still goes
    # through the scheduler, which accounts the device plugin's resources and allocates DRA claims —
    # a pod created with nodeName bypasses it, and its unallocated claims make the kubelet refuse it
    # (Kubernetes docs "Dynamic Resource Allocation" → "Pre-scheduled Pods").
    spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "containers": [container],
        "nodeSelector": {HOSTNAME_LABEL: nodes[0]},
    }
    if gang is not None:
        spec["hostname"] = f"r{gang.rank}"
        spec["subdomain"] = gang.service
    if claim is not None:
        spec["resourceClaims"] = [claim]
    tolerations = _tolerations(job, vendors)
    if tolerations:
        spec["tolerations"] = tolerations
    if volumes:
        spec["volumes"] = volumes

    labels = _common_labels(job)
    if attempt is not None:
        labels[LABEL_ATTEMPT] = str(attempt)
    if gang is not None:
        labels[LABEL_REPLICA] = str(gang.rank)
    template = {"metadata": {"labels": labels, "annotations": pod_annotations}, "spec": spec}
    return template, annotations


# ---------------------------------------------------------------------------------------------------
# Workloads
# ---------------------------------------------------------------------------------------------------

WORKLOAD_KINDS = ("Job", "Deployment")


def _batch_job(
    job: Any, name: str, template: dict, annotations: dict, attempt: int, replica: int | None
) -> dict[str, Any]:
    """batch/v1 Job of one pod. ``backoffLimit: 0``: retries are Suanchi's."""
    labels = _common_labels(job)
    labels[LABEL_ATTEMPT] = str(attempt)
    if replica is not None:
        labels[LABEL_REPLICA] = str(replica)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": _namespace(job.project),
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {"backoffLimit": 0, "parallelism": 1, "completions": 1, "template": template},
    }


def _rendezvous_service(job: Any, name: str, attempt: int) -> dict[str, Any]:
    """The headless Service that gives each replica's pod a DNS name (``r<rank>.<name>``). Not-ready
    addresses are published: ranks rendezvous before any readiness (Kubernetes docs "Service" →
    "Headless Services", ``publishNotReadyAddresses``)."""
    labels = _common_labels(job)
    labels[LABEL_ATTEMPT] = str(attempt)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": _namespace(job.project), "labels": labels},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_JOB: labels[LABEL_JOB], LABEL_ATTEMPT: str(attempt)},
            "ports": [{"name": "rendezvous", "port": MASTER_PORT, "protocol": "TCP"}],
        },
    }


def _rank_table_configmap(job: Any, name: str, attempt: int) -> dict[str, Any]:
    """The ConfigMap HCCL Controller fills with the job's rank table (created "initializing")."""
    labels = _common_labels(job)
    labels[LABEL_ATTEMPT] = str(attempt)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": _namespace(job.project), "labels": labels},
        "data": {"hccl.json": json.dumps({"status": "initializing"})},
    }


def _claim_ref(claim: dict | None) -> dict[str, str] | None:
    if claim is None:
        return None
    key = "resourceClaimTemplateName" if claim["kind"] == "ResourceClaimTemplate" else "resourceClaimName"
    return {"name": POD_CLAIM_NAME, key: claim["metadata"]["name"]}


def workload_objects(
    job: Any,
    allocations: Sequence[Any],
    cluster: Any,
    *,
    attempt: int,
    checkpoint: str | None = None,
    keep_names: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Every object of one attempt of ``job``, in apply order (the outbox applies and deletes them
    as one group): the Ascend rank-table ConfigMap, DRA ResourceClaims / ResourceClaimTemplates, the
    rendezvous Service, then the workloads. No pod template can land on more than one node:

    * batch work, one replica: one batch/v1 Job (``suanchi-<id>-a<attempt>``);
    * batch work, several replicas (a gang, on one node or several): one Job per replica
      (``…-r<rank>``), each pinned to its replica's node, with its own ResourceClaim in DRA mode, a
      headless Service for the rendezvous and MASTER_ADDR / MASTER_PORT / WORLD_SIZE / RANK /
      NODE_RANK; ``RANK_TABLE_FILE`` and its ConfigMap mount when an Ascend job's env asks for it;
    * inference: one apps/v1 Deployment (``suanchi-<id>``) when its replicas share a node, else one
      per node (``suanchi-<id>-n<k>``, replicas = those placed there), each with a
      ResourceClaimTemplate in DRA mode; ``keep_names`` keeps the names a re-render of the same
      attempt already used (``deployment_names``).
    """
    allocations = sorted(allocations, key=lambda a: (a.replica, a.node.name, a.device.index))
    if not allocations:
        raise ValueError(f"job {job.pk} has no allocations to render")
    replicas: dict[int, list[Any]] = defaultdict(list)
    for allocation in allocations:
        replicas[allocation.replica].append(allocation)
    nodes = sorted({a.node.name for a in allocations})
    objects: list[dict[str, Any]] = []
    workloads: list[dict[str, Any]] = []

    if job.kind == "inference":
        names = deployment_names(workload_name(job), nodes, keep_names)
        for node in nodes:
            allocs = [a for a in allocations if a.node.name == node]
            units = [[a for a in allocs if a.replica == r] for r in sorted({a.replica for a in allocs})]
            name = names[node]
            claim = _claim_manifest(job, f"{name}-devices", units, cluster, attempt=None, template=True)
            if claim is not None:
                objects.append(claim)
            template, annotations = _pod_template(
                job,
                allocs,
                cluster,
                attempt=None,
                checkpoint=None,
                restart_policy="Always",
                claim=_claim_ref(claim),
            )
            count = int(job.replicas) if name == workload_name(job) else len(units)
            workloads.append(_deployment(job, name, template, annotations, count))
        return objects + workloads

    base = workload_name(job, attempt)
    # One pod per replica and node: a replica whose device groups were placed on several nodes of one
    # switch (seed 000 §3.2's cross-node fallback) runs as one pinned pod per node, like a gang.
    pods: dict[tuple[int, str], list[Any]] = defaultdict(list)
    for allocation in allocations:
        pods[(allocation.replica, allocation.node.name)].append(allocation)
    replicas = dict(enumerate(pods[key] for key in sorted(pods)))
    if len(replicas) == 1:
        (allocs,) = replicas.values()
        claim = _claim_manifest(job, f"{base}-devices", [allocs], cluster, attempt=attempt, template=False)
        if claim is not None:
            objects.append(claim)
        template, annotations = _pod_template(
            job,
            allocs,
            cluster,
            attempt=attempt,
            checkpoint=checkpoint,
            restart_policy="Never",
            claim=_claim_ref(claim),
        )
        return [*objects, _batch_job(job, base, template, annotations, attempt, None)]

    rank_table = ""
    if "RANK_TABLE_FILE" in (job.env or {}) and any(a.device.vendor == "huawei" for a in allocations):
        rank_table = dns_label(f"rings-config-{base}")
        objects.append(_rank_table_configmap(job, rank_table, attempt))
    node_rank = {node: i for i, node in enumerate(nodes)}
    for rank, (_replica, allocs) in enumerate(sorted(replicas.items())):
        name = f"{base}-r{rank}"
        claim = _claim_manifest(job, f"{name}-devices", [allocs], cluster, attempt=attempt, template=False)
        if claim is not None:
            objects.append(claim)
        gang = _Gang(
            rank=rank,
            world_size=len(replicas),
            node_rank=node_rank[allocs[0].node.name],
            service=base,
            rank_table=rank_table,
        )
        template, annotations = _pod_template(
            job,
            allocs,
            cluster,
            attempt=attempt,
            checkpoint=checkpoint,
            restart_policy="Never",
            claim=_claim_ref(claim),
            gang=gang,
        )
        workloads.append(_batch_job(job, name, template, annotations, attempt, rank))
    objects.append(_rendezvous_service(job, base, attempt))
    return objects + workloads


def _deployment(job: Any, name: str, template: dict, annotations: dict, replicas: int) -> dict[str, Any]:
    labels = _common_labels(job)
    selector = {LABEL_JOB: labels[LABEL_JOB], MANAGED_BY_KEY: MANAGED_BY}
    if name != workload_name(job):  # one Deployment per node: each selects only its own pods
        template["metadata"]["labels"][LABEL_WORKLOAD] = name
        selector[LABEL_WORKLOAD] = name
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": _namespace(job.project),
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "replicas": int(replicas),
            "selector": {"matchLabels": selector},
            # Devices are exclusive: a surge pod could not get its cards, so replace in place.
            "strategy": {"type": "Recreate"},
            "template": template,
        },
    }


def workload_manifests(
    job: Any, allocations: Sequence[Any], cluster: Any, *, attempt: int, checkpoint: str | None = None
) -> list[dict[str, Any]]:
    """The workloads (batch/v1 Jobs or apps/v1 Deployments) among ``workload_objects``."""
    objects = workload_objects(job, allocations, cluster, attempt=attempt, checkpoint=checkpoint)
    return [o for o in objects if o["kind"] in WORKLOAD_KINDS]


def job_manifest(
    job: Any, allocations: Sequence[Any], cluster: Any, *, attempt: int, checkpoint: str | None = None
) -> dict[str, Any]:
    """The (first) batch/v1 Job of a batch job's attempt — the only one for a single replica."""
    batch = job if job.kind != "inference" else _as_batch(job)
    return workload_manifests(batch, allocations, cluster, attempt=attempt, checkpoint=checkpoint)[0]


def deployment_manifest(job: Any, allocations: Sequence[Any], cluster: Any) -> dict[str, Any]:
    """The (first) apps/v1 Deployment of an inference service."""
    return workload_manifests(_as_inference(job), allocations, cluster, attempt=0)[0]


def workload_manifest(
    job: Any, allocations: Sequence[Any], cluster: Any, *, attempt: int, checkpoint: str | None = None
) -> dict[str, Any]:
    """The first workload of ``workload_objects`` (Deployment for inference, batch/v1 Job else)."""
    return workload_manifests(job, allocations, cluster, attempt=attempt, checkpoint=checkpoint)[0]


def _as_batch(job: Any) -> Any:
    clone = copy.copy(job)
    clone.kind = "training"
    return clone


def _as_inference(job: Any) -> Any:
    if job.kind == "inference":
        return job
    clone = copy.copy(job)
    clone.kind = "inference"
    return clone
