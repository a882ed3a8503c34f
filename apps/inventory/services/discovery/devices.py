"""How a report's devices meet the ledger: matching, the fields and health it sets, the node facts,
and the topology links and groups."""

from __future__ import annotations

from typing import Any

from apps.catalog.selectors import device_model_match
from apps.inventory.models import (
    Device,
    DeviceEvent,
    DeviceLink,
    Node,
)
from apps.inventory.services.discovery.common import (
    DEVICE_REPORT_FIELDS,
    NODE_VERSION_FIELDS,
    UNKNOWN,
    VERSION_CHANGED,
    IngestResult,
    _Recorder,
)
from apps.inventory.vendors.base import ParsedDevice, ParsedReport


def _match_devices(
    devices: list[ParsedDevice], existing: list[Device], by_uuid: dict[str, Device]
) -> list[tuple[ParsedDevice, Device | None]]:
    """Pair each parsed device with a ledger device: UUID (any node), then serial, PCIe bus, index."""
    taken: set[int] = set()
    pairs: list[tuple[ParsedDevice, Device | None]] = []
    local = [d for d in existing if d.health != Device.Health.RETIRED]

    def first(predicate) -> Device | None:
        for device in local:
            if device.pk not in taken and predicate(device):
                return device
        return None

    for p in devices:
        match: Device | None = None
        if p.uuid and p.uuid in by_uuid and by_uuid[p.uuid].pk not in taken:
            match = by_uuid[p.uuid]
        if match is None and p.serial:
            match = first(
                lambda d, p=p: d.serial == p.serial and (not d.uuid or not p.uuid or d.uuid == p.uuid)
            )
        if match is None and p.pci_bus_id:
            match = first(
                lambda d, p=p: d.pci_bus_id == p.pci_bus_id and (not d.uuid or not p.uuid or d.uuid == p.uuid)
            )
        if match is None:
            # Same slot: only when the ledger row has no UUID to contradict the report's.
            match = first(
                lambda d, p=p: d.index == p.index and (not d.uuid or not p.uuid or d.uuid == p.uuid)
            )
        if match is not None:
            taken.add(match.pk)
        pairs.append((p, match))
    return pairs


def _model_for(parsed: ParsedReport, p: ParsedDevice, cache: dict) -> Any:
    key = (p.model_name, p.pci_device_id, p.memory_mib)
    if key not in cache:
        cache[key] = (
            device_model_match(
                vendor=parsed.vendor,
                raw_name=p.model_name,
                pci_device_id=p.pci_device_id,
                memory_mib=p.memory_mib,
            )
            if (p.model_name or p.pci_device_id)
            else None
        )
    return cache[key]


def _apply_node_facts(node: Node, parsed: ParsedReport, rec: _Recorder) -> bool:
    changed = False
    for name in NODE_VERSION_FIELDS:
        value = parsed.node.get(name)
        if value is None:
            continue
        value = str(value)
        old = getattr(node, name)
        if old != value:
            setattr(node, name, value)
            changed = True
            rec.add(
                DeviceEvent.Kind.VERSION_CHANGED,
                VERSION_CHANGED % {"field": name.replace("_", " "), "old": old or UNKNOWN, "new": value},
                before={name: old or None},
                after={name: value},
            )
    nics = parsed.topology.get("nics") if parsed.topology else None
    if nics:
        rdma = []
        for alias, info in sorted(nics.items()):
            gpu_links = info.get("gpu_links") or {}
            nearest = sorted(int(i) for i, link in gpu_links.items() if link in ("PIX", "PXB"))
            rdma.append({"name": info.get("name") or alias, "alias": alias, "nearest_gpus": nearest})
        if rdma != node.rdma_nics:
            rec.add(
                DeviceEvent.Kind.UPDATED,
                "RDMA NICs changed",
                before={"rdma_nics": node.rdma_nics},
                after={"rdma_nics": rdma},
            )
            node.rdma_nics = rdma
            changed = True
    return changed


def _device_changes(device: Device, p: ParsedDevice, model, *, creating: bool) -> dict[str, tuple[Any, Any]]:
    changes: dict[str, tuple[Any, Any]] = {}

    def setf(name: str, value: Any) -> None:
        old = getattr(device, name)
        if old != value:
            changes[name] = (old, value)
            setattr(device, name, value)

    for name in DEVICE_REPORT_FIELDS:
        value = getattr(p, name)
        if value is None or value == "":
            continue
        setf(name, value)
    if p.index != device.index:
        setf("index", p.index)
    if p.model_name:
        setf("raw_model_name", p.model_name[:150])
    if p.model_name or p.pci_device_id:
        setf("device_model", model)
        setf("model_unrecognized", model is None)
    if p.mig_enabled is not None:
        setf("mig_enabled", p.mig_enabled)
        setf("partitions", list(p.partitions))
    if p.pcie_switch is not None:  # "" clears it: the topology report shows no switch
        setf("pcie_switch", p.pcie_switch)
    if p.mig_profiles is not None:
        setf("mig_profiles", _merge_mig_profiles(device.mig_profiles or [], p.mig_profiles))
    return changes


def _merge_mig_profiles(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge a MIG listing into the card's profiles by profile id.

    ``-lgip`` prints names, memory and instance counts but no placements; ``-lgipp`` prints only
    placements. Each listing is complete for what it prints, so the new entries win field by field,
    and a field the listing does not print (None) keeps its stored value. A profile the new listing
    omits is dropped when the listing names its profiles (-lgip, the authority on which profiles
    exist) and kept when it does not (-lgipp).
    """
    by_id = {entry.get("id"): entry for entry in old}
    names_profiles = any(entry.get("name") is not None for entry in new)
    merged: list[dict[str, Any]] = []
    for entry in new:
        previous = by_id.pop(entry["id"], {})
        combined = dict(previous)
        combined.update({key: value for key, value in entry.items() if value is not None})
        for key, value in entry.items():
            combined.setdefault(key, value)
        merged.append(combined)
    if not names_profiles:
        merged.extend(by_id.values())
    return sorted(merged, key=lambda entry: entry["id"])


def _health_for(p: ParsedDevice) -> tuple[str | None, str]:
    if p.health == "degraded":
        return Device.Health.DEGRADED, (p.health_detail or "reported degraded")[:300]
    if p.health == "healthy":
        return Device.Health.HEALTHY, ""
    return None, ""


def _json_safe(changes: dict[str, tuple[Any, Any]], side: int) -> dict[str, Any]:
    out = {}
    for name, pair in changes.items():
        value = pair[side]
        out[name] = value.pk if hasattr(value, "pk") else value
    return out


def _apply_links(
    node: Node, parsed: ParsedReport, devices_by_index: dict[int, Device], result: IngestResult
) -> set[int]:
    """Replace the link set between the report's devices. Returns indices whose topology group changed."""
    if not parsed.links:
        return set()
    wanted: dict[tuple[int, int], str] = {}
    for link in parsed.links:
        a, b = sorted((link.a, link.b))
        if a in devices_by_index and b in devices_by_index and a != b:
            wanted[(devices_by_index[a].pk, devices_by_index[b].pk)] = link.link
        else:
            result.warnings.append(
                f"link {link.a}-{link.b} ({link.link}) names a device not in the ledger; skipped"
            )
    ids = [d.pk for d in devices_by_index.values()]
    current = {
        (min(link.device_a_id, link.device_b_id), max(link.device_a_id, link.device_b_id)): link
        for link in DeviceLink.objects.filter(node=node, device_a__in=ids, device_b__in=ids)
    }
    for pair, raw in wanted.items():
        kind, count = _link_kind(raw)
        existing = current.pop(pair, None)
        if existing is None:
            DeviceLink.objects.create(
                node=node, device_a_id=pair[0], device_b_id=pair[1], kind=kind, link=raw, nvlink_count=count
            )
            result.links_written += 1
        elif existing.link != raw or existing.device_a_id != pair[0]:
            existing.device_a_id, existing.device_b_id = pair
            existing.kind, existing.link, existing.nvlink_count = kind, raw, count
            existing.save()
            result.links_written += 1
    if current:
        DeviceLink.objects.filter(pk__in=[link.pk for link in current.values()]).delete()
        result.links_removed += len(current)


def _link_kind(raw: str) -> tuple[str, int | None]:
    upper = raw.upper()
    if upper.startswith("NV") and upper[2:].isdigit():
        return DeviceLink.Kind.NVLINK, int(upper[2:])
    if upper in DeviceLink.Kind.values:
        return upper, None
    if upper in ("XGMI", "HCCS", "MLULINK"):
        return upper, None
    # npu-smi info -t topo: HCCS_SW = "Connection traversing HCCS through a switch"; SIO = the
    # die-to-die bus inside one A3 chip (aclrtGetDevicesTopo ACL_RT_DEVS_TOPOLOGY_SIO). Both are direct
    # NPU links like HCCS.
    if upper in ("HCCS_SW", "SIO"):
        return DeviceLink.Kind.HCCS, None
    return DeviceLink.Kind.SYS, None


def _topology_groups(parsed: ParsedReport) -> dict[int, str]:
    """Devices joined by direct device links (NVLink, xGMI, HCCS) form one group: connected components."""
    direct = [
        (link.a, link.b)
        for link in parsed.links
        if _link_kind(link.link)[0] in (DeviceLink.Kind.NVLINK, DeviceLink.Kind.XGMI, DeviceLink.Kind.HCCS)
    ]
    if not direct:
        return {}
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in direct:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    prefix = "nvlink" if parsed.vendor == "nvidia" else "link"
    return {index: f"{prefix}-{find(index)}" for index in parent}
