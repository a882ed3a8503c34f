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

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import yaml
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.clusters import hygon
from apps.clusters.ascend import DRA_DRIVER as ASCEND_DRA_DRIVER
from apps.clusters.health import sync_outcome_log
from apps.clusters.manifests import node_patch, pci_address_sysfs
from apps.clusters.models import PushAction
from apps.clusters.outbox import object_stream, push_object_enqueue
from apps.core.audit import actor_fields, change_record_create
from apps.core.errors import ValidationFailed
from apps.core.stored_text import stored
from apps.inventory.models import Cluster, Device, DeviceEvent, Node, Pool, node_name_problem
from apps.inventory.services.discovery import node_confirm_in_cluster

SUANCHI_PREFIX = "suanchi.io/"
POOL_LABEL = "suanchi.io/pool"
DEFAULT_POOL_SLUG = "default"

# Texts stored in node and device events, shown in the reader's language (apps.core.stored_text).
NODE_FOUND = stored("node %(name)s found in Kubernetes by cluster sync (pool %(pool)s, %(cards)d cards)")
LABELS_KEPT = stored("labels or taints of node %(name)s changed outside Suanchi; kept: %(keys)s")
LABELS_RESTORING = stored(
    "Suanchi's labels or taints on node %(name)s were changed outside Suanchi (%(keys)s); restoring them"
)
LABELS_OK = stored("Suanchi's labels and taints on node %(name)s are as the ledger wants")
NOT_READY = stored("Kubernetes reports node %(name)s NotReady (%(reason)s)")
READY_AGAIN = stored("Kubernetes reports node %(name)s Ready again")
LISTED_AGAIN = stored("node %(name)s is listed by Kubernetes again")
PLUGIN_DROPPED = stored(
    "node %(name)s: Kubernetes can allocate %(alloc)d %(res)s but the ledger has %(have)d healthy cards: the device plugin dropped %(short)d"
)
ALLOCATABLE_OK = stored("node %(name)s: %(res)s allocatable matches the ledger again")
CARD_UUID = stored("card %(index)d of node %(name)s: UUID %(uuid)s from ResourceSlice %(slice)s")
SLICE_UNKNOWN_DEVICE = stored(
    "ResourceSlice %(slice)s of driver %(driver)s publishes device %(uuid)s on node %(name)s; the ledger lacks it"
)
SLICE_DEVICE_OK = stored("device %(uuid)s of node %(name)s is in the ledger")
CARD_MIG_DEVICES = stored(
    "card %(index)d of node %(name)s: MIG devices %(devices)s published by the NVIDIA DRA driver"
)
CARD_AMD_DEVICES = stored(
    "card %(index)d of node %(name)s: devices %(devices)s published by the AMD GPU DRA driver"
)
CARD_NOT_PUBLISHED = stored(
    "card %(uuid)s of node %(name)s is in the ledger but in no ResourceSlice of its driver"
)
CARD_PUBLISHED = stored("card %(uuid)s of node %(name)s is published again")
NODE_NOT_LISTED = stored("node %(name)s is in the ledger but Kubernetes no longer lists it")
TAINTS = stored("taints")  # a parameter of LABELS_KEPT / LABELS_RESTORING

# Whole-device extended resources -> vendor (sources in the module docstring).
WHOLE_DEVICE_RESOURCES: dict[str, str] = {
    "nvidia.com/gpu": "nvidia",
    "huawei.com/Ascend910": "huawei",
    "huawei.com/Ascend310P": "huawei",
    "huawei.com/Ascend310": "huawei",
    "huawei.com/npu": "huawei",
    "amd.com/gpu": "amd",
    "hygon.com/dcu": "hygon",
    "hygon.com/hcu": "hygon",  # the HCU device plugin (apps.clusters.hygon)
    "cambricon.com/mlu": "cambricon",
    # apps.inventory.vendors.resource_names (HAMi's documented counts)
    "metax-tech.com/gpu": "metax",
    "kunlunxin.com/xpu": "kunlunxin",
    "enflame.com/gcu": "enflame",
    # Moore Threads' device plugin (apps/inventory/vendors/mthreads.py)
    "mthreads.com/gpu": "mthreads",
}
# Slices of a card (MIG instances, vNPU templates, vDCUs, HAMi shares): reported, never counted as cards.
_SLICE_RESOURCE = re.compile(
    r"^(nvidia\.com/(mig-.+|gpumem|gpucores)|huawei\.com/Ascend(910|310P?)-.+|hygon\.com/dcu(num|mem|cores)"
    r"|hygon\.com/(hcu(num|mem|cores)|hcu-.+)"
    r"|cambricon\.com/mlu.+|mthreads\.com/(vgpu|sgpu-memory|sgpu-core))$"
)
# DRA driver name -> vendor: the driver names are DNS subdomains owned by the vendor.
_DRIVER_VENDOR = (
    ("nvidia", "nvidia"),
    ("huawei", "huawei"),
    ("ascend", "huawei"),
    ("amd", "amd"),
    ("hygon", "hygon"),
    ("cambricon", "cambricon"),
)
# The node labels that name a card model (NVIDIA GPU feature discovery; Suanchi's vendor labels).
_MODEL_LABELS = ("nvidia.com/gpu.product", "gpu-model", "npu-model", "dcu-model", "mlu-model")


def is_accelerator_resource(name: str) -> bool:
    return name in WHOLE_DEVICE_RESOURCES or bool(_SLICE_RESOURCE.match(name))


def driver_vendor(driver: str) -> str | None:
    for needle, vendor in _DRIVER_VENDOR:
        if needle in driver.lower():
            return vendor
    return None


# --------------------------------------------------------------------------------------------------
# what Kubernetes says, checked


@dataclass
class NodeView:
    name: str
    labels: dict[str, str]
    taints: list[dict[str, str]]
    ready: bool
    ready_reason: str
    capacity: dict[str, int]
    allocatable: dict[str, int]


@dataclass
class SliceDevice:
    node: str
    driver: str
    slice: str
    device: str
    uuid: str
    pci: str  # the card's PCI address (pci_address_sysfs), "" when not published
    parent_uuid: str = ""  # a partition (NVIDIA MIG device): its card's UUID
    parent_pci: str = ""  # a partition (AMD): its card's PCI address
    attributes: dict[str, Any] = field(default_factory=dict)
    capacity: dict[str, Any] = field(default_factory=dict)  # name -> quantity ("value"), as published
    # Huawei under HAMi's ascend-dra-driver: the chip's ``physicalID``, matched with ``Device.index``
    # (the id its claims pin, apps.clusters.ascend); None for every other driver.
    physical_id: int | None = None

    def mig_record(self) -> dict[str, Any] | None:
        """An NVIDIA MIG device as ``Device.dra_mig_devices`` keeps it: its own ``uuid``, ``profile``,
        and its placement from the ``memorySlice<i>`` capacities (one per memory slice it holds:
        cmd/gpu-kubelet-plugin/deviceinfo.go MigDeviceInfo.GetDevice). None for anything else."""
        plain = {k.rsplit("/", 1)[-1]: v for k, v in self.attributes.items()}
        if self.driver != "gpu.nvidia.com" or plain.get("type") != "mig" or not self.uuid:
            return None
        slices = sorted(
            int(name[len("memorySlice") :]) for name in self.capacity if re.fullmatch(r"memorySlice\d+", name)
        )
        return {
            "uuid": self.uuid,
            "profile": str(plain.get("profile") or ""),
            "start": slices[0] if slices else None,
            "size": len(slices) if slices else None,
            "device": self.device,
        }

    def amd_record(self) -> dict[str, Any] | None:
        """An AMD device as ``Device.dra_mig_devices`` keeps it for its card: ``device`` (its name),
        ``type`` (``amdgpu`` a whole card, ``amdgpu-partition`` one of its partitions) and
        ``profile`` (``partitionProfile``: the card's mode, "cpx_nps4"; ROCm/k8s-gpu-dra-driver
        cmd/gpu-kubeletplugin/deviceinfo.go). None for any other driver's device."""
        if self.driver != "gpu.amd.com":
            return None
        plain = {k.rsplit("/", 1)[-1]: v for k, v in self.attributes.items()}
        return {
            "device": self.device,
            "type": str(plain.get("type") or ""),
            "profile": str(plain.get("partitionProfile") or ""),
        }

    @property
    def key(self) -> str:
        """What names this device in drift records: its UUID, else (a whole card) its PCI address,
        else its driver and name (a partition shares its card's PCI address with its siblings)."""
        whole = not (self.parent_uuid or self.parent_pci)
        return self.uuid or (self.pci if whole else "") or f"{self.driver}/{self.device}"


def _count(value: Any, where: str) -> int:
    """An extended resource quantity: a whole number ("8", 8). Device plugins publish integers."""
    text = str(value).strip()
    if not re.fullmatch(r"\d+", text):
        raise ValidationFailed(
            _("%(where)s: %(value)r is not a whole number of devices") % {"where": where, "value": value},
            details={"field": where},
        )
    return int(text)


def nodes_parse(items: list[Any]) -> list[NodeView]:
    """``v1`` Node objects → :class:`NodeView`; ``ValidationFailed`` naming the item and field."""
    views: list[NodeView] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        where = f"items[{i}]"
        if not isinstance(item, dict):
            raise ValidationFailed(_("%(where)s is not an object") % {"where": where})
        meta = item.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name:
            raise ValidationFailed(
                _("%(where)s: metadata.name is missing") % {"where": where},
                details={"field": f"{where}.metadata.name"},
            )
        problem = node_name_problem(name)
        if problem:
            raise ValidationFailed(f"{where}: {problem}", details={"field": f"{where}.metadata.name"})
        if name in seen:
            raise ValidationFailed(
                _("%(where)s: node %(name)s is listed twice") % {"where": where, "name": name}
            )
        seen.add(name)
        where = f"{where} ({name})"
        labels = meta.get("labels") or {}
        spec = item.get("spec") or {}
        status = item.get("status") or {}
        if not isinstance(labels, dict) or not isinstance(spec, dict) or not isinstance(status, dict):
            raise ValidationFailed(
                _("%(where)s: metadata.labels, spec and status must be objects") % {"where": where}
            )
        taints = spec.get("taints") or []
        if not isinstance(taints, list) or any(not isinstance(t, dict) or not t.get("key") for t in taints):
            raise ValidationFailed(
                _("%(where)s: spec.taints must be a list of taints with a key") % {"where": where}
            )
        conditions = status.get("conditions") or []
        ready_cond = next((c for c in conditions if isinstance(c, dict) and c.get("type") == "Ready"), None)
        # Node conditions: kubernetes.io/docs/reference/node/node-status/#condition — Ready is
        # "True", "False" (unhealthy) or "Unknown" (the node controller lost contact).
        ready = bool(ready_cond and ready_cond.get("status") == "True")
        reason = (
            ""
            if ready
            else str((ready_cond or {}).get("reason") or ("NoReadyCondition" if not ready_cond else ""))
        )
        resources: dict[str, dict[str, int]] = {}
        for key in ("capacity", "allocatable"):
            raw = status.get(key) or {}
            if not isinstance(raw, dict):
                raise ValidationFailed(
                    _("%(where)s: status.%(key)s must be an object") % {"where": where, "key": key}
                )
            resources[key] = {
                res: _count(value, f"{where}: status.{key}.{res}")
                for res, value in sorted(raw.items())
                if is_accelerator_resource(res)
            }
        views.append(
            NodeView(
                name=name,
                labels={str(k): str(v) for k, v in labels.items()},
                taints=[{k: str(v) for k, v in t.items() if k in ("key", "value", "effect")} for t in taints],
                ready=ready,
                ready_reason=reason,
                capacity=resources["capacity"],
                allocatable=resources["allocatable"],
            )
        )
    return views


def _attribute(value: Any) -> Any:
    """A DeviceAttribute ({"string": "GPU-…"} / {"int": 0} / {"bool": …} / {"version": …}) → its value."""
    if isinstance(value, dict) and len(value) == 1:
        return next(iter(value.values()))
    return value


def _pool_generation(spec: dict) -> tuple[tuple[str, str], int]:
    pool = spec.get("pool") if isinstance(spec.get("pool"), dict) else {}
    generation = pool.get("generation")
    return (str(spec.get("driver")), str(pool.get("name") or "")), (
        generation if isinstance(generation, int) else 0
    )


def _newest_generations(items: list[Any]) -> dict[tuple[str, str], int]:
    """The highest ``spec.pool.generation`` of each (driver, pool): resource.k8s.io/v1 ResourcePool
    (k8s.io/api resource/v1 types.go) — "Consumers of ResourceSlices should only consider resources
    from the pool with the highest generation number" (older slices linger while a driver restarts
    and republishes)."""
    newest: dict[tuple[str, str], int] = {}
    for item in items:
        spec = item.get("spec") if isinstance(item, dict) else None
        if isinstance(spec, dict) and spec.get("driver"):
            pool, generation = _pool_generation(spec)
            newest[pool] = max(newest.get(pool, generation), generation)
    return newest


def _ascend_physical_id(driver: str, plain: dict[str, Any]) -> int | None:
    """``physicalID`` of a device of HAMi's Ascend driver (an int attribute), else None."""
    value = plain.get("physicalID") if driver == ASCEND_DRA_DRIVER else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def slices_parse(items: list[Any]) -> list[SliceDevice]:
    """``resource.k8s.io/v1`` ResourceSlice objects → one :class:`SliceDevice` per device of a node,
    from the newest generation of each pool only."""
    out: list[SliceDevice] = []
    newest = _newest_generations(items)
    for i, item in enumerate(items):
        where = f"items[{i}]"
        if not isinstance(item, dict):
            raise ValidationFailed(_("%(where)s is not an object") % {"where": where})
        name = (item.get("metadata") or {}).get("name") or ""
        spec = item.get("spec")
        if not isinstance(spec, dict) or not spec.get("driver"):
            raise ValidationFailed(
                _("%(where)s: spec.driver is missing") % {"where": where},
                details={"field": f"{where}.spec.driver"},
            )
        devices = spec.get("devices") or []
        if not isinstance(devices, list):
            raise ValidationFailed(_("%(where)s: spec.devices must be a list") % {"where": where})
        node = spec.get("nodeName")
        if not node:
            continue  # network-attached devices (allNodes / nodeSelector): no node to file them under
        pool, generation = _pool_generation(spec)
        if generation < newest[pool]:
            continue  # a stale slice of a pool its driver has republished
        for j, device in enumerate(devices):
            if not isinstance(device, dict) or not device.get("name"):
                raise ValidationFailed(
                    _("%(where)s: spec.devices[%(j)d].name is missing") % {"where": where, "j": j},
                    details={"field": f"{where}.spec.devices[{j}].name"},
                )
            attrs = {str(k): _attribute(v) for k, v in (device.get("attributes") or {}).items()}
            # Attribute names may be qualified with the driver's domain ("gpu.nvidia.com/uuid").
            plain = {k.rsplit("/", 1)[-1]: v for k, v in attrs.items()}
            out.append(
                SliceDevice(
                    node=str(node),
                    driver=str(spec["driver"]),
                    slice=str(name),
                    device=str(device["name"]),
                    # HAMi's Ascend driver publishes no stable uuid (source: "<node>-<logic id>"; a
                    # development build: the chip UUID), so it is never taken as the card's.
                    uuid="" if str(spec["driver"]) == ASCEND_DRA_DRIVER else str(plain.get("uuid") or ""),
                    physical_id=_ascend_physical_id(str(spec["driver"]), plain),
                    # AMD: pciAddr; NVIDIA: resource.kubernetes.io/pciBusID (a MIG device: its parent's);
                    # Hygon dra.hygon.com: none, the device name encodes it (hcu-0000-3b-00-0)
                    pci=pci_address_sysfs(plain.get("pciAddr") or plain.get("pciBusID"))
                    or pci_address_sysfs(
                        hygon.device_name_pci(device["name"]) if spec["driver"] == hygon.DRA_DRIVER else ""
                    ),
                    parent_uuid=str(plain.get("parentUUID") or ""),
                    parent_pci=pci_address_sysfs(plain.get("parentPciAddr")),
                    attributes=attrs,
                    capacity={
                        str(k).rsplit("/", 1)[-1]: (v.get("value") if isinstance(v, dict) else v)
                        for k, v in (device.get("capacity") or {}).items()
                    },
                )
            )
    return out


def sync_input_load(text: str | bytes, *, source: str = "input") -> dict[str, list[dict]]:
    """A file's Nodes and ResourceSlices: ``{"nodes": [...], "slices": [...]}``.

    Accepts a ``NodeList`` / ``ResourceSliceList`` (what the API returns) or a ``kind: List`` of
    Nodes / ResourceSlices (``kubectl get nodes -o yaml``), in YAML or JSON."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValidationFailed(
            _("%(source)s is not YAML or JSON: %(error)s") % {"source": source, "error": e}
        ) from e
    if not isinstance(doc, dict) or not doc.get("kind"):
        raise ValidationFailed(
            _("%(source)s: expected a NodeList, ResourceSliceList or List with a kind") % {"source": source}
        )
    kind = doc["kind"]
    items = doc.get("items")
    if kind not in ("NodeList", "ResourceSliceList", "List"):
        raise ValidationFailed(
            _("%(source)s: kind %(kind)s is not a NodeList, ResourceSliceList or List")
            % {"source": source, "kind": kind},
            details={"kind": kind},
        )
    if not isinstance(items, list):
        raise ValidationFailed(_("%(source)s: items must be a list") % {"source": source})
    out: dict[str, list[dict]] = {"nodes": [], "slices": []}
    for i, item in enumerate(items):
        item_kind = item.get("kind") if isinstance(item, dict) else None
        if kind == "NodeList":
            item_kind = item_kind or "Node"
        elif kind == "ResourceSliceList":
            item_kind = item_kind or "ResourceSlice"
        if item_kind == "Node":
            out["nodes"].append(item)
        elif item_kind == "ResourceSlice":
            out["slices"].append(item)
        else:
            raise ValidationFailed(
                _("%(source)s: items[%(i)d] is a %(kind)s, not a Node or ResourceSlice")
                % {"source": source, "i": i, "kind": item_kind or "?"}
            )
    return out


# --------------------------------------------------------------------------------------------------
# reading a live cluster (no transaction open)


def cluster_read(cluster: Cluster) -> tuple[list[dict], list[dict] | None]:
    """The cluster's Nodes and ResourceSlices (None when the API server serves no resource.k8s.io/v1)."""
    from kubernetes import client

    from apps.clusters.backend import KubernetesBackend, PermanentBackendError

    backend = KubernetesBackend(cluster)
    try:
        nodes = backend._call("list nodes", client.CoreV1Api(backend.api_client).list_node)
        try:
            slices = backend._call(
                "list resourceslices", client.ResourceV1Api(backend.api_client).list_resource_slice
            )
        except PermanentBackendError as e:
            if e.status != 404:
                raise
            slices = None  # no DRA API (Kubernetes < 1.34, or the group is switched off)
    finally:
        backend.close()
    return nodes.get("items") or [], (slices.get("items") or []) if slices is not None else None


# --------------------------------------------------------------------------------------------------
# writing the ledger


@dataclass
class SyncReport:
    cluster: str
    dry_run: bool
    nodes: list[dict] = field(default_factory=list)
    slices: list[dict] = field(default_factory=list)
    drift: list[dict] = field(default_factory=list)
    created_nodes: list[str] = field(default_factory=list)
    created_devices: int = 0
    confirmed: list[str] = field(default_factory=list)
    events: int = 0
    patches: int = 0

    def as_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> dict:
        return {
            "nodes": len(self.nodes),
            "created": len(self.created_nodes),
            "drift": len(self.drift),
            "events": self.events,
            "patches": self.patches,
        }


class _Sync:
    def __init__(self, cluster: Cluster, report: SyncReport, actor: Any):
        self.cluster, self.report, self.actor = cluster, report, actor
        self.actor_label = actor_fields(actor)["actor_label"][:150]

    def drift(
        self,
        node: Node,
        key: str,
        state: dict,
        normal: dict,
        *,
        kind: str,
        message: str,
        severity: str = DeviceEvent.Severity.WARNING,
        device: Device | None = None,
    ) -> None:
        """Note the drift ``key`` of ``node`` in ``state``; an event only when that differs from the
        last state recorded for the key (no record yet = ``normal``)."""
        if state != normal:
            self.report.drift.append({"node": node.name, "drift": key, **state, "message": message})
        last = (
            DeviceEvent.objects.filter(node=node, after__drift=key)
            .order_by("-created_at", "-id")
            .values_list("after", flat=True)
            .first()
        )
        previous = {k: v for k, v in last.items() if k != "drift"} if last else normal
        if previous == state:
            return
        DeviceEvent.objects.create(
            node=node,
            device=device,
            kind=kind,
            severity=severity if state != normal else DeviceEvent.Severity.INFO,
            message=message[:500],
            before={"drift": key, **previous},
            after={"drift": key, **state},
            actor_label=self.actor_label,
        )
        self.report.events += 1


def _pool_for(cluster: Cluster, labels: dict[str, str]) -> Pool:
    slug = labels.get(POOL_LABEL)
    if slug:
        pool = Pool.objects.filter(cluster=cluster, slug=slug).first()
        if pool is not None:
            return pool
    pool, _created = Pool.objects.get_or_create(
        cluster=cluster, slug=DEFAULT_POOL_SLUG, defaults={"name": f"{cluster.name} default"}
    )
    return pool


def _cards(view: NodeView) -> dict[str, int]:
    """vendor -> whole cards in capacity."""
    out: dict[str, int] = {}
    for res, n in view.capacity.items():
        vendor = WHOLE_DEVICE_RESOURCES.get(res)
        if vendor:
            out[vendor] = out.get(vendor, 0) + n
    return out


def _node_create(s: _Sync, view: NodeView) -> Node:
    pool = _pool_for(s.cluster, view.labels)
    node = Node(cluster=s.cluster, pool=pool, name=view.name, labels=view.labels, taints=view.taints)
    node.full_clean()
    node.save()
    model = next((view.labels[k] for k in _MODEL_LABELS if view.labels.get(k)), "")
    devices = []
    for vendor, count in sorted(_cards(view).items()):
        for index in range(count):
            device = Device(node=node, vendor=vendor, index=index, raw_model_name=model[:150])
            device.full_clean(validate_unique=False, validate_constraints=False)
            devices.append(device)
    Device.objects.bulk_create(devices)
    s.report.created_devices += len(devices)
    message = NODE_FOUND % {
        "name": view.name,
        "pool": pool.slug,
        "cards": len(devices),
    }
    DeviceEvent.objects.create(
        node=node,
        kind=DeviceEvent.Kind.REGISTERED,
        message=message[:500],
        after={"pool": pool.slug, "cards": _cards(view)},
        actor_label=s.actor_label,
    )
    s.report.events += 1
    change_record_create(actor=s.actor, action="node.sync_create", obj=node, after={"cards": _cards(view)})
    s.report.created_nodes.append(view.name)
    return node


def _owned(key: str) -> bool:
    return key.startswith(SUANCHI_PREFIX)


def _taint_key(t: dict) -> tuple:
    return (t.get("key", ""), t.get("value", ""), t.get("effect", ""))


def _sync_labels(s: _Sync, node: Node, view: NodeView) -> None:
    """Outside changes to others' labels/taints are kept (taken into the ledger); Suanchi's are
    restored through the outbox. Both are drift events."""
    ours = {k: v for k, v in node.labels.items() if _owned(k)}
    live_ours = {k: v for k, v in view.labels.items() if _owned(k)}
    theirs_live = {k: v for k, v in view.labels.items() if not _owned(k)}
    theirs_ledger = {k: v for k, v in node.labels.items() if not _owned(k)}
    our_taints = sorted((t for t in node.taints if _owned(t.get("key", ""))), key=_taint_key)
    live_our_taints = sorted((t for t in view.taints if _owned(t.get("key", ""))), key=_taint_key)
    their_taints_live = [t for t in view.taints if not _owned(t.get("key", ""))]
    their_taints_ledger = [t for t in node.taints if not _owned(t.get("key", ""))]

    if theirs_live != theirs_ledger or sorted(map(_taint_key, their_taints_live)) != sorted(
        map(_taint_key, their_taints_ledger)
    ):
        before = {"labels": node.labels, "taints": node.taints}
        node.labels = {**theirs_live, **ours}
        node.taints = their_taints_live + [t for t in node.taints if _owned(t.get("key", ""))]
        node.save(update_fields=["labels", "taints", "updated_at"])
        changed = sorted(set(theirs_live.items()) ^ set(theirs_ledger.items()))
        DeviceEvent.objects.create(
            node=node,
            kind=DeviceEvent.Kind.UPDATED,
            severity=DeviceEvent.Severity.INFO,
            message=(
                LABELS_KEPT
                % {"name": node.name, "keys": ", ".join(sorted({k for k, _v in changed})) or TAINTS}
            )[:500],
            before=before,
            after={"labels": node.labels, "taints": node.taints},
            actor_label=s.actor_label,
        )
        s.report.events += 1
        s.report.drift.append(
            {"node": node.name, "drift": "labels-kept", "keys": sorted({k for k, _v in changed})}
        )
        change_record_create(
            actor=s.actor,
            action="node.sync_labels",
            obj=node,
            before=before,
            after={"labels": node.labels, "taints": node.taints},
        )

    wrong = sorted(k for k in set(ours) | set(live_ours) if ours.get(k) != live_ours.get(k))
    taints_wrong = list(map(_taint_key, our_taints)) != list(map(_taint_key, live_our_taints))
    state = {"keys": wrong, "taints": taints_wrong}
    s.drift(
        node,
        "suanchi-labels",
        state,
        {"keys": [], "taints": False},
        kind=DeviceEvent.Kind.UPDATED,
        message=(LABELS_RESTORING % {"name": node.name, "keys": ", ".join(wrong) or TAINTS})
        if wrong or taints_wrong
        else LABELS_OK % {"name": node.name},
    )
    if not (wrong or taints_wrong):
        return
    stream = object_stream(s.cluster, "Node", "", node.name)
    if PushAction.objects.filter(cluster=s.cluster, stream=stream, state=PushAction.State.PENDING).exists():
        return  # a restoring patch is already on its way
    manifest = node_patch(node)
    for key in set(live_ours) - set(ours):  # a Suanchi label added outside: remove it (value null)
        manifest["metadata"]["labels"][key] = None
    push_object_enqueue(cluster=s.cluster, manifest=manifest, actor=s.actor, verb="patch")
    s.report.patches += 1


def _sync_node(s: _Sync, node: Node, view: NodeView, created: bool) -> None:
    s.drift(
        node,
        "ready",
        {"ready": view.ready, "reason": view.ready_reason},
        {"ready": True, "reason": ""},
        kind=DeviceEvent.Kind.NOT_READY if not view.ready else DeviceEvent.Kind.STATUS_CHANGED,
        message=(
            NOT_READY % {"name": node.name, "reason": view.ready_reason}
            if not view.ready
            else READY_AGAIN % {"name": node.name}
        ),
    )
    s.drift(
        node,
        "presence",
        {"present": True},
        {"present": True},
        kind=DeviceEvent.Kind.STATUS_CHANGED,
        message=LISTED_AGAIN % {"name": node.name},
    )
    healthy: dict[str, int] = {}
    for vendor in Device.objects.filter(node=node, health=Device.Health.HEALTHY).values_list(
        "vendor", flat=True
    ):
        healthy[vendor] = healthy.get(vendor, 0) + 1
    for res, vendor in sorted(WHOLE_DEVICE_RESOURCES.items()):
        if res not in view.capacity and res not in view.allocatable:
            continue
        have = healthy.get(vendor, 0)
        allocatable = view.allocatable.get(res, 0)
        short = max(0, have - allocatable)
        s.drift(
            node,
            f"allocatable:{res}",
            {"short": short, "allocatable": allocatable} if short else {"short": 0},
            {"short": 0},
            kind=DeviceEvent.Kind.CONFLICT,
            message=(
                PLUGIN_DROPPED
                % {"name": node.name, "alloc": allocatable, "res": res, "have": have, "short": short}
                if short
                else ALLOCATABLE_OK % {"name": node.name, "res": res}
            ),
        )
    if not created:
        _sync_labels(s, node, view)


def _card_pci(card: Device) -> str:
    return pci_address_sysfs(card.pci_bus_id)


def _slice_card(d: SliceDevice, cards: list[Device]) -> Device | None:
    """The ledger card slice device ``d`` is, or is a partition of (None: the ledger lacks it).

    A partition names its card: NVIDIA MIG devices by ``parentUUID`` (on a MIG-enabled GPU the
    driver publishes only these, not the card), AMD partitions by ``parentPciAddr``. A card is
    its UUID (NVIDIA), else its PCI address (AMD publishes no UUID) when one side has no UUID."""
    if d.physical_id is not None:  # HAMi's Ascend driver: the chip whose index is its physicalID
        return next((c for c in cards if c.index == d.physical_id), None)
    if d.parent_uuid or d.parent_pci:
        return next(
            (
                c
                for c in cards
                if (d.parent_uuid and c.uuid == d.parent_uuid)
                or (d.parent_pci and _card_pci(c) == d.parent_pci)
            ),
            None,
        )
    if d.uuid:
        match = next((c for c in cards if c.uuid == d.uuid), None)
        if match is not None:
            return match
    if d.pci:
        return next((c for c in cards if _card_pci(c) == d.pci and not (d.uuid and c.uuid)), None)
    return None


def _uuid_learn(s: _Sync, node: Node, card: Device, d: SliceDevice) -> None:
    """A card the ledger knows by PCI address only takes the UUID its driver publishes."""
    if card.uuid or not d.uuid or d.parent_uuid or Device.objects.filter(uuid=d.uuid).exists():
        return
    before = {"uuid": card.uuid}
    card.uuid = d.uuid
    card.save(update_fields=["uuid", "updated_at"])
    DeviceEvent.objects.create(
        node=node,
        device=card,
        kind=DeviceEvent.Kind.UPDATED,
        message=(CARD_UUID % {"index": card.index, "name": node.name, "uuid": d.uuid, "slice": d.slice})[
            :500
        ],
        before=before,
        after={"uuid": d.uuid},
        actor_label=s.actor_label,
    )
    s.report.events += 1


def _mig_learn(s: _Sync, node: Node, card: Device, published: list[dict[str, Any]]) -> None:
    """Keep the MIG devices the NVIDIA DRA driver publishes for ``card`` (their own UUIDs, profiles and
    placements) so a MIG claim selects exactly the ledger's instance; an event when they change."""
    published = sorted(published, key=lambda m: (m["start"] is None, m["start"] or 0, m["uuid"]))
    if (card.dra_mig_devices or []) == published:
        return
    before = {"dra_mig_devices": card.dra_mig_devices or []}
    card.dra_mig_devices = published
    card.save(update_fields=["dra_mig_devices", "updated_at"])
    shown = ", ".join(f"{m['profile']}@{m['start']} {m['uuid']}" for m in published) or "-"
    DeviceEvent.objects.create(
        node=node,
        device=card,
        kind=DeviceEvent.Kind.UPDATED,
        message=(CARD_MIG_DEVICES % {"index": card.index, "name": node.name, "devices": shown})[:500],
        before=before,
        after={"dra_mig_devices": published},
        actor_label=s.actor_label,
    )
    s.report.events += 1


def _amd_learn(s: _Sync, node: Node, card: Device, published: list[dict[str, Any]]) -> None:
    """Keep what the AMD GPU DRA driver publishes for ``card`` (the whole card, or its partitions and
    their mode) in ``Device.dra_mig_devices``, so a claim for a mode the card is not in is refused
    before it leaves a pod Pending (apps.clusters.manifests.amd_mode_refusal); an event on change."""
    published = sorted(published, key=lambda d: d["device"])
    if (card.dra_mig_devices or []) == published:
        return
    before = {"dra_mig_devices": card.dra_mig_devices or []}
    card.dra_mig_devices = published
    card.save(update_fields=["dra_mig_devices", "updated_at"])
    shown = ", ".join(f"{d['device']} {d['type']} {d['profile']}".strip() for d in published) or "-"
    DeviceEvent.objects.create(
        node=node,
        device=card,
        kind=DeviceEvent.Kind.UPDATED,
        message=(CARD_AMD_DEVICES % {"index": card.index, "name": node.name, "devices": shown})[:500],
        before=before,
        after={"dra_mig_devices": published},
        actor_label=s.actor_label,
    )
    s.report.events += 1


def _sync_slices(s: _Sync, nodes: dict[str, Node], devices: list[SliceDevice]) -> None:
    by_node: dict[str, list[SliceDevice]] = {}
    for d in devices:
        by_node.setdefault(d.node, []).append(d)
    for name, items in sorted(by_node.items()):
        node = nodes.get(name)
        if node is None:
            continue  # a slice of a node Kubernetes does not list: nothing to file it under
        vendors = {driver_vendor(d.driver) for d in items} - {None}
        cards = list(
            Device.objects.filter(node=node, vendor__in=vendors)
            .exclude(health__in=[Device.Health.RETIRED, Device.Health.LOST])
            .order_by("vendor", "index")
        )
        # Cards the ledger cannot name (no UUID, no PCI address): a device of their vendor that
        # matches nothing may be one of them, so it is unknown rather than drift.
        unnamed = Counter(c.vendor for c in cards if not c.uuid and not _card_pci(c))
        published: set[int] = set()
        migs: dict[int, list[dict[str, Any]]] = {}
        for d in items:
            vendor = driver_vendor(d.driver)
            s.report.slices.append(
                {"node": name, "uuid": d.uuid, "pci": d.pci, "driver": d.driver, "device": d.device}
            )
            if vendor is None or not (
                d.uuid or d.pci or d.parent_uuid or d.parent_pci or d.physical_id is not None
            ):
                continue
            match = _slice_card(d, [c for c in cards if c.vendor == vendor])
            if match is not None:
                published.add(match.pk)
                _uuid_learn(s, node, match, d)
                record = d.mig_record() if match.vendor == "nvidia" else d.amd_record()
                mig_list = migs.setdefault(match.pk, [])
                if record is not None:
                    mig_list.append(record)
            elif unnamed[vendor] > 0 and not (d.parent_uuid or d.parent_pci):
                unnamed[vendor] -= 1
                continue
            s.drift(
                node,
                f"slice-device:{d.key}",
                {"in_ledger": match is not None},
                {"in_ledger": True},
                kind=DeviceEvent.Kind.CONFLICT,
                message=(
                    SLICE_UNKNOWN_DEVICE % {"slice": d.slice, "driver": d.driver, "uuid": d.key, "name": name}
                    if match is None
                    else SLICE_DEVICE_OK % {"uuid": d.key, "name": name}
                ),
            )
        for card in cards:
            if card.pk in migs and card.vendor == "nvidia":
                _mig_learn(s, node, card, migs[card.pk])
            elif card.pk in migs and card.vendor == "amd":
                _amd_learn(s, node, card, migs[card.pk])
            ident = card.uuid or _card_pci(card)
            if not ident:
                continue
            present = card.pk in published
            s.drift(
                node,
                f"ledger-device:{ident}",
                {"in_slice": present},
                {"in_slice": True},
                kind=DeviceEvent.Kind.CONFLICT,
                device=card,
                message=(
                    CARD_NOT_PUBLISHED % {"uuid": ident, "name": name}
                    if not present
                    else CARD_PUBLISHED % {"uuid": ident, "name": name}
                ),
            )


def cluster_sync_apply(
    *,
    cluster: Cluster,
    nodes: list[dict],
    slices: list[dict] | None = None,
    dry_run: bool = False,
    actor: Any = "cluster-sync",
) -> SyncReport:
    """Compare Kubernetes' Nodes (and ResourceSlices, when given) with the ledger of ``cluster``.

    Checks the input first (``ValidationFailed``, nothing written), then writes in one transaction
    (rolled back when ``dry_run``: the report says what a sync would do)."""
    views = nodes_parse(nodes)
    slice_devices = slices_parse(slices) if slices is not None else None
    report = SyncReport(cluster=cluster.slug, dry_run=dry_run)
    with transaction.atomic():
        locked = Cluster.objects.select_for_update().get(pk=cluster.pk)
        s = _Sync(locked, report, actor)
        ledger = {
            n.name: n for n in Node.objects.filter(cluster=locked).select_related("pool").order_by("pk")
        }
        seen: dict[str, Node] = {}
        for view in views:
            node = ledger.get(view.name)
            created = node is None
            if created:
                node = _node_create(s, view)
            seen[view.name] = node
            _sync_node(s, node, view, created)
            report.nodes.append(
                {
                    "name": view.name,
                    "ready": view.ready,
                    "ready_reason": view.ready_reason,
                    "capacity": view.capacity,
                    "allocatable": view.allocatable,
                    "pool": node.pool.slug if node.pool_id else None,
                    "created": created,
                }
            )
        for name, node in sorted(ledger.items()):
            if name in seen or node.status == Node.Status.RETIRED or node.pending_approval:
                continue
            s.drift(
                node,
                "presence",
                {"present": False},
                {"present": True},
                kind=DeviceEvent.Kind.STATUS_CHANGED,
                message=NODE_NOT_LISTED % {"name": name},
            )
        if slice_devices is not None:
            _sync_slices(s, seen, slice_devices)
        report.confirmed = [
            n.name for n in node_confirm_in_cluster(cluster=locked, node_names=list(seen), actor=actor)
        ]
        if dry_run:
            transaction.set_rollback(True)
        else:
            locked.last_synced_at = timezone.now()
            locked.last_sync = {**report.summary(), "error": ""}
            locked.save(update_fields=["last_synced_at", "last_sync", "updated_at"])
    return report


def outside_changes_take(*, cluster: Cluster, nodes: list[dict], actor: Any = "cluster-sync") -> None:
    """Take the labels and taints changed outside Suanchi on these live Nodes into the ledger now, as
    the next sync would (``_sync_labels``): e.g. the NoExecute taint whose eviction reconcile just
    saw, so that the engine keeps the job's next attempt off that node while the taint is there —
    and only while it is there."""
    views = nodes_parse(nodes)
    with transaction.atomic():
        s = _Sync(cluster, SyncReport(cluster=cluster.slug, dry_run=False), actor)
        ledger = {n.name: n for n in Node.objects.filter(cluster=cluster, name__in=[v.name for v in views])}
        for view in views:
            if view.name in ledger:
                _sync_labels(s, ledger[view.name], view)


def cluster_sync(*, cluster: Cluster, actor: Any = "cluster-sync") -> SyncReport:
    """Read the live cluster (outside any transaction), then apply. A simulated cluster has no
    Kubernetes API to read: ``ValidationFailed``."""
    from apps.clusters.backend import BackendError

    if cluster.backend != Cluster.Backend.KUBERNETES:
        raise ValidationFailed(
            _("cluster %(slug)s is simulated: there is no Kubernetes API to sync from")
            % {"slug": cluster.slug}
        )
    previous = cluster.last_sync or {}
    try:
        nodes, slices = cluster_read(cluster)
    except BackendError as e:
        Cluster.objects.filter(pk=cluster.pk).update(
            last_sync={"error": e.message[:500]}, updated_at=timezone.now()
        )
        sync_outcome_log(cluster, previous=previous, error=e.message)  # one line per change
        raise
    report = cluster_sync_apply(cluster=cluster, nodes=nodes, slices=slices, actor=actor)
    sync_outcome_log(cluster, previous=previous, error="")
    return report
