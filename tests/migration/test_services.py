"""Dual-track services: creation rules, shifting through the outbox, rollback, gates and promotion."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import kubernetes_validate
import pytest
from django.utils import timezone

from apps.clusters.models import PushAction
from apps.clusters.pusher import push_job_run
from apps.core.errors import (
    Conflict,
    InsufficientCapacity,
    InvalidTransition,
    PermissionDenied,
    ValidationFailed,
)
from apps.core.models import ChangeRecord
from apps.jobs.models import Allocation, JobState
from apps.migration import services
from apps.migration.gates import gate_evaluate, service_gate_results
from apps.migration.models import AccuracyEval, Gate, GateStatus, MigratedService, MigrationAction, Phase
from tests.fixtures.migration import inference_job, samples
from tests.kube.test_manifests import K8S_VERSION, validate

pytestmark = pytest.mark.django_db


def active(job):
    return Allocation.objects.filter(job=job, released_at__isnull=True)


def last_deployment(job):
    return PushAction.objects.filter(job=job, kind="Deployment").order_by("-seq").first()


# ------------------------------------------------------------------ creation


def test_split_replicas_keeps_one_replica_per_track_and_never_falls_short():
    assert services.split_replicas(4, 0) == (4, 1)
    assert services.split_replicas(4, 10) == (4, 1)
    assert services.split_replicas(4, 50) == (2, 2)
    assert services.split_replicas(4, 100) == (1, 4)
    assert services.split_replicas(3, 40) == (2, 2)


def test_it_creates_a_service_with_vendors_from_the_jobs_and_records_who(dual):
    service, user, project = dual
    assert (service.source_vendor, service.target_vendor) == ("nvidia", "huawei")
    assert (service.source_weight, service.target_weight, service.phase) == (100, 0, Phase.VALIDATE)
    action = service.actions.get()
    assert action.kind == MigrationAction.Kind.CREATE and action.actor == user
    assert ChangeRecord.objects.filter(action="migration.service.create", object_id=str(service.pk)).exists()


def test_it_rejects_tracks_on_the_same_vendor(fleet, member_project, a100, plan):
    user, project = member_project
    one = inference_job(project, user, a100, "a")
    two = inference_job(project, user, a100, "b")
    with pytest.raises(ValidationFailed, match="Both tracks run on nvidia") as info:
        services.service_create(actor=user, plan=plan, name="x", source_job=one, target_job=two)
    assert "target_job" in info.value.details
    assert not MigratedService.objects.exists()


def test_it_rejects_weights_that_do_not_add_up_to_100(fleet, member_project, a100, ascend, plan):
    user, project = member_project
    one = inference_job(project, user, a100, "a")
    two = inference_job(project, user, ascend, "b")
    with pytest.raises(ValidationFailed, match="add up to 100"):
        services.service_create(
            actor=user,
            plan=plan,
            name="x",
            source_job=one,
            target_job=two,
            source_weight=70,
            target_weight=20,
        )
    assert not MigratedService.objects.exists() and not MigrationAction.objects.exists()


def test_a_viewer_cannot_steer(dual, make_user):
    from apps.accounts.models import Membership

    service, _user, project = dual
    viewer = make_user("viewer")
    Membership.objects.create(user=viewer, project=project, role="viewer")
    with pytest.raises(PermissionDenied):
        services.service_shift(service=service, actor=viewer)


# ------------------------------------------------------------------ shifting through the outbox


def test_shift_scales_both_deployments_through_the_outbox_and_they_validate(dual):
    service, user, _project = dual
    before_src = PushAction.objects.filter(job=service.source_job, kind="Deployment").count()
    action = services.service_shift(service=service, actor=user, target_weight=20, reason="canary")
    service.refresh_from_db()
    assert (service.source_weight, service.target_weight) == (80, 20)
    # capacity 4: source ceil(3.2) = 4, target ceil(0.8) = 1
    assert action.replicas == {"source": [2, 4], "target": [1, 1]}
    assert action.actor == user and action.kind == MigrationAction.Kind.SHIFT
    assert len({a.replica for a in active(service.source_job)}) == 4
    assert PushAction.objects.filter(job=service.source_job, kind="Deployment").count() == before_src + 1
    for job in (service.source_job, service.target_job):
        deployment = last_deployment(job)
        assert deployment is not None
        validate(deployment.object)
        assert kubernetes_validate.validate(deployment.object, K8S_VERSION, strict=True) == "1.30"
    assert last_deployment(service.source_job).object["spec"]["replicas"] == 4
    assert push_job_run(job_id=service.source_job_id)["failed"] == 0


def test_shifting_past_validation_needs_a_promotion(dual):
    service, user, _project = dual
    with pytest.raises(Conflict, match="at most 20 %"):
        services.service_shift(service=service, actor=user, target_weight=50)
    service.refresh_from_db()
    assert service.target_weight == 0 and not service.actions.filter(kind="shift").exists()


def test_after_promotion_a_step_moves_both_tracks(dual):
    service, user, _project = dual
    samples(service)
    services.service_promote(service=service, actor=user)
    services.service_shift(service=service, actor=user, target_weight=50)
    service.refresh_from_db()
    assert service.phase == Phase.INFERENCE
    before = PushAction.objects.filter(
        job__in=[service.source_job, service.target_job], kind="Deployment"
    ).count()
    action = services.service_shift(service=service, actor=user)  # one step of 10 %
    service.refresh_from_db()
    assert service.target_weight == 60
    assert action.replicas == {"source": [2, 2], "target": [2, 3]}
    assert (
        PushAction.objects.filter(job__in=[service.source_job, service.target_job], kind="Deployment").count()
        == before + 1
    )
    assert last_deployment(service.target_job).object["spec"]["replicas"] == 3
    validate(last_deployment(service.target_job).object)


def test_shifting_an_unscheduled_service_is_a_conflict(fleet, member_project, a100, ascend, plan):
    user, project = member_project
    source = inference_job(project, user, a100, "src")
    target = inference_job(project, user, ascend, "tgt", schedule=False)
    assert target.state == JobState.PENDING
    service = services.service_create(actor=user, plan=plan, name="s", source_job=source, target_job=target)
    with pytest.raises(InvalidTransition, match="target job .* is pending"):
        services.service_shift(service=service, actor=user, step=10)
    service.refresh_from_db()
    assert service.target_weight == 0
    assert not PushAction.objects.filter(job=target).exists()


def test_a_shift_that_cannot_get_its_replicas_writes_nothing(dual):
    service, user, _project = dual
    samples(service)
    services.service_promote(service=service, actor=user)
    # Eight Ascend cards in the fleet: capacity 20 at 100 % would need 20 target replicas.
    MigratedService.objects.filter(pk=service.pk).update(capacity_replicas=20)
    allocations_before = Allocation.objects.count()
    pushes_before = PushAction.objects.count()
    with pytest.raises(InsufficientCapacity, match=r"target track \(job chat-ascend\) could reach only"):
        services.service_shift(service=service, actor=user, target_weight=100)
    service.refresh_from_db()
    assert service.target_weight == 0
    assert Allocation.objects.count() == allocations_before
    assert PushAction.objects.count() == pushes_before


def test_rollback_returns_traffic_to_the_source_track_first(dual):
    service, user, _project = dual
    services.service_shift(service=service, actor=user, target_weight=20)
    action = services.service_rollback(service=service, actor=user, reason="p99 regression")
    service.refresh_from_db()
    assert (service.source_weight, service.target_weight) == (100, 0)
    assert action.kind == MigrationAction.Kind.ROLLBACK and action.reason == "p99 regression"
    assert action.from_target_weight == 20 and action.to_target_weight == 0
    with pytest.raises(Conflict, match="Nothing to roll back"):
        services.service_rollback(service=service, actor=user)


# ------------------------------------------------------------------ gates


def test_latency_and_error_gates_pass_on_good_measurements(dual):
    service, _user, _project = dual
    samples(service, source_p99=100, target_p99=108, target_errors=2, requests=1000)  # +8 %, 0.2 %
    results = {r.kind: r for r in service_gate_results(service=service)}
    latency, errors = results["p99_latency"], results["error_rate"]
    assert latency.status == "pass" and Decimal(latency.measured) == Decimal("8.0000")
    assert errors.status == "pass" and Decimal(errors.measured) == Decimal("0.2000")
    assert "ServiceMetric: 72 target + 72 source windows" in latency.source
    assert "prometheus:http://prom:9090 (test fixture)" in latency.source
    assert len(latency.days) == 3 and latency.days[0]["target_p99_ms"] == "108.0000"


def test_latency_gate_fails_with_the_measured_value(dual):
    service, _user, _project = dual
    samples(service, source_p99=100, target_p99=125)
    gate = Gate.objects.get(plan=service.plan, kind="p99_latency")
    result = gate_evaluate(gate=gate, service=service)
    assert result.status == "fail"
    assert Decimal(result.measured) == Decimal("25.0000")
    assert "3 of 3 days" in result.detail


def test_error_gate_fails_on_one_bad_day(dual):
    service, _user, _project = dual
    now = timezone.now()
    samples(service, now=now)
    # The most recent day: 10 errors per 1000 requests = 1 % > 0.5 %.
    service.metrics.filter(track="target", window_start__gte=now - timedelta(days=1)).update(errors=10)
    result = gate_evaluate(
        gate=Gate.objects.get(plan=service.plan, kind="error_rate"), service=service, now=now
    )
    assert result.status == "fail" and Decimal(result.measured) == Decimal("1.0000")
    assert "1 of 3 days" in result.detail


def test_a_gate_without_data_for_every_day_does_not_pass(dual):
    service, _user, _project = dual
    samples(service, days=2)  # the gate wants 3 days
    result = gate_evaluate(gate=Gate.objects.get(plan=service.plan, kind="p99_latency"), service=service)
    assert result.status == "no_data" and "no measurements on 1 of 3 days" in result.detail


def test_accuracy_gate_compares_the_latest_evaluations_and_names_them(dual):
    service, user, _project = dual
    gate = Gate.objects.create(
        plan=service.plan, phase="validate", kind="accuracy", threshold=Decimal("0.5"), metric="top1"
    )
    now = timezone.now()
    services.accuracy_eval_record(
        service=service,
        actor=user,
        track="source",
        metric="top1",
        value="76.10",
        source="eval job 17",
        measured_at=now,
        dataset="imagenet-val",
    )
    tgt = services.accuracy_eval_record(
        service=service,
        actor=user,
        track="target",
        metric="top1",
        value="75.90",
        source="eval job 18",
        measured_at=now,
    )
    result = gate_evaluate(gate=gate, service=service)
    assert result.status == "pass" and Decimal(result.measured) == Decimal("-0.2000")
    assert f"AccuracyEval #{tgt.pk}" in result.source and "eval job 17" in result.source
    AccuracyEval.objects.create(
        service=service,
        track="target",
        metric="top1",
        value=Decimal("74.9"),
        source="eval job 19",
        measured_at=now + timedelta(minutes=1),
    )
    result = gate_evaluate(gate=gate, service=service, now=now + timedelta(minutes=2))
    assert result.status == "fail" and Decimal(result.measured) == Decimal("-1.2000")


def test_promoting_past_a_failed_gate_is_refused_with_the_reason(dual):
    service, user, _project = dual
    samples(service, target_p99=130)
    with pytest.raises(services.GateFailed, match="measured 30.0000 % vs source p99") as info:
        services.service_promote(service=service, actor=user)
    assert info.value.status_code == 409
    assert info.value.details["gates"][0]["kind"] == "p99_latency"
    service.refresh_from_db()
    assert service.phase == Phase.VALIDATE
    assert service.gate_status == GateStatus.FAILED  # the refused evaluation is kept for the page
    assert not service.actions.filter(kind="promote").exists()


def test_promotion_records_the_gate_results_and_reduce_needs_all_traffic(dual):
    service, user, _project = dual
    samples(service)
    action = services.service_promote(service=service, actor=user, reason="validated")
    assert action.to_phase == Phase.INFERENCE and len(action.gate_results) == 2
    assert all(r["status"] == "pass" for r in action.gate_results)
    with pytest.raises(Conflict, match="Shift all traffic"):
        services.service_promote(service=service, actor=user)
    services.service_shift(service=service, actor=user, target_weight=100)
    action = services.service_promote(service=service, actor=user)
    service.refresh_from_db()
    assert service.phase == Phase.REDUCE
    assert service.source_job.replicas == 1  # the CUDA fallback
    with pytest.raises(Conflict, match="last phase"):
        services.service_promote(service=service, actor=user)


def test_metric_ingest_is_idempotent_and_refuses_a_bad_batch_whole(dual):
    service, user, _project = dual
    sample = {
        "track": "target",
        "window_start": "2026-11-01T10:00:00+00:00",
        "window_seconds": 300,
        "requests": 600,
        "errors": 1,
        "p99_latency_ms": "212.5",
        "source": "prometheus:http://prom:9090",
    }
    assert services.service_metrics_ingest(service=service, actor=user, samples=[sample]) == {
        "created": 1,
        "updated": 0,
    }
    assert services.service_metrics_ingest(
        service=service, actor=user, samples=[{**sample, "errors": 2}]
    ) == {
        "created": 0,
        "updated": 1,
    }
    with pytest.raises(ValidationFailed, match="Sample 1 is invalid") as info:
        services.service_metrics_ingest(
            service=service,
            actor=user,
            samples=[{**sample, "window_start": "2026-11-01T10:05:00+00:00"}, {**sample, "errors": 700}],
        )
    assert "errors" in info.value.details["1"]
    assert service.metrics.count() == 1 and service.metrics.get().errors == 2


def test_one_shift_reapplies_both_deployments_through_the_outbox(dual):
    service, user, _project = dual
    samples(service)
    services.service_shift(service=service, actor=user, target_weight=20)
    services.service_promote(service=service, actor=user)
    jobs = (service.source_job, service.target_job)
    before = {job.pk: PushAction.objects.filter(job=job, kind="Deployment").count() for job in jobs}
    action = services.service_shift(service=service, actor=user, target_weight=75)
    assert action.replicas == {"source": [4, 1], "target": [1, 3]}
    for job, replicas in ((service.source_job, 1), (service.target_job, 3)):
        assert PushAction.objects.filter(job=job, kind="Deployment").count() == before[job.pk] + 1
        deployment = last_deployment(job)
        assert deployment.state == PushAction.State.PENDING
        assert deployment.object["spec"]["replicas"] == replicas
        validate(deployment.object)
        assert len({a.replica for a in active(job)}) == replicas
        assert push_job_run(job_id=job.pk)["failed"] == 0


def test_the_periodic_task_records_each_services_gate_verdict(dual):
    from worker.tasks.migration import gates_evaluate_task

    service, _user, _project = dual
    samples(service, source_p99=100, target_p99=125)  # latency gate fails
    assert gates_evaluate_task.apply().get() == {"passed": 0, "failed": 1}
    service.refresh_from_db()
    assert service.gate_status == GateStatus.FAILED and service.gate_checked_at is not None
    assert {r["kind"]: r["status"] for r in service.gate_results}["p99_latency"] == "fail"
