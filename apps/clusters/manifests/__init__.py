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

Where each part is: :mod:`.names` (labels, annotations, names), :mod:`.cluster_objects` (a project's
Namespace and ResourceQuota, a Node's patch), :mod:`.resources` (device-plugin resources per vendor
and mode), :mod:`.dra` (DRA drivers, DeviceClasses, claims), :mod:`.pod` (the pod template),
:mod:`.workloads` (every object of an attempt). This package re-exports what the rest of Suanchi
imports.
"""

from __future__ import annotations

from apps.clusters.manifests.cluster_objects import namespace_manifest, node_patch, resource_quota_manifest
from apps.clusters.manifests.dra import (
    ANN_DRA_FALLBACK,
    DRA_API_VERSION,
    DRA_DRIVERS,
    DRA_EXTENDED_RESOURCE,
    NVIDIA_CONFIG_API,
    POD_CLAIM_NAME,
    CelInt,
    DraDriver,
    claim_devices,
    device_class_manifests,
    mig_device_uuid,
    pci_address_sysfs,
)
from apps.clusters.manifests.names import (
    ANN_EXPECTED_DURATION,
    ANN_PLACEMENT,
    ANN_TRACE,
    ANN_UUIDS,
    API_VERSIONS,
    HAMI_UUID_ANNOTATION,
    HOSTNAME_LABEL,
    LABEL_ATTEMPT,
    LABEL_JOB,
    LABEL_PROJECT,
    LABEL_WORKLOAD,
    MANAGED_BY,
    MANAGED_BY_KEY,
    QUOTA_NAME,
    dns_label,
    label_value,
    valid_label_key,
    workload_name,
)
from apps.clusters.manifests.pod import (
    DEVICE_PLUGIN_ENV,
    LABEL_REPLICA,
    MASTER_PORT,
    RANK_TABLE_DIR,
    RANK_TABLE_FILE,
)
from apps.clusters.manifests.resources import amd_mode_refusal, replica_resources, vnpu_resource_name
from apps.clusters.manifests.workloads import (
    WORKLOAD_KINDS,
    deployment_manifest,
    job_manifest,
    workload_manifest,
    workload_manifests,
    workload_objects,
)

__all__ = [
    "ANN_DRA_FALLBACK",
    "ANN_EXPECTED_DURATION",
    "ANN_PLACEMENT",
    "ANN_TRACE",
    "ANN_UUIDS",
    "API_VERSIONS",
    "DEVICE_PLUGIN_ENV",
    "DRA_API_VERSION",
    "DRA_DRIVERS",
    "DRA_EXTENDED_RESOURCE",
    "HAMI_UUID_ANNOTATION",
    "HOSTNAME_LABEL",
    "LABEL_ATTEMPT",
    "LABEL_JOB",
    "LABEL_PROJECT",
    "LABEL_REPLICA",
    "LABEL_WORKLOAD",
    "MANAGED_BY",
    "MANAGED_BY_KEY",
    "MASTER_PORT",
    "NVIDIA_CONFIG_API",
    "POD_CLAIM_NAME",
    "QUOTA_NAME",
    "RANK_TABLE_DIR",
    "RANK_TABLE_FILE",
    "WORKLOAD_KINDS",
    "CelInt",
    "DraDriver",
    "amd_mode_refusal",
    "claim_devices",
    "deployment_manifest",
    "device_class_manifests",
    "dns_label",
    "job_manifest",
    "label_value",
    "mig_device_uuid",
    "namespace_manifest",
    "node_patch",
    "pci_address_sysfs",
    "replica_resources",
    "resource_quota_manifest",
    "valid_label_key",
    "vnpu_resource_name",
    "workload_manifest",
    "workload_manifests",
    "workload_name",
    "workload_objects",
]
