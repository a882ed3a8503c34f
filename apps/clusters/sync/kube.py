"""What Kubernetes says, checked: Nodes and DRA ResourceSlices as plain dicts (read from a live
cluster outside any transaction, or from a file), the vendor of a resource or a DRA driver."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from django.utils.translation import gettext as _

from apps.clusters import hygon
from apps.clusters.ascend import DRA_DRIVER as ASCEND_DRA_DRIVER
from apps.clusters.manifests import pci_address_sysfs
from apps.core.errors import ValidationFailed
from apps.inventory.models import Cluster, node_name_problem

SUANCHI_PREFIX = "suanchi.io/"
POOL_LABEL = "suanchi.io/pool"
DEFAULT_POOL_SLUG = "default"


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

    from apps.clusters.backends.errors import PermanentBackendError
    from apps.clusters.backends.kubernetes import KubernetesBackend

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
