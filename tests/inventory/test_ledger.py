"""Ledger services: node and device state changes, CSV import, CSV / XLSX export."""

from __future__ import annotations

import csv
import io
import threading

import openpyxl
import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection

from apps.catalog.models import DeviceKind, Vendor
from apps.core.errors import InvalidTransition, ValidationFailed
from apps.core.models import ChangeRecord
from apps.inventory.models import Device, DeviceEvent, Node
from apps.inventory.services.ledger import (
    EXPORT_COLUMNS,
    IMPORT_COLUMNS,
    MAINTENANCE_TAINT,
    QUARANTINE_TAINT,
    device_pool_status_set,
    device_retire,
    device_update,
    ledger_export,
    ledger_import_csv,
    node_status_set,
)
from tests.fixtures.factories.accounts import ProjectFactory, UserFactory
from tests.fixtures.factories.catalog import DeviceModelFactory
from tests.fixtures.factories.inventory import ClusterFactory, DeviceFactory, NodeFactory, PoolFactory

pytestmark = pytest.mark.django_db

S = Node.Status
FOREIGN_TAINT = {"key": "example.com/dedicated", "value": "infer", "effect": "NoSchedule"}


@pytest.fixture
def actor():
    return UserFactory(username="ops", is_staff=True)


def records(obj, action: str | None = None):
    qs = ChangeRecord.objects.filter(
        content_type=ContentType.objects.get_for_model(type(obj)), object_id=str(obj.pk)
    )
    return qs.filter(action=action) if action else qs


def taint_keys(node: Node) -> list[str]:
    return sorted(t["key"] for t in node.taints)


def status_taints(status: str) -> list[dict]:
    return {S.MAINTENANCE: [MAINTENANCE_TAINT], S.QUARANTINED: [QUARANTINE_TAINT]}.get(status, [])


# ---------------------------------------------------------------------------------------------- nodes

ALLOWED = [
    # (from, to, reason, event kind)
    (S.READY, S.MAINTENANCE, "", DeviceEvent.Kind.MAINTENANCE),
    (S.MAINTENANCE, S.READY, "", DeviceEvent.Kind.MAINTENANCE),
    (S.READY, S.QUARANTINED, "ECC errors", DeviceEvent.Kind.QUARANTINE),
    (S.MAINTENANCE, S.QUARANTINED, "ECC errors", DeviceEvent.Kind.QUARANTINE),
    (S.DRAINING, S.QUARANTINED, "ECC errors", DeviceEvent.Kind.QUARANTINE),
    (S.QUARANTINED, S.READY, "card replaced", DeviceEvent.Kind.QUARANTINE),
    (S.READY, S.DRAINING, "", DeviceEvent.Kind.STATUS_CHANGED),
    (S.DRAINING, S.READY, "", DeviceEvent.Kind.STATUS_CHANGED),
    (S.DRAINING, S.MAINTENANCE, "", DeviceEvent.Kind.MAINTENANCE),
    (S.READY, S.RETIRED, "end of life", DeviceEvent.Kind.RETIRED),
    (S.MAINTENANCE, S.RETIRED, "end of life", DeviceEvent.Kind.RETIRED),
    (S.DRAINING, S.RETIRED, "end of life", DeviceEvent.Kind.RETIRED),
    (S.QUARANTINED, S.RETIRED, "end of life", DeviceEvent.Kind.RETIRED),
]


@pytest.mark.parametrize(("current", "target", "reason", "kind"), ALLOWED)
def test_each_allowed_node_transition_writes_an_event_a_change_record_and_taints(
    actor, current, target, reason, kind
):
    node = NodeFactory(name="gpu-a01", status=current, taints=[FOREIGN_TAINT, *status_taints(current)])

    result = node_status_set(node=node, status=target, reason=reason, actor=actor)

    node.refresh_from_db()
    assert result.status == node.status == target
    assert node.status_reason == reason
    # Suanchi's taint follows the status; taints set by others stay.
    assert node.taints == [FOREIGN_TAINT, *status_taints(target)]
    event = DeviceEvent.objects.get(node=node)
    assert (event.kind, event.device, event.actor_label) == (kind, None, "ops")
    assert event.before["status"] == current and event.after["status"] == target
    assert event.after["taints"] == node.taints
    if reason:
        assert reason in event.message
    record = records(node, "node.status_set").get()
    assert record.actor == actor
    assert (record.before["status"], record.after["status"]) == (current, target)


def test_maintenance_adds_a_no_schedule_taint_and_leaving_it_removes_it(actor):
    node = NodeFactory(taints=[])
    node = node_status_set(node=node, status=S.MAINTENANCE, actor=actor)
    assert node.taints == [{"key": "suanchi.io/maintenance", "value": "true", "effect": "NoSchedule"}]
    node = node_status_set(node=node, status=S.QUARANTINED, reason="XID 79", actor=actor)
    assert node.taints == [{"key": "suanchi.io/quarantine", "value": "true", "effect": "NoExecute"}]
    node = node_status_set(node=node, status=S.READY, reason="repaired", actor=actor)
    assert node.taints == []
    messages = list(DeviceEvent.objects.filter(node=node).order_by("id").values_list("message", flat=True))
    assert "maintenance on" in messages[0]
    assert "quarantined: XID 79" in messages[1]
    assert "released from quarantine" in messages[2]


def test_same_status_is_a_no_op_without_event(actor):
    node = NodeFactory(status=S.MAINTENANCE, taints=[MAINTENANCE_TAINT])
    node_status_set(node=node, status=S.MAINTENANCE, actor=actor)
    assert not DeviceEvent.objects.exists()
    assert not records(node).exists()


@pytest.mark.parametrize(
    ("current", "target", "message"),
    [
        (S.RETIRED, S.READY, "node gpu-a01 is retired; a retired node cannot become ready"),
        (S.RETIRED, S.MAINTENANCE, "node gpu-a01 is retired; a retired node cannot become maintenance"),
        (S.QUARANTINED, S.DRAINING, "node gpu-a01 is quarantined; a quarantined node cannot become draining"),
        (
            S.QUARANTINED,
            S.MAINTENANCE,
            "node gpu-a01 is quarantined; a quarantined node cannot become maintenance",
        ),
        (S.MAINTENANCE, S.DRAINING, "node gpu-a01 is maintenance; a maintenance node cannot become draining"),
    ],
)
def test_forbidden_node_transitions_are_refused_and_write_nothing(actor, current, target, message):
    node = NodeFactory(name="gpu-a01", status=current, taints=status_taints(current))
    with pytest.raises(InvalidTransition) as exc:
        node_status_set(node=node, status=target, reason="because", actor=actor)
    assert exc.value.message.startswith(message)
    assert exc.value.status_code == 409
    node.refresh_from_db()
    assert node.status == current
    assert not DeviceEvent.objects.exists()
    assert not ChangeRecord.objects.exists()


@pytest.mark.parametrize(("current", "target"), [(S.QUARANTINED, S.READY), (S.READY, S.RETIRED)])
def test_release_and_retire_need_a_reason(actor, current, target):
    node = NodeFactory(status=current)
    with pytest.raises(ValidationFailed) as exc:
        node_status_set(node=node, status=target, reason="  ", actor=actor)
    assert "reason" in exc.value.details
    node.refresh_from_db()
    assert node.status == current


def test_unknown_node_status_is_bad_input(actor):
    with pytest.raises(ValidationFailed):
        node_status_set(node=NodeFactory(), status="sleeping", actor=actor)


def test_the_status_is_read_again_inside_the_lock(actor):
    node = NodeFactory(status=S.READY)
    Node.objects.filter(pk=node.pk).update(status=S.RETIRED)  # changed behind this stale instance's back
    with pytest.raises(InvalidTransition, match="is retired"):
        node_status_set(node=node, status=S.MAINTENANCE, actor=actor)


def test_retiring_a_node_retires_its_devices_each_with_an_event(actor):
    node = NodeFactory(name="gpu-a02")
    live = DeviceFactory.create_batch(2, node=node)
    old = DeviceFactory(node=node, health=Device.Health.RETIRED, health_reason="burnt")

    node_status_set(node=node, status=S.RETIRED, reason="decommissioned", actor=actor)

    for device in live:
        device.refresh_from_db()
        assert device.health == Device.Health.RETIRED
        assert "decommissioned" in device.health_reason
        event = DeviceEvent.objects.get(device=device)
        assert event.kind == DeviceEvent.Kind.RETIRED
        assert records(device, "device.retire").count() == 1
    old.refresh_from_db()
    assert old.health_reason == "burnt"
    assert not DeviceEvent.objects.filter(device=old).exists()
    assert DeviceEvent.objects.filter(node=node, device=None, kind=DeviceEvent.Kind.RETIRED).count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_quarantines_of_one_node_write_one_event():
    node = NodeFactory()
    barrier = threading.Barrier(2)
    errors: list[Exception] = []

    def quarantine() -> None:
        try:
            stale = Node.objects.get(pk=node.pk)  # both threads read "ready"
            barrier.wait(timeout=10)
            node_status_set(node=stale, status=S.QUARANTINED, reason="XID 79", actor="worker")
        except Exception as exc:  # pragma: no cover - reported by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=quarantine) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert errors == []
    assert DeviceEvent.objects.filter(node=node, kind=DeviceEvent.Kind.QUARANTINE).count() == 1
    assert ChangeRecord.objects.filter(action="node.status_set").count() == 1


# -------------------------------------------------------------------------------------------- devices


def test_quarantining_a_device_needs_a_reason_and_is_recorded(actor):
    device = DeviceFactory()
    with pytest.raises(ValidationFailed):
        device_pool_status_set(device=device, pool_status="quarantine", actor=actor)

    device = device_pool_status_set(device=device, pool_status="quarantine", reason="XID 48", actor=actor)

    assert device.pool_status == "quarantine"
    event = DeviceEvent.objects.get(device=device)
    assert (event.kind, event.severity) == (DeviceEvent.Kind.QUARANTINE, DeviceEvent.Severity.WARNING)
    assert (event.before, event.after) == ({"pool_status": "production"}, {"pool_status": "quarantine"})
    assert "XID 48" in event.message
    assert records(device, "device.pool_status_set").get().after == {"pool_status": "quarantine"}


@pytest.mark.parametrize(
    ("current", "target", "kind"),
    [
        ("quarantine", "production", DeviceEvent.Kind.QUARANTINE),
        ("production", "gray", DeviceEvent.Kind.STATUS_CHANGED),
        ("gray", "production", DeviceEvent.Kind.STATUS_CHANGED),
    ],
)
def test_device_pool_status_moves(actor, current, target, kind):
    device = DeviceFactory(pool_status=current)
    device = device_pool_status_set(device=device, pool_status=target, actor=actor)
    assert Device.objects.get(pk=device.pk).pool_status == target
    assert DeviceEvent.objects.get(device=device).kind == kind
    assert records(device).count() == 1


def test_device_pool_status_same_value_is_a_no_op(actor):
    device = DeviceFactory(pool_status="gray")
    device_pool_status_set(device=device, pool_status="gray", actor=actor)
    assert not DeviceEvent.objects.exists()


def test_a_retired_device_cannot_change_pool_status(actor):
    device = DeviceFactory(health=Device.Health.RETIRED)
    with pytest.raises(InvalidTransition, match="is retired"):
        device_pool_status_set(device=device, pool_status="gray", actor=actor)


def test_retired_is_no_pool_status_one_can_choose(actor):
    device = DeviceFactory()
    with pytest.raises(ValidationFailed, match="only by being retired"):
        device_pool_status_set(device=device, pool_status="retired", actor=actor)
    device.refresh_from_db()
    assert device.pool_status == Device.PoolStatus.PRODUCTION and not DeviceEvent.objects.filter(
        device=device
    )


def test_unknown_pool_status_is_bad_input(actor):
    with pytest.raises(ValidationFailed):
        device_pool_status_set(device=DeviceFactory(), pool_status="staging", actor=actor)


def test_device_retire_records_and_is_idempotent(actor):
    device = DeviceFactory()
    with pytest.raises(ValidationFailed):
        device_retire(device=device, reason="", actor=actor)

    device = device_retire(device=device, reason="HBM failure", actor=actor)
    device_retire(device=device, reason="again", actor=actor)

    device.refresh_from_db()
    assert (device.health, device.health_reason) == (Device.Health.RETIRED, "HBM failure")
    assert device.pool_status == Device.PoolStatus.RETIRED  # in no pool any more (issue 29 §9)
    event = DeviceEvent.objects.get(device=device)
    assert event.kind == DeviceEvent.Kind.RETIRED
    assert event.after == {"health": "retired", "health_reason": "HBM failure", "pool_status": "retired"}
    assert event.before["pool_status"] == "production"
    assert records(device, "device.retire").count() == 1


def test_device_update_records_only_changed_fields(actor):
    project = ProjectFactory()
    device = DeviceFactory(serial="SN1", topology_group="nvl-0")

    device = device_update(
        device=device, actor=actor, serial="SN2", topology_group="nvl-0", owner_project=project
    )

    device.refresh_from_db()
    assert (device.serial, device.owner_project) == ("SN2", project)
    event = DeviceEvent.objects.get(device=device)
    assert event.kind == DeviceEvent.Kind.UPDATED
    assert event.before == {"serial": "SN1", "owner_project": None}
    assert event.after == {"serial": "SN2", "owner_project": project.pk}
    assert records(device, "device.update").get().after == event.after


def test_device_update_without_a_change_writes_no_event(actor):
    device = DeviceFactory(serial="SN1")
    device_update(device=device, actor=actor, serial="SN1")
    assert not DeviceEvent.objects.exists()
    assert not ChangeRecord.objects.exists()


def test_device_update_refuses_unknown_or_protected_fields(actor):
    device = DeviceFactory()
    with pytest.raises(ValidationFailed) as exc:
        device_update(device=device, actor=actor, health="degraded", colour="red")
    assert set(exc.value.details) == {"health", "colour"}


def test_device_update_naming_a_model_recognises_the_card(actor):
    device = DeviceFactory(device_model=None, raw_model_name="Mystery X1", model_unrecognized=True)
    ascend = DeviceModelFactory(name="Ascend 910B", vendor=Vendor.HUAWEI, kind=DeviceKind.NPU)
    with pytest.raises(ValidationFailed, match="huawei model"):
        device_update(device=device, actor=actor, device_model=ascend)

    model = DeviceModelFactory(name="H20")
    device = device_update(device=device, actor=actor, device_model=model)

    assert (device.device_model, device.model_unrecognized) == (model, False)
    assert DeviceEvent.objects.get(device=device).after == {
        "device_model": model.pk,
        "model_unrecognized": False,
    }


# --------------------------------------------------------------------------------------------- import


def make_csv(rows: list[dict], columns=IMPORT_COLUMNS) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: row.get(key, "") for key in columns})
    return buffer.getvalue()


@pytest.fixture
def ledger():
    """A cluster with a pool, a project, a catalog model and one node with one card."""
    cluster = ClusterFactory(slug="bj1", name="Beijing 1")
    pool = PoolFactory(cluster=cluster, slug="training", name="training")
    project = ProjectFactory(slug="llm")
    model = DeviceModelFactory(
        name="A100 80GB SXM", slug="a100-80gb-sxm", product_names=["NVIDIA A100-SXM4-80GB"]
    )
    node = NodeFactory(
        cluster=cluster, pool=pool, name="gpu-a01", cpu_arch="x86_64", driver_version="550.54.15"
    )
    device = DeviceFactory(
        node=node, index=0, uuid="GPU-aaaa", serial="S0", device_model=model, firmware_version="1.0"
    )
    return {
        "cluster": cluster,
        "pool": pool,
        "project": project,
        "model": model,
        "node": node,
        "device": device,
    }


def happy_rows() -> list[dict]:
    base = {"cluster": "bj1", "pool": "training", "vendor": "nvidia"}
    return [
        # existing node and card, firmware changed
        {**base, "node": "gpu-a01", "device_index": "0", "uuid": "GPU-aaaa", "firmware_version": "2.0"},
        # a new card on the existing node, model named by a product name
        {
            **base,
            "node": "gpu-a01",
            "device_index": "1",
            "uuid": "GPU-bbbb",
            "device_model": "NVIDIA A100-SXM4-80GB",
            "numa_node": "1",
            "owner_project": "llm",
            "topology_group": "机柜A-nvl0",
        },
        # a new node with one card
        {
            **base,
            "node": "gpu-b01",
            "node_status": "maintenance",
            "cpu_arch": "aarch64",
            "driver_version": "550.90.07",
            "rack": "R12",
            "device_index": "0",
            "uuid": "GPU-cccc",
            "device_model": "a100-80gb-sxm",
            "serial": "S-c",
        },
        # a node without devices
        {"cluster": "bj1", "node": "npu-c01", "cann_version": "8.0.RC2", "cpu_arch": "aarch64"},
    ]


def test_import_happy_path(actor, ledger):
    report = ledger_import_csv(data=make_csv(happy_rows()), actor=actor)

    assert (report.created_nodes, report.updated_nodes) == (2, 0)
    assert (report.created_devices, report.updated_devices) == (2, 1)
    assert report.unchanged == 1  # node gpu-a01 itself
    assert report.warnings == []
    assert [r["line"] for r in report.rows] == [2, 3, 4, 5]
    assert report.rows[0]["device_changes"] == ["firmware_version"]
    assert [r["node_action"] for r in report.rows] == ["unchanged", "", "created", "created"]
    assert report.as_dict()["changed"] is True

    updated = Device.objects.get(uuid="GPU-aaaa")
    assert updated.firmware_version == "2.0"
    assert updated.serial == "S0"  # empty cell: unchanged
    event = DeviceEvent.objects.get(device=updated)
    assert event.kind == DeviceEvent.Kind.UPDATED
    assert (event.before, event.after) == ({"firmware_version": "1.0"}, {"firmware_version": "2.0"})
    assert records(updated, "device.update").count() == 1

    new = Device.objects.get(uuid="GPU-bbbb")
    assert (new.node, new.index, new.device_model, new.numa_node) == (ledger["node"], 1, ledger["model"], 1)
    assert (new.owner_project, new.topology_group, new.model_unrecognized) == (
        ledger["project"],
        "机柜A-nvl0",
        False,
    )
    assert DeviceEvent.objects.get(device=new).kind == DeviceEvent.Kind.IMPORTED
    assert records(new, "device.import").count() == 1

    b01 = Node.objects.get(name="gpu-b01")
    assert (b01.cluster, b01.pool, b01.status) == (ledger["cluster"], ledger["pool"], S.MAINTENANCE)
    assert (b01.cpu_arch, b01.driver_version, b01.rack) == ("aarch64", "550.90.07", "R12")
    assert b01.taints == [MAINTENANCE_TAINT]
    assert DeviceEvent.objects.get(node=b01, device=None).kind == DeviceEvent.Kind.IMPORTED
    assert records(b01, "node.import").count() == 1
    c01 = Node.objects.get(name="npu-c01")
    assert (c01.pool, c01.cann_version, c01.devices.count()) == (None, "8.0.RC2", 0)


def test_import_with_three_bad_rows_writes_nothing_and_lists_each(actor, ledger):
    rows = happy_rows()
    rows[0]["cluster"] = "nowhere"  # line 2
    rows[2]["device_index"] = "first"  # line 4
    rows[3]["node_status"] = "asleep"  # line 5
    before = (
        Node.objects.count(),
        Device.objects.count(),
        DeviceEvent.objects.count(),
        ChangeRecord.objects.count(),
    )

    with pytest.raises(ValidationFailed) as exc:
        ledger_import_csv(data=make_csv(rows), actor=actor)

    assert exc.value.message == "3 rows have errors"
    errors = exc.value.details["rows"]
    assert {(e["line"], e["column"]) for e in errors} == {
        (2, "cluster"),
        (4, "device_index"),
        (5, "node_status"),
    }
    assert "no cluster with slug 'nowhere'" in errors[0]["message"]
    after = (
        Node.objects.count(),
        Device.objects.count(),
        DeviceEvent.objects.count(),
        ChangeRecord.objects.count(),
    )
    assert after == before
    assert Device.objects.get(uuid="GPU-aaaa").firmware_version == "1.0"


@pytest.mark.parametrize(
    ("change", "column", "fragment"),
    [
        ({"vendor": "nvidea"}, "vendor", "not a catalog vendor"),
        ({"owner_project": "ghost"}, "owner_project", "no project with slug 'ghost'"),
        ({"pool": "inference"}, "pool", "no pool 'inference' in cluster bj1"),
        ({"numa_node": "0.5"}, "numa_node", "not a whole number"),
        ({"device_index": "-1"}, "device_index", "not a whole number >= 0"),
        ({"vendor": ""}, "vendor", "required on a device row"),
        ({"node": ""}, "node", "required"),
        ({"device_model": "Ascend 910B"}, "device_model", "huawei model"),
        ({"uuid": "GPU-zzzz-elsewhere"}, "uuid", "belongs to device"),
        ({"uuid": "GPU-new", "device_index": "0", "node": "gpu-a01"}, "uuid", "retire it before"),
        ({"node_status": "ready", "node": "gpu-old"}, "node_status", "a retired node cannot become ready"),
        ({"pci_bus_id": "zz:zz"}, "pci_bus_id", "is not a PCI address"),  # issue 29 §9
        ({"pci_bus_id": "0000:1a:00"}, "pci_bus_id", "is not a PCI address"),  # no function
    ],
)
def test_import_reports_bad_values(actor, ledger, change, column, fragment):
    DeviceModelFactory(name="Ascend 910B", vendor=Vendor.HUAWEI, kind=DeviceKind.NPU)
    DeviceFactory(node=NodeFactory(cluster=ledger["cluster"], name="gpu-other"), uuid="GPU-zzzz-elsewhere")
    NodeFactory(cluster=ledger["cluster"], name="gpu-old", status=S.RETIRED)
    row = {"cluster": "bj1", "node": "gpu-new", "vendor": "nvidia", "device_index": "3", **change}

    with pytest.raises(ValidationFailed) as exc:
        ledger_import_csv(data=make_csv([row]), actor=actor)

    assert exc.value.message == "1 row has errors"
    [error] = [e for e in exc.value.details["rows"] if e["column"] == column]
    assert error["line"] == 2
    assert fragment in error["message"]


def test_import_stores_a_pci_address_in_the_form_reports_store(actor, ledger):
    row = {
        "cluster": "bj1",
        "node": "gpu-pci",
        "vendor": "nvidia",
        "device_index": "0",
        "pci_bus_id": "1a:00.0",
    }
    ledger_import_csv(data=make_csv([row]), actor=actor)
    assert Device.objects.get(node__name="gpu-pci").pci_bus_id == "0000:1A:00.0"


def test_import_rejects_duplicates_within_the_file(actor, ledger):
    rows = [
        {"cluster": "bj1", "node": "gpu-x", "vendor": "nvidia", "device_index": "0", "uuid": "GPU-1"},
        {"cluster": "bj1", "node": "gpu-x", "vendor": "nvidia", "device_index": "1", "uuid": "GPU-1"},
        {"cluster": "bj1", "node": "gpu-x", "vendor": "nvidia", "device_index": "0", "uuid": "GPU-2"},
        {"cluster": "bj1", "node": "gpu-x", "cpu_arch": "x86_64"},
        {"cluster": "bj1", "node": "gpu-x", "cpu_arch": "aarch64"},
    ]
    with pytest.raises(ValidationFailed) as exc:
        ledger_import_csv(data=make_csv(rows), actor=actor)
    errors = {(e["line"], e["column"]): e["message"] for e in exc.value.details["rows"]}
    assert "already appears on line 2" in errors[(3, "uuid")]
    assert "already appears on line 2" in errors[(4, "device_index")]
    assert "disagrees with 'x86_64' on line 5" in errors[(6, "cpu_arch")]
    assert not Node.objects.filter(name="gpu-x").exists()


def test_import_rejects_unknown_and_missing_columns(actor):
    with pytest.raises(ValidationFailed) as exc:
        ledger_import_csv(data="cluster,hostname,colour\nbj1,a,red\n", actor=actor)
    errors = exc.value.details["rows"]
    assert {(e["line"], e["column"]) for e in errors} == {(1, "hostname"), (1, "colour"), (1, "node")}


def test_an_unknown_model_is_recorded_and_flagged_with_a_warning(actor, ledger):
    row = {
        "cluster": "bj1",
        "node": "gpu-a01",
        "vendor": "nvidia",
        "device_index": "5",
        "device_model": "GB300 NVL",
    }

    report = ledger_import_csv(data=make_csv([row]), actor=actor)

    device = Device.objects.get(node=ledger["node"], index=5)
    assert (device.device_model, device.raw_model_name, device.model_unrecognized) == (
        None,
        "GB300 NVL",
        True,
    )
    assert device.model_label == "GB300 NVL"
    assert report.created_devices == 1
    [warning] = report.warnings
    assert warning["line"] == 2 and warning["column"] == "device_model"
    assert "not in the catalog" in warning["message"]


def test_importing_the_same_file_twice_changes_nothing_the_second_time(actor, ledger):
    data = make_csv(happy_rows())
    ledger_import_csv(data=data, actor=actor)
    events, audit = DeviceEvent.objects.count(), ChangeRecord.objects.count()

    report = ledger_import_csv(data=data, actor=actor)

    assert (report.created_nodes, report.updated_nodes, report.created_devices, report.updated_devices) == (
        0,
        0,
        0,
        0,
    )
    assert report.unchanged == 3 + 3  # nodes gpu-a01, gpu-b01, npu-c01 and three cards
    assert report.changed is False
    assert {r["device_action"] for r in report.rows if r["device"]} == {"unchanged"}
    assert all(r["node_changes"] == r["device_changes"] == [] for r in report.rows)
    assert (DeviceEvent.objects.count(), ChangeRecord.objects.count()) == (events, audit)


def test_dry_run_reports_but_writes_nothing(actor, ledger):
    counts = (
        Node.objects.count(),
        Device.objects.count(),
        DeviceEvent.objects.count(),
        ChangeRecord.objects.count(),
    )

    report = ledger_import_csv(data=make_csv(happy_rows()), actor=actor, dry_run=True)

    assert report.dry_run is True
    assert (report.created_nodes, report.created_devices, report.updated_devices) == (2, 2, 1)
    after = (
        Node.objects.count(),
        Device.objects.count(),
        DeviceEvent.objects.count(),
        ChangeRecord.objects.count(),
    )
    assert after == counts
    assert Device.objects.get(uuid="GPU-aaaa").firmware_version == "1.0"


def test_dry_run_still_reports_errors(actor, ledger):
    with pytest.raises(ValidationFailed):
        ledger_import_csv(data=make_csv([{"cluster": "nowhere", "node": "x"}]), actor=actor, dry_run=True)


def test_import_changes_node_status_through_the_state_machine(actor, ledger):
    row = {"cluster": "bj1", "node": "gpu-a01", "node_status": "maintenance"}
    report = ledger_import_csv(data=make_csv([row]), actor=actor)
    node = Node.objects.get(pk=ledger["node"].pk)
    assert (node.status, node.taints) == (S.MAINTENANCE, [MAINTENANCE_TAINT])
    assert report.updated_nodes == 1
    assert DeviceEvent.objects.get(node=node).kind == DeviceEvent.Kind.MAINTENANCE
    assert records(node, "node.status_set").count() == 1


def test_a_node_imported_as_retired_retires_its_imported_cards(actor, ledger):
    rows = [
        {
            "cluster": "bj1",
            "node": "gpu-old",
            "node_status": "retired",
            "vendor": "nvidia",
            "device_index": "0",
        },
        {"cluster": "bj1", "node": "gpu-old", "vendor": "nvidia", "device_index": "1"},
    ]
    report = ledger_import_csv(data=make_csv(rows), actor=actor)
    node = Node.objects.get(name="gpu-old")
    assert (report.created_nodes, report.created_devices, report.updated_nodes) == (1, 2, 0)
    assert node.status == S.RETIRED
    assert set(node.devices.values_list("health", flat=True)) == {Device.Health.RETIRED}
    assert DeviceEvent.objects.filter(node=node, kind=DeviceEvent.Kind.RETIRED).count() == 3  # node + 2 cards


def test_import_matches_a_card_without_uuid_by_its_slot(actor, ledger):
    Device.objects.filter(pk=ledger["device"].pk).update(uuid=None)
    row = {"cluster": "bj1", "node": "gpu-a01", "vendor": "NVIDIA", "device_index": "0", "uuid": "GPU-found"}
    report = ledger_import_csv(data=make_csv([row]), actor=actor)
    assert report.updated_devices == 1 and report.created_devices == 0
    assert Device.objects.get(pk=ledger["device"].pk).uuid == "GPU-found"


def test_import_accepts_gb18030_files_from_chinese_excel(actor, ledger):
    row = {
        "cluster": "bj1",
        "node": "gpu-a01",
        "vendor": "nvidia",
        "device_index": "0",
        "topology_group": "一号柜",
    }
    report = ledger_import_csv(data=make_csv([row]).encode("gb18030"), actor=actor)
    assert report.updated_devices == 1
    assert Device.objects.get(pk=ledger["device"].pk).topology_group == "一号柜"


# --------------------------------------------------------------------------------------------- export


@pytest.fixture
def fleet(ledger):
    """A varied ledger: Chinese text, a formula-like serial, unrecognized, lost and retired cards."""
    node = ledger["node"]
    DeviceFactory(
        node=node,
        index=1,
        uuid="GPU-bbbb",
        serial="=HYPERLINK(1)",
        numa_node=-1,
        topology_group="机柜A",
        owner_project=ledger["project"],
    )
    DeviceFactory(
        node=node, index=2, uuid=None, device_model=None, raw_model_name="Mystery X1", model_unrecognized=True
    )
    DeviceFactory(node=node, index=3, uuid=None, health=Device.Health.LOST)
    DeviceFactory(node=node, index=3, uuid=None, health=Device.Health.RETIRED, serial="old-card")
    npu = NodeFactory(cluster=ledger["cluster"], name="npu-c01", status=S.QUARANTINED, cann_version="8.0.RC2")
    ascend = DeviceModelFactory(name="Ascend 910B", vendor=Vendor.HUAWEI, kind=DeviceKind.NPU)
    DeviceFactory(node=npu, vendor=Vendor.HUAWEI, index=0, device_model=ascend, pool_status="quarantine")
    return ledger


def test_csv_export_has_a_bom_the_import_columns_and_read_only_ones(fleet, django_assert_num_queries):
    with django_assert_num_queries(1):
        content, content_type, filename = ledger_export(devices=Device.objects.all(), fmt="csv")

    assert content.startswith(b"\xef\xbb\xbf")
    assert content_type.startswith("text/csv")
    assert filename.endswith(".csv")
    rows = list(csv.DictReader(io.StringIO(content.decode("utf-8-sig"))))
    assert list(rows[0]) == list(EXPORT_COLUMNS)
    assert len(rows) == Device.objects.count()
    by_serial = {r["serial"]: r for r in rows}
    formula = by_serial["'=HYPERLINK(1)"]  # defused for spreadsheets
    assert (formula["topology_group"], formula["numa_node"], formula["owner_project"]) == (
        "机柜A",
        "-1",
        "llm",
    )
    assert by_serial["old-card"]["health"] == "retired"
    unrecognized = next(r for r in rows if r["device_model"] == "Mystery X1")
    assert unrecognized["model_unrecognized"] == "true"


def test_csv_export_reimports_unchanged(actor, fleet):
    content, _, _ = ledger_export(devices=Device.objects.all(), fmt="csv")
    events, audit = DeviceEvent.objects.count(), ChangeRecord.objects.count()

    report = ledger_import_csv(data=content, actor=actor)

    assert (report.created_nodes, report.updated_nodes, report.created_devices, report.updated_devices) == (
        0,
        0,
        0,
        0,
    )
    assert report.unchanged == Node.objects.count() + Device.objects.count()
    assert (DeviceEvent.objects.count(), ChangeRecord.objects.count()) == (events, audit)
    assert Device.objects.get(uuid="GPU-bbbb").serial == "=HYPERLINK(1)"


def test_xlsx_export_is_formatted_and_reimports_unchanged(actor, fleet):
    content, content_type, filename = ledger_export(devices=Device.objects.all(), fmt="xlsx")
    assert content_type == "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
    assert filename.endswith(".xlsx")

    sheet = openpyxl.load_workbook(io.BytesIO(content)).active
    assert [c.value for c in sheet[1]] == list(EXPORT_COLUMNS)
    assert all(c.font.bold for c in sheet[1])
    assert sheet.freeze_panes == "A2"
    assert sheet.column_dimensions["A"].width >= len("cluster")
    serial_column = EXPORT_COLUMNS.index("serial") + 1
    formula_cell = next(
        sheet.cell(row=r, column=serial_column)
        for r in range(2, sheet.max_row + 1)
        if sheet.cell(row=r, column=serial_column).value == "=HYPERLINK(1)"
    )
    assert formula_cell.data_type == "s"  # text, not a formula

    buffer = io.StringIO()
    writer = csv.writer(buffer)
    for values in sheet.iter_rows(values_only=True):
        writer.writerow(["" if v is None else v for v in values])
    events = DeviceEvent.objects.count()
    report = ledger_import_csv(data=buffer.getvalue(), actor=actor)

    assert not report.changed
    assert report.unchanged == Node.objects.count() + Device.objects.count()
    assert DeviceEvent.objects.count() == events


def test_export_refuses_unknown_formats():
    with pytest.raises(ValidationFailed):
        ledger_export(devices=Device.objects.none(), fmt="pdf")
