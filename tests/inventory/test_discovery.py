"""Discovery: node reports upsert the ledger idempotently; missing cards become LOST and come back FOUND."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.catalog.models import DeviceModel
from apps.core.errors import NotFound, ParseFailed
from apps.core.models import ChangeRecord
from apps.inventory.models import Device, DeviceEvent, DeviceLink, Node, NodeReport
from apps.inventory.services.discovery import node_report_ingest

pytestmark = pytest.mark.django_db

A100 = "NVIDIA A100-SXM4-80GB"


def gpu_csv(rows: list[tuple[int, str]], *, driver: str = "535.154.05", vbios: str = "92.00.45.00.06") -> str:
    """`nvidia-smi --query-gpu=<agent fields> --format=csv,noheader,nounits` for (index, uuid) rows."""
    lines = []
    for index, uuid in rows:
        bus = f"00000000:{0x07 + index * 0x10:02X}:00.0"
        lines.append(
            f"{index}, {uuid}, {A100}, 13240230{index:05d}, {bus}, 81920, {driver}, {vbios}, 0, 0, 34, 61.20"
        )
    return "\n".join(lines) + "\n"


def uuids(n: int, prefix: str = "GPU-0000") -> list[tuple[int, str]]:
    return [(i, f"{prefix}{i:04d}-1111-2222-3333-444455556666") for i in range(n)]


@pytest.fixture
def node(cluster):
    return Node.objects.create(cluster=cluster, name="gpu-a01")


@pytest.fixture
def a100_model():
    return DeviceModel.objects.create(
        vendor="nvidia",
        kind="gpu",
        name="A100 80GB SXM4",
        slug="a100-80gb-sxm4",
        memory_mib=81920,
        product_names=[A100],
        bf16_dense_tflops=312,
        fp16_dense_tflops=312,
    )


def ingest(
    text: str, *, kind: str = "nvidia-smi-csv", node_name: str = "gpu-a01", cluster=None, dry_run=False
):
    return node_report_ingest(
        node_name=node_name, kind=kind, text=text, actor="agent:prod", cluster=cluster, dry_run=dry_run
    )


def ledger_state() -> list[tuple]:
    return list(
        Device.objects.order_by("pk").values_list(
            "pk",
            "node_id",
            "index",
            "uuid",
            "serial",
            "pci_bus_id",
            "health",
            "firmware_version",
            "device_model_id",
            "model_unrecognized",
            "topology_group",
            "numa_node",
            "updated_at",
        )
    )


def test_a_first_report_registers_devices_and_the_driver_with_events(node, a100_model):
    result = ingest(gpu_csv(uuids(8)))
    assert result.created == 8
    devices = list(Device.objects.filter(node=node).order_by("index"))
    assert [d.index for d in devices] == list(range(8))
    assert all(d.device_model == a100_model and not d.model_unrecognized for d in devices)
    assert devices[0].pci_bus_id.endswith("07:00.0")
    node.refresh_from_db()
    assert node.driver_version == "535.154.05"
    assert DeviceEvent.objects.filter(kind="registered", device__isnull=False).count() == 8
    assert DeviceEvent.objects.filter(kind="version_changed", device__isnull=True).count() == 1
    assert ChangeRecord.objects.filter(action="node_report.ingest", object_id=str(node.pk)).count() == 1


def test_the_same_report_twice_changes_nothing_and_writes_no_event(node, a100_model):
    text = gpu_csv(uuids(8))
    ingest(text)
    before = ledger_state()
    events, records = DeviceEvent.objects.count(), ChangeRecord.objects.count()
    second = ingest(text)
    assert second.changed is False
    assert second.unchanged == 8
    assert ledger_state() == before
    assert DeviceEvent.objects.count() == events
    assert ChangeRecord.objects.count() == records
    report = NodeReport.objects.get(node=node)
    assert report.repeat_count == 2


def test_a_missing_card_becomes_lost_with_an_event_and_comes_back_found(node, a100_model):
    rows = uuids(8)
    ingest(gpu_csv(rows))
    result = ingest(gpu_csv(rows[:3] + rows[4:]))
    assert result.lost == 1
    lost = Device.objects.get(node=node, index=3)
    assert lost.health == Device.Health.LOST
    event = DeviceEvent.objects.get(kind="lost", device=lost)
    assert event.severity == "critical"
    assert "掉卡" in event.message
    # Reporting the same partial view again writes nothing new.
    assert ingest(gpu_csv(rows[:3] + rows[4:])).changed is False
    assert DeviceEvent.objects.filter(kind="lost").count() == 1
    back = ingest(gpu_csv(rows))
    assert back.found == 1
    lost.refresh_from_db()
    assert lost.health == Device.Health.HEALTHY
    assert DeviceEvent.objects.filter(kind="found", device=lost).count() == 1


def test_a_replacement_card_in_the_same_slot_is_a_new_device_and_the_old_one_is_lost(node, a100_model):
    rows = uuids(2)
    ingest(gpu_csv(rows))
    old = Device.objects.get(node=node, index=1)
    replaced = [rows[0], (1, "GPU-ffff0001-1111-2222-3333-444455556666")]
    result = ingest(gpu_csv(replaced))
    assert (result.created, result.lost) == (1, 1)
    old.refresh_from_db()
    assert old.health == Device.Health.LOST
    new = Device.objects.get(uuid="GPU-ffff0001-1111-2222-3333-444455556666")
    assert new.index == 1 and new.health == Device.Health.HEALTHY


def test_a_card_that_appears_on_another_node_is_moved_with_an_event(cluster, node, a100_model):
    Node.objects.create(cluster=cluster, name="gpu-a02")
    rows = uuids(2)
    ingest(gpu_csv(rows))
    result = ingest(gpu_csv([(0, rows[1][1])]), node_name="gpu-a02")
    assert result.moved == 1
    device = Device.objects.get(uuid=rows[1][1])
    assert device.node.name == "gpu-a02" and device.index == 0
    assert DeviceEvent.objects.filter(kind="moved", device=device).exists()


def test_an_unknown_model_is_recorded_with_its_raw_name_and_flagged(node):
    text = "0, GPU-abcd0000-1111-2222-3333-444455556666, NVIDIA Future GPU X9, 1, 00000000:07:00.0, 98304, 590.10, 1.0, 0, 0, 30, 50\n"
    ingest(text)
    device = Device.objects.get(node=node)
    assert device.device_model is None
    assert device.model_unrecognized is True
    assert device.raw_model_name == "NVIDIA Future GPU X9"
    assert DeviceEvent.objects.filter(kind="model_unrecognized", device=device).count() == 1


def test_a_driver_upgrade_and_a_firmware_change_are_version_events(node, a100_model):
    rows = uuids(2)
    ingest(gpu_csv(rows))
    ingest(gpu_csv(rows, driver="550.54.15", vbios="92.00.99.00.01"))
    node.refresh_from_db()
    assert node.driver_version == "550.54.15"
    node_event = DeviceEvent.objects.get(
        kind="version_changed", device__isnull=True, after__driver_version="550.54.15"
    )
    assert node_event.before == {"driver_version": "535.154.05"}
    assert DeviceEvent.objects.filter(kind="version_changed", device__isnull=False).count() == 2


def test_malformed_output_is_a_400_naming_the_line_and_writes_nothing(node, a100_model):
    good = gpu_csv(uuids(2))
    bad = good + "2, GPU-truncated\n"
    with pytest.raises(ParseFailed) as excinfo:
        ingest(bad)
    assert "line 3" in excinfo.value.message
    assert Device.objects.count() == 0
    assert NodeReport.objects.count() == 0
    assert DeviceEvent.objects.count() == 0


def test_an_unknown_node_needs_a_cluster_to_be_registered(cluster, a100_model):
    with pytest.raises(NotFound):
        ingest(gpu_csv(uuids(1)), node_name="new-node")
    result = ingest(gpu_csv(uuids(1)), node_name="new-node", cluster=cluster)
    assert result.node.name == "new-node"
    assert DeviceEvent.objects.filter(kind="registered", device__isnull=True, node__name="new-node").exists()


TOPO_2 = (
    "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV12\t0-63\t0\t\tN/A\n"
    "GPU1\tNV12\t X \t0-63\t0\t\tN/A\n"
)


def test_a_topology_report_writes_links_and_groups_without_marking_anything_lost(node, a100_model):
    ingest(gpu_csv(uuids(2)))
    result = ingest(TOPO_2, kind="nvidia-topo")
    assert result.lost == 0
    link = DeviceLink.objects.get(node=node)
    assert (link.kind, link.link, link.nvlink_count) == ("NV", "NV12", 12)
    groups = set(Device.objects.filter(node=node).values_list("topology_group", flat=True))
    assert groups == {"nvlink-0"}
    assert ingest(TOPO_2, kind="nvidia-topo").changed is False


def test_dry_run_json_writes_nothing_and_prints_the_documented_shape(node, a100_model, tmp_path, capsys):
    path = tmp_path / "smi.csv"
    path.write_text(gpu_csv(uuids(2)))
    call_command(
        "ingest_node_report", str(path), node="gpu-a01", kind="nvidia-smi-csv", dry_run=True, json=True
    )
    body = json.loads(capsys.readouterr().out)
    assert set(body) >= {"node", "devices", "links"}
    assert body["node"]["driver_version"] == "535.154.05"
    for key in (
        "index",
        "uuid",
        "serial",
        "model_name",
        "memory_mib",
        "pci_bus_id",
        "numa_node",
        "firmware_version",
    ):
        assert key in body["devices"][0]
    assert body["devices"][0]["numa_node"] is None
    assert body["devices"][0]["memory_mib"] == 81920
    assert Device.objects.count() == 0 and NodeReport.objects.count() == 0


def test_the_command_reports_parse_errors_without_a_traceback(node, tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("0, only, three\n")
    with pytest.raises(CommandError, match="line 1"):
        call_command("ingest_node_report", str(path), node="gpu-a01", kind="nvidia-smi-csv")
