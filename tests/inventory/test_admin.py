"""The ledger admin console: access, actions through services, history, import view, exports."""

from __future__ import annotations

import csv
import io

import openpyxl
import pytest
from django.contrib.admin import helpers
from django.contrib.messages import get_messages
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from apps.core.models import ChangeRecord
from apps.inventory.models import AgentToken, Device, DeviceEvent, Node, NodeReport
from apps.inventory.services.ledger import EXPORT_COLUMNS, IMPORT_COLUMNS
from tests.fixtures.factories.accounts import UserFactory
from tests.fixtures.factories.catalog import DeviceModelFactory
from tests.fixtures.factories.inventory import ClusterFactory, DeviceFactory, NodeFactory, PoolFactory

pytestmark = pytest.mark.django_db

S = Node.Status
NODE_CHANGELIST = reverse("admin:inventory_node_changelist")
DEVICE_CHANGELIST = reverse("admin:inventory_device_changelist")
IMPORT_URL = reverse("admin:inventory_device_import")


@pytest.fixture
def staff(client):
    user = UserFactory(username="admin", is_staff=True, is_superuser=True)
    client.force_login(user)
    return client


def action(client, url: str, name: str, objects, **extra):
    data = {"action": name, helpers.ACTION_CHECKBOX_NAME: [o.pk for o in objects], **extra}
    return client.post(url, data)


def texts(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


# --------------------------------------------------------------------------------------------- access


def test_anonymous_users_are_sent_to_the_admin_login(client):
    response = client.get("/admin/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_non_staff_users_are_sent_to_the_admin_login(client):
    client.force_login(UserFactory(username="member"))
    for url in ("/admin/", NODE_CHANGELIST, IMPORT_URL):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/admin/login/")


def test_staff_without_change_permission_cannot_open_the_import(client):
    client.force_login(UserFactory(username="viewer", is_staff=True))
    assert client.get(IMPORT_URL).status_code == 403


@pytest.mark.parametrize(
    "name",
    ["cluster", "pool", "node", "device", "deviceevent", "nodereport", "agenttoken"],
)
def test_staff_can_open_every_ledger_changelist(staff, name):
    NodeReport.objects.create(
        node=NodeFactory(), kind="nvidia-smi-xml", sha256="0" * 64, size_bytes=3, raw_text="<x>"
    )
    DeviceFactory()
    assert staff.get(reverse(f"admin:inventory_{name}_changelist")).status_code == 200


# ---------------------------------------------------------------------------------------- node actions


def test_maintenance_on_and_off(staff):
    node = NodeFactory(name="gpu-a01")
    asked = action(staff, NODE_CHANGELIST, "maintenance_on", [node])
    assert asked.status_code == 200 and b'name="reason"' in asked.content  # asks for a reason first
    node.refresh_from_db()
    assert node.status == S.READY
    response = action(staff, NODE_CHANGELIST, "maintenance_on", [node], apply="1", reason="BIOS update")
    assert response.status_code == 302
    node.refresh_from_db()
    assert node.status == S.MAINTENANCE and node.status_reason == "BIOS update"
    assert "Maintenance on: 1" in texts(response)

    action(staff, NODE_CHANGELIST, "maintenance_off", [node])
    node.refresh_from_db()
    assert node.status == S.READY
    kinds = list(DeviceEvent.objects.filter(node=node).values_list("actor_label", "kind"))
    assert kinds == [("admin", "maintenance"), ("admin", "maintenance")]


@pytest.mark.parametrize(
    ("name", "current", "target"),
    [
        ("quarantine", S.READY, S.QUARANTINED),
        ("release_from_quarantine", S.QUARANTINED, S.READY),
        ("retire", S.MAINTENANCE, S.RETIRED),
    ],
)
def test_node_actions_with_a_reason_ask_for_it_first(staff, name, current, target):
    node = NodeFactory(name="gpu-a01", status=current)

    page = action(staff, NODE_CHANGELIST, name, [node])
    assert page.status_code == 200
    assert [t.name for t in page.templates][0] == "admin/inventory/action_reason.html"
    assert b'name="reason"' in page.content and b"gpu-a01" in page.content
    node.refresh_from_db()
    assert node.status == current  # nothing happens before the reason is given

    missing = action(staff, NODE_CHANGELIST, name, [node], apply="1", reason="")
    assert missing.status_code == 200 and b"This field is required" in missing.content

    done = action(staff, NODE_CHANGELIST, name, [node], apply="1", reason="ticket OPS-42")
    assert done.status_code == 302
    node.refresh_from_db()
    assert (node.status, node.status_reason) == (target, "ticket OPS-42")
    assert ChangeRecord.objects.filter(action="node.status_set", object_id=str(node.pk)).count() == 1


def test_service_errors_become_admin_messages_not_500s(staff):
    retired = NodeFactory(name="gpu-dead", status=S.RETIRED)
    ready = NodeFactory(name="gpu-ok")

    response = action(staff, NODE_CHANGELIST, "quarantine", [retired, ready], apply="1", reason="fault")

    assert response.status_code == 302
    messages = texts(response)
    assert any(
        "gpu-dead: node gpu-dead is retired; a retired node cannot become quarantined" in m for m in messages
    )
    assert "Quarantined: 1" in messages
    ready.refresh_from_db()
    assert ready.status == S.QUARANTINED


def test_release_refuses_a_node_that_is_not_quarantined(staff):
    node = NodeFactory(name="gpu-a01", status=S.READY)
    response = action(staff, NODE_CHANGELIST, "release_from_quarantine", [node], apply="1", reason="fixed")
    assert any("not quarantined" in m for m in texts(response))
    assert not DeviceEvent.objects.exists()


def test_node_page_shows_devices_and_history_but_status_is_read_only(staff):
    node = NodeFactory(name="gpu-a01")
    DeviceFactory(node=node, serial="SN-VISIBLE")
    action(staff, NODE_CHANGELIST, "maintenance_on", [node], apply="1", reason="BIOS update")

    page = staff.get(reverse("admin:inventory_node_change", args=[node.pk]))

    assert page.status_code == 200
    assert b"SN-VISIBLE" in page.content
    assert b"node gpu-a01 maintenance on" in page.content
    form = page.context["adminform"].form
    assert "status" not in form.fields and "taints" not in form.fields
    assert "pool" in form.fields


def test_history_inline_shows_only_the_latest_events(staff):
    node = NodeFactory()
    DeviceEvent.objects.bulk_create(
        DeviceEvent(node=node, kind="updated", message=f"event {i}") for i in range(60)
    )
    page = staff.get(reverse("admin:inventory_node_change", args=[node.pk]))
    history = next(f for f in page.context["inline_admin_formsets"] if f.opts.model is DeviceEvent)
    assert len(history.formset.forms) == 50
    assert b"event 59" in page.content and b"event 0<" not in page.content


def test_editing_node_descriptive_fields_is_audited(staff):
    cluster = ClusterFactory()
    node = NodeFactory(cluster=cluster, rack="R1")
    pool = PoolFactory(cluster=cluster)
    url = reverse("admin:inventory_node_change", args=[node.pk])
    form = staff.get(url).context["adminform"].form
    data = {k: v for k, v in form.initial.items() if k in form.fields and v is not None}
    data.update(
        {
            "pool": pool.pk,
            "rack": "R9",
            "labels": "{}",
            "devices-TOTAL_FORMS": 0,
            "devices-INITIAL_FORMS": 0,
            "events-TOTAL_FORMS": 0,
            "events-INITIAL_FORMS": 0,
        }
    )
    response = staff.post(url, data)
    assert response.status_code == 302, response.context["adminform"].form.errors if response.context else ""
    node.refresh_from_db()
    assert (node.pool, node.rack) == (pool, "R9")
    record = ChangeRecord.objects.get(action="node.admin_edit")
    assert record.before == {"pool": None, "rack": "R1"}


def test_node_changelist_counts_devices_without_n_plus_one(staff, django_assert_max_num_queries):
    cluster = ClusterFactory()
    pool = PoolFactory(cluster=cluster)
    for i in range(30):
        node = NodeFactory(cluster=cluster, pool=pool)
        DeviceFactory.create_batch(2, node=node)
        if i == 0:
            DeviceFactory(node=node, health=Device.Health.RETIRED)
    with django_assert_max_num_queries(9):
        response = staff.get(NODE_CHANGELIST)
    assert response.status_code == 200
    counts = {n.device_count for n in response.context["cl"].result_list}
    assert counts == {2}


def test_node_search_by_device_uuid_lists_the_node_once_with_its_count(staff):
    node = NodeFactory(name="gpu-a01")
    DeviceFactory(node=node, uuid="GPU-needle-1")
    DeviceFactory(node=node, uuid="GPU-needle-2")
    NodeFactory(name="gpu-a02")
    response = staff.get(NODE_CHANGELIST, {"q": "GPU-needle"})
    assert [(n.name, n.device_count) for n in response.context["cl"].result_list] == [("gpu-a01", 2)]


# -------------------------------------------------------------------------------------- device actions


def test_device_quarantine_return_and_retire(staff):
    device = DeviceFactory()

    page = action(staff, DEVICE_CHANGELIST, "quarantine", [device])
    assert page.status_code == 200 and b'name="reason"' in page.content
    action(staff, DEVICE_CHANGELIST, "quarantine", [device], apply="1", reason="XID 79")
    device.refresh_from_db()
    assert device.pool_status == "quarantine"

    action(staff, DEVICE_CHANGELIST, "return_to_production", [device])
    device.refresh_from_db()
    assert device.pool_status == "production"

    action(staff, DEVICE_CHANGELIST, "retire", [device], apply="1", reason="HBM failure")
    device.refresh_from_db()
    assert (device.health, device.health_reason) == ("retired", "HBM failure")
    kinds = list(DeviceEvent.objects.filter(device=device).order_by("id").values_list("kind", flat=True))
    assert kinds == ["quarantine", "quarantine", "retired"]

    response = action(staff, DEVICE_CHANGELIST, "return_to_production", [device])
    assert any("is retired" in m for m in texts(response))


def test_device_change_form_edits_go_through_the_service(staff):
    device = DeviceFactory(serial="SN-1")
    url = reverse("admin:inventory_device_change", args=[device.pk])
    page = staff.get(url)
    form = page.context["adminform"].form
    assert {"health", "pool_status", "node", "uuid"}.isdisjoint(form.fields)
    assert {"serial", "owner_project", "device_model"} <= set(form.fields)
    data = {k: ("" if v is None else v) for k, v in form.initial.items() if k in form.fields}
    data.update({"serial": "SN-2", "events-TOTAL_FORMS": 0, "events-INITIAL_FORMS": 0})

    response = staff.post(url, data)

    assert response.status_code == 302
    device.refresh_from_db()
    assert device.serial == "SN-2"
    event = DeviceEvent.objects.get(device=device)
    assert (event.kind, event.before, event.after) == ("updated", {"serial": "SN-1"}, {"serial": "SN-2"})
    page = staff.get(url)
    assert b"updated: serial" in page.content  # the history inline


def test_device_changelist_has_no_n_plus_one(staff, django_assert_max_num_queries):
    model = DeviceModelFactory()
    for _ in range(10):
        node = NodeFactory()
        DeviceFactory.create_batch(8, node=node, device_model=model)
    with django_assert_max_num_queries(9):
        response = staff.get(DEVICE_CHANGELIST)
    assert response.status_code == 200
    assert len(response.context["cl"].result_list) == 80
    assert IMPORT_URL.encode() in response.content  # the "Import ledger CSV" button


# ----------------------------------------------------------------------------------------------- export


def test_device_export_actions_return_files(staff):
    devices = DeviceFactory.create_batch(3)

    response = action(staff, DEVICE_CHANGELIST, "export_csv", devices[:2])
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"].startswith("attachment; filename=")
    rows = list(csv.reader(io.StringIO(response.content.decode("utf-8-sig"))))
    assert rows[0] == list(EXPORT_COLUMNS) and len(rows) == 3

    response = action(staff, DEVICE_CHANGELIST, "export_xlsx", devices)
    assert response["Content-Disposition"].endswith('.xlsx"')
    assert openpyxl.load_workbook(io.BytesIO(response.content)).active.max_row == 4


def test_node_export_action_exports_the_nodes_devices(staff):
    node = NodeFactory()
    DeviceFactory.create_batch(2, node=node)
    DeviceFactory()  # another node's card
    response = action(staff, NODE_CHANGELIST, "export_csv", [node])
    rows = list(csv.DictReader(io.StringIO(response.content.decode("utf-8-sig"))))
    assert {r["node"] for r in rows} == {node.name} and len(rows) == 2


# ----------------------------------------------------------------------------------------------- import


def upload(client, text: str, *, dry_run: bool = False):
    data = {"file": SimpleUploadedFile("ledger.csv", text.encode("utf-8-sig"), content_type="text/csv")}
    if dry_run:
        data["dry_run"] = "on"
    return client.post(IMPORT_URL, data)


def csv_text(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(IMPORT_COLUMNS), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: row.get(k, "") for k in IMPORT_COLUMNS})
    return buffer.getvalue()


def test_import_page_shows_the_form_and_the_columns(staff):
    page = staff.get(IMPORT_URL)
    assert page.status_code == 200
    assert b'type="file"' in page.content and b"dry_run" in page.content
    assert b"device_index" in page.content


def test_import_page_lists_every_bad_row(staff):
    ClusterFactory(slug="bj1")
    rows = [
        {"cluster": "nowhere", "node": "a"},
        {"cluster": "bj1", "node": "b", "vendor": "nvidia", "device_index": "x"},
        {"cluster": "bj1", "node": "c"},
        {"cluster": "bj1", "node": "d", "node_status": "asleep"},
    ]
    page = upload(staff, csv_text(rows))

    assert page.status_code == 200
    assert b"3 rows have errors" in page.content
    assert [(e["line"], e["column"]) for e in page.context["errors"]] == [
        (2, "cluster"),
        (3, "device_index"),
        (5, "node_status"),
    ]
    assert page.content.count(b'class="import-error"') == 3
    assert not Node.objects.exists()


def test_import_page_dry_run_then_real_import(staff):
    ClusterFactory(slug="bj1")
    text = csv_text(
        [{"cluster": "bj1", "node": "gpu-z", "vendor": "nvidia", "device_index": "0", "device_model": "Z9"}]
    )

    page = upload(staff, text, dry_run=True)
    assert page.status_code == 200
    assert page.context["report"].created_devices == 1
    assert b"Dry run" in page.content and b"not in the catalog" in page.content
    assert not Node.objects.exists()

    page = upload(staff, text)
    assert page.context["report"].created_nodes == 1
    assert Device.objects.get(node__name="gpu-z").model_unrecognized is True
    assert b"created" in page.content


# -------------------------------------------------------------------------------- reports, agent tokens


def test_node_report_page_shows_raw_text_in_pre_and_is_read_only(staff):
    report = NodeReport.objects.create(
        node=NodeFactory(), kind="npu-smi", sha256="0" * 64, size_bytes=9, raw_text="<npu> & 910B"
    )
    page = staff.get(reverse("admin:inventory_nodereport_change", args=[report.pk]))
    assert page.status_code == 200
    assert b"&lt;npu&gt; &amp; 910B</pre>" in page.content
    assert b'name="_save"' not in page.content


def test_device_events_are_read_only(staff):
    event = DeviceEvent.objects.create(node=NodeFactory(), kind="updated", message="m")
    assert staff.get(reverse("admin:inventory_deviceevent_add")).status_code == 403
    assert (
        staff.post(
            reverse("admin:inventory_deviceevent_delete", args=[event.pk]), {"post": "yes"}
        ).status_code
        == 403
    )
    assert DeviceEvent.objects.filter(pk=event.pk).exists()


def test_creating_an_agent_token_shows_the_key_once_and_stores_its_hash(staff):
    cluster = ClusterFactory()
    response = staff.post(
        reverse("admin:inventory_agenttoken_add"), {"cluster": cluster.pk, "name": "rack-12"}
    )

    # The key is on the answer itself (no-store), not in a flash message kept in a cookie (issue 27 §4).
    assert response.status_code == 200
    assert "shown only this once" in response.content.decode()
    key = response.content.decode().split('<code id="new-key">')[1].split("</code>")[0]
    assert key.startswith("sca_") and len(key) > 30
    assert "no-store" in response["Cache-Control"]
    assert not texts(response) and key not in str(response.cookies)
    token = AgentToken.objects.get(name="rack-12")
    assert token.key_hash == AgentToken.hash_key(key)
    assert token.prefix == key[:12]
    assert key not in str(list(AgentToken.objects.values()))
    assert ChangeRecord.objects.filter(action="agent_token.create").count() == 1

    action(staff, reverse("admin:inventory_agenttoken_changelist"), "revoke", [token])
    token.refresh_from_db()
    assert token.revoked is True


def test_node_report_list_does_not_load_raw_text(staff):
    node = NodeFactory()
    for i in range(3):
        NodeReport.objects.create(
            node=node, kind="npu-smi", sha256=f"{i}" * 64, size_bytes=9, raw_text="x" * 1000
        )
    with CaptureQueriesContext(connection) as ctx:
        assert staff.get(reverse("admin:inventory_nodereport_changelist")).status_code == 200
    listing = [
        q["sql"]
        for q in ctx.captured_queries
        if 'FROM "inventory_nodereport"' in q["sql"] and "COUNT" not in q["sql"]
    ]
    assert listing and all('"raw_text"' not in sql for sql in listing)


def test_a_large_import_runs_on_a_worker_with_a_progress_page(staff, django_capture_on_commit_callbacks):
    from unittest import mock

    from apps.core.models import BackgroundRun
    from worker.tasks.inventory import ledger_import_task

    ClusterFactory(slug="bj1")
    rows = [
        {"cluster": "bj1", "node": f"gpu-{i // 8:03d}", "vendor": "nvidia", "device_index": str(i % 8)}
        for i in range(640)
    ]
    with (
        mock.patch.object(ledger_import_task, "apply_async") as send,
        django_capture_on_commit_callbacks(execute=True),
    ):
        page = upload(staff, csv_text(rows))
    run = BackgroundRun.objects.get()
    assert page.status_code == 302 and page["Location"].endswith(f"/import/{run.pk}/")
    send.assert_called_once_with(args=[run.pk])
    assert run.kind == "inventory.ledger_import" and run.status == BackgroundRun.Status.QUEUED
    assert run.params["rows"] == 640 and not Device.objects.exists()
    assert run.actor.username == "admin" and run.actor_label == "admin"
    waiting = staff.get(page["Location"])
    assert f'data-url="/runs/{run.pk}/"'.encode() in waiting.content and b"<script>" not in waiting.content
    progress = staff.get(f"/runs/{run.pk}/").json()
    assert progress["status"] == "queued" and progress["percent"] == 0

    ledger_import_task.apply(args=[run.pk]).get()  # the worker's turn
    run.refresh_from_db()
    assert run.status == BackgroundRun.Status.SUCCEEDED and run.result["report"]["created_devices"] == 640
    assert run.started_at and run.finished_at
    assert Device.objects.count() == 640 and Node.objects.count() == 80
    ledger_import_task.apply(args=[run.pk]).get()  # redelivered: nothing more happens
    assert Device.objects.count() == 640
    done = staff.get(page["Location"])
    assert done.status_code == 200 and b"Import result" in done.content
    assert staff.get(f"/runs/{run.pk}/").json()["percent"] == 100


def test_a_large_import_with_a_bad_row_writes_nothing_and_lists_it(staff):
    from apps.core.models import BackgroundRun
    from worker.tasks.inventory import ledger_import_task

    ClusterFactory(slug="bj1")
    rows = [{"cluster": "bj1", "node": f"n{i}", "vendor": "nvidia", "device_index": "0"} for i in range(600)]
    rows[300]["device_index"] = "x"
    page = upload(staff, csv_text(rows))
    run = BackgroundRun.objects.get()
    ledger_import_task.apply(args=[run.pk]).get()
    run.refresh_from_db()
    assert run.status == BackgroundRun.Status.FAILED and "1 row has errors" in run.error
    assert [e["line"] for e in run.result["errors"]] == [302]
    assert not Node.objects.exists()
    failed = staff.get(page["Location"])
    assert failed.content.count(b'class="import-error"') == 1
