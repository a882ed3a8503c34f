"""Device matching: which ledger card a sample belongs to."""

from __future__ import annotations

from apps.inventory.models import Cluster, Device
from apps.telemetry.samples import Sample, memory_cap_mib, power_cap_w


class DeviceResolver:
    """Ledger devices by UUID, serial, (node, PCIe bus id) or (node, vendor, index); retired cards never match."""

    def __init__(self, *, cluster: Cluster | None = None) -> None:
        qs = Device.objects.exclude(health=Device.Health.RETIRED)
        if cluster is not None:
            qs = qs.filter(node__cluster=cluster)
        rows = list(
            qs.values_list(
                "pk",
                "uuid",
                "serial",
                "pci_bus_id",
                "index",
                "vendor",
                "node__name",
                "node_id",
                "health",
                "memory_mib",
                "device_model__memory_mib",
                "device_model__tdp_w",
            )
        )
        # Lost cards first, so a live card in the same slot wins.
        rows.sort(key=lambda r: r[8] != Device.Health.LOST)
        self.node_of: dict[int, int] = {}
        # Per card: (memory cap MiB, power cap W) that its readings must stay within.
        self.limits: dict[int, tuple[float, float]] = {
            r[0]: (memory_cap_mib(r[9], r[10]), power_cap_w(r[11])) for r in rows
        }
        self.by_uuid: dict[str, int] = {}
        self.by_serial: dict[str, int] = {}
        self.by_pci: dict[tuple[str, str], int] = {}
        self.by_index: dict[tuple[str, str, int], int] = {}
        for pk, uuid, serial, pci, index, vendor, node, node_id, *_rest in rows:
            self.node_of[pk] = node_id
            if uuid:
                self.by_uuid[uuid] = pk
            if serial:
                self.by_serial[serial] = pk
            if pci:
                self.by_pci[(node, pci.upper())] = pk
            self.by_index[(node, vendor, index)] = pk

    def resolve(self, s: Sample) -> int | None:
        if s.device_id is not None:
            return s.device_id if s.device_id in self.node_of else None
        if s.uuid and s.uuid in self.by_uuid:
            return self.by_uuid[s.uuid]
        if s.serial and s.serial in self.by_serial:
            return self.by_serial[s.serial]
        if s.node:
            if s.pci_bus_id and (s.node, s.pci_bus_id) in self.by_pci:
                return self.by_pci[(s.node, s.pci_bus_id)]
            if s.index is not None and s.vendor:
                return self.by_index.get((s.node, s.vendor, s.index))
        return None


def _describe(s: Sample) -> str:
    parts = [
        f"{k}={v}"
        for k, v in (
            ("device_id", s.device_id),
            ("uuid", s.uuid),
            ("serial", s.serial),
            ("pci", s.pci_bus_id),
            ("node", s.node),
            ("index", s.index),
        )
        if v is not None
    ]
    return " ".join(parts) or "(no identity)"
