"""Rollout API: the commands, bad input (400 / 409 with the reason), permissions, no N+1."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from apps.rollout import services
from apps.rollout.models import AutoscalePolicy, GrayBatch, UpgradeWave
from tests.fixtures.jobs import submit_whole_cards
from tests.fixtures.rollout import ingest_soak

pytestmark = pytest.mark.django_db

API = "/api/rollout"


def create_batch(client, criteria, nodes, *, name, kind="driver"):
    response = client.post(
        f"{API}/batches/",
        {
            "name": name,
            "slug": name,
            "kind": kind,
            "target_version": "1.0",
            "criteria": criteria.pk,
            "nodes": [n.pk for n in nodes],
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    return response.json()


def test_a_batch_goes_from_planned_to_admitted_through_the_commands(staff_client, fleet, criteria, now):
    criteria = services.soak_criteria_update(criteria=criteria, actor="ops", max_throughput_drop_pct=None)
    batch = create_batch(staff_client, criteria, [fleet["gpu-02"]], name="canary")
    assert batch["stage"] == "planned" and batch["nodes"] == ["gpu-02"] and batch["layer"] == 3

    response = staff_client.post(f"{API}/batches/{batch['id']}/start-soak/")
    assert response.status_code == 200 and response.json()["stage"] == "soaking"

    # Admitting a batch still soaking: 409 with the reason.
    response = staff_client.post(f"{API}/batches/{batch['id']}/admit/", {}, format="json")
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "soak_not_passed"
    assert "soak has not passed" in error["message"]

    # Soak long enough with clean telemetry (the soak started a day ago).
    row = GrayBatch.objects.get(pk=batch["id"])
    start = now - timedelta(hours=25)
    GrayBatch.objects.filter(pk=row.pk).update(soak_started_at=start)
    ingest_soak([fleet["gpu-02"]], start=start, end=now - timedelta(minutes=2), now=now)
    response = staff_client.post(f"{API}/batches/{batch['id']}/evaluate/")
    assert response.status_code == 200
    assert response.json()["verdict"] == "pass", response.json()
    response = staff_client.post(
        f"{API}/batches/{batch['id']}/admit/", {"reason": "clean soak"}, format="json"
    )
    assert response.status_code == 200 and response.json()["stage"] == "admitted"


def test_evaluating_a_planned_batch_is_a_conflict(staff_client, fleet, criteria):
    batch = create_batch(staff_client, criteria, [fleet["gpu-01"]], name="idle")
    response = staff_client.post(f"{API}/batches/{batch['id']}/evaluate/")
    assert response.status_code == 409
    assert "only a soaking batch is evaluated" in response.json()["error"]["message"]


def test_a_batch_without_nodes_is_refused(staff_client, criteria):
    response = staff_client.post(
        f"{API}/batches/",
        {
            "name": "x",
            "slug": "x",
            "kind": "driver",
            "target_version": "1",
            "criteria": criteria.pk,
            "nodes": [],
        },
        format="json",
    )
    assert response.status_code == 400
    assert GrayBatch.objects.count() == 0


def test_a_driver_wave_does_not_start_before_the_scheduler_wave_passed(staff_client, fleet, criteria):
    plan = staff_client.post(f"{API}/upgrade-plans/", {"name": "2026-Q4 stack"}, format="json").json()
    waves = {}
    for kind, node in (("device_plugin", "gpu-01"), ("scheduler", "gpu-02"), ("driver", "npu-01")):
        batch = create_batch(
            staff_client, criteria, [fleet[node]], name=f"wave-{kind}".replace("_", "-"), kind=kind
        )
        response = staff_client.post(
            f"{API}/upgrade-waves/", {"plan": plan["id"], "batch": batch["id"]}, format="json"
        )
        assert response.status_code == 201, response.json()
        waves[kind] = response.json()
    assert [waves[k]["layer"] for k in ("device_plugin", "scheduler", "driver")] == [1, 2, 3]

    # The device-plugin wave passed; the scheduler wave is only soaking.
    GrayBatch.objects.filter(pk=waves["device_plugin"]["batch"]).update(
        stage="passed", soak_started_at="2026-11-01T00:00Z"
    )
    assert staff_client.post(f"{API}/upgrade-waves/{waves['scheduler']['id']}/start/").status_code == 200

    response = staff_client.post(f"{API}/upgrade-waves/{waves['driver']['id']}/start/")
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "layer_order"
    assert "scheduler wave (batch wave-scheduler) has not passed" in error["message"]
    assert error["details"]["blocking_waves"][0]["stage"] == "soaking"
    # nothing half-written: the driver batch's node stayed in production
    assert GrayBatch.objects.get(pk=waves["driver"]["batch"]).stage == "planned"
    assert not fleet["npu-01"].devices.filter(pool_status="gray").exists()
    # the batch command enforces the same rule
    response = staff_client.post(f"{API}/batches/{waves['driver']['batch']}/start-soak/")
    assert response.status_code == 409 and response.json()["error"]["code"] == "layer_order"

    GrayBatch.objects.filter(pk=waves["scheduler"]["batch"]).update(stage="admitted")
    assert (
        staff_client.post(f"{API}/upgrade-waves/{waves['driver']['id']}/start/").json()["state"] == "running"
    )


def test_new_hardware_is_not_an_upgrade_layer(staff_client, fleet, criteria):
    plan = services.upgrade_plan_create(actor="ops", name="p")
    batch = create_batch(staff_client, criteria, [fleet["gpu-01"]], name="lot-7", kind="hardware")
    response = staff_client.post(
        f"{API}/upgrade-waves/", {"plan": plan.pk, "batch": batch["id"]}, format="json"
    )
    assert response.status_code == 400
    assert UpgradeWave.objects.count() == 0


def test_batches_are_for_platform_staff(api_client, make_user, fleet, criteria):
    api_client.force_authenticate(make_user("bob"))
    assert api_client.get(f"{API}/batches/").status_code == 403
    assert api_client.post(f"{API}/soak-criteria/", {"name": "x"}, format="json").status_code == 403


def test_batch_list_has_no_n_plus_one(staff_client, fleet, criteria, django_assert_max_num_queries):
    for i in range(6):
        services.batch_create(
            actor="ops",
            name=f"b{i}",
            slug=f"b{i}",
            kind="driver",
            target_version="1",
            criteria=criteria,
            nodes=[fleet["gpu-01"], fleet["gpu-02"]],
        )
    with django_assert_max_num_queries(8):
        response = staff_client.get(f"{API}/batches/")
    assert response.json()["count"] == 6


def test_a_policy_whose_down_threshold_is_above_its_up_threshold_is_refused(
    api_client, member_project, service
):
    user, _project = member_project
    api_client.force_authenticate(user)
    response = api_client.post(
        f"{API}/autoscale-policies/",
        {"job": service.pk, "up_threshold_pct": "60", "down_threshold_pct": "70", "max_replicas": 4},
        format="json",
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert "down_threshold_pct" in error["details"]
    assert "must be below the scale-up threshold" in error["message"]
    assert not AutoscalePolicy.objects.exists()

    response = api_client.post(
        f"{API}/autoscale-policies/",
        {"job": service.pk, "min_replicas": 3, "max_replicas": 2},
        format="json",
    )
    assert response.status_code == 400 and "max_replicas" in response.json()["error"]["details"]

    response = api_client.post(
        f"{API}/autoscale-policies/", {"job": service.pk, "max_replicas": 3}, format="json"
    )
    assert response.status_code == 201
    body = response.json()
    assert (
        body["up_threshold_pct"],
        body["up_window_s"],
        body["down_threshold_pct"],
        body["down_window_s"],
    ) == ("80.00", 300, "20.00", 1800)
    # an update that crosses the thresholds is refused too
    response = api_client.patch(
        f"{API}/autoscale-policies/{body['id']}/", {"down_threshold_pct": "85"}, format="json"
    )
    assert response.status_code == 400
    assert AutoscalePolicy.objects.get().down_threshold_pct == Decimal("20")


def test_only_inference_services_get_a_policy(api_client, member_project, fleet, a100):
    user, project = member_project
    train = submit_whole_cards(project, user, a100, name="train", image="t:1")
    api_client.force_authenticate(user)
    response = api_client.post(f"{API}/autoscale-policies/", {"job": train.pk}, format="json")
    assert response.status_code == 400 and "job" in response.json()["error"]["details"]


def test_outsiders_neither_see_nor_change_a_policy(api_client, make_user, member_project, service):
    policy = services.autoscale_policy_create(actor="test", job=service, max_replicas=3)
    api_client.force_authenticate(make_user("mallory"))
    assert api_client.get(f"{API}/autoscale-policies/").json()["count"] == 0
    assert api_client.get(f"{API}/autoscale-policies/{policy.pk}/").status_code == 404
    response = api_client.post(f"{API}/autoscale-policies/", {"job": service.pk}, format="json")
    assert response.status_code == 403


def test_evaluate_now_answers_204_while_it_holds_and_decisions_are_listed(
    api_client, member_project, service
):
    from apps.rollout.models import ScaleDecision

    user, _project = member_project
    policy = services.autoscale_policy_create(actor="test", job=service, max_replicas=3)
    api_client.force_authenticate(user)
    response = api_client.post(f"{API}/autoscale-policies/{policy.pk}/evaluate/")
    assert response.status_code == 204
    body = api_client.get(f"{API}/autoscale-policies/{policy.pk}/").json()
    assert body["last_reason"] and body["last_evaluated_at"]
    for i in range(5):
        ScaleDecision.objects.create(
            policy=policy,
            job=service,
            created_at=service.created_at,
            action="up",
            from_replicas=1,
            to_replicas=2,
            reached_replicas=2,
            reason=f"r{i}",
        )
    response = api_client.get(f"{API}/scale-decisions/", {"job": service.pk})
    assert response.json()["count"] == 5


def test_criteria_in_use_by_a_soaking_batch_do_not_change(staff_client, fleet, criteria):
    batch = create_batch(staff_client, criteria, [fleet["gpu-01"]], name="c1")
    staff_client.post(f"{API}/batches/{batch['id']}/start-soak/")
    response = staff_client.patch(f"{API}/soak-criteria/{criteria.pk}/", {"min_days": 7}, format="json")
    assert response.status_code == 409
    assert "in use by a soaking batch" in response.json()["error"]["message"]
    response = staff_client.post(
        f"{API}/soak-criteria/", {"name": "bad", "min_days": 0, "max_temperature_c": "80"}, format="json"
    )
    assert response.status_code == 400
