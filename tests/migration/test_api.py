"""The migration API and pages: scoping, commands and their error bodies (400 / 403 / 404 / 409)."""

from __future__ import annotations

import csv
import io

import pytest

from apps.clusters.models import PushAction
from apps.migration.models import MigratedService, MigrationAction, MigrationPlan
from tests.fixtures.migration import inference_job, samples

pytestmark = pytest.mark.django_db


def url(service, verb=""):
    return f"/api/migration/services/{service.pk}/" + (f"{verb}/" if verb else "")


# ------------------------------------------------------------------ scoping


# Services: anonymous 401, outsiders 404, viewers 403, 405 and bad JSON are tests/migration/test_api_contract.py.


def test_outsiders_see_no_actions_and_staff_see_every_service(dual, outsider, staff_user, api_client):
    service, user, _project = dual
    api_client.force_authenticate(outsider)
    assert api_client.get("/api/migration/actions/").json()["results"] == []
    api_client.force_authenticate(staff_user)
    assert [s["id"] for s in api_client.get("/api/migration/services/").json()["results"]] == [service.pk]


def test_pages_are_scoped_like_the_api(dual, outsider, staff_user, client):
    service, user, _project = dual
    client.force_login(outsider)
    page = client.get("/migration/")
    assert page.status_code == 200 and service.name.encode() not in page.content
    assert client.get(f"/migration/services/{service.pk}/").status_code == 404
    assert client.post(f"/migration/services/{service.pk}/shift/").status_code == 404
    rows = list(csv.reader(io.StringIO(client.get("/migration/export/services.csv").content.decode())))
    assert len(rows) == 1  # the header only
    client.force_login(user)
    page = client.get("/migration/")
    assert page.status_code == 200 and b"chat" in page.content and b"phase-board" in page.content
    detail = client.get(f"/migration/services/{service.pk}/")
    assert detail.status_code == 200 and b"track-table" in detail.content
    rows = list(csv.reader(io.StringIO(client.get("/migration/export/services.csv").content.decode())))
    assert [r[6] for r in rows[1:]] == ["source", "target"]
    client.force_login(staff_user)
    assert client.get(f"/migration/services/{service.pk}/").status_code == 200


def test_the_service_list_has_no_n_plus_one(
    dual, staff_user, api_client, django_assert_max_num_queries, plan
):
    service, user, project = dual
    for i in range(3):
        a = inference_job(project, user, service.source_job.device_model, f"s{i}", schedule=False)
        b = inference_job(project, user, service.target_job.device_model, f"t{i}", schedule=False)
        MigratedService.objects.create(
            plan=plan,
            project=project,
            name=f"x{i}",
            source_job=a,
            target_job=b,
            source_vendor="nvidia",
            target_vendor="huawei",
        )
    api_client.force_authenticate(staff_user)
    with django_assert_max_num_queries(6):
        assert len(api_client.get("/api/migration/services/").json()["results"]) == 4


# ------------------------------------------------------------------ commands


def test_shift_through_the_api_records_the_actor_and_pushes_both_deployments(dual, api_client):
    service, user, _project = dual
    api_client.force_authenticate(user)
    response = api_client.post(
        url(service, "shift"), {"source_weight": 85, "target_weight": 15, "reason": "canary"}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert response.json()["to_target_weight"] == 15 and response.json()["actor_label"] == user.username
    assert PushAction.objects.filter(job=service.source_job, kind="Deployment").count() >= 2
    body = api_client.get(url(service)).json()
    assert (body["source_weight"], body["target_weight"], body["source_replicas"]) == (85, 15, 4)


def test_weights_that_do_not_add_up_are_a_400(dual, api_client):
    service, user, _project = dual
    api_client.force_authenticate(user)
    response = api_client.post(
        url(service, "shift"), {"source_weight": 80, "target_weight": 15}, format="json"
    )
    assert response.status_code == 400
    assert "add up to 100" in response.json()["error"]["message"]
    assert not MigrationAction.objects.filter(kind="shift").exists()
    response = api_client.post(url(service, "shift"), {"target_weight": 101}, format="json")
    assert response.status_code == 400


def test_promoting_past_a_failed_gate_is_a_409_with_the_reason(dual, api_client):
    service, user, _project = dual
    samples(service, target_errors=20)  # 2 % errors > 0.5 %
    api_client.force_authenticate(user)
    response = api_client.post(url(service, "promote"), {}, format="json")
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "gate_failed"
    assert "error rate" in error["message"] and "measured 2.0000 % errors" in error["message"]
    failed = error["details"]["gates"]
    assert failed[0]["kind"] == "error_rate" and failed[0]["source"].startswith("ServiceMetric:")
    assert api_client.get(url(service)).json()["phase"] == "validate"


def test_promote_passes_on_good_data(dual, api_client):
    service, user, _project = dual
    samples(service)
    api_client.force_authenticate(user)
    response = api_client.post(url(service, "promote"), {"reason": "ok"}, format="json")
    assert response.status_code == 200 and response.json()["to_phase"] == "inference"


def test_a_service_whose_tracks_sit_on_the_same_vendor_is_a_400(
    fleet, member_project, a100, plan, api_client
):
    user, project = member_project
    one = inference_job(project, user, a100, "a")
    two = inference_job(project, user, a100, "b")
    api_client.force_authenticate(user)
    response = api_client.post(
        "/api/migration/services/",
        {"plan": plan.pk, "name": "same", "source_job": one.pk, "target_job": two.pk},
        format="json",
    )
    assert response.status_code == 400
    assert "Both tracks run on nvidia" in response.json()["error"]["message"]
    assert not MigratedService.objects.exists()


def test_create_through_the_api_and_refuse_someone_elses_job(
    fleet, member_project, a100, ascend, plan, api_client, outsider
):
    user, project = member_project
    one = inference_job(project, user, a100, "a")
    two = inference_job(project, user, ascend, "b")
    api_client.force_authenticate(outsider)
    payload = {"plan": plan.pk, "name": "svc", "source_job": one.pk, "target_job": two.pk}
    assert api_client.post("/api/migration/services/", payload, format="json").status_code == 400
    api_client.force_authenticate(user)
    bad = api_client.post(
        "/api/migration/services/", {**payload, "source_weight": 60, "target_weight": 30}, format="json"
    )
    assert bad.status_code == 400 and "add up to 100" in bad.json()["error"]["message"]
    response = api_client.post(
        "/api/migration/services/", {**payload, "source_weight": 90, "target_weight": 10}, format="json"
    )
    assert response.status_code == 201, response.json()
    assert response.json()["target_vendor"] == "huawei" and response.json()["target_weight"] == 10


def test_shifting_an_unscheduled_service_is_a_409(fleet, member_project, a100, ascend, plan, api_client):
    from apps.migration import services

    user, project = member_project
    one = inference_job(project, user, a100, "a", schedule=False)
    two = inference_job(project, user, ascend, "b", schedule=False)
    service = services.service_create(actor=user, plan=plan, name="idle", source_job=one, target_job=two)
    api_client.force_authenticate(user)
    response = api_client.post(url(service, "shift"), {"step": 10}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "invalid_transition"
    assert "pending" in response.json()["error"]["message"]


def test_rollback_and_history(dual, api_client):
    service, user, _project = dual
    api_client.force_authenticate(user)
    assert api_client.post(url(service, "shift"), {"target_weight": 20}, format="json").status_code == 200
    response = api_client.post(url(service, "rollback"), {"reason": "p99"}, format="json")
    assert response.status_code == 200 and response.json()["to_target_weight"] == 0
    kinds = [
        a["kind"]
        for a in api_client.get("/api/migration/actions/", {"service": service.pk}).json()["results"]
    ]
    assert kinds == ["rollback", "shift", "create"]
    assert api_client.post(url(service, "rollback"), {}, format="json").status_code == 409


def test_metric_ingestion_and_comparison(dual, api_client):
    service, user, _project = dual
    api_client.force_authenticate(user)
    from django.utils import timezone

    now = timezone.now().replace(microsecond=0)
    batch = [
        {
            "track": track,
            "window_start": now.isoformat(),
            "window_seconds": 300,
            "requests": n,
            "errors": e,
            "p99_latency_ms": p,
            "source": "prometheus:http://prom:9090",
        }
        for track, n, e, p in (("source", 3000, 3, "180"), ("target", 600, 6, "199.5"))
    ]
    response = api_client.post(
        "/api/migration/service-metrics/", {"service": service.pk, "samples": batch}, format="json"
    )
    assert response.status_code == 201 and response.json() == {"created": 2, "updated": 0}
    bad = api_client.post(
        "/api/migration/service-metrics/",
        {"service": service.pk, "samples": [{**batch[0], "errors": 5000}]},
        format="json",
    )
    assert bad.status_code == 400 and "errors" in bad.json()["error"]["details"]["0"]
    tracks = api_client.get(url(service, "comparison"), {"days": 1}).json()["tracks"]
    source, target = tracks
    assert (source["throughput_rps"], target["throughput_rps"]) == ("10.00", "2.00")
    assert (source["p99_ms"], target["p99_ms"]) == ("180.00", "199.50")
    assert target["error_rate_pct"] == "1.0000"
    assert api_client.get(url(service, "comparison"), {"days": 0}).status_code == 400


def test_plans_are_written_by_staff_only(api_client, staff_user, make_user):
    user = make_user("pat")
    payload = {
        "name": "P",
        "source_vendors": ["nvidia"],
        "target_vendors": ["huawei"],
        "phases": [{"phase": "validate", "owner": "ops"}],
        "gates": [{"phase": "validate", "kind": "error_rate", "threshold": "0.5", "window_days": 3}],
    }
    api_client.force_authenticate(user)
    assert api_client.post("/api/migration/plans/", payload, format="json").status_code == 403
    api_client.force_authenticate(staff_user)
    response = api_client.post("/api/migration/plans/", payload, format="json")
    assert response.status_code == 201, response.json()
    plan = MigrationPlan.objects.get()
    assert plan.phases.get().owner == "ops" and plan.gates.get().kind == "error_rate"
    clash = api_client.post(
        "/api/migration/plans/", {**payload, "name": "Q", "target_vendors": ["nvidia"]}, format="json"
    )
    assert clash.status_code == 400
    accuracy = api_client.post(
        "/api/migration/gates/",
        {"plan": plan.pk, "phase": "training", "kind": "accuracy", "threshold": "0.3"},
        format="json",
    )
    assert accuracy.status_code == 400 and "metric" in accuracy.json()["error"]["details"]


def test_the_service_page_steers_and_shows_refusals_as_messages(dual, client):
    service, user, _project = dual
    client.force_login(user)
    page = f"/migration/services/{service.pk}/"
    response = client.post(page + "shift/", {"target_weight": "50", "reason": "too far"}, follow=True)
    assert response.status_code == 200
    assert "at most 20 %" in response.content.decode()
    service.refresh_from_db()
    assert service.target_weight == 0
    response = client.post(page + "shift/", {"target_weight": "", "reason": "one step"}, follow=True)
    assert response.status_code == 200
    service.refresh_from_db()
    assert service.target_weight == 10
    assert service.actions.filter(kind="shift", actor=user, reason="one step").exists()
    response = client.post(page + "promote/", {}, follow=True)
    assert "Cannot promote chat past validate" in response.content.decode()
    response = client.post(page + "rollback/", {"target_weight": "0"}, follow=True)
    service.refresh_from_db()
    assert service.target_weight == 0
