"""Issue 28: the exporters of Hygon HCU (hcu-exporter), Iluvatar (ix-exporter), MetaX (mx-exporter) and
Enflame (gcu-exporter), parsed from pages built from the exporters' own sources
(tests/telemetry/fixtures/SOURCES.md), ingested onto their ledger cards, and their pod labels read back
like dcgm-exporter's. Units, label names and the meaning of -1 / ``type="xtt"`` / health codes were read
in the exporters' code and documentation, not observed on a card."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from apps.inventory.models import Cluster, Device, Node
from apps.telemetry import exposition, ingest
from apps.telemetry import metric_maps as mm
from apps.telemetry.models import DeviceRollup
from apps.telemetry.samples import series_to_samples
from tests.fixtures.telemetry import allocate, fixture_text, make_job

NOW = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
SCRAPED = NOW - timedelta(minutes=2)

HCU_CARD = (
    'device_id="T8R1380013061601",minor_number="0",name="K100",node="hcunode3",pcieBus_number="0000:f6:00.0"'
)
HCU_OTHER = (
    'device_id="T8R1380013061602",minor_number="1",name="K100",node="hcunode3",pcieBus_number="0000:f7:00.0"'
)
GCU_CARD = 'busid="0000:40:00.0",host="sse-lab-inspur-043",minor_number="2"'
GCU_OTHER = 'busid="0000:41:00.0",host="sse-lab-inspur-043",minor_number="3"'


def convert(text: str):
    parsed = exposition.parse(text)
    assert parsed.errors == []
    return series_to_samples(
        ((s.name, s.labels, s.value, s.timestamp) for s in parsed.samples), default_at=0.0
    )


def by_key(conversion):
    return {(s.index, s.partition): s for s in conversion.samples}


# --- parsing ------------------------------------------------------------------------------------------


def test_hygon_hcu_page_reads_serial_pci_bytes_and_pod_labels_on_every_series():
    conv = convert(fixture_text("hygon_hcu.prom"))
    assert conv.vendors == ["hygon"]
    card, vhcu = by_key(conv)[(0, "")], by_key(conv)[(0, "vhcu/1")]
    assert card.as_dry_run() == {
        "device": {
            "uuid": None,
            "serial": "T8R1380013061601",  # device_id is the serial number (hcu-dcgm rsmiDevSerialNumberGet)
            "pci_bus_id": "0000:F6:00.0",  # the exporter's lower-case bus id in the ledger's form
            "index": 0,
            "node": "hcunode3",
        },
        "vendor": "hygon",
        "mig_profile": None,
        "utilization_pct": 85.0,
        "memory_used_mib": 32768.0,  # bytes ÷ 2^20
        "memory_total_mib": 65536.0,
        "temperature_c": 46.0,
        "power_w": 260.0,
        "pod": "training-job",
        "namespace": "default",
    }
    assert card.counters == {"ecc_correctable": 0.0}
    # The vHCU is a partition of the same card, with its own pod.
    assert (vhcu.serial, vhcu.utilization_pct, vhcu.namespace, vhcu.pod) == (
        "T8R1380013061601",
        72.0,
        "default",
        "inference",
    )
    # hcu_cu_usage (1 s window) and the per-process family are the exporter's, not read.
    assert conv.skipped == {"unused_family": 2}
    assert set(conv.examples["unused_family"]) == {"hcu_cu_usage", "hcu_process_vram_used_bytes"}


def test_the_dcu_exporter_pod_labels_still_read_and_hcu_health_is_one_for_healthy():
    assert mm.HYGON.pod({"dcu_pod_namespace": "a", "dcu_pod_name": "p"}) == ("a", "p")
    assert mm.HYGON.pod({"hcu_pod_namespace": "", "hcu_pod_name": "", "dcu_pod_name": "x"}) == (None, None)
    text = (
        f'hcu_health_status{{{HCU_CARD},hcu_pod_namespace="",hcu_pod_name="",container="",health="x"}} 0\n'
        f'hcu_util_percent{{{HCU_CARD},hcu_pod_namespace="",hcu_pod_name="",container=""}} 40\n'
        f'hcu_utilizationrate{{{HCU_CARD},hcu_pod_namespace="",hcu_pod_name="",container=""}} 41\n'
    )
    (s,) = convert(text).samples
    assert s.health == {"health": "unhealthy"}
    assert s.utilization_pct == 41.0  # HCUUse (low cost) before the 1 s-window busy percent


def test_iluvatar_page_reads_uuid_index_mib_and_the_idle_cards_have_no_pod():
    conv = convert(fixture_text("iluvatar.prom"))
    assert conv.vendors == ["iluvatar"]
    cards = by_key(conv)
    assert sorted(cards) == [(0, ""), (1, ""), (2, "")]
    mr = cards[(1, "")]
    assert (mr.uuid, mr.memory_used_mib, mr.memory_total_mib, mr.temperature_c, mr.power_w) == (
        "GPU-50351a81-6f42-4746-9981-6e4401848ba5",
        116.0,
        32768.0,
        57.0,  # ix_temperature, the deprecated name, when ix_gpu_temperature is absent
        131.0,
    )
    assert all(s.pod is None and s.node is None for s in conv.samples)  # pod="" and node_name=""


def test_metax_page_reads_vram_only_kib_milliwatts_and_exported_pod_labels():
    conv = convert(fixture_text("metax.prom"))
    assert conv.vendors == ["metax"]
    idle, busy = by_key(conv)[(0, "")], by_key(conv)[(1, "")]
    # The mx-smi sample's card: 858 of 65536 MiB, 29 °C, 53 W.
    assert (idle.memory_used_mib, idle.memory_total_mib, idle.temperature_c, idle.power_w) == (
        858.0,
        65536.0,
        29.0,
        53.0,
    )
    assert idle.pod is None and idle.health == {"health": "ok"}
    assert (busy.utilization_pct, busy.memory_used_mib, busy.power_w) == (87.0, 49152.0, 398.0)
    assert (busy.node, busy.namespace, busy.pod) == ("mx-01", "nlp", "suanchi-41-a0-mx1k2")
    # type="xtt" (system memory) is skipped, not taken for the card's memory.
    assert conv.skipped["unused_series"] == 4
    assert conv.examples["unused_series"][0] == "mx_memory_total{type='xtt'}"


def test_enflame_page_reads_bytes_watts_health_2_and_pod_name_labels():
    conv = convert(fixture_text("enflame.prom"))
    assert conv.vendors == ["enflame"]
    (s,) = conv.samples
    assert s.as_dry_run() == {
        "device": {
            "uuid": "GCU-U53000080105",
            "serial": None,
            "pci_bus_id": "0000:40:00.0",
            "index": 2,
            "node": "sse-lab-inspur-043",
        },
        "vendor": "enflame",
        "mig_profile": None,
        "utilization_pct": 80.0,
        "memory_used_mib": 1024.0,
        "memory_total_mib": 16384.0,
        "temperature_c": 34.5,
        # enflame_gcu_power_consumption (W); enflame_gcu_power_usage is a percent of the capability.
        "power_w": 56.0,
        "pod": "pod-gcu-example",
        "namespace": "enflame",
    }
    assert s.health == {"health": "ok"}  # 2 = healthy
    assert s.counters == {"ecc_sbe": 0.0, "ecc_dbe": 0.0}
    assert "enflame_gcu_power_usage" in conv.examples["unused_family"]


def test_enflame_minus_one_is_not_supported_and_a_bus_id_it_cannot_read_is_no_pci_address():
    pods = 'pod_name="",pod_namespace="",container_name=""'
    text = (
        f'enflame_gcu_usage{{{GCU_OTHER},uuid="GCU-X",{pods}}} -1\n'
        f'enflame_gcu_temperatures{{{GCU_OTHER},uuid="GCU-X",{pods}}} -1\n'
        f'enflame_gcu_memory_used_bytes{{{GCU_OTHER},uuid="GCU-X",{pods}}} 0\n'
        f'enflame_gcu_health{{{GCU_OTHER},uuid="GCU-X",healthmsg="",{pods}}} 1\n'
        f'enflame_gcu_usage{{busid="not supported",host="h",minor_number="4",uuid="GCU-Y",{pods}}} 5\n'
        f'enflame_vgcu_usage{{{GCU_CARD},uuid="GCU-Z",vindex="1",metrics="vgcu_usage",{pods}}} 33\n'
    )
    conv = convert(text)
    samples = {s.uuid: s for s in conv.samples}
    x = samples["GCU-X"]
    assert (x.utilization_pct, x.temperature_c, x.memory_used_mib) == (None, None, 0.0)
    assert x.health == {"health": "unhealthy"}  # 1 = unhealthy
    assert conv.skipped["not_supported"] == 2
    assert samples["GCU-Y"].pci_bus_id is None and samples["GCU-Y"].index == 4
    assert (samples["GCU-Z"].partition, samples["GCU-Z"].utilization_pct) == ("vgcu/1", 33.0)


@pytest.mark.parametrize(
    ("vendor", "utilization", "pod_labels"),
    [
        ("hygon", "hcu_utilizationrate", ("hcu_pod_namespace", "hcu_pod_name")),
        ("iluvatar", "ix_gpu_utilization", ("namespace", "pod")),
        ("metax", "mx_gpu_usage", ("exported_namespace", "exported_pod")),
        ("enflame", "enflame_gcu_usage", ("pod_namespace", "pod_name")),
    ],
)
def test_every_new_vendor_maps_the_five_gauges_its_pod_labels_and_the_unified_brand(
    vendor, utilization, pod_labels
):
    vmap = mm.VENDOR_MAPS[vendor]
    assert {g.field for g in vmap.gauges.values()} >= {mm.UTIL, mm.MEM_USED, mm.MEM_TOTAL, mm.TEMP, mm.POWER}
    assert mm.lookup(utilization) == (vmap, "gauge", utilization)
    namespace_label, pod_label = pod_labels
    assert vmap.pod({namespace_label: "team-a", pod_label: "train-0"}) == ("team-a", "train-0")
    assert mm.BRAND_TO_VENDOR[vendor] == vendor
    assert re.escape(utilization) in ingest.prometheus_query()


def test_the_unified_series_of_the_new_brands_land_on_their_vendor():
    text = (
        'gpu:utilization:percent{gpu="1",uuid="GPU-ix",gpu_brand="iluvatar"} 20\n'
        'gpu:utilization:percent{deviceId="0",uuid="MX-1",Hostname="mx-01",gpu_brand="metax"} 40\n'
        f'gpu:utilization:percent{{{GCU_CARD},uuid="GCU-U1",gpu_brand="enflame"}} 80\n'
        f'gpu:utilization:percent{{{HCU_CARD},gpu_brand="hygon"}} 55\n'
        f"hcu_utilizationrate{{{HCU_CARD}}} 50\n"
    )
    found = {(s.vendor, s.uuid or s.serial): s.utilization_pct for s in convert(text).samples}
    assert found == {
        ("iluvatar", "GPU-ix"): 20.0,
        ("metax", "MX-1"): 40.0,
        ("enflame", "GCU-U1"): 80.0,
        ("hygon", "T8R1380013061601"): 55.0,  # the recorded series wins over the raw one
    }


# --- ingest and read-back -------------------------------------------------------------------------------


@pytest.fixture
def fleet(db):
    cluster = Cluster.objects.create(name="New vendors", slug="newv")
    cards = {}
    rows = [
        ("hcunode3", "hygon", 0, None, "T8R1380013061601", "0000:F6:00.0", 65536),
        ("hcunode3", "hygon", 1, None, "T8R1380013061602", "0000:F7:00.0", 65536),
        ("mx-01", "metax", 0, "MX-FILLED-0000-0000-0000-000000000000", "", "", 65536),
        ("mx-01", "metax", 1, "MX-FILLED-0000-0000-0000-000000000001", "", "", 65536),
        ("sse-lab-inspur-043", "enflame", 2, "GCU-U53000080105", "", "0000:40:00.0", 16384),
        ("sse-lab-inspur-043", "enflame", 3, "GCU-U53000080106", "", "0000:41:00.0", 16384),
        ("ix-01", "iluvatar", 0, "GPU-4a8348cb-505c-507f-8df7-ff3c796e3033", "", "", 32768),
        ("ix-01", "iluvatar", 1, "GPU-50351a81-6f42-4746-9981-6e4401848ba5", "", "", 32768),
        ("ix-01", "iluvatar", 2, "GPU-6d2ec5fa-f293-57a3-9f2c-335f78120578", "", "", 32768),
    ]
    nodes: dict[str, Node] = {}
    for node_name, vendor, index, uuid, serial, pci, memory in rows:
        node = nodes.get(node_name) or Node.objects.create(cluster=cluster, name=node_name)
        nodes[node_name] = node
        cards[f"{vendor}/{index}"] = Device.objects.create(
            node=node, vendor=vendor, index=index, uuid=uuid, serial=serial, pci_bus_id=pci, memory_mib=memory
        )
    return cards


def five(device, partition=""):
    return DeviceRollup.objects.get(device=device, resolution=300, partition=partition)


def test_every_new_exporter_page_lands_on_its_ledger_card(fleet):
    for name in ("hygon_hcu.prom", "metax.prom", "enflame.prom", "iluvatar.prom"):
        report, _ = ingest.scrape_ingest(text=fixture_text(name), at=SCRAPED, now=NOW)
        assert report.skipped.get("device_not_in_ledger", 0) == 0, (name, report.as_dict())
    hcu = five(fleet["hygon/0"])
    assert (hcu.util_avg, hcu.mem_used_avg_mib, hcu.mem_total_mib, hcu.power_avg_w) == (
        85.0,
        32768.0,
        65536.0,
        260.0,
    )
    assert hcu.pods == [{"namespace": "default", "pod": "training-job"}]
    assert five(fleet["hygon/0"], "vhcu/1").util_avg == 72.0
    mx = five(fleet["metax/1"])
    assert (mx.util_avg, mx.mem_used_avg_mib, mx.temp_max_c, mx.power_avg_w) == (87.0, 49152.0, 71.5, 398.0)
    gcu = five(fleet["enflame/2"])
    assert (gcu.util_avg, gcu.mem_total_mib, gcu.temp_max_c, gcu.power_avg_w) == (80.0, 16384.0, 34.5, 56.0)
    assert gcu.pods == [{"namespace": "enflame", "pod": "pod-gcu-example"}]
    assert five(fleet["iluvatar/2"]).power_avg_w == 13.0


def _hcu_page(namespace: str, pod: str) -> str:
    """The fixture's card (index 0) held by ``pod`` and a second card (index 1, no pod) in the same
    exporter format: the page a two-card node shows."""
    text = fixture_text("hygon_hcu.prom").replace('"default"', f'"{namespace}"')
    text = text.replace('"training-job"', f'"{pod}"').replace('"inference"', f'"{pod}"')
    other = [
        line.replace(HCU_CARD, HCU_OTHER)
        .replace(f'hcu_pod_namespace="{namespace}"', 'hcu_pod_namespace=""')
        .replace(f'hcu_pod_name="{pod}"', 'hcu_pod_name=""')
        for line in text.splitlines()
        if line.startswith("hcu_") and HCU_CARD in line
    ]
    return text + "\n".join(other) + "\n"


def _gcu_page(namespace: str, pod: str) -> str:
    text = (
        fixture_text("enflame.prom")
        .replace('"enflame"', f'"{namespace}"')
        .replace('"pod-gcu-example"', f'"{pod}"')
    )
    other = [
        line.replace(GCU_CARD, GCU_OTHER)
        .replace("GCU-U53000080105", "GCU-U53000080106")
        .replace(f'pod_name="{pod}",pod_namespace="{namespace}"', 'pod_name="",pod_namespace=""')
        for line in text.splitlines()
        if line.startswith("enflame_gcu_") and GCU_CARD in line
    ]
    return text + "\n".join(other) + "\n"


def _mx_page(namespace: str, pod: str) -> str:
    return (
        fixture_text("metax.prom")
        .replace('"nlp"', f'"{namespace}"')
        .replace('"suanchi-41-a0-mx1k2"', f'"{pod}"')
    )


@pytest.mark.parametrize(
    ("vendor", "allocated", "actual", "page"),
    [
        ("hygon", 1, 0, _hcu_page),
        ("metax", 0, 1, _mx_page),
        ("enflame", 3, 2, _gcu_page),
    ],
)
def test_the_exporters_pod_labels_move_the_allocation_to_the_card_the_pod_runs_on(
    fleet, make_project, vendor, allocated, actual, page
):
    project = make_project("vision")
    job = make_job(project)
    alloc = allocate(job, fleet[f"{vendor}/{allocated}"], start=NOW - timedelta(hours=1))

    report, _ = ingest.scrape_ingest(text=page("vision", f"suanchi-{job.pk}-a0-k2"), at=SCRAPED, now=NOW)

    alloc.refresh_from_db()
    assert alloc.device_id == fleet[f"{vendor}/{actual}"].pk
    assert (report.placements_moved, report.placement_conflicts) == (1, 0)
