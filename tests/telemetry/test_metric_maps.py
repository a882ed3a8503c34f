"""The vendor metric maps (apps/telemetry/metric_maps.py) follow the cross-vendor cheat-sheet
(../shared/reference/hardware-telemetry.md §1.6): utilization, memory, temperature and power of every
vendor, its pod labels, and the unit traps (Ascend "MB" = MiB, Hygon / Cambricon bytes, dcgm's
memory total = free + used + reserved)."""

from __future__ import annotations

import pytest

from apps.telemetry.metric_maps import (
    MEM_FREE,
    MEM_RESERVED,
    MEM_TOTAL,
    MEM_USED,
    MIB,
    POWER,
    TEMP,
    UTIL,
    VENDOR_MAPS,
    lookup,
)
from apps.telemetry.samples import series_to_samples


@pytest.mark.parametrize(
    ("vendor", "utilization", "pod_labels"),
    [
        ("nvidia", "DCGM_FI_DEV_GPU_UTIL", ("namespace", "pod")),
        ("huawei", "npu_chip_info_utilization", ("namespace", "pod_name")),
        ("amd", "gpu_gfx_activity", ("namespace", "pod")),
        ("hygon", "dcu_utilizationrate", ("dcu_pod_namespace", "dcu_pod_name")),
        ("cambricon", "mlu_utilization", ("namespace", "pod")),
    ],
)
def test_every_vendor_maps_the_five_gauges_and_its_pod_labels(vendor, utilization, pod_labels):
    vmap = VENDOR_MAPS[vendor]
    assert vmap.gauges[utilization].field == UTIL
    fields = {gauge.field for gauge in vmap.gauges.values()}
    assert {UTIL, MEM_USED, MEM_TOTAL, TEMP, POWER} <= fields
    assert lookup(utilization) == (vmap, "gauge", utilization)
    namespace_label, pod_label = pod_labels
    assert vmap.pod({namespace_label: "team-a", pod_label: "train-0"}) == ("team-a", "train-0")


def test_the_dcgm_memory_total_is_free_plus_used_plus_reserved():
    # No FB_TOTAL in dcgm-exporter's default counters: the three parts (MiB) are added.
    gauges = VENDOR_MAPS["nvidia"].gauges
    assert [gauges[f"DCGM_FI_DEV_FB_{part}"].field for part in ("FREE", "USED", "RESERVED")] == [
        MEM_FREE,
        MEM_USED,
        MEM_RESERVED,
    ]
    labels = {"UUID": "GPU-1", "gpu": "0", "Hostname": "gpu-01"}
    series = [
        ("DCGM_FI_DEV_FB_FREE", labels, 60000.0, None),
        ("DCGM_FI_DEV_FB_USED", labels, 20000.0, None),
        ("DCGM_FI_DEV_FB_RESERVED", labels, 1920.0, None),
    ]
    (sample,) = series_to_samples(series, default_at=0.0).samples
    assert (sample.memory_used_mib, sample.memory_total_mib) == (20000.0, 81920.0)


def test_the_memory_units_keep_the_vendor_traps():
    # Ascend's "MB" is 2^20 bytes (HBM totals of 32768 / 65536 MB): read as MiB.
    assert VENDOR_MAPS["huawei"].gauges["npu_chip_info_hbm_used_memory"].scale == 1.0
    # Hygon and Cambricon report bytes.
    assert VENDOR_MAPS["hygon"].gauges["dcu_usedmemory_bytes"].scale == 1 / MIB
    assert VENDOR_MAPS["cambricon"].gauges["mlu_memory_total"].scale == 1 / MIB
    # AMD: junction temperature (MI3xx) wins over edge (MI2xx) when both are present.
    amd = VENDOR_MAPS["amd"].gauges
    assert amd["gpu_junction_temperature"].field == amd["gpu_edge_temperature"].field == TEMP
    assert amd["gpu_junction_temperature"].priority < amd["gpu_edge_temperature"].priority
