"""Issue 28: parsers for MetaX mx-smi, Iluvatar ixsmi, Kunlunxin xpu-smi and Enflame efsmi, and
``--kind auto`` that recognises each tool by its own banner and refuses what it cannot parse.

Fixtures are real published outputs (tests/inventory/fixtures/SOURCES.md); truncated and edited
variants are cut from them in the tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.catalog.models import Vendor
from apps.core.errors import ParseFailed
from apps.inventory.models import Cluster, Device, NodeReport
from apps.inventory.services.discovery import node_report_ingest
from apps.inventory.vendors import ADAPTERS, KIND_VENDORS, detect_kind, parse_report
from apps.inventory.vendors.resource_names import device_resource_name

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def refusal(kind: str, text: str) -> ParseFailed:
    with pytest.raises(ParseFailed) as caught:
        parse_report(kind, text)
    return caught.value


def cut_after(text: str, needle: str) -> str:
    """The text up to and including the first line containing ``needle``."""
    lines = text.splitlines(keepends=True)
    number = next(i for i, line in enumerate(lines) if needle in line)
    return "".join(lines[: number + 1])


# ---------------------------------------------------------------------------------------------------
# Registry and catalog


def test_each_new_kind_belongs_to_its_vendor_and_the_vendor_is_a_catalog_value():
    assert {k: KIND_VENDORS[k] for k in ("mx-smi", "ixsmi", "xpu-smi", "efsmi")} == {
        "mx-smi": "metax",
        "ixsmi": "iluvatar",
        "xpu-smi": "kunlunxin",
        "efsmi": "enflame",
    }
    assert {"metax", "iluvatar", "kunlunxin", "enflame"} <= set(Vendor.values)
    assert {"mx-smi", "ixsmi", "xpu-smi", "efsmi"} <= set(NodeReport.Kind.values)
    # Parser-only: no adapter renders manifests, labels or taints for them yet.
    assert not {"metax", "iluvatar", "kunlunxin", "enflame"} & set(ADAPTERS)


def test_device_resource_names_come_from_the_adapter_or_the_documented_table():
    assert device_resource_name("cambricon") == "cambricon.com/mlu"
    assert device_resource_name("metax") == "metax-tech.com/gpu"
    assert device_resource_name("kunlunxin") == "kunlunxin.com/xpu"
    assert device_resource_name("enflame") == "enflame.com/gcu"
    assert device_resource_name("iluvatar") is None  # HAMi names Iluvatar shares per model only
    assert device_resource_name("mthreads") is None


# ---------------------------------------------------------------------------------------------------
# MetaX mx-smi


def test_mx_smi_gives_name_bus_id_memory_and_the_node_versions():
    report = parse_report("mx-smi", fixture("mx_smi_c550_8gpu.txt"))
    assert (report.vendor, report.kind, report.full_inventory) == ("metax", "mx-smi", True)
    assert report.node["driver_version"] == "2.15.9" and report.node["smi_version"] == "2.2.4"
    assert report.node["maca_version"] == "2.32.0.6" and report.node["bios_version"] == "1.25.1.0"
    assert [(d.index, d.pci_bus_id) for d in report.devices][::7] == [
        (0, "0000:0F:00.0"),
        (7, "0000:D7:00.0"),
    ]
    card = report.devices[5]
    assert (card.model_name, card.memory_mib, card.memory_used_mib) == ("MetaX C550", 65536, 858)
    assert (card.temperature_c, card.power_w, card.utilization_pct) == (32.0, 55.0, 0.0)
    assert card.extra == {"power_cap_w": 450.0, "gpu_state": "Available"}
    assert card.uuid is None and card.serial is None and card.firmware_version is None


def test_mx_smi_cut_inside_a_card_is_truncated_naming_the_line():
    text = cut_after(fixture("mx_smi_c550_8gpu.txt"), "| 3           MetaX C550")
    error = refusal("mx-smi", text)
    assert error.details["line"] == len(text.splitlines())
    assert "is not closed by a rule: the output is truncated" in error.message


def test_mx_smi_cut_between_two_cards_is_caught_by_the_attached_gpus_count():
    text = fixture("mx_smi_c550_8gpu.txt")
    lines = text.splitlines()
    end = max(i for i, line in enumerate(lines) if "| 3           MetaX C550" in line) + 3
    error = refusal("mx-smi", "\n".join(lines[:end]) + "\n")
    assert "'Attached GPUs : 8' (line 6) but the table lists 4 cards" in error.message


def test_mx_smi_a_repeated_gpu_index_is_refused():
    text = fixture("mx_smi_c550_8gpu.txt").replace("| 1           MetaX C550", "| 0           MetaX C550")
    error = refusal("mx-smi", text)
    assert error.message == "line 17: card 0 already listed on line 14"


# ---------------------------------------------------------------------------------------------------
# Iluvatar ixsmi


def test_ixsmi_gives_sixteen_cards_with_bus_ids_memory_and_power_where_printed():
    report = parse_report("ixsmi", fixture("ixsmi_bi_v150_16gpu.txt"))
    assert (report.vendor, report.kind) == ("iluvatar", "ixsmi")
    assert (report.node["driver_version"], report.node["cuda_version"], report.node["smi_version"]) == (
        "4.3.0",
        "10.2",
        "4.3.0",
    )
    assert [d.index for d in report.devices] == list(range(16))
    zero, one = report.devices[0], report.devices[1]
    assert (one.model_name, one.pci_bus_id, one.memory_mib, one.memory_used_mib) == (
        "Iluvatar BI-V150",
        "0000:16:00.0",
        32768,
        64,
    )
    assert (one.temperature_c, one.power_w, one.extra["power_cap_w"]) == (34.0, 103.0, 350.0)
    assert (zero.power_w, zero.extra["power_cap_w"], zero.extra["fan_pct"]) == (None, None, None)  # N/A
    assert one.extra["compute_mode"] == "Default" and one.extra["sm_clock_mhz"] == 1500.0


def test_ixsmi_without_the_processes_box_is_truncated():
    text = fixture("ixsmi_bi_v150_16gpu.txt")
    cut = text[: text.index("\n\n")] + "\n"  # the card table only
    error = refusal("ixsmi", cut)
    assert error.message.startswith(f"line {len(cut.splitlines())}: no '| Processes:' box")


# ---------------------------------------------------------------------------------------------------
# Kunlunxin xpu-smi


def test_xpu_smi_reads_three_lines_per_card():
    report = parse_report("xpu-smi", fixture("xpu_smi_p800_8xpu.txt"))
    assert (report.vendor, report.kind) == ("kunlunxin", "xpu-smi")
    assert report.node["driver_version"] == "5.0.21.21" and report.node["xpu_rt_version"] == "5.0.21"
    assert [(d.index, d.pci_bus_id) for d in report.devices][6] == (6, "0000:A3:00.0")
    card = report.devices[1]
    assert (card.model_name, card.memory_mib, card.memory_used_mib) == ("P800 OAM", 98304, 0)
    assert (card.temperature_c, card.power_w, card.health) == (41.0, 90.0, "healthy")
    assert (card.extra["l3_total_mib"], card.extra["sriov_mode"], card.extra["ecc_errors"]) == (
        96,
        "Disabled",
        0,
    )


def test_xpu_smi_counts_uncorrected_ecc_errors_as_degraded():
    text = fixture("xpu_smi_p800_8xpu.txt").replace(
        "| 00000000:05:00.0 N/A |                    0 |", "| 00000000:05:00.0 N/A |                    2 |"
    )
    card = parse_report("xpu-smi", text).devices[1]
    assert (card.health, card.health_detail) == ("degraded", "Volatile Uncorr. ECC: 2")


def test_xpu_smi_a_card_missing_its_third_line_is_refused():
    text = fixture("xpu_smi_p800_8xpu.txt")
    lines = text.splitlines()
    third = next(i for i, line in enumerate(lines) if "Disabled" in line)
    error = refusal("xpu-smi", "\n".join(lines[:third] + lines[third + 1 :]) + "\n")
    assert error.message == "line 9: expected 3 lines per card, got 2"


# ---------------------------------------------------------------------------------------------------
# Enflame efsmi


def test_efsmi_gives_serial_firmware_bus_id_and_memory_size():
    report = parse_report("efsmi", fixture("efsmi_s60_2dev.txt"))
    assert (report.vendor, report.kind) == ("enflame", "efsmi")
    assert report.node["driver_version"] == "1.2.0.301" and report.node["smi_version"] == "1.2.0.301"
    assert [(d.index, d.serial, d.firmware_version, d.pci_bus_id, d.memory_mib) for d in report.devices] == [
        (0, "A073640510015", "33.6.2", "0000:01:00.0", 49120),
        (1, "C807J40510285", "33.6.5", "0000:09:00.0", 42976),
    ]
    card = report.devices[1]
    assert (card.model_name, card.temperature_c, card.power_w, card.utilization_pct) == (
        "S60",
        46.0,
        128.0,
        0.0,
    )
    assert card.extra == {"ecc": "Enable", "dpm": "Active", "power_cap_w": 300.0, "gcu_virt": "Disable"}
    assert card.memory_used_mib is None and card.uuid is None  # efsmi's table prints neither


def test_efsmi_cut_inside_a_card_is_truncated():
    text = cut_after(fixture("efsmi_s60_2dev.txt"), "| 1      S60")
    assert "is not closed by a rule" in refusal("efsmi", text).message


# ---------------------------------------------------------------------------------------------------
# --kind auto


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("mx_smi_c550_8gpu.txt", "mx-smi"),
        ("ixsmi_bi_v150_16gpu.txt", "ixsmi"),
        ("xpu_smi_p800_8xpu.txt", "xpu-smi"),
        ("efsmi_s60_2dev.txt", "efsmi"),
    ],
)
def test_kind_auto_takes_each_new_tool_for_itself_not_for_hy_smi(name, kind):
    assert detect_kind(fixture(name)) == kind
    assert parse_report("auto", fixture(name)).vendor == KIND_VENDORS[kind]


def test_kind_auto_refuses_another_mx_smi_view_naming_metax_not_hygon():
    banner_only = cut_after(fixture("mx_smi_c550_8gpu.txt"), "Attached GPUs")
    with pytest.raises(ParseFailed) as caught:
        detect_kind(banner_only)
    assert caught.value.message.startswith(
        "line 1: this looks like MetaX mx-smi output, but not its card table"
    )
    assert caught.value.details["looks_like"] == "MetaX mx-smi" and "Hygon" not in caught.value.message


def test_kind_auto_refuses_an_efsmi_banner_without_the_table_naming_enflame():
    banner_only = "\n".join(fixture("efsmi_s60_2dev.txt").splitlines()[:4]) + "\n"
    with pytest.raises(ParseFailed) as caught:
        parse_report("auto", banner_only)
    assert caught.value.details["looks_like"] == "Enflame efsmi"
    assert "DCU|HCU" not in caught.value.message  # never handed to the hy-smi parser


def test_kind_auto_refuses_intel_xpu_smi_naming_it():
    # The first line of intel/xpumanager doc/smi_user_guide.md's `xpu-smi` help output.
    with pytest.raises(ParseFailed) as caught:
        detect_kind("Intel(R) XPU System Management Interface -- v1.0\n")
    assert caught.value.message.startswith("line 1: this looks like Intel xpu-smi output, which this version")


def test_kind_auto_refuses_kunlunxins_older_listing_naming_it():
    # The header of the R300 listing in PaddlePaddle/docs docs/hardware_support/xpu/install_cn.md.
    text = (
        "Runtime Version: 4.31\nDriver Version: 4.0\n  DEVICES\n"
        "| DevID |   PCI Addr   | Model |   SN   |    INODE   | UseRate |    L3     |    Memory    |\n"
    )
    with pytest.raises(ParseFailed) as caught:
        detect_kind(text)
    assert caught.value.details["looks_like"] == "Kunlunxin xpu-smi's R200/R300 listing"
    assert caught.value.details["text"] == "Runtime Version: 4.31"


def test_kind_auto_refuses_an_unknown_output_quoting_its_first_line():
    with pytest.raises(ParseFailed) as caught:
        detect_kind("\nfoo-smi 1.0\n| something |\n")
    assert caught.value.message.startswith(
        "line 1: cannot tell which tool printed this output ('foo-smi 1.0')"
    )
    assert "mx-smi" in caught.value.details["valid_kinds"] and "looks_like" not in caught.value.details


# ---------------------------------------------------------------------------------------------------
# Ingestion


@pytest.fixture
def cluster(db):
    return Cluster.objects.create(name="Prod", slug="prod")


def test_an_auto_mx_smi_report_registers_metax_cards_and_stores_the_kind(cluster):
    result = node_report_ingest(
        node_name="mx-01", kind="auto", text=fixture("mx_smi_c550_8gpu.txt"), actor="command", cluster=cluster
    )
    assert result.created == 8
    assert NodeReport.objects.get().kind == "mx-smi"
    cards = Device.objects.filter(node__name="mx-01").order_by("index")
    assert {c.vendor for c in cards} == {"metax"}
    assert [c.pci_bus_id for c in cards][:2] == ["0000:0F:00.0", "0000:34:00.0"]


def test_an_efsmi_report_keeps_the_serial_numbers(cluster):
    node_report_ingest(
        node_name="gcu-01", kind="efsmi", text=fixture("efsmi_s60_2dev.txt"), actor="command", cluster=cluster
    )
    assert sorted(Device.objects.filter(vendor="enflame").values_list("serial", flat=True)) == [
        "A073640510015",
        "C807J40510285",
    ]
