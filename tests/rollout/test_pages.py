"""Rollout pages, admin console actions and the demo loader."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model

from apps.demo import rollout as demo
from apps.inventory.models import Device, Node
from apps.rollout import services
from apps.rollout.models import AutoscalePolicy, GrayBatch, ScaleDecision
from tests.fixtures.rollout import ingest_soak

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(client, staff_user):
    client.force_login(staff_user)
    return client


def test_batch_pages_show_the_soak_evidence(staff, fleet, criteria, now):
    batch = services.batch_create(
        actor="ops",
        name="fw canary",
        slug="fw-canary",
        kind="firmware",
        target_version="9",
        criteria=criteria,
        nodes=[fleet["gpu-02"]],
    )
    start = now - timedelta(hours=5)
    services.batch_soak_start(batch=batch, actor="ops", now=start)
    ingest_soak([fleet["gpu-02"]], start=start, end=now - timedelta(minutes=2), now=now)
    services.batch_evaluate(batch=batch, actor="worker", now=now)

    page = staff.get("/rollout/")
    assert page.status_code == 200
    assert "fw canary" in page.content.decode()
    page = staff.get(f"/rollout/batches/{batch.pk}/")
    body = page.content.decode()
    assert page.status_code == 200
    assert 'id="soak-evidence"' in body and "plotly-basic.min.js" in body
    assert "soak time" in body  # what is still missing is spelled out
    assert staff.get("/rollout/waves/").status_code == 200
    assert staff.get("/rollout/?stage=soaking").status_code == 200


def test_members_see_the_autoscaling_of_their_services_only(client, member_project, service, make_user):
    user, _project = member_project
    policy = services.autoscale_policy_create(actor="test", job=service, max_replicas=3)
    ScaleDecision.objects.create(
        policy=policy,
        job=service,
        created_at=service.created_at,
        action="up",
        from_replicas=1,
        to_replicas=2,
        reached_replicas=2,
        reason="95 % > 80 % over 5 min",
    )
    client.force_login(user)
    assert client.get("/rollout/").status_code == 302  # batches are for staff; members land on autoscaling
    body = client.get("/rollout/autoscaling/").content.decode()
    assert "95 % &gt; 80 % over 5 min" in body and 'id="scale-history"' in body
    assert client.get(f"/rollout/batches/{1}/").status_code == 403
    client.force_login(make_user("eve"))
    assert "95 %" not in client.get("/rollout/autoscaling/").content.decode()


def test_admin_actions_go_through_the_services(staff, fleet, criteria):
    batch = services.batch_create(
        actor="ops",
        name="adm",
        slug="adm",
        kind="driver",
        target_version="1",
        criteria=criteria,
        nodes=[fleet["gpu-01"]],
    )
    url = "/admin/rollout/graybatch/"
    response = staff.post(url, {"action": "admit", "_selected_action": [batch.pk]}, follow=True)
    assert "soak has not passed" in response.content.decode()
    staff.post(url, {"action": "start_soak", "_selected_action": [batch.pk]}, follow=True)
    batch.refresh_from_db()
    assert batch.stage == GrayBatch.Stage.SOAKING
    assert set(Device.objects.filter(node=fleet["gpu-01"]).values_list("pool_status", flat=True)) == {"gray"}
    staff.post(url, {"action": "fail", "_selected_action": [batch.pk]}, follow=True)
    batch.refresh_from_db()
    assert batch.stage == GrayBatch.Stage.FAILED
    assert Node.objects.get(pk=fleet["gpu-01"].pk).status == Node.Status.QUARANTINED
    assert staff.get(f"{url}{batch.pk}/change/").status_code == 200
    assert staff.get("/admin/rollout/autoscalepolicy/add/").status_code == 200


def test_the_demo_loader_leaves_one_passed_and_one_soaking_batch_and_a_policy(fleet, service):
    Node.objects.filter(pk=fleet["gpu-02"].pk).update(name="a100-pcie-01")
    Node.objects.filter(pk=fleet["npu-01"].pk).update(name="ascend-910b-02")
    service.__class__.objects.filter(pk=service.pk).update(name="bert-serving")
    get_user_model()  # the loader needs no user
    out = io.StringIO()
    demo.load(actor="demo-loader", stdout=out)
    stages = dict(GrayBatch.objects.values_list("slug", "stage"))
    assert stages == {"dcgm-exporter-3-3-9": "passed", "ascend-fw-24-1-rc3": "soaking"}
    assert AutoscalePolicy.objects.filter(job=service).exists()
    demo.load(actor="demo-loader", stdout=out)  # idempotent
    assert GrayBatch.objects.count() == 2
