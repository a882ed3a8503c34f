"""The exposition parser and the five vendor metric maps, on fixtures written from the documented
names, labels and units (../shared/reference/hardware-telemetry.md §1)."""

from __future__ import annotations

import math

import pytest

from apps.telemetry import exposition
from apps.telemetry.metric_maps import normalize_pci
from apps.telemetry.samples import series_to_samples
from tests.fixtures.telemetry import fixture_text

AT = 1764400000.0


def convert(text: str):
    parsed = exposition.parse(text)
    return parsed, series_to_samples(
        ((s.name, s.labels, s.value, s.timestamp) for s in parsed.samples), default_at=AT
    )


def by_index(conversion):
    return {(s.index, s.partition): s for s in conversion.samples}


# --- exposition format ------------------------------------------------------------------------------


def test_it_parses_labels_with_escapes_special_values_and_timestamps():
    text = (
        "# HELP x_total A counter.\n"
        "# TYPE x_total counter\n"
        'x_total{path="/a\\"b\\\\c",msg="line\\nnext",empty=""} 12.5 1764400000123\n'
        "y NaN\n"
        "z +Inf\n"
        "w -Inf\n"
        'v{a="1",} 3e2\n'
    )
    parsed = exposition.parse(text)
    assert parsed.errors == []
    assert parsed.types == {"x_total": "counter"}
    first = parsed.samples[0]
    assert first.labels == {"path": '/a"b\\c', "msg": "line\nnext", "empty": ""}
    assert first.value == 12.5
    assert first.timestamp == pytest.approx(1764400000.123)
    assert math.isnan(parsed.samples[1].value)
    assert parsed.samples[2].value == math.inf and parsed.samples[3].value == -math.inf
    assert parsed.samples[4].labels == {"a": "1"} and parsed.samples[4].value == 300.0


def test_it_reports_malformed_lines_by_number_and_keeps_the_rest():
    text = "\n".join(
        [
            'good{a="1"} 1',
            'bad{a="1" 2',  # unterminated label set
            "also_bad{a=1} 3",  # unquoted value
            "no_value",
            "text_value abc",
            'ts{a="1"} 1 notatime',
            "# TYPE broken nonsense",
            'dup{a="1",a="2"} 1',
            "9starts_with_digit 1",
        ]
    )
    parsed = exposition.parse(text)
    assert [s.name for s in parsed.samples] == ["good"]
    assert [line for line, _ in parsed.errors] == [2, 3, 4, 5, 6, 7, 8, 9]
    messages = dict(parsed.errors)
    assert "unterminated" in messages[2] or "expected" in messages[2]
    assert "double-quoted" in messages[3]
    assert "missing value" in messages[4]
    assert "not a number" in messages[5]
    assert "milliseconds" in messages[6]
    assert "given twice" in messages[8]


def test_pci_bus_ids_are_normalised_to_the_ledger_form():
    assert normalize_pci("00000000:1A:00.0") == "0000:1A:00.0"
    assert normalize_pci("0000:3d:00.0") == "0000:3D:00.0"
    assert normalize_pci("c1:00.0") == "0000:C1:00.0"
    assert normalize_pci("") is None


# --- vendors -----------------------------------------------------------------------------------------


def test_dcgm_exporter_page_gives_one_sample_per_gpu_with_memory_total_from_free_used_reserved():
    parsed, conv = convert(fixture_text("dcgm.prom"))
    assert parsed.errors == []
    assert conv.vendors == ["nvidia"]
    samples = by_index(conv)
    gpu0, gpu1 = samples[(0, "")], samples[(1, "")]
    assert gpu0.as_dry_run() == {
        "device": {
            "uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000000",
            "serial": None,
            "pci_bus_id": "0000:1A:00.0",
            "index": 0,
            "node": "gpu-01",
        },
        "vendor": "nvidia",
        "mig_profile": None,
        "utilization_pct": 87.0,
        "memory_used_mib": 72000.0,
        "memory_total_mib": 81559.0,  # 9559 free + 72000 used + 0 reserved
        "temperature_c": 64.0,
        "power_w": 612.48,
        "pod": "suanchi-12-a0-x7k2p",
        "namespace": "vision",
    }
    assert gpu0.counters == {"pcie_replay": 3.0}
    assert gpu0.health is None  # XID 0 = no error
    # The idle GPU has no pod labels (current dcgm-exporter omits them).
    assert gpu1.pod is None and gpu1.namespace is None
    assert gpu1.utilization_pct == 0.0
    # A family of the exporter that Suanchi does not use is counted, not an error.
    assert conv.skipped == {"unused_family": 1}
    assert conv.examples["unused_family"] == ["DCGM_FI_DEV_SM_CLOCK"]


def test_dcgm_mig_instances_are_partitions_with_profile_and_lowercase_hostname():
    _, conv = convert(fixture_text("dcgm_mig.prom"))
    samples = by_index(conv)
    one, two = samples[(0, "3g.40gb/1")], samples[(0, "3g.40gb/2")]
    assert one.mig_profile == "3g.40gb" and two.mig_profile == "3g.40gb"
    assert one.node == "gpu-02" and two.node == "gpu-02"  # from `hostname` (dcgm-exporter d5e5f51)
    assert one.utilization_pct == pytest.approx(62.5)  # DCP ratio 0.625 × 100
    assert one.memory_total_mib == 40448.0
    assert (one.namespace, one.pod) == ("vision", "suanchi-15-6d9f-abcde")
    assert two.pod is None  # a MIG series without pod labels


def test_old_hostname_label_and_legacy_names_are_read():
    text = (
        'dcgm_gpu_utilization{gpu="3",uuid="GPU-old",Hostname="legacy-01"} 41\n'
        'dcgm_fb_used{gpu="3",uuid="GPU-old",Hostname="legacy-01"} 1024\n'
    )
    _, conv = convert(text)
    (s,) = conv.samples
    assert (s.uuid, s.node, s.index, s.utilization_pct, s.memory_used_mib) == (
        "GPU-old",
        "legacy-01",
        3,
        41.0,
        1024.0,
    )


def test_ascend_page_uses_vdie_id_pcie_bus_info_and_explicit_timestamps():
    _, conv = convert(fixture_text("ascend.prom"))
    assert conv.vendors == ["huawei"]
    samples = by_index(conv)
    idle, busy = samples[(0, "")], samples[(1, "")]
    assert idle.uuid == "5A3C2F10-0000-0000-0000-000000000001"
    assert idle.pci_bus_id == "0000:C1:00.0"
    assert idle.pod is None  # empty pod_name / namespace labels mean "no pod"
    assert busy.at == 1764400000.0  # the exporter's millisecond timestamp, not the default
    assert (busy.namespace, busy.pod) == ("nlp", "suanchi-21-a1-q8w4e")
    assert (busy.utilization_pct, busy.memory_used_mib, busy.memory_total_mib) == (98.0, 60000.0, 65536.0)
    assert (busy.temperature_c, busy.power_w) == (71.0, 310.0)
    assert busy.health == {"health": "ok"}
    assert conv.skipped == {"unused_family": 1}  # machine_npu_nums


def test_amd_page_uses_serial_and_prefers_junction_temperature():
    _, conv = convert(fixture_text("amd.prom"))
    (s,) = conv.samples
    assert (s.vendor, s.serial, s.index, s.node) == ("amd", "692251001124", 0, "amd-01")
    assert s.partition == ""  # gpu_partition_id "NA" in SPX mode
    assert (s.utilization_pct, s.memory_used_mib, s.memory_total_mib) == (73.0, 150000.0, 196592.0)
    assert s.temperature_c == 66.0  # junction, not the 50 °C edge sensor
    assert s.power_w == 540.0
    assert s.pod is None  # pod="" on an idle GPU
    assert s.counters == {"ecc_uncorrectable": 0.0}


def test_amd_metrics_field_prefix_is_accepted():
    _, conv = convert('amd_gpu_gfx_activity{serial_number="S1",gpu_id="2",hostname="amd-02"} 12\n')
    (s,) = conv.samples
    assert (s.vendor, s.serial, s.utilization_pct) == ("amd", "S1", 12.0)


def test_hygon_page_converts_bytes_and_takes_pods_from_dcu_containers():
    _, conv = convert(fixture_text("hygon.prom"))
    (s,) = conv.samples
    assert (s.vendor, s.serial, s.index, s.node, s.pci_bus_id) == (
        "hygon",
        "HY2210A00042",
        0,
        "dcu-01",
        "0000:3D:00.0",
    )
    assert (s.memory_used_mib, s.memory_total_mib) == (32768.0, 65536.0)
    assert (s.utilization_pct, s.temperature_c, s.power_w) == (55.0, 58.5, 402.0)
    assert (s.namespace, s.pod) == ("search", "suanchi-33-7c9d-zz1")


def test_cambricon_page_converts_bytes_and_takes_pods_from_mlu_container():
    _, conv = convert(fixture_text("cambricon.prom"))
    (s,) = conv.samples
    assert (s.vendor, s.uuid, s.serial, s.index, s.node) == (
        "cambricon",
        "MLU-20001234-1916-0000-0000-000000000000",
        "SN0000AB1234",
        0,
        "mlu-01",
    )
    assert (s.memory_used_mib, s.memory_total_mib) == (10240.0, 49152.0)
    assert (s.namespace, s.pod) == ("nlp", "suanchi-40-a0-m1")
    assert s.health == {"health": "ok"}


def test_unknown_families_nan_values_and_series_without_identity_are_counted():
    text = (
        'node_cpu_seconds_total{cpu="0"} 10\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-x"} NaN\n'
        "DCGM_FI_DEV_GPU_UTIL 5\n"
    )
    _, conv = convert(text)
    assert conv.samples == []
    assert conv.skipped == {"unknown_family": 1, "not_a_number": 1, "no_device_identity": 1}


def test_health_signals_xid_unhealthy_and_error_codes():
    text = (
        'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-x",Hostname="h"} 79\n'
        'npu_chip_info_health_status{id="1",vdie_id="V-1"} 0\n'
        'npu_chip_info_error_code{id="1",vdie_id="V-1"} 2164260864\n'
        'DCGM_EXP_XID_ERRORS_COUNT{gpu="1",UUID="GPU-y",xid="48",window_size_in_ms="300000"} 2\n'
    )
    _, conv = convert(text)
    found = {s.uuid: s.health for s in conv.samples}
    assert found["GPU-x"] == {"xid": [79]}
    assert found["V-1"] == {"health": "unhealthy", "error_code": ["0x81000000"]}
    assert found["GPU-y"] == {"xid": [48]}


def test_the_unified_recording_rule_series_wins_over_the_raw_one():
    text = (
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-u",node="n1"} 50\n'
        'gpu:utilization:percent{gpu="0",UUID="GPU-u",node="n1",gpu_brand="nvidia"} 51\n'
        'gpu:utilization:percent{id="0",vdie_id="V-9",node="n2",gpu_brand="huawei"} 20\n'
        'gpu:utilization:percent{x="1",gpu_brand="intel"} 20\n'
    )
    _, conv = convert(text)
    found = {s.uuid: s for s in conv.samples}
    assert found["GPU-u"].utilization_pct == 51.0
    assert found["V-9"].vendor == "huawei" and found["V-9"].utilization_pct == 20.0
    assert conv.skipped == {"unknown_vendor_brand": 1}
