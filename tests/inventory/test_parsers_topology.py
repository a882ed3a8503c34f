"""Issue 19 item 3: discovery for all five vendors with topology, MIG profiles and ``--kind auto``.

Fixtures are written from the vendors' documented output formats (tests/inventory/fixtures/SOURCES.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.core.errors import ParseFailed
from apps.inventory.models import Cluster, Device, DeviceLink, Node, NodeReport
from apps.inventory.services.discovery import node_report_ingest
from apps.inventory.vendors import PARSERS, detect_kind, parse_report
from apps.inventory.vendors.adapter import pix_switch_ids

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


# Every fixture file and the kind its content is. --kind auto must pick exactly this kind.
FIXTURE_KINDS = {
    "cnmon_info_mlu370_x4.txt": "cnmon-info",
    "cnmon_info_truncated.txt": "cnmon-info",
    "cnmon_mlu370_x4_v4.txt": "cnmon",
    "cnmon_mlu370_x8_v5.txt": "cnmon",
    "cnmon_truncated.txt": "cnmon",
    "efsmi_s60_2dev.txt": "efsmi",
    "mthreads_gmi_s5000_excerpt.txt": "mthreads-gmi",
    "hy_smi_dcu.txt": "hy-smi",
    "hy_smi_hcu.txt": "hy-smi",
    "hy_smi_topo_hcu_4.txt": "hy-smi-topo",
    "hy_smi_topo_truncated.txt": "hy-smi-topo",
    "ixsmi_bi_v150_16gpu.txt": "ixsmi",
    "mx_smi_c550_8gpu.txt": "mx-smi",
    "npu_smi_310p_duo.txt": "npu-smi",
    "npu_smi_910b3_8chip.txt": "npu-smi",
    "npu_smi_a3_phy_id.txt": "npu-smi",
    "npu_smi_topo_910b_8npu.txt": "npu-smi-topo",
    "npu_smi_topo_a3_phy_id.txt": "npu-smi-topo",
    "npu_smi_topo_truncated.txt": "npu-smi-topo",
    "nvidia_mig_lgip_a100_40gb.txt": "nvidia-smi-mig-lgip",
    "nvidia_mig_lgip_truncated.txt": "nvidia-smi-mig-lgip",
    "nvidia_mig_lgipp_a100.txt": "nvidia-smi-mig-lgipp",
    "nvidia_mig_lgipp_truncated.txt": "nvidia-smi-mig-lgipp",
    "nvidia_smi_q_a100_mig.xml": "nvidia-smi-xml",
    "nvidia_smi_q_t4_na.xml": "nvidia-smi-xml",
    "nvidia_smi_query_header.csv": "nvidia-smi-csv",
    "nvidia_smi_query_noheader_nounits.csv": "nvidia-smi-csv",
    "nvidia_topo_a100_pcie_old_driver.txt": "nvidia-topo",
    "nvidia_topo_gh200_1gpu.txt": "nvidia-topo",
    "nvidia_topo_h100_8gpu_nics.txt": "nvidia-topo",
    "rocm_smi_mi210_xgmi.json": "rocm-smi-json",
    "rocm_smi_topo_2hives.json": "rocm-smi-topo",
    "rocm_smi_topo_mi300a_4gpu.txt": "rocm-smi-topo",
    "rocm_smi_topo_truncated.txt": "rocm-smi-topo",
    "xpu_smi_p800_8xpu.txt": "xpu-smi",
}


def test_the_auto_table_lists_every_fixture_file_and_every_kind():
    on_disk = {p.name for p in FIXTURES.iterdir() if p.suffix in (".txt", ".json", ".xml", ".csv")}
    assert on_disk == set(FIXTURE_KINDS)
    assert set(FIXTURE_KINDS.values()) == set(PARSERS)


@pytest.mark.parametrize("name", sorted(FIXTURE_KINDS))
def test_kind_auto_recognises_every_fixture(name):
    assert detect_kind(fixture(name)) == FIXTURE_KINDS[name]


@pytest.mark.parametrize("name", sorted(n for n in FIXTURE_KINDS if "truncated" not in n))
def test_kind_auto_parses_like_the_named_kind_and_says_which_it_took(name):
    auto = parse_report("auto", fixture(name))
    named = parse_report(FIXTURE_KINDS[name], fixture(name))
    assert auto.kind == FIXTURE_KINDS[name]
    body = auto.as_dict()
    assert body["kind"] == FIXTURE_KINDS[name] and body["requested_kind"] == "auto"
    assert named.as_dict()["requested_kind"] == FIXTURE_KINDS[name]
    assert body["devices"] == named.as_dict()["devices"] and body["links"] == named.as_dict()["links"]


def test_kind_auto_refuses_an_output_it_cannot_recognise_naming_line_1():
    with pytest.raises(ParseFailed) as caught:
        parse_report("auto", "Mon Jan  1 00:00:00 2026\nsome other tool\n")
    assert caught.value.message.startswith("line 1: cannot tell which tool printed this output ('Mon Jan")
    assert caught.value.details["line"] == 1
    assert "cnmon" in caught.value.details["valid_kinds"]


# ---------------------------------------------------------------------------------------------------
# Cambricon


def test_cnmon_v5_table_gives_bus_ids_memory_firmware_and_driver():
    report = parse_report("cnmon", fixture("cnmon_mlu370_x8_v5.txt"))
    assert report.vendor == "cambricon" and report.full_inventory is True
    assert report.node["driver_version"] == "5.10.22" and report.node["smi_version"] == "5.10.22"
    assert [(d.index, d.pci_bus_id, d.memory_mib, d.memory_used_mib) for d in report.devices] == [
        (0, "0000:13:00.0", 20638, 0),
        (1, "0000:16:00.0", 20638, 0),
    ]
    card = report.devices[1]
    assert (card.model_name, card.firmware_version, card.temperature_c, card.power_w) == (
        "MLU370-X8",
        "v1.1.6",
        32.0,
        107.0,
    )
    assert card.health == "healthy" and card.extra["power_cap_w"] == 250.0
    assert card.uuid is None and card.serial is None  # the table prints neither


def test_cnmon_v4_table_takes_the_driver_from_the_card_rows_and_has_no_bus_id():
    report = parse_report("cnmon", fixture("cnmon_mlu370_x4_v4.txt"))
    assert report.node["driver_version"] == "4.20.11"
    assert [(d.index, d.pci_bus_id, d.memory_mib) for d in report.devices] == [
        (0, None, 23308),
        (1, None, 23308),
    ]
    assert report.devices[0].health is None  # Ecc-Error N/A: inline ECC off, nothing said


def test_cnmon_info_gives_uuid_bus_id_memory_and_health():
    report = parse_report("cnmon-info", fixture("cnmon_info_mlu370_x4.txt"))
    assert report.node["driver_version"] == "5.10.22"
    assert [(d.index, d.uuid, d.pci_bus_id, d.memory_mib) for d in report.devices] == [
        (0, "77013006-2457-0000-0000-000000000000", "0000:01:00.0", 23308),
        (1, "77013006-2457-0000-0000-000000000001", "0000:02:00.0", 23308),
    ]
    first = report.devices[0]
    assert (first.model_name, first.firmware_version, first.health) == ("MLU370-X4", "v1.1.6", "healthy")
    assert (first.utilization_pct, first.memory_used_mib, first.temperature_c, first.power_w) == (
        66.0,
        17320,
        78.0,
        44.0,
    )


# Issue 28 item 1: an idle card's "Processes :" section is empty. No vendor-hosted idle-card sample
# was found, so the idle card is the fixture's busy card 0 with its one process entry removed.
_CARD0_PROCESS = """        Process                    : 0
            PID                    : 101934
            cmdline                : /torch/venv3/pytorch_infer/bin/python
            MLU Memory Usage       : 15829 MiB
"""


def _idle_card0() -> str:
    text = fixture("cnmon_info_mlu370_x4.txt")
    assert _CARD0_PROCESS in text
    return text.replace(_CARD0_PROCESS, "", 1)


def test_cnmon_info_accepts_an_empty_processes_section_between_cards():
    report = parse_report("cnmon-info", _idle_card0())
    assert [d.index for d in report.devices] == [0, 1]
    assert report.devices[0].extra["process_count"] == 0
    assert report.devices[1].extra["process_count"] is None  # card 1 prints no Processes section
    assert (
        parse_report("cnmon-info", fixture("cnmon_info_mlu370_x4.txt")).devices[0].extra["process_count"] == 1
    )


def test_cnmon_info_accepts_an_empty_processes_section_at_the_end_of_the_output():
    text = _idle_card0()
    card1 = text.index("Card 1")
    last = text[:card1]  # card 0 alone, ending with its empty "Processes :"
    assert last.rstrip().endswith("Processes                      :")
    report = parse_report("cnmon-info", last)
    assert [(d.index, d.extra["process_count"], d.memory_mib) for d in report.devices] == [(0, 0, 23308)]


def test_cnmon_info_still_refuses_a_section_cut_at_the_end_of_the_output():
    text = _idle_card0()
    cut = text[: text.index("        Domain ID")]  # ends with "PCI :" and nothing under it
    with pytest.raises(ParseFailed) as caught:
        parse_report("cnmon-info", cut)
    assert "section 'PCI' has no entries: the output is truncated" in caught.value.message


def test_a_cnmon_info_card_in_bad_health_is_degraded_with_the_printed_state():
    text = fixture("cnmon_info_mlu370_x4.txt").replace(": Good", ": Warning", 1)
    device = parse_report("cnmon-info", text).devices[0]
    assert (device.health, device.health_detail) == ("degraded", "Health State: Warning")


# ---------------------------------------------------------------------------------------------------
# Topology: Huawei, AMD, Hygon


def test_npu_smi_topo_gives_hccs_links_between_every_pair_and_the_cpu_affinity():
    report = parse_report("npu-smi-topo", fixture("npu_smi_topo_910b_8npu.txt"))
    assert report.vendor == "huawei" and report.full_inventory is False
    assert [d.index for d in report.devices] == list(range(8))
    assert len(report.links) == 28 and {link.link for link in report.links} == {"HCCS"}
    assert (report.links[0].a, report.links[0].b) == (0, 1)
    assert report.topology["cpu_affinity"][7] == "48-71"
    assert all(d.numa_node is None for d in report.devices)  # npu-smi prints no NUMA node


def test_npu_smi_topo_on_a3_uses_the_physical_ids_and_keeps_sio():
    report = parse_report("npu-smi-topo", fixture("npu_smi_topo_a3_phy_id.txt"))
    assert [d.index for d in report.devices] == [12, 13]
    assert [(link.a, link.b, link.link) for link in report.links] == [(12, 13, "SIO")]


def test_rocm_smi_topo_text_gives_xgmi_links_numa_nodes_weights_and_hops():
    report = parse_report("rocm-smi-topo", fixture("rocm_smi_topo_mi300a_4gpu.txt"))
    assert report.vendor == "amd" and report.full_inventory is False
    assert [(d.index, d.numa_node) for d in report.devices] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert len(report.links) == 6 and {link.link for link in report.links} == {"XGMI"}
    assert report.topology["pairs"][0] == {"a": 0, "b": 1, "link_type": "XGMI", "weight": 15, "hops": 1}


def test_rocm_smi_topo_json_links_only_xgmi_pairs_and_keeps_pcie_pairs_in_the_topology():
    report = parse_report("rocm-smi-topo", fixture("rocm_smi_topo_2hives.json"))
    assert [(d.index, d.numa_node) for d in report.devices] == [(0, 0), (1, 0), (2, 1), (3, 1)]
    assert [(link.a, link.b, link.link) for link in report.links] == [(0, 1, "XGMI"), (2, 3, "XGMI")]
    pcie = [p for p in report.topology["pairs"] if (p["a"], p["b"]) == (0, 2)][0]
    assert pcie == {"a": 0, "b": 2, "link_type": "PCIE", "weight": 72, "hops": 3}


def test_hy_smi_topo_reads_hcu_labels_for_hygon():
    report = parse_report("hy-smi-topo", fixture("hy_smi_topo_hcu_4.txt"))
    assert report.vendor == "hygon"
    assert [(d.index, d.numa_node) for d in report.devices] == [(0, 0), (1, 0), (2, 1), (3, 1)]
    assert len(report.links) == 6 and {link.link for link in report.links} == {"XGMI"}


# ---------------------------------------------------------------------------------------------------
# NVIDIA MIG


def test_mig_lgip_lists_each_profile_with_its_memory_and_instances():
    report = parse_report("nvidia-smi-mig-lgip", fixture("nvidia_mig_lgip_a100_40gb.txt"))
    assert report.full_inventory is False and [d.index for d in report.devices] == [0]
    profiles = report.as_dict()["mig_profiles"]
    assert [p["name"] for p in profiles] == [
        "1g.5gb",
        "1g.5gb+me",
        "1g.10gb",
        "2g.10gb",
        "3g.20gb",
        "4g.20gb",
        "7g.40gb",
    ]
    three = next(p for p in profiles if p["id"] == 9)
    assert three["gpu"] == 0 and three["name"] == "3g.20gb"
    assert (three["memory_mib"], three["max_instances"], three["free_instances"]) == (20091, 2, 2)
    assert three["placements"] is None and three["sm"] == 42


def test_mig_lgipp_lists_the_start_slots_and_size_of_each_profile():
    report = parse_report("nvidia-smi-mig-lgipp", fixture("nvidia_mig_lgipp_a100.txt"))
    by_id = {p["id"]: p for p in report.as_dict()["mig_profiles"]}
    assert by_id[9]["placements"] == [{"start": 0, "size": 4}, {"start": 4, "size": 4}]
    assert by_id[5]["placements"] == [{"start": 0, "size": 4}]  # "Placement :" (singular)
    assert by_id[19]["placements"] == [{"start": s, "size": 1} for s in range(7)]
    assert by_id[9]["name"] is None and by_id[9]["memory_mib"] is None  # -lgipp prints neither


# ---------------------------------------------------------------------------------------------------
# Truncated and wrong-vendor files: a ParseFailed (HTTP 400) naming the line

TRUNCATED = [
    ("cnmon", "cnmon_truncated.txt", 12, "truncated"),
    ("cnmon-info", "cnmon_info_truncated.txt", 53, "section 'Power' has no entries"),
    ("npu-smi-topo", "npu_smi_topo_truncated.txt", 6, "before the row for NPU5"),
    ("rocm-smi-topo", "rocm_smi_topo_truncated.txt", 21, "before the row for device 1"),
    ("hy-smi-topo", "hy_smi_topo_truncated.txt", 26, "End of"),
    ("nvidia-smi-mig-lgip", "nvidia_mig_lgip_truncated.txt", 13, "truncated"),
    ("nvidia-smi-mig-lgipp", "nvidia_mig_lgipp_truncated.txt", 5, "Profile ID"),
]


@pytest.mark.parametrize(("kind", "name", "line", "fragment"), TRUNCATED)
def test_a_truncated_output_is_refused_naming_the_line(kind, name, line, fragment):
    with pytest.raises(ParseFailed) as caught:
        parse_report(kind, fixture(name))
    assert caught.value.message.startswith(f"line {line}: ")
    assert fragment in caught.value.message
    assert caught.value.details == {**caught.value.details, "kind": kind, "line": line}
    assert caught.value.status_code == 400


WRONG_VENDOR = [
    ("cnmon", "nvidia_topo_h100_8gpu_nics.txt", 1, "is this cnmon output"),
    ("cnmon-info", "npu_smi_910b3_8chip.txt", 1, "is this cnmon info output"),
    ("npu-smi-topo", "nvidia_topo_h100_8gpu_nics.txt", 1, "is this npu-smi info -t topo output"),
    ("rocm-smi-topo", "hy_smi_topo_hcu_4.txt", 2, "is this rocm-smi --showtopo output"),
    ("hy-smi-topo", "rocm_smi_topo_mi300a_4gpu.txt", 3, "is this hy-smi --showtopo output"),
    ("nvidia-smi-mig-lgip", "cnmon_mlu370_x8_v5.txt", 1, "is this nvidia-smi mig -lgip output"),
    ("nvidia-smi-mig-lgipp", "npu_smi_topo_910b_8npu.txt", 1, "is this nvidia-smi mig -lgipp output"),
]


@pytest.mark.parametrize(("kind", "name", "line", "fragment"), WRONG_VENDOR)
def test_another_vendors_output_is_refused_naming_the_line(kind, name, line, fragment):
    with pytest.raises(ParseFailed) as caught:
        parse_report(kind, fixture(name))
    assert caught.value.message.startswith(f"line {line}: ")
    assert fragment in caught.value.message
    assert caught.value.status_code == 400


@pytest.mark.parametrize("kind", ["cnmon", "cnmon-info", "npu-smi-topo", "rocm-smi-topo", "hy-smi-topo"])
def test_new_parsers_refuse_empty_input(kind):
    with pytest.raises(ParseFailed, match="empty input"):
        parse_report(kind, "  \n")


# ---------------------------------------------------------------------------------------------------
# PCIe switch ids


def test_pix_cells_join_devices_behind_one_switch_directly_or_through_a_nic():
    cells = {
        ("GPU0", "GPU1"): "PIX",
        ("GPU2", "NIC0"): "PIX",
        ("GPU3", "NIC0"): "PIX",
        ("GPU4", "GPU5"): "PXB",
        ("GPU0", "GPU2"): "NODE",
    }
    assert pix_switch_ids(["GPU0", "GPU1", "GPU2", "GPU3", "GPU4", "GPU5"], cells) == {
        "GPU0": "pix-GPU0",
        "GPU1": "pix-GPU0",
        "GPU2": "pix-GPU2",
        "GPU3": "pix-GPU2",
        "GPU4": "",
        "GPU5": "",
    }


def test_nvidia_topo_derives_the_pcie_switch_from_pix_cells():
    report = parse_report("nvidia-topo", fixture("nvidia_topo_a100_pcie_old_driver.txt"))
    # GPU0 and GPU2 see a NIC as PIX; GPU1 and GPU3 reach theirs only through the host bridge.
    assert [d.pcie_switch for d in report.devices] == ["pix-GPU0", "", "pix-GPU2", ""]


# ---------------------------------------------------------------------------------------------------
# Ledger: MIG profiles, links, the PCIe switch in the engine's snapshot, the API and the command

A100 = "NVIDIA A100-SXM4-40GB"


def gpu_csv(n: int) -> str:
    return "".join(
        f"{i}, GPU-{i:08d}-1111-2222-3333-444455556666, {A100}, 13240230{i:05d}, "
        f"00000000:{0x07 + i * 0x10:02X}:00.0, 40960, 535.154.05, 92.00.45.00.06, 0, 0, 34, 61.20\n"
        for i in range(n)
    )


def ingest(kind: str, text: str, node: str = "gpu-a01", cluster=None):
    return node_report_ingest(node_name=node, kind=kind, text=text, actor="command", cluster=cluster)


def test_mig_listings_merge_on_the_card_by_profile_id(cluster):
    ingest("nvidia-smi-csv", gpu_csv(1), cluster=cluster)
    ingest("nvidia-smi-mig-lgip", fixture("nvidia_mig_lgip_a100_40gb.txt"))
    result = ingest("nvidia-smi-mig-lgipp", fixture("nvidia_mig_lgipp_a100.txt"))
    assert result.updated == 1 and result.lost == 0
    profiles = {p["id"]: p for p in Device.objects.get(index=0).mig_profiles}
    assert profiles[9]["name"] == "3g.20gb" and profiles[9]["max_instances"] == 2
    assert profiles[9]["placements"] == [{"start": 0, "size": 4}, {"start": 4, "size": 4}]
    assert sorted(profiles) == [0, 5, 9, 14, 15, 19, 20]
    # -lgip again keeps the placements -lgipp gave, and the same listing twice changes nothing.
    assert ingest("nvidia-smi-mig-lgip", fixture("nvidia_mig_lgip_a100_40gb.txt")).changed is False
    assert Device.objects.get(index=0).mig_profiles == list(sorted(profiles.values(), key=lambda p: p["id"]))


def test_an_npu_topology_report_writes_hccs_links_and_one_group(cluster):
    ingest("npu-smi", fixture("npu_smi_910b3_8chip.txt"), node="npu-01", cluster=cluster)
    result = ingest("auto", fixture("npu_smi_topo_910b_8npu.txt"), node="npu-01")
    assert result.parsed.kind == "npu-smi-topo" and result.lost == 0
    assert result.links_written == 28
    assert set(DeviceLink.objects.values_list("kind", flat=True)) == {"HCCS"}
    assert set(Device.objects.values_list("topology_group", flat=True)) == {"link-0"}
    assert NodeReport.objects.filter(kind="npu-smi-topo").count() == 1


def test_sio_and_hccs_switch_links_are_hccs_links_in_the_ledger(cluster):
    from apps.inventory.services.discovery import _link_kind

    assert _link_kind("SIO") == ("HCCS", None)
    assert _link_kind("HCCS_SW") == ("HCCS", None)


def test_the_pcie_switch_reaches_the_engine_snapshot(cluster):
    from apps.scheduling.snapshot import fleet_snapshot

    ingest("nvidia-smi-csv", gpu_csv(4), cluster=cluster)
    ingest("nvidia-topo", fixture("nvidia_topo_a100_pcie_old_driver.txt"))
    assert list(Device.objects.order_by("index").values_list("pcie_switch", flat=True)) == [
        "pix-GPU0",
        "",
        "pix-GPU2",
        "",
    ]
    node = fleet_snapshot().by_name["gpu-a01"]
    assert sorted((d.index, d.pcie_switch) for d in node.devices) == [
        (0, "pix-GPU0"),
        (1, ""),
        (2, "pix-GPU2"),
        (3, ""),
    ]


def test_the_api_takes_kind_auto_and_says_which_kind_it_took(api_client, staff_user, cluster):
    api_client.force_authenticate(staff_user)
    response = api_client.post(
        "/api/inventory/node-reports/",
        {"node": "mlu-01", "cluster": "prod", "kind": "auto", "text": fixture("cnmon_mlu370_x8_v5.txt")},
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["kind"], body["requested_kind"]) == ("cnmon", "auto")
    assert NodeReport.objects.get().kind == "cnmon"
    assert Device.objects.filter(node__name="mlu-01", vendor="cambricon").count() == 2


def test_the_api_refuses_an_unrecognised_auto_report_with_a_400_and_writes_nothing(
    api_client, staff_user, cluster
):
    api_client.force_authenticate(staff_user)
    response = api_client.post(
        "/api/inventory/node-reports/",
        {"node": "mlu-01", "cluster": "prod", "kind": "auto", "text": "hello\nworld\n"},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("line 1: cannot tell which tool")
    assert not Node.objects.filter(name="mlu-01").exists() and NodeReport.objects.count() == 0


def test_a_truncated_report_through_the_api_is_a_400_naming_the_line(api_client, staff_user, cluster):
    api_client.force_authenticate(staff_user)
    response = api_client.post(
        "/api/inventory/node-reports/",
        {"node": "mlu-01", "cluster": "prod", "kind": "cnmon", "text": fixture("cnmon_truncated.txt")},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("line 12: ")
    assert Device.objects.count() == 0


def test_dry_run_json_prints_devices_links_and_mig_profiles(db, tmp_path, capsys):
    path = tmp_path / "lgipp.txt"
    path.write_text(fixture("nvidia_mig_lgipp_a100.txt"))
    call_command("ingest_node_report", str(path), node="gpu-a01", kind="auto", dry_run=True, json=True)
    body = json.loads(capsys.readouterr().out)
    assert (body["kind"], body["requested_kind"]) == ("nvidia-smi-mig-lgipp", "auto")
    assert {"id": 0, "placements": [{"start": 0, "size": 8}]}.items() <= next(
        p for p in body["mig_profiles"] if p["id"] == 0
    ).items()

    path.write_text(fixture("cnmon_info_mlu370_x4.txt"))
    call_command("ingest_node_report", str(path), node="mlu-01", kind="auto", dry_run=True, json=True)
    body = json.loads(capsys.readouterr().out)
    assert body["kind"] == "cnmon-info" and body["mig_profiles"] == []
    assert {k: body["devices"][0][k] for k in ("uuid", "serial", "pci_bus_id", "memory_mib")} == {
        "uuid": "77013006-2457-0000-0000-000000000000",
        "serial": None,
        "pci_bus_id": "0000:01:00.0",
        "memory_mib": 23308,
    }

    path.write_text(fixture("npu_smi_topo_a3_phy_id.txt"))
    call_command("ingest_node_report", str(path), node="npu-01", kind="npu-smi-topo", dry_run=True, json=True)
    body = json.loads(capsys.readouterr().out)
    assert body["links"] == [{"a": 12, "b": 13, "link": "SIO"}]
    assert Device.objects.count() == 0 and NodeReport.objects.count() == 0


def test_the_command_refuses_a_wrong_vendor_file_naming_the_line(db, tmp_path):
    path = tmp_path / "topo.txt"
    path.write_text(fixture("nvidia_topo_h100_8gpu_nics.txt"))
    with pytest.raises(CommandError, match="line 1: .*npu-smi info -t topo"):
        call_command("ingest_node_report", str(path), node="npu-01", kind="npu-smi-topo", dry_run=True)


@pytest.mark.django_db(transaction=True)
def test_the_agent_runs_the_topology_tool_when_present_and_the_links_reach_the_ledger(live_server, tmp_path):
    from apps.inventory.services.tokens import agent_token_create
    from tests.integration.test_agent import fake_tool, run_agent

    cluster = Cluster.objects.create(name="Prod", slug="prod")
    _, key = agent_token_create(cluster=cluster, name="agent", actor="test")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_tool(
        bin_dir,
        "npu-smi",
        {
            "info": FIXTURES / "npu_smi_910b3_8chip.txt",
            "info -t topo": FIXTURES / "npu_smi_topo_910b_8npu.txt",
        },
    )
    done = run_agent(live_server, bin_dir, key, "ascend-01")
    assert done.returncode == 0, done.stderr
    assert "npu-smi-topo:" in done.stderr
    assert DeviceLink.objects.filter(node__name="ascend-01", kind="HCCS").count() == 28
    assert set(NodeReport.objects.values_list("kind", flat=True)) == {"npu-smi", "npu-smi-topo"}
