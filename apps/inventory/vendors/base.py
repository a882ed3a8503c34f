"""What every vendor adapter provides, and what every SMI parser returns.

Parsers are pure functions ``parse(text: str) -> ParsedReport``: no Django, no database. They raise
``ParseFailed`` (apps.core.errors) naming the line (1-based) or XML element that failed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar


@dataclass
class ParsedDevice:
    index: int
    uuid: str | None = None
    serial: str | None = None
    model_name: str | None = None  # the raw product name the tool printed
    memory_mib: int | None = None  # total device memory in MiB
    pci_bus_id: str | None = None  # normalised "0000:1A:00.0" (upper-case hex, 4-digit domain)
    numa_node: int | None = None
    firmware_version: str | None = None  # VBIOS / firmware as printed
    health: str | None = None  # "healthy" | "degraded" | None when the tool does not say
    health_detail: str | None = None  # raw text behind a non-healthy value, e.g. "Warning", "ECC DBE 2"
    pci_device_id: str | None = None  # e.g. "0x20B2"
    mig_enabled: bool | None = None
    partitions: list[dict[str, Any]] = field(default_factory=list)  # MIG instances etc.
    # PCIe switch the card sits behind, derived from topology reports (see adapter.pix_switch_ids);
    # "" = the report says it shares no switch, None = the report does not say.
    pcie_switch: str | None = None
    # MIG GPU-instance profiles from nvidia-smi mig -lgip / -lgipp: [{"id", "name", "memory_mib",
    # "max_instances", "free_instances", "placements": [{"start", "size"}] | None}]; None = not a MIG listing.
    mig_profiles: list[dict[str, Any]] | None = None
    utilization_pct: float | None = None
    memory_used_mib: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ParsedLink:
    a: int  # device index
    b: int  # device index, a < b
    link: str  # raw cell: "NV12", "PIX", "PXB", "PHB", "NODE", "SYS", "HCCS", "XGMI", ...


@dataclass
class ParsedReport:
    vendor: str  # catalog Vendor value: "nvidia", "huawei", "amd", "hygon", ...
    kind: str  # NodeReport.Kind value
    # Node-level facts; keys always present, None where the tool does not say.
    node: dict[str, Any] = field(default_factory=dict)
    devices: list[ParsedDevice] = field(default_factory=list)
    links: list[ParsedLink] = field(default_factory=list)
    # True when the report lists every device of its vendor on the node (devices missing → LOST).
    full_inventory: bool = True
    # Topology extras: NIC legend, CPU/NUMA affinity per GPU, ...
    topology: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # The kind the caller asked for: "auto" when the kind was recognised from the content.
    requested_kind: str | None = None

    NODE_KEYS: ClassVar[tuple[str, ...]] = (
        "driver_version",
        "cuda_version",
        "cann_version",
        "rocm_version",
        "dtk_version",
        "smi_version",
    )

    def __post_init__(self) -> None:
        for key in self.NODE_KEYS:
            self.node.setdefault(key, None)

    def as_dict(self) -> dict[str, Any]:
        """The ``--dry-run --json`` shape: {"node": {...}, "devices": [...], "links": [...], "mig_profiles": [...]}.

        ``kind`` is the kind that was parsed; ``requested_kind`` is "auto" when it was recognised from
        the content. ``mig_profiles`` is empty except for MIG listings (one entry per GPU and profile).
        """
        return {
            "vendor": self.vendor,
            "kind": self.kind,
            "requested_kind": self.requested_kind or self.kind,
            "node": dict(self.node),
            "devices": [asdict(d) for d in self.devices],
            "links": [asdict(link) for link in self.links],
            "mig_profiles": [
                {"gpu": d.index, **profile} for d in self.devices for profile in (d.mig_profiles or [])
            ],
            "full_inventory": self.full_inventory,
            "topology": self.topology,
            "warnings": list(self.warnings),
        }
