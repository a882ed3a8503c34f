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
from apps.inventory.models import Device, NodeReport
from apps.inventory.services.discovery import node_report_ingest
from apps.inventory.vendors import ADAPTERS, KIND_VENDORS, adapter_for_kind, detect_kind, parse_report
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
    # Each now has an adapter (issue 28 §1): resource name, labels, taint and the agent DaemonSet.
    assert {"metax", "iluvatar", "kunlunxin", "enflame"} <= set(ADAPTERS)


def test_device_resource_names_come_from_the_adapter():
    assert device_resource_name("cambricon") == "cambricon.com/mlu"
    assert device_resource_name("metax") == "metax-tech.com/gpu"
    assert device_resource_name("kunlunxin") == "kunlunxin.com/xpu"
    assert device_resource_name("enflame") == "enflame.com/gcu"
    # Deep-Spark/ix-device-plugin's plugin.go and chart values (not HAMi's per-model shares).
    assert device_resource_name("iluvatar") == "iluvatar.com/gpu"
    # Moore Threads' device plugin (Mthreads GPU Operator; Project-HAMi/website
    # docs/installation/how-to-use-mthreads-s5000.md: whole cards as mthreads.com/gpu).
    assert device_resource_name("mthreads") == "mthreads.com/gpu"
    assert device_resource_name("birentech") is None  # no Vendor value, no adapter


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


# ---------------------------------------------------------------------------------------------------
# Adapters (issue 28 §1): facts taken from each vendor's plugin; sources in each adapter's docstring.


@pytest.mark.parametrize(
    ("vendor", "resource", "env", "accelerator", "model_key", "model", "model_label"),
    [
        (
            "metax",
            "metax-tech.com/gpu",
            "MACA_VISIBLE_DEVICES",
            "metax-gpu",
            "gpu-model",
            "MetaX C550",
            "C550",
        ),
        (
            "iluvatar",
            "iluvatar.com/gpu",
            "IX_VISIBLE_DEVICES",
            "iluvatar-gpu",
            "gpu-model",
            "Iluvatar BI-V150",
            "BI-V150",
        ),
        (
            "kunlunxin",
            "kunlunxin.com/xpu",
            "XPU_VISIBLE_DEVICES",
            "kunlunxin-xpu",
            "xpu-model",
            "P800 OAM",
            "P800-OAM",
        ),
        ("enflame", "enflame.com/gcu", "ENFLAME_VISIBLE_DEVICES", "enflame-gcu", "gcu-model", "S60", "S60"),
    ],
)
def test_each_new_vendor_has_an_adapter_with_its_plugins_resource_labels_and_taint(
    vendor, resource, env, accelerator, model_key, model, model_label
):
    adapter = ADAPTERS[vendor]
    assert (adapter.resource_name, adapter.visible_devices_env) == (resource, env)
    assert adapter.node_labels(model) == {
        "accelerator": accelerator,
        "gpu-brand": vendor,
        model_key: model_label,
    }
    assert adapter.taints() == [{"key": "accelerator", "value": accelerator, "effect": "NoSchedule"}]
    assert adapter.mounts() == []
    assert adapter_for_kind(adapter.report_kinds[0]) is adapter


def test_the_jobs_env_filter_drops_the_new_vendors_visible_devices_variables():
    from apps.clusters.manifests import DEVICE_PLUGIN_ENV

    assert {
        "MACA_VISIBLE_DEVICES",
        "IX_VISIBLE_DEVICES",
        "XPU_VISIBLE_DEVICES",
        "ENFLAME_VISIBLE_DEVICES",
    } <= (DEVICE_PLUGIN_ENV)


# ---------------------------------------------------------------------------------------------------
# Real sample → ledger → whole-card pod → fake API server → bound to a node advertising the resource


@pytest.fixture
def fake_server():
    from tests.kube.fake_apiserver import FakeApiServer

    srv = FakeApiServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def fake_api(fake_server, tmp_path):
    from kubernetes import config as k8s_config

    from tests.kube.fake_apiserver import kubeconfig_for

    api_client = k8s_config.new_client_from_config(config_file=str(kubeconfig_for(fake_server, tmp_path)))
    yield api_client
    api_client.close()


def _tolerated(tolerations: list[dict], taint: dict) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t["key"] == taint["key"]):
            return True
        if t.get("key") == taint["key"] and t.get("value") == taint.get("value"):
            return True
    return False


@pytest.mark.parametrize(
    ("kind", "name", "node_name"),
    [
        ("mx-smi", "mx_smi_c550_8gpu.txt", "mx-01"),
        ("ixsmi", "ixsmi_bi_v150_16gpu.txt", "ix-01"),
        ("xpu-smi", "xpu_smi_p800_8xpu.txt", "xpu-01"),
        ("efsmi", "efsmi_s60_2dev.txt", "gcu-01"),
        ("mthreads-gmi", "mthreads_gmi_s5000_excerpt.txt", "mtt-01"),
    ],
)
def test_a_real_report_becomes_a_whole_card_pod_the_fake_binds_to_the_node_advertising_it(
    cluster, fake_server, fake_api, kind, name, node_name
):
    from kubernetes import client as k8s

    from apps.clusters import manifests as m
    from apps.jobs.models import Allocation
    from tests.kube.test_manifests import TRACE, make_job
    from tests.kube.validation import assert_strict_valid

    result = node_report_ingest(
        node_name=node_name, kind=kind, text=fixture(name), actor="command", cluster=cluster
    )
    vendor = KIND_VENDORS[kind]
    adapter = ADAPTERS[vendor]
    cards = list(Device.objects.filter(node__name=node_name).order_by("index"))
    assert result.created == len(cards) > 0 and {c.vendor for c in cards} == {vendor}
    card = cards[-1]
    alloc = Allocation(
        device=card,
        node=card.node,
        replica=0,
        memory_mib=card.memory_mib or 0,
        compute_milli=1000,
        whole_card=True,
        trace_id=TRACE,
    )
    obj = m.job_manifest(make_job(), [alloc], cluster, attempt=0)
    assert_strict_valid(obj)
    pod_spec = obj["spec"]["template"]["spec"]
    (ctr,) = pod_spec["containers"]
    assert ctr["resources"]["limits"] == {adapter.resource_name: "1"}
    assert adapter.visible_devices_env not in {e["name"] for e in ctr.get("env", [])}
    for taint in adapter.taints():
        assert _tolerated(pod_spec.get("tolerations", []), taint), taint

    # The node as its device plugin registers it: the count of cards under the plugin's resource name.
    fake_server.add_node(
        node_name,
        adapter.node_labels(card.raw_model_name),
        capacity={adapter.resource_name: str(len(cards)), "cpu": "64", "memory": "512Gi", "pods": "110"},
        taints=adapter.taints(),
    )
    fake_server.add_node("cpu-01", capacity={"cpu": "64", "memory": "512Gi", "pods": "110"})
    namespace = obj["metadata"]["namespace"]
    k8s.CoreV1Api(fake_api).create_namespace(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    k8s.BatchV1Api(fake_api).create_namespaced_job(namespace, obj)
    fake_server.advance(1)
    (pod,) = fake_server.objects("Pod", namespace)
    bound = pod["spec"].get("nodeName")
    assert bound == node_name
    (node,) = [n for n in fake_server.objects("Node") if n["metadata"]["name"] == bound]
    wanted = pod["spec"]["containers"][0]["resources"]["limits"]
    assert all(int(node["status"]["allocatable"].get(res, "0")) >= int(qty) for res, qty in wanted.items())
    assert all(_tolerated(pod["spec"]["tolerations"], t) for t in node["spec"].get("taints", []))


# ---------------------------------------------------------------------------------------------------
# The demo (issue 28 §7): MetaX, Kunlunxin and Ascend 310P nodes, matched to catalog rows, labelled


@pytest.mark.django_db
def test_the_demo_fleet_has_metax_kunlunxin_and_ascend_310p_nodes_matched_to_the_catalog():
    from django.core.management import call_command

    from apps.catalog.models import ComputeCoefficient
    from apps.inventory.models import Node

    call_command("load_demo")
    for node_name, vendor, model, count in (
        ("metax-c550-01", "metax", "C550", 8),
        ("xpu-p800-01", "kunlunxin", "P800 OAM", 8),
        ("ascend-310p-01", "huawei", "Ascend 310P", 4),
    ):
        cards = Device.objects.filter(node__name=node_name).select_related("device_model")
        assert cards.count() == count
        assert {(c.vendor, c.device_model.name if c.device_model else None) for c in cards} == {
            (vendor, model)
        }
        assert not any(c.model_unrecognized for c in cards)
        assert ComputeCoefficient.objects.filter(device_model__name=model).exists()  # billable
        node = Node.objects.get(name=node_name)
        accelerator = ADAPTERS[vendor].node_labels()["accelerator"]
        assert node.labels.get("accelerator") == accelerator, node.labels
        assert {"key": "accelerator", "value": accelerator, "effect": "NoSchedule"} in node.taints


# ---------------------------------------------------------------------------------------------------
# Exporter metric maps (issue 28 §1): Iluvatar's ix-exporter, on its README's real /metrics output


def test_the_ix_exporter_page_gives_three_cards_with_mib_watts_and_the_deprecated_temperature():
    from apps.telemetry import exposition
    from apps.telemetry.metric_maps import MEM_TOTAL, TEMP, VENDOR_MAPS, lookup
    from apps.telemetry.samples import series_to_samples
    from tests.fixtures.telemetry import fixture_text

    parsed = exposition.parse(fixture_text("iluvatar.prom"))
    conv = series_to_samples(
        ((s.name, s.labels, s.value, s.timestamp) for s in parsed.samples), default_at=0.0
    )
    samples = sorted(conv.samples, key=lambda s: s.index)
    assert [(s.vendor, s.index, s.uuid) for s in samples] == [
        ("iluvatar", 0, "GPU-4a8348cb-505c-507f-8df7-ff3c796e3033"),
        ("iluvatar", 1, "GPU-50351a81-6f42-4746-9981-6e4401848ba5"),
        ("iluvatar", 2, "GPU-6d2ec5fa-f293-57a3-9f2c-335f78120578"),
    ]
    mr_v50 = samples[1]
    # MiB and W as the exporter's metrics.yaml states; ix_temperature (deprecated) still read.
    assert (mr_v50.memory_used_mib, mr_v50.memory_total_mib) == (116.0, 32768.0)
    assert (mr_v50.power_w, mr_v50.temperature_c, mr_v50.utilization_pct) == (131.0, 57.0, 0.0)
    assert (mr_v50.namespace, mr_v50.pod, mr_v50.pods) == (None, None, None)  # README ran outside Kubernetes
    # Families the exporter has that Suanchi does not use are "unused", not "unknown".
    assert conv.skipped.get("unused_family", 0) > 0 and conv.skipped.get("unknown_family", 0) == 0
    vmap = VENDOR_MAPS["iluvatar"]
    assert vmap.gauges["ix_gpu_temperature"].priority < vmap.gauges["ix_temperature"].priority
    assert vmap.gauges["ix_mem_total"].field == MEM_TOTAL and vmap.gauges["ix_gpu_temperature"].field == TEMP
    assert vmap.pod({"namespace": "team-a", "pod": "train-0"}) == ("team-a", "train-0")
    assert lookup("ix_xid_errors") == (vmap, "health", "ix_xid_errors")
    # MetaX and Enflame have maps from their exporters' source (tests/telemetry/test_new_exporters.py);
    # Kunlunxin and Moore Threads publish none: no map, no guessed names.
    assert {"metax", "enflame"} <= set(VENDOR_MAPS)
    assert not {"kunlunxin", "mthreads"} & set(VENDOR_MAPS)


def test_test_connection_names_iluvatars_own_plugin_and_exporter_daemonsets():
    from apps.clusters.connect import KNOWN_DAEMONSETS

    known = dict(KNOWN_DAEMONSETS)
    # metadata.name in Deep-Spark/ix-device-plugin ix-device-plugin.yaml and ix-exporter's static manifest.
    assert known["iluvatar-device-plugin"] == "Iluvatar device plugin"
    assert known["ix-exporter"] == "Iluvatar ix-exporter"
