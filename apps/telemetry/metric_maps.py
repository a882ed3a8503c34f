"""Vendor metric maps: exporter metric names → Suanchi's normalized fields, with units.

Every name, label and unit below is from ``../shared/reference/hardware-telemetry.md`` §1
(1.1 dcgm-exporter, 1.2 Ascend npu-exporter, 1.3 AMD device-metrics-exporter, 1.4 Hygon
dcu-exporter, 1.5 Cambricon mlu-exporter, 1.6 cross-vendor cheat-sheet); Iluvatar's ix-exporter is
from its own repository (cited above its map). Canonical units: %, MiB, °C, W. Pure Python, no Django.

Memory units: dcgm reports MiB. Ascend and AMD say "MB"; the observed Ascend HBM totals (32768 MB,
65536 MB, §2 npu-smi) are powers of two, i.e. the tools' "MB" is 2^20 bytes, so MB is read as MiB
(factor 1) for both. Hygon and Cambricon report bytes (÷ 2^20); Ascend vNPU memory is KB (÷ 1024).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

MIB = 1024.0 * 1024.0

# Normalized gauge fields.
UTIL = "utilization_pct"
MEM_USED = "memory_used_mib"
MEM_TOTAL = "memory_total_mib"
MEM_FREE = "_memory_free_mib"  # dcgm: total = free + used + reserved
MEM_RESERVED = "_memory_reserved_mib"
TEMP = "temperature_c"
POWER = "power_w"


@dataclass(frozen=True)
class Gauge:
    field: str
    scale: float = 1.0
    # Lower wins when two metrics give the same field (e.g. junction before edge temperature).
    priority: int = 0


@dataclass(frozen=True)
class VendorMap:
    vendor: str  # catalog Vendor value
    gauges: dict[str, Gauge]
    # Monotonic error counters: metric name → counter key stored in rollups' error_deltas.
    counters: dict[str, str]
    # Health gauges: metric name → kind ("xid" = last XID code, "health" = 1 ok / 0 bad / -1 unknown,
    # "error_code" = fault code, non-zero is a fault, "xid_count" = XIDs seen, code in label "xid").
    health: dict[str, str]
    # Series whose only job is to tie pods to devices (value 1 per device and container).
    pod_info: tuple[str, ...] = ()
    # Name prefixes of this exporter's families (to tell "unused" from "unknown" families).
    prefixes: tuple[str, ...] = ()
    identity: Callable[[dict[str, str]], dict] = field(default=lambda labels: {})
    pod: Callable[[dict[str, str]], tuple[str | None, str | None]] = field(
        default=lambda labels: (None, None)
    )
    partition: Callable[[dict[str, str]], tuple[str, str | None]] = field(default=lambda labels: ("", None))


def normalize_pci(value: str | None) -> str | None:
    """dcgm's ``00000000:1A:00.0`` or a bare ``1a:00.0`` → the ledger's ``0000:1A:00.0``."""
    if not value:
        return None
    text = value.strip()
    parts = text.split(":")
    if len(parts) == 3:
        domain, bus, rest = parts
        domain = domain[-4:].rjust(4, "0")
    elif len(parts) == 2:
        domain, (bus, rest) = "0000", parts
    else:
        return text.upper()
    return f"{domain}:{bus.rjust(2, '0')}:{rest}".upper()


def _int(value: str | None) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _node(labels: dict[str, str], *names: str) -> str | None:
    # ``node`` is added by our scrape configs (platform/prometheus, seed 004 relabel) and equals the
    # Kubernetes node name; the exporters' own host labels come next.
    for name in ("node", *names):
        if labels.get(name):
            return labels[name]
    return None


def _blank(value: str | None) -> str | None:
    return value or None


# --- NVIDIA dcgm-exporter (§1.1) -----------------------------------------------------------------


def _nvidia_identity(labels: dict[str, str]) -> dict:
    return {
        "uuid": _blank(labels.get("UUID") or labels.get("uuid")),
        "serial": None,
        "pci_bus_id": normalize_pci(labels.get("pci_bus_id")),
        "index": _int(labels.get("gpu")),
        # ``Hostname`` up to 4.5.3-4.8.2, ``hostname`` from d5e5f51 (PR #655): accept both.
        "node": _node(labels, "Hostname", "hostname"),
    }


def _nvidia_pod(labels: dict[str, str]) -> tuple[str | None, str | None]:
    return (
        _blank(labels.get("namespace") or labels.get("pod_namespace")),
        _blank(labels.get("pod") or labels.get("pod_name")),
    )


def _nvidia_partition(labels: dict[str, str]) -> tuple[str, str | None]:
    profile = labels.get("GPU_I_PROFILE")
    if not profile:
        return "", None
    return f"{profile}/{labels.get('GPU_I_ID', '')}", profile


NVIDIA = VendorMap(
    vendor="nvidia",
    gauges={
        "DCGM_FI_DEV_GPU_UTIL": Gauge(UTIL),
        # MIG instances do not report GPU_UTIL; the DCP ratio 0..1 stands in (×100 → %).
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": Gauge(UTIL, 100.0, priority=1),
        "DCGM_FI_DEV_FB_USED": Gauge(MEM_USED),
        "DCGM_FI_DEV_FB_TOTAL": Gauge(MEM_TOTAL),
        "DCGM_FI_DEV_FB_FREE": Gauge(MEM_FREE),
        "DCGM_FI_DEV_FB_RESERVED": Gauge(MEM_RESERVED),
        "DCGM_FI_DEV_GPU_TEMP": Gauge(TEMP),
        "DCGM_FI_DEV_POWER_USAGE": Gauge(POWER),
        # 1.x compatibility names (etc/1.x-compatibility-metrics.csv), seen in older clusters.
        "dcgm_gpu_utilization": Gauge(UTIL, priority=2),
        "dcgm_fb_used": Gauge(MEM_USED, priority=2),
        "dcgm_gpu_temp": Gauge(TEMP, priority=2),
        "dcgm_power_usage": Gauge(POWER, priority=2),
    },
    counters={
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "pcie_replay",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "uncorrectable_remapped_rows",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "correctable_remapped_rows",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "ecc_sbe",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_dbe",
    },
    health={
        "DCGM_FI_DEV_XID_ERRORS": "xid",
        "DCGM_EXP_XID_ERRORS_COUNT": "xid_count",
    },
    prefixes=("DCGM_", "dcgm_"),
    identity=_nvidia_identity,
    pod=_nvidia_pod,
    partition=_nvidia_partition,
)


# --- Huawei Ascend npu-exporter (§1.2) -----------------------------------------------------------


def _ascend_identity(labels: dict[str, str]) -> dict:
    return {
        "uuid": _blank(labels.get("vdie_id")),
        "serial": _blank(labels.get("serial_number")),
        "pci_bus_id": normalize_pci(labels.get("pcie_bus_info")),
        "index": _int(labels.get("id")),
        "node": _node(labels),
    }


def _ascend_pod(labels: dict[str, str]) -> tuple[str | None, str | None]:
    return _blank(labels.get("namespace")), _blank(labels.get("pod_name"))


def _ascend_partition(labels: dict[str, str]) -> tuple[str, str | None]:
    if labels.get("is_virtual") in ("true", "1") and labels.get("v_dev_id"):
        return f"vnpu/{labels['v_dev_id']}", None
    return "", None


ASCEND = VendorMap(
    vendor="huawei",
    gauges={
        "npu_chip_info_utilization": Gauge(UTIL),
        "npu_chip_info_hbm_used_memory": Gauge(MEM_USED),
        "npu_chip_info_hbm_total_memory": Gauge(MEM_TOTAL),
        # DDR memory (inference cards without HBM) only when HBM is absent.
        "npu_chip_info_used_memory": Gauge(MEM_USED, priority=1),
        "npu_chip_info_total_memory": Gauge(MEM_TOTAL, priority=1),
        "npu_chip_info_temperature": Gauge(TEMP),
        "npu_chip_info_power": Gauge(POWER),
        "vnpu_pod_aicore_utilization": Gauge(UTIL, priority=3),
        "vnpu_pod_used_memory": Gauge(MEM_USED, 1 / 1024.0, priority=3),
        "vnpu_pod_total_memory": Gauge(MEM_TOTAL, 1 / 1024.0, priority=3),
    },
    counters={
        "npu_chip_info_hbm_ecc_total_single_bit_error_cnt": "ecc_sbe",
        "npu_chip_info_hbm_ecc_total_double_bit_error_cnt": "ecc_dbe",
    },
    health={
        "npu_chip_info_health_status": "health",
        "npu_chip_info_error_code": "error_code",
    },
    prefixes=(
        "npu_",
        "machine_npu",
        "machine_card",
        "machine_healthy",
        "machine_unhealthy",
        "machine_unknown",
        "container_npu",
        "vnpu_",
        "node_base_info",
    ),
    identity=_ascend_identity,
    pod=_ascend_pod,
    partition=_ascend_partition,
)


# --- AMD device-metrics-exporter (§1.3) ----------------------------------------------------------


def _amd_identity(labels: dict[str, str]) -> dict:
    return {
        "uuid": _blank(labels.get("gpu_uuid")),
        "serial": _blank(labels.get("serial_number")),
        "pci_bus_id": None,
        "index": _int(labels.get("gpu_id")),
        "node": _node(labels, "hostname"),
    }


def _amd_partition(labels: dict[str, str]) -> tuple[str, str | None]:
    pid = labels.get("gpu_partition_id", "NA")
    mode = (labels.get("gpu_compute_partition_type") or "").lower()
    if pid in ("", "NA") or mode in ("", "spx"):
        return "", None
    return f"{mode}/{pid}", mode


AMD = VendorMap(
    vendor="amd",
    gauges={
        "gpu_gfx_activity": Gauge(UTIL),
        "gpu_used_vram": Gauge(MEM_USED),
        "gpu_total_vram": Gauge(MEM_TOTAL),
        "gpu_junction_temperature": Gauge(TEMP),
        "gpu_edge_temperature": Gauge(TEMP, priority=1),
        "gpu_package_power": Gauge(POWER),
        "gpu_average_package_power": Gauge(POWER, priority=1),
        "gpu_power_usage": Gauge(POWER, priority=2),
    },
    counters={
        "gpu_ecc_correct_total": "ecc_correctable",
        "gpu_ecc_uncorrect_total": "ecc_uncorrectable",
        "pcie_replay_count": "pcie_replay",
    },
    health={"gpu_health": "health"},
    prefixes=("gpu_", "pcie_"),
    identity=_amd_identity,
    pod=_nvidia_pod,
    partition=_amd_partition,
)


# --- Hygon dcu-exporter (§1.4) -------------------------------------------------------------------


def _hygon_identity(labels: dict[str, str]) -> dict:
    return {
        "uuid": None,
        "serial": _blank(labels.get("device_id")),  # device_id is the serial number
        "pci_bus_id": normalize_pci(labels.get("pcieBus_number")),
        "index": _int(labels.get("minor_number")),
        "node": _node(labels),
    }


def _hygon_pod(labels: dict[str, str]) -> tuple[str | None, str | None]:
    return _blank(labels.get("dcu_pod_namespace")), _blank(labels.get("dcu_pod_name"))


HYGON = VendorMap(
    vendor="hygon",
    gauges={
        "dcu_utilizationrate": Gauge(UTIL),
        "dcu_usedmemory_bytes": Gauge(MEM_USED, 1 / MIB),
        "dcu_memorycap_bytes": Gauge(MEM_TOTAL, 1 / MIB),
        "dcu_temp": Gauge(TEMP),
        "dcu_power_usage": Gauge(POWER),
    },
    counters={},
    health={},
    pod_info=("dcu_containers",),
    prefixes=("dcu_",),
    identity=_hygon_identity,
    pod=_hygon_pod,
)


# --- Cambricon mlu-exporter (§1.5, default --metrics-prefix=mlu) ---------------------------------


def _cambricon_identity(labels: dict[str, str]) -> dict:
    return {
        "uuid": _blank(labels.get("uuid")),
        "serial": _blank(labels.get("sn")),
        "pci_bus_id": None,
        "index": _int(labels.get("mlu")),
        "node": _node(labels),
    }


CAMBRICON = VendorMap(
    vendor="cambricon",
    gauges={
        "mlu_utilization": Gauge(UTIL),
        "mlu_memory_used": Gauge(MEM_USED, 1 / MIB),
        "mlu_memory_total": Gauge(MEM_TOTAL, 1 / MIB),
        "mlu_temperature": Gauge(TEMP),
        "mlu_power_usage": Gauge(POWER),
    },
    counters={
        "mlu_xid_error_count": "xid_errors",
        "mlu_dram_ecc_sbe_count": "ecc_sbe",
        "mlu_dram_ecc_dbe_count": "ecc_dbe",
        "mlu_pcie_replay_count": "pcie_replay",
    },
    health={"mlu_health": "health", "mlu_last_xid_error": "xid"},
    pod_info=("mlu_container",),
    prefixes=("mlu_",),
    identity=_cambricon_identity,
    pod=_nvidia_pod,
)


# --- Iluvatar CoreX ix-exporter (issue 28) -----------------------------------------------------------
# Names, units and labels from Deep-Spark/ix-exporter@7f169d7f etc/metrics.yaml (the metric list with
# units: memory in MiB, power in W, temperature in C) and the README's example /metrics output
# (@0ac29ede). Pod labels ``namespace`` / ``pod`` are filled in Kubernetes mode (``--enable-kubernetes``,
# default true); ``ix_temperature`` is the deprecated name of ``ix_gpu_temperature``.
# MetaX, Kunlunxin, Enflame and Moore Threads: no exporter metric list from the vendor was found in a
# public source, so they have no map (their series are counted as unknown families).


def _iluvatar_identity(labels: dict[str, str]) -> dict:
    return {
        "uuid": _blank(labels.get("uuid")),
        "serial": _blank(labels.get("serial")),
        "pci_bus_id": None,
        "index": _int(labels.get("gpu")),
        "node": _node(labels, "node_name"),
    }


ILUVATAR = VendorMap(
    vendor="iluvatar",
    gauges={
        "ix_gpu_utilization": Gauge(UTIL),
        "ix_mem_used": Gauge(MEM_USED),
        "ix_mem_total": Gauge(MEM_TOTAL),
        "ix_gpu_temperature": Gauge(TEMP),
        "ix_temperature": Gauge(TEMP, priority=1),
        "ix_power_usage": Gauge(POWER),
    },
    counters={"ix_pcie_replay_counter": "pcie_replay"},
    health={"ix_xid_errors": "xid"},
    pod_info=("ix_process_info",),
    prefixes=("ix_",),
    identity=_iluvatar_identity,
    pod=_nvidia_pod,
)


VENDOR_MAPS: dict[str, VendorMap] = {m.vendor: m for m in (NVIDIA, ASCEND, AMD, HYGON, CAMBRICON, ILUVATAR)}

# Unified series written by platform/prometheus/rules/suanchi-gpu.rules.yml (seed 004 §4): the
# vendor comes from the ``gpu_brand`` label; the original labels are kept, so identity is per vendor.
UNIFIED_UTIL = "gpu:utilization:percent"
UNIFIED_GAUGES: dict[str, Gauge] = {UNIFIED_UTIL: Gauge(UTIL, priority=-1)}
BRAND_TO_VENDOR = {
    "nvidia": "nvidia",
    "huawei": "huawei",
    "amd": "amd",
    "hygon": "hygon",
    "cambricon": "cambricon",
}

# AMD's optional ``CommonConfig.MetricsFieldPrefix`` (the example config uses ``amd_``).
AMD_FIELD_PREFIX = "amd_"

_BY_NAME: dict[str, tuple[VendorMap, str]] = {}
for _map in VENDOR_MAPS.values():
    for _name in _map.gauges:
        _BY_NAME[_name] = (_map, "gauge")
    for _name in _map.counters:
        _BY_NAME[_name] = (_map, "counter")
    for _name in _map.health:
        _BY_NAME[_name] = (_map, "health")
    for _name in _map.pod_info:
        _BY_NAME[_name] = (_map, "pod_info")


def lookup(name: str) -> tuple[VendorMap, str, str] | None:
    """(vendor map, role, canonical metric name) for a known metric name, else None."""
    hit = _BY_NAME.get(name)
    if hit:
        return hit[0], hit[1], name
    if name.startswith(AMD_FIELD_PREFIX):
        bare = name[len(AMD_FIELD_PREFIX) :]
        hit = _BY_NAME.get(bare)
        if hit and hit[0] is AMD:
            return AMD, hit[1], bare
    return None


def family_vendor(name: str) -> str | None:
    """The vendor whose exporter emits this (unmapped) family, judged by its prefix, or None."""
    for vmap in VENDOR_MAPS.values():
        if name.startswith(vmap.prefixes):
            return vmap.vendor
    if name.startswith(AMD_FIELD_PREFIX):
        return "amd"
    return None
