"""Issue 29 §3: release work in the app. Staff create, start, evaluate, admit, fail and roll back gray
batches and create plans and waves from the pages, each with a reason and its audit record; members
get the styled 403; bad input is a 400 with a message and writes nothing; the node picker pages on
the server (10,000 nodes); the soak chart's legend, points and error axis."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.core.models import ChangeRecord
from apps.inventory.models import Device, Node, Pool
from apps.rollout import charts, services
from apps.rollout.models import GrayBatch, SoakResult, UpgradePlan, UpgradeWave
from tests.fixtures.rollout import ingest_soak

pytestmark = pytest.mark.django_db

REASON = "canary for the 550.90 rollout (change CHG-1234)"


@pytest.fixture
def staff(client, staff_user):
    client.force_login(staff_user)
    return client


@pytest.fixture
def quick(db):
    """One day, no benchmark needed: a clean soak of a day passes."""
    return services.soak_criteria_create(
        actor="test",
        name="agents: 1 day",
        min_days=1,
        max_error_events=0,
        max_temperature_c=Decimal("85"),
        max_throughput_drop_pct=None,
        max_lost_devices=0,
    )


def records(action: str, batch=None):
    qs = ChangeRecord.objects.filter(action=action)
    return qs.filter(object_id=str(batch.pk)) if batch is not None else qs


def create_form(criteria, **extra) -> dict:
    data = {
        "name": "NVIDIA 550.90 canary",
        "slug": "",
        "kind": "driver",
        "target_version": "550.90.07",
        "criteria": str(criteria.pk),
        "reason": REASON,
    }
    data.update(extra)
    return data


def make_batch(criteria, nodes, name="canary", kind="driver"):
    return services.batch_create(
        actor="ops", name=name, slug=name, kind=kind, target_version="1", criteria=criteria, nodes=nodes
    )


# -------------------------------------------------------------------------------------------------
# create


def test_staff_create_a_batch_from_picked_nodes_and_are_its_creator(staff, staff_user, fleet, criteria):
    page = staff.get("/rollout/batches/new/")
    body = page.content.decode()
    assert page.status_code == 200
    assert 'name="csrfmiddlewaretoken"' in body and 'data-search-url="/rollout/nodes/"' in body
    assert "created_by" not in body  # nobody picks the creator by hand

    response = staff.post(
        "/rollout/batches/new/",
        create_form(criteria, nodes=[str(fleet["gpu-01"].pk), str(fleet["gpu-02"].pk)], created_by="1"),
    )
    batch = GrayBatch.objects.get(name="NVIDIA 550.90 canary")
    assert response.status_code == 302 and response["Location"] == f"/rollout/batches/{batch.pk}/"
    assert batch.slug == "nvidia-550-90-canary"  # made from the name
    assert batch.created_by == staff_user and batch.stage == GrayBatch.Stage.PLANNED
    assert set(batch.nodes.values_list("name", flat=True)) == {"gpu-01", "gpu-02"}
    (record,) = records("graybatch.create", batch)
    assert record.actor == staff_user and record.message == REASON
    assert record.after["nodes"] == ["gpu-01", "gpu-02"]
    detail = staff.get(response["Location"]).content.decode()
    assert "Act on it in the admin console" not in detail
    assert REASON in detail  # the audit trail on the page shows the reason
    assert 'data-batch-action="start_soak"' in detail and 'data-batch-action="admit"' not in detail


def test_nodes_by_name_pool_or_label_and_a_plan_wave_in_one_go(staff, fleet, criteria):
    plan = services.upgrade_plan_create(actor="ops", name="Q4 stack")
    Node.objects.filter(pk=fleet["npu-01"].pk).update(labels={"suanchi.io/rack": "r12"})
    response = staff.post(
        "/rollout/batches/new/",
        create_form(
            criteria,
            name="by name",
            node_names="gpu-01,\nprod/gpu-02",
            label="suanchi.io/rack=r12",
            plan=str(plan.pk),
        ),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    batch = GrayBatch.objects.get(name="by name")
    assert set(batch.nodes.values_list("name", flat=True)) == {"gpu-01", "gpu-02", "npu-01"}
    wave = UpgradeWave.objects.get(batch=batch)
    assert wave.plan == plan and wave.layer == 3
    assert records("upgradewave.create").get().message == REASON

    pool = Pool.objects.get(slug="training")
    response = staff.post(
        "/rollout/batches/new/", create_form(criteria, name="whole pool", pool=str(pool.pk))
    )
    assert response.status_code == 302
    assert GrayBatch.objects.get(name="whole pool").nodes.count() == 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"reason": ""}, "Give a reason"),
        ({}, "Pick at least one node"),
        ({"node_names": "gpu-01 gpu-99"}, "No node named gpu-99."),
        ({"label": "no equals sign"}, "Write the label as key=value."),
        ({"label": "team=nobody"}, "No node has the label team=nobody."),
        ({"nodes": ["abc"]}, "is not a valid value"),
        ({"name": "中文名称", "node_names": "gpu-01"}, "Give a slug"),
        ({"kind": "teleport", "node_names": "gpu-01"}, "Select a valid choice"),
    ],
)
def test_bad_input_is_a_400_with_a_message_and_writes_nothing(staff, fleet, criteria, change, message):
    before = ChangeRecord.objects.count()
    response = staff.post("/rollout/batches/new/", create_form(criteria, **change))
    assert response.status_code == 400
    assert message in response.content.decode()
    assert GrayBatch.objects.count() == 0 and ChangeRecord.objects.count() == before


def test_refusals_of_the_services_are_400s_and_roll_the_whole_form_back(staff, fleet, criteria):
    Node.objects.filter(pk=fleet["gpu-02"].pk).update(status=Node.Status.RETIRED)
    before = ChangeRecord.objects.count()
    response = staff.post("/rollout/batches/new/", create_form(criteria, node_names="gpu-01 gpu-02"))
    assert response.status_code == 400
    assert "retired nodes cannot join a batch: gpu-02" in response.content.decode()
    assert GrayBatch.objects.count() == 0 and ChangeRecord.objects.count() == before

    make_batch(criteria, [fleet["gpu-01"]], name="taken")
    before = ChangeRecord.objects.count()
    response = staff.post(
        "/rollout/batches/new/", create_form(criteria, slug="taken", nodes=[str(fleet["gpu-01"].pk)])
    )
    assert response.status_code == 400
    # the picked node comes back as a chip, so nothing has to be searched again
    assert f'name="nodes" value="{fleet["gpu-01"].pk}"' in response.content.decode()
    assert GrayBatch.objects.count() == 1 and ChangeRecord.objects.count() == before

    # a new-hardware batch is no upgrade layer: the plan's wave is refused, and the batch is not kept
    plan = services.upgrade_plan_create(actor="ops", name="Q4")
    before = ChangeRecord.objects.count()
    response = staff.post(
        "/rollout/batches/new/",
        create_form(criteria, name="new cards", kind="hardware", node_names="npu-01", plan=str(plan.pk)),
    )
    assert response.status_code == 400
    assert "is not an upgrade layer" in response.content.decode()
    assert not GrayBatch.objects.filter(name="new cards").exists()
    assert ChangeRecord.objects.count() == before


def test_members_get_the_styled_403_and_write_nothing(client, member_project, fleet, criteria):
    user, _project = member_project
    batch = make_batch(criteria, [fleet["gpu-01"]])
    plan = services.upgrade_plan_create(actor="ops", name="Q4")
    wave = services.upgrade_wave_create(actor="ops", plan=plan, batch=batch)
    client.force_login(user)
    before = ChangeRecord.objects.count()
    for method, url, data in [
        ("get", "/rollout/batches/new/", None),
        ("post", "/rollout/batches/new/", create_form(criteria, node_names="gpu-02", name="x")),
        ("get", "/rollout/nodes/?q=gpu", None),
        ("post", f"/rollout/batches/{batch.pk}/actions/start-soak/", {"reason": REASON}),
        ("post", "/rollout/waves/plans/new/", {"name": "mine", "reason": REASON}),
        ("post", "/rollout/waves/new/", {"plan": plan.pk, "batch": batch.pk, "reason": REASON}),
        ("post", f"/rollout/waves/{wave.pk}/start/", {"reason": REASON}),
    ]:
        response = getattr(client, method)(url, data) if data else getattr(client, method)(url)
        assert response.status_code == 403, url
        body = response.content.decode()
        assert "This page is for platform staff only." in body  # the styled page says why
        assert "Django administration" not in body and "Not allowed" in body
    batch.refresh_from_db()
    assert batch.stage == GrayBatch.Stage.PLANNED
    assert ChangeRecord.objects.count() == before and GrayBatch.objects.count() == 1


# -------------------------------------------------------------------------------------------------
# stage changes


def test_staff_walk_a_batch_through_every_stage_with_reasons(staff, staff_user, fleet, quick):
    batch = make_batch(quick, [fleet["gpu-01"]])
    url = f"/rollout/batches/{batch.pk}/actions"

    response = staff.post(f"{url}/start-soak/", {"reason": "start: " + REASON})
    assert response.status_code == 302
    batch.refresh_from_db()
    assert batch.stage == GrayBatch.Stage.SOAKING
    record = records("graybatch.soaking", batch).get()
    assert record.actor == staff_user and record.message == "start: " + REASON
    assert set(Device.objects.filter(node=fleet["gpu-01"]).values_list("pool_status", flat=True)) == {"gray"}

    # 25 hours of clean telemetry, then an evaluation someone asked for: it passes.
    start = timezone.now() - timedelta(hours=25)
    GrayBatch.objects.filter(pk=batch.pk).update(soak_started_at=start)
    ingest_soak([fleet["gpu-01"]], start=start, end=timezone.now() - timedelta(minutes=2))
    response = staff.post(f"{url}/evaluate/", {"reason": "evaluate: on request"})
    assert response.status_code == 302
    batch.refresh_from_db()
    assert batch.stage == GrayBatch.Stage.PASSED
    assert records("graybatch.evaluate", batch).get().message == "evaluate: on request"
    assert records("graybatch.passed", batch).get().actor == staff_user

    page = staff.get(f"/rollout/batches/{batch.pk}/").content.decode()
    assert 'data-batch-action="admit"' in page and 'data-batch-action="start_soak"' not in page
    response = staff.post(f"{url}/admit/", {"reason": "admit: clean for a day"})
    assert response.status_code == 302
    batch.refresh_from_db()
    assert batch.stage == GrayBatch.Stage.ADMITTED and batch.stage_reason == "admit: clean for a day"
    assert records("graybatch.admitted", batch).get().message == "admit: clean for a day"
    assert set(Device.objects.filter(node=fleet["gpu-01"]).values_list("pool_status", flat=True)) == {
        "production"
    }
    page = staff.get(f"/rollout/batches/{batch.pk}/").content.decode()
    assert "no stage change is left" in page


def test_fail_and_roll_back_from_the_page(staff, staff_user, fleet, criteria):
    batch = make_batch(criteria, [fleet["gpu-02"]])
    services.batch_soak_start(batch=batch, actor="ops")
    url = f"/rollout/batches/{batch.pk}/actions"
    assert staff.post(f"{url}/fail/", {"reason": "fan noise on gpu-02"}).status_code == 302
    batch.refresh_from_db()
    assert batch.stage == GrayBatch.Stage.FAILED
    assert Node.objects.get(pk=fleet["gpu-02"].pk).status == Node.Status.QUARANTINED
    assert records("graybatch.failed", batch).get().message == "fan noise on gpu-02"

    response = staff.post(f"{url}/rollback/", {"reason": "driver reverted"}, follow=True)
    assert response.status_code == 200
    batch.refresh_from_db()
    assert batch.stage == GrayBatch.Stage.ROLLED_BACK
    assert records("graybatch.rolled_back", batch).get().actor == staff_user
    assert Node.objects.get(pk=fleet["gpu-02"].pk).status == Node.Status.READY
    assert "rolled back." in response.content.decode()


def test_a_stage_change_without_a_reason_or_out_of_turn_writes_nothing(staff, fleet, criteria):
    batch = make_batch(criteria, [fleet["gpu-01"]])
    url = f"/rollout/batches/{batch.pk}/actions"
    before = ChangeRecord.objects.count()
    response = staff.post(f"{url}/start-soak/", {"reason": "   "})
    assert response.status_code == 400
    assert "Give a reason" in response.content.decode()
    response = staff.post(f"{url}/admit/", {"reason": "looks fine"})
    assert response.status_code == 409
    body = response.content.decode()
    assert 'data-action-error="admit"' in body and "its soak has not passed" in body
    response = staff.post(f"{url}/evaluate/", {"reason": "now"})
    assert response.status_code == 409 and "only a soaking batch is evaluated" in response.content.decode()
    assert staff.post(f"{url}/teleport/", {"reason": "x"}).status_code == 404
    assert staff.get(f"{url}/start-soak/").status_code == 405
    batch.refresh_from_db()
    assert batch.stage == GrayBatch.Stage.PLANNED and ChangeRecord.objects.count() == before
    assert set(Device.objects.filter(node=fleet["gpu-01"]).values_list("pool_status", flat=True)) == {
        "production"
    }


def test_csrf_is_enforced_on_the_forms(fleet, criteria, staff_user):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(staff_user)
    batch = make_batch(criteria, [fleet["gpu-01"]])
    response = client.post(f"/rollout/batches/{batch.pk}/actions/start-soak/", {"reason": REASON})
    assert response.status_code == 403
    batch.refresh_from_db()
    assert batch.stage == GrayBatch.Stage.PLANNED


# -------------------------------------------------------------------------------------------------
# plans and waves


def test_plans_and_waves_from_the_waves_page(staff, staff_user, fleet, criteria):
    response = staff.post("/rollout/waves/plans/new/", {"name": "2027-Q1", "reason": "quarterly stack"})
    assert response.status_code == 302
    plan = UpgradePlan.objects.get(name="2027-Q1")
    assert records("upgradeplan.create").get().message == "quarterly stack"
    response = staff.post("/rollout/waves/plans/new/", {"name": "2027-Q1", "reason": "again"})
    assert response.status_code == 400 and "already exists" in response.content.decode()
    assert UpgradePlan.objects.count() == 1

    agents = make_batch(criteria, [fleet["gpu-01"]], name="dcgm", kind="collector")
    drivers = make_batch(criteria, [fleet["gpu-02"]], name="driver", kind="driver")
    for batch in (agents, drivers):
        response = staff.post(
            "/rollout/waves/new/", {"plan": plan.pk, "batch": batch.pk, "reason": "in the plan"}
        )
        assert response.status_code == 302
    assert records("upgradewave.create").count() == 2
    page = staff.get("/rollout/waves/").content.decode()
    assert f'data-wave-start="{agents.wave.pk}"' in page
    assert ">planned</span>" in page  # the badge reads the state's label

    # the driver wave waits for the collector wave: a 409 naming it, nothing started
    before = ChangeRecord.objects.count()
    response = staff.post(f"/rollout/waves/{drivers.wave.pk}/start/", {"reason": "go"})
    assert response.status_code == 409
    assert "the collector / device plugin wave (batch dcgm) has not passed" in response.content.decode()
    assert ChangeRecord.objects.count() == before
    response = staff.post(f"/rollout/waves/{agents.wave.pk}/start/", {"reason": "dcgm first"})
    assert response.status_code == 302
    agents.refresh_from_db()
    assert agents.stage == GrayBatch.Stage.SOAKING
    assert records("graybatch.soaking", agents).get().message == "dcgm first"
    response = staff.post(f"/rollout/waves/{drivers.wave.pk}/start/", {"reason": ""})
    assert response.status_code == 400 and "Give a reason" in response.content.decode()


# -------------------------------------------------------------------------------------------------
# the node picker at fleet scale


def test_the_node_picker_pages_10000_nodes_on_the_server(staff, fleet, criteria):
    cluster = fleet["gpu-01"].cluster
    pool = Pool.objects.get(slug="training")
    Node.objects.bulk_create(
        [
            Node(
                cluster=cluster,
                pool=pool if i % 2 else None,
                name=f"edge-{i:05d}",
                labels={"suanchi.io/rack": f"r{i % 100}"},
                status=Node.Status.RETIRED if i % 1000 == 7 else Node.Status.READY,
            )
            for i in range(10_000)
        ]
    )
    with CaptureQueriesContext(connection) as queries:
        page = staff.get("/rollout/batches/new/")
    assert page.status_code == 200
    assert "edge-00001" not in page.content.decode()  # no select of ten thousand options
    assert len(queries) < 30

    with CaptureQueriesContext(connection) as queries:
        data = staff.get("/rollout/nodes/", {"q": "edge-", "page": 3}).json()
    assert len(queries) < 12
    assert data["count"] == 10_000 - 10  # retired nodes cannot join, so they are not offered
    assert data["page"] == 3 and data["pages"] == -(-data["count"] // 25) and len(data["results"]) == 25
    assert data["results"][0]["name"] == "edge-00051"  # by name; retired edge-00007 is left out
    row = data["results"][0]
    assert set(row) == {"id", "name", "cluster", "pool", "status", "cards", "gray_batch"}

    by_label = staff.get("/rollout/nodes/", {"q": "suanchi.io/rack=r42"}).json()
    assert by_label["count"] == 100
    by_pool = staff.get("/rollout/nodes/", {"q": "edge-000", "pool": pool.pk}).json()
    assert by_pool["count"] == 49 and all(r["pool"] == "training" for r in by_pool["results"])

    # a soaking batch shows on its nodes; a page past the end is the last page
    batch = make_batch(criteria, [fleet["gpu-01"]])
    services.batch_soak_start(batch=batch, actor="ops")
    gpu = staff.get("/rollout/nodes/", {"q": "gpu-01", "page": 99}).json()
    assert gpu["page"] == 1 and gpu["results"][0]["gray_batch"] == "canary"
    assert gpu["results"][0]["cards"] == 4

    # a label selector over many nodes creates the batch from the server side
    response = staff.post(
        "/rollout/batches/new/", create_form(criteria, name="rack 42", label="suanchi.io/rack=r42")
    )
    assert response.status_code == 302
    assert GrayBatch.objects.get(name="rack 42").nodes.count() == 100


# -------------------------------------------------------------------------------------------------
# the soak chart


def _figure(html: str) -> dict:
    payload = re.search(
        r'<script type="application/json" data-plotly-figure="soak-evidence">(.*?)</script>', html
    )
    assert payload, html[:500]
    return json.loads(payload.group(1))


def _result(batch, start, hours, series):
    return SoakResult.objects.create(
        batch=batch,
        computed_at=start + timedelta(hours=hours),
        verdict="pending",
        window_start=start,
        window_end=start + timedelta(hours=hours),
        soak_hours=Decimal(hours),
        evidence={"series": series},
    )


def test_a_20_hour_soak_draws_a_point_per_hour_below_a_legend_that_stays_inside(fleet, criteria):
    batch = make_batch(criteria, [fleet["gpu-01"]])
    start = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=20)
    services.batch_soak_start(batch=batch, actor="ops", now=start)
    ingest_soak([fleet["gpu-01"]], start=start, end=start + timedelta(hours=20) - timedelta(minutes=1))
    result = services.batch_evaluate(batch=batch, actor="worker", now=start + timedelta(hours=20))
    # the series comes from the hourly rollups: one row per hour of the soak
    assert len(result.evidence["series"]) == 20
    spec = _figure(charts.soak_evidence_html(result, criteria))
    traces = spec["figure"]["data"]
    util = next(t for t in traces if t["name"] == "utilization %")
    assert len(util["x"]) == 20 and all(v == 60.0 for v in util["y"])
    assert "markers" in util["mode"]
    layout = spec["figure"]["layout"]
    # the box the page draws is as tall as the figure: nothing spills onto the next card
    assert spec["height"] == f"{layout['height']}px"
    legend = layout["legend"]
    assert legend["orientation"] == "h" and legend["yanchor"] == "bottom" and legend["y"] >= 1
    assert layout["margin"]["t"] >= 60
    errors_axis = layout["yaxis3"]
    assert (
        errors_axis["range"] == [0, 1] and errors_axis["dtick"] == 1 and errors_axis["rangemode"] == "tozero"
    )
    assert errors_axis["tickformat"] == ",d"


def test_hours_without_telemetry_are_gaps_on_the_whole_soak_and_error_ticks_are_whole(fleet, criteria):
    batch = make_batch(criteria, [fleet["gpu-01"]])
    start = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=20)
    last = start + timedelta(hours=19)
    # the demo's case: only the newest hour had telemetry
    only = [
        {
            "hour": last.isoformat(),
            "util_avg": 50.0,
            "temp_max": 60.0,
            "counter_errors": 7.0,
            "error_events": 2,
        }
    ]
    spec = _figure(charts.soak_evidence_html(_result(batch, start, 20, only), criteria))
    traces = spec["figure"]["data"]
    util = next(t for t in traces if t["name"] == "utilization %")
    assert len(util["x"]) == 20 and util["y"][:19] == [None] * 19 and util["y"][-1] == 50.0
    events = next(t for t in traces if t["name"] == "critical events")
    assert events["y"] == [0] * 19 + [2]  # the ledger's events are known for every hour
    counters = next(t for t in traces if t["name"] == "error counter increase")
    assert counters["y"][:19] == [None] * 19  # a counter without telemetry is unknown, not 0
    axis = spec["figure"]["layout"]["yaxis3"]
    assert axis["range"][0] == 0 and axis["dtick"] == 2 and axis["range"][1] >= 7  # 0, 2, 4, 6, 8
    xaxis = spec["figure"]["layout"]["xaxis"]
    assert xaxis["range"][0] < util["x"][0] and xaxis["range"][1] > util["x"][-1]
