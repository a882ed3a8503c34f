"""Vendor metric maps: exporter metric names → Suanchi's normalized fields, with units.

Every name, label and unit below is from ``../shared/reference/hardware-telemetry.md`` §1
(1.1 dcgm-exporter, 1.2 Ascend npu-exporter, 1.3 AMD device-metrics-exporter, 1.4 Hygon
dcu-exporter, 1.5 Cambricon mlu-exporter, 1.6 cross-vendor cheat-sheet); Hygon's hcu-exporter,
Iluvatar's ix-exporter, MetaX's mx-exporter and Enflame's gcu-exporter are from their own
repositories (cited above each map). Canonical units: %, MiB, °C, W. Pure Python, no Django.

Memory units: dcgm reports MiB. Ascend and AMD say "MB"; the observed Ascend HBM totals (32768 MB,
65536 MB, §2 npu-smi) are powers of two, i.e. the tools' "MB" is 2^20 bytes, so MB is read as MiB
(factor 1) for both. Hygon (DCU and HCU), Cambricon and Enflame report bytes (÷ 2^20); Ascend vNPU
memory and MetaX memory are KB (÷ 1024). MetaX power is milliwatts (÷ 1000).
"""

from __future__ import annotations

import re
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
    # Only the series whose label ``when[0]`` equals ``when[1]`` (MetaX ``mx_memory_*{type="vram"}``:
    # the family also carries ``type="xtt"``, system memory); the others are skipped as unused.
    when: tuple[str, str] | None = None
    # The exporter's "not supported" value (Enflame gcu-exporter: -1), skipped, never a reading.
    unsupported: float | None = None


@dataclass(frozen=True)
class VendorMap:
    vendor: str  # catalog Vendor value
    gauges: dict[str, Gauge]
    # Monotonic error counters: metric name → counter key stored in rollups' error_deltas.
    counters: dict[str, str]
    # Health gauges: metric name → kind ("xid" = last XID code, "health" = 1 ok / 0 bad / -1 unknown,
    # "health_210" = 2 ok / 1 bad / 0 unknown (Enflame), "error_code" = fault code, non-zero is a
    # fault, "xid_count" = XIDs seen, code in label "xid").
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


# --- Hygon dcu-exporter (§1.4) and hcu-exporter -------------------------------------------------
# The HCU exporter (HYGON-AI/hcu-exporter, Hygon's DCU renamed HCU) keeps the DCU exporter's label
# schema with ``hcu_`` names, from its source: pkg/util/metrics_define.go @ 8a959ce8 (HCULabels
# ``device_id``, ``minor_number``, ``name``, ``node``, ``pcieBus_number``, ``hcu_pod_namespace``,
# ``hcu_pod_name``, ``container`` on every physical-card series; VHcuLabels add ``vhcu_minor_number``,
# ``vhcu_computer_unit``, ``vhcu_memory_cap`` and drop ``pcieBus_number``), cmd/hcu-exporter/main.go
# @ 0d40a601 (names, HELP texts) and metrics_loop.go @ bfe780b8 (label values: ``device_id`` is the
# card's serial number, ``pcieBus_number`` is ``%04x:%02x:%02x.%x``, lower case; the pod labels are
# filled from the kubelet pod-resources API by PCI bus id, empty when no pod holds the card). Units
# from HYGON-AI/hcu-dcgm pkg/dcgm/api.go @ b223b72e: temperature millidegrees / 1000 = °C, power
# average µW / 10^6 = W, memory from rsmi in bytes, ``hcu_utilizationrate`` the busy percent
# (``HCUUse``; ``hcu_util_percent`` is the 1 s-window variant of the "high" metrics level).


def _hygon_identity(labels: dict[str, str]) -> dict:
    return {
        "uuid": None,
        "serial": _blank(labels.get("device_id")),  # device_id is the serial number
        "pci_bus_id": normalize_pci(labels.get("pcieBus_number")),
        "index": _int(labels.get("minor_number")),
        "node": _node(labels),
    }


def _hygon_pod(labels: dict[str, str]) -> tuple[str | None, str | None]:
    if "hcu_pod_name" in labels or "hcu_pod_namespace" in labels:
        return _blank(labels.get("hcu_pod_namespace")), _blank(labels.get("hcu_pod_name"))
    return _blank(labels.get("dcu_pod_namespace")), _blank(labels.get("dcu_pod_name"))


def _hygon_partition(labels: dict[str, str]) -> tuple[str, str | None]:
    # A vHCU's series (vhcu_*) carry its own minor number next to the physical card's.
    vhcu = labels.get("vhcu_minor_number")
    if vhcu:
        return f"vhcu/{vhcu}", None
    return "", None


HYGON = VendorMap(
    vendor="hygon",
    gauges={
        "dcu_utilizationrate": Gauge(UTIL),
        "dcu_usedmemory_bytes": Gauge(MEM_USED, 1 / MIB),
        "dcu_memorycap_bytes": Gauge(MEM_TOTAL, 1 / MIB),
        "dcu_temp": Gauge(TEMP),
        "dcu_power_usage": Gauge(POWER),
        "hcu_utilizationrate": Gauge(UTIL),
        "hcu_util_percent": Gauge(UTIL, priority=1),
        "hcu_usedmemory_bytes": Gauge(MEM_USED, 1 / MIB),
        "hcu_memorycap_bytes": Gauge(MEM_TOTAL, 1 / MIB),
        "hcu_temp": Gauge(TEMP),
        "hcu_power_usage": Gauge(POWER),
        # vHCU instances (partition ``vhcu/<vhcu_minor_number>``): busy %, memory used in bytes.
        "vhcu_utilizationrate": Gauge(UTIL),
        "vhcu_usedmemory_bytes": Gauge(MEM_USED, 1 / MIB),
    },
    counters={
        "hcu_ce_count_total": "ecc_correctable",
        "hcu_ue_count_total": "ecc_uncorrectable",
        "hcu_pcie_replay_count": "pcie_replay",
    },
    # hcu_health_status: "1=Healthy, 0=otherwise" (main.go).
    health={"hcu_health_status": "health"},
    pod_info=("dcu_containers",),
    prefixes=("dcu_", "hcu_", "vhcu_"),
    identity=_hygon_identity,
    pod=_hygon_pod,
    partition=_hygon_partition,
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
# Kunlunxin and Moore Threads: no exporter from the vendor was found in a public source (Kunlunxin
# publishes go-xpuml, a library, not an exporter), so they have no map (their series are counted as
# unknown families). MetaX and Enflame: below.


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


# --- MetaX mx-exporter (issue 28) -----------------------------------------------------------------
# From MetaX-MACA/mxExporter @ 874612bf (mx-exporter 0.13.2): mx_exporter/default-counters.csv (names,
# HELP texts with units, label order ``deviceId``, ``uuid``, ``exported_pod``, ``exported_namespace``,
# ``exported_container``, ``Hostname``, ``driver_version``, ``bios_version``, ``modelName``,
# ``die_id``), mx_exporter/gpu_monitor.py (temperatures are the SDK's hundredths / 100 = °C;
# memory has a ``type`` label, ``vram`` or ``xtt``) and mx_exporter/mx_exporter.py (the pod labels
# come from the kubelet pod-resources API by device uuid, empty strings when no pod holds the card).
# Units as the CSV says: memory "in KB", power "in milliwatt", usage "in percent". The SDK's KB are
# read as KiB (÷ 1024 → MiB), as Ascend's KB: mx-smi prints the same cards' memory in MiB
# (apps/inventory/vendors/metax.py, ``858/65536 MiB``) and 64 GiB is a whole number of KiB only.
# ``deviceId`` is the SDK's device index. Per-die families (``die_id``) of a multi-die card fold into
# one card sample (the first series read wins); per-die rows are not modelled.


def _metax_identity(labels: dict[str, str]) -> dict:
    return {
        "uuid": _blank(labels.get("uuid")),
        "serial": None,
        "pci_bus_id": None,
        "index": _int(labels.get("deviceId")),
        "node": _node(labels, "Hostname"),
    }


def _metax_pod(labels: dict[str, str]) -> tuple[str | None, str | None]:
    return _blank(labels.get("exported_namespace")), _blank(labels.get("exported_pod"))


def _metax_partition(labels: dict[str, str]) -> tuple[str, str | None]:
    # sGPU series (commented out in the default CSV) carry ``sgpuId``.
    sgpu = labels.get("sgpuId")
    if sgpu:
        return f"sgpu/{sgpu}", None
    return "", None


METAX = VendorMap(
    vendor="metax",
    gauges={
        "mx_gpu_usage": Gauge(UTIL),
        "mx_memory_used": Gauge(MEM_USED, 1 / 1024.0, when=("type", "vram")),
        "mx_memory_total": Gauge(MEM_TOTAL, 1 / 1024.0, when=("type", "vram")),
        "mx_chip_hotspot_temp": Gauge(TEMP),
        "mx_board_power": Gauge(POWER, 1 / 1000.0),
        "mx_sgpu_usage": Gauge(UTIL),
        "mx_sgpu_used_memory": Gauge(MEM_USED, 1 / 1024.0),
        "mx_sgpu_total_memory": Gauge(MEM_TOTAL, 1 / 1024.0),
    },
    counters={},
    # mx_gpu_state: "GPU state: 0(not available) 1(available)".
    health={"mx_gpu_state": "health"},
    prefixes=("mx_",),
    identity=_metax_identity,
    pod=_metax_pod,
    partition=_metax_partition,
)


# --- Enflame gcu-exporter (issue 28) -------------------------------------------------------------
# From EnflameTechnology/gcu-exporter @ 0e6e15c9: collector/collector.go (namespaces ``enflame_gcu``,
# ``enflame_vgcu``), collector/*.go (names, HELP texts, label order ``host``, ``minor_number``,
# ``uuid``, ``busid``, ``slot``, ``name``, ``pod_name``, ``pod_namespace``, ``container_name``; "-1
# means not supported"), collector/metrics.go (in vGCU mode the physical enflame_gcu_* series are
# not exported, only the per-``vindex`` enflame_vgcu_* ones), vendor/go-eflib/device.go (memory used
# in MiB × 2^20 and total in bytes, so both families are bytes; ``enflame_gcu_power_usage`` is
# consumption ÷ capability × 100, a percent, not watts; a bus id the library cannot read is the text
# "not supported"). Units of temperature (°C) and ``enflame_gcu_power_consumption`` (W) are from
# Enflame's "GCU-Exporter user guide" v1.7 (enflame_gcu-exporter_user_guide; examples "34.5度",
# "56.0W"), not stated in the code. Pod labels: collector/pod_info.go maps the kubelet pod-resources
# device ids of ``enflame.com/gcu`` (``enflame.com/vgcu`` in vGCU mode) and the collectors look them
# up by the card's minor number (by ``vindex`` for vGCUs), so they are filled only where the device
# plugin's device ids are those numbers: read in source, not run here.

_PCI_ADDRESS = re.compile(r"^(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def _enflame_identity(labels: dict[str, str]) -> dict:
    busid = (labels.get("busid") or "").strip()
    return {
        "uuid": _blank(labels.get("uuid")),
        "serial": None,
        "pci_bus_id": normalize_pci(busid) if _PCI_ADDRESS.match(busid) else None,
        "index": _int(labels.get("minor_number")),
        "node": _node(labels, "host"),
    }


def _enflame_pod(labels: dict[str, str]) -> tuple[str | None, str | None]:
    return _blank(labels.get("pod_namespace")), _blank(labels.get("pod_name"))


def _enflame_partition(labels: dict[str, str]) -> tuple[str, str | None]:
    vindex = labels.get("vindex")
    if vindex:
        return f"vgcu/{vindex}", None
    return "", None


ENFLAME = VendorMap(
    vendor="enflame",
    gauges={
        "enflame_gcu_usage": Gauge(UTIL, unsupported=-1.0),
        "enflame_gcu_memory_used_bytes": Gauge(MEM_USED, 1 / MIB),
        "enflame_gcu_memory_total_bytes": Gauge(MEM_TOTAL, 1 / MIB),
        "enflame_gcu_temperatures": Gauge(TEMP, unsupported=-1.0),
        "enflame_gcu_power_consumption": Gauge(POWER, unsupported=-1.0),
        "enflame_vgcu_usage": Gauge(UTIL, unsupported=-1.0),
        "enflame_vgcu_memory_used_bytes": Gauge(MEM_USED, 1 / MIB),
        "enflame_vgcu_memory_total_bytes": Gauge(MEM_TOTAL, 1 / MIB),
    },
    counters={
        "enflame_gcu_ecc_single_bit_error_total_count": "ecc_sbe",
        "enflame_gcu_ecc_double_bit_error_total_count": "ecc_dbe",
    },
    # "Gcu health as reported by the device (2:healthy,1:unhealthy,0:unknown)".
    health={"enflame_gcu_health": "health_210", "enflame_vgcu_health": "health_210"},
    prefixes=("enflame_gcu_", "enflame_vgcu_"),
    identity=_enflame_identity,
    pod=_enflame_pod,
    partition=_enflame_partition,
)


VENDOR_MAPS: dict[str, VendorMap] = {
    m.vendor: m for m in (NVIDIA, ASCEND, AMD, HYGON, CAMBRICON, ILUVATAR, METAX, ENFLAME)
}

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
    "iluvatar": "iluvatar",
    "metax": "metax",
    "enflame": "enflame",
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
