"""Cluster sync: Kubernetes Nodes and DRA ResourceSlices → the ledger, every difference an event.

Two halves, so that no network call happens inside a database transaction:

* reading: :func:`cluster_read` lists ``v1`` Nodes and ``resource.k8s.io/v1`` ResourceSlices through
  the official client; :func:`sync_input_load` reads the same objects from a file (a ``NodeList`` /
  ``ResourceSliceList`` as the API returns it, or the ``kind: List`` that ``kubectl get -o yaml``
  prints). Both give plain dicts, checked by :func:`nodes_parse` / :func:`slices_parse`.
* writing: :func:`cluster_sync_apply` compares them with the ledger in one transaction.

What becomes of a difference (DESIGN "Cluster backends": any difference is a drift event):

* a node Kubernetes lists that the ledger lacks is created, in the pool its ``suanchi.io/pool``
  label names (else the cluster's ``default`` pool), with one card per whole-device resource in
  ``status.capacity``; pending nodes Kubernetes lists are approved (``node_confirm_in_cluster``);
* ``Ready`` False/Unknown (with its reason), ``allocatable`` below the ledger's healthy count (a
  card the device plugin dropped), a ResourceSlice device the ledger lacks or a ledger card missing
  from its driver's slices, labels / taints changed outside Suanchi, a node gone: a ``DeviceEvent``
  whose ``after`` carries ``{"drift": <key>, ...}``. A drift is recorded when its state differs from
  the last one recorded for that key, so syncing twice records nothing new;
* labels / taints: Suanchi's own (``suanchi.io/``) are restored through the push outbox (a Node
  patch), everybody else's are kept and taken into the ledger.

Resource names (whole devices, as each vendor's device plugin publishes them in ``status.capacity``):

* ``nvidia.com/gpu``; MIG mixed strategy ``nvidia.com/mig-<profile>`` (slices, not cards) —
  NVIDIA k8s-device-plugin README, "MIG Support" / docs.nvidia.com/datacenter/cloud-native/gpu-operator/
  latest/gpu-operator-mig.html;
* ``huawei.com/Ascend910``, ``huawei.com/Ascend310P``, ``huawei.com/Ascend310``, ``huawei.com/npu``;
  vNPU templates ``huawei.com/Ascend910-<n>c…`` (slices) — Ascend MindCluster ascend-device-plugin docs;
* ``amd.com/gpu`` — ROCm/k8s-device-plugin README;
* ``hygon.com/dcu`` (HAMi dcu-vgpu-device-plugin: ``hygon.com/dcunum`` for vDCUs, slices) —
  Project-HAMi/HAMi docs/hygon-dcu-support.md; ``hygon.com/hcu`` (the HCU device plugin; its
  ``hygon.com/hcu-share-*`` vHCUs, ``hcu-mig-*`` instances and HAMi ``hcunum`` / ``hcucores`` /
  ``hcumem`` are slices) — HYGON-AI/k8s-hcu-device-plugin (``apps.clusters.hygon``);
* ``cambricon.com/mlu`` — Cambricon/cambricon-k8s-device-plugin README ("Running MLU Jobs").

ResourceSlice fields follow the ``resource.k8s.io/v1`` API (Kubernetes 1.34,
kubernetes.io/docs/reference/kubernetes-api/workload-resources/resource-slice-v1/): ``spec.driver``,
``spec.nodeName``, ``spec.pool``, ``spec.devices[].name``, ``spec.devices[].attributes`` (a map of
qualified name → one of ``int`` / ``bool`` / ``string`` / ``version``); only the slices of the
highest ``spec.pool.generation`` of a pool count (ResourcePool.generation). A slice device is a
ledger card by ``uuid`` (NVIDIA ``gpu.nvidia.com``, cmd/gpu-kubelet-plugin/deviceinfo.go), else by
PCI address (AMD ``gpu.amd.com`` publishes no UUID, only ``pciAddr``; NVIDIA also
``resource.kubernetes.io/pciBusID``), in the drivers' lower-case sysfs spelling; a partition names
its card (NVIDIA MIG ``parentUUID``, cmd/gpu-kubelet-plugin/mig.go, the only devices published for
a MIG-enabled GPU, whose own ``uuid``, ``profile`` and ``memorySlice<i>`` placement are kept on the
card as ``Device.dra_mig_devices`` for MIG claims; AMD ``parentPciAddr``, a partitioned card being
published as its partitions only; what the AMD driver publishes for a card — the whole card or its
partitions and their ``partitionProfile`` — is kept in the same field, so a claim for a mode the card
is not in is refused before it is pushed). A pool's counter slice (KEP-4815 ``sharedCounters``, no
devices) has nothing to match. No driver publishes an ``index``: nothing relies on one.

Hygon's ``dra.hygon.com`` publishes ``uuid`` and no PCI attribute; its device name
``hcu-<PCI address, - for : and .>`` gives the address (``apps.clusters.hygon.device_name_pci``). A
vHCU is capacity consumed on its card's one device (consumable capacity), never a device of its
own: vHCUs are no cards and no drift.

HAMi's Ascend driver (``ascend.project-hami.io``, ``apps.clusters.ascend``) publishes no PCI address
and no stable uuid: a chip is the ledger's Huawei card whose ``index`` is its ``physicalID`` (the id
the claims pin); a vNPU share is consumed capacity of that one device, no card and no drift.
"""

from apps.clusters.sync.apply import (
    NODE_FOUND,
    SyncReport,
    _sync_labels,
    cluster_sync,
    cluster_sync_apply,
    outside_changes_take,
)
from apps.clusters.sync.kube import (
    DEFAULT_POOL_SLUG,
    POOL_LABEL,
    SUANCHI_PREFIX,
    WHOLE_DEVICE_RESOURCES,
    NodeView,
    SliceDevice,
    cluster_read,
    driver_vendor,
    is_accelerator_resource,
    nodes_parse,
    slices_parse,
    sync_input_load,
)

__all__ = [
    "DEFAULT_POOL_SLUG",
    "NODE_FOUND",
    "POOL_LABEL",
    "SUANCHI_PREFIX",
    "WHOLE_DEVICE_RESOURCES",
    "NodeView",
    "SliceDevice",
    "SyncReport",
    "_sync_labels",
    "cluster_read",
    "cluster_sync",
    "cluster_sync_apply",
    "driver_vendor",
    "is_accelerator_resource",
    "nodes_parse",
    "outside_changes_take",
    "slices_parse",
    "sync_input_load",
]
