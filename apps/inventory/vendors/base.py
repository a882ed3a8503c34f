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
        """The ``--dry-run --json`` shape: {"node": {...}, "devices": [...], "links": [...]}."""
        return {
            "vendor": self.vendor,
            "kind": self.kind,
            "node": dict(self.node),
            "devices": [asdict(d) for d in self.devices],
            "links": [asdict(link) for link in self.links],
            "full_inventory": self.full_inventory,
            "topology": self.topology,
            "warnings": list(self.warnings),
        }
