"""Issue 27 §3: one member cannot poison everyone's recommendations or the coefficient proposals.

Figures must fit their column and their card's catalog peak; ``runs`` is counted by the platform; job
reports never outrank benchmark runs and never propose a coefficient unless staff verified them; the
measurement API does not show another project's job through ``source_label``."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.admin import helpers
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from apps.benchlib import services
from apps.benchlib.models import CoefficientProposal, Measurement
from apps.benchlib.plausibility import catalog_peak_per_card, column_limits
from apps.benchlib.recommend import recommend
from apps.catalog.models import WorkloadProfile
from apps.catalog.workloads import workload_profile_sync
from apps.core.models import ChangeRecord
from apps.jobs.models import Allocation, Job, JobState
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards


@pytest.fixture
def resnet(db):
    workload_profile_sync(actor="test")
    return WorkloadProfile.objects.get(key="resnet50-infer")


def _benchmark(profile, model, throughput):
    return Measurement.objects.create(
        profile=profile,
        device_model=model,
        throughput=Decimal(throughput),
        runs=1,
        source=Measurement.Source.BENCHMARK,
        source_label="harness",
        measured_at=timezone.now() - timedelta(days=1),
    )


def _running_job(project, user, model, name="bench"):
    job = submit_whole_cards(project, user, model, name=name, image="bench:1")
    scheduling_cycle_run(actor="test")
    assert Allocation.objects.filter(job=job, released_at__isnull=True).exists()
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    job.refresh_from_db()
    return job


def _post(api_client, job, body):
    return api_client.post(f"/api/jobs/jobs/{job.pk}/throughput/", body, format="json")


def _figures(answer) -> list[tuple]:
    return [(o.label, o.per_instance, o.instances, o.trusted) for o in answer.options]


def _proposals() -> list[tuple]:
    services.coefficient_proposals_refresh()
    return sorted(
        CoefficientProposal.objects.filter(state="open").values_list("device_model__slug", "proposed_value")
    )


def test_a_throughput_the_column_cannot_hold_is_refused_before_writing(
    fleet, resnet, member_project, a100, api_client
):
    user, project = member_project
    job = _running_job(project, user, a100)
    api_client.force_authenticate(user)
    largest, _quantum = column_limits(Measurement, "throughput")
    assert largest == Decimal("999999999999.9999")
    too_big = _post(api_client, job, {"profile": "resnet50-infer", "throughput": "1e12"})
    assert too_big.status_code == 400, too_big.content
    assert "999999999999.9999" in too_big.json()["error"]["message"]
    for figure in ("1e30", "1e400", "-1e400", "Infinity"):
        refused = _post(api_client, job, {"profile": "resnet50-infer", "throughput": figure})
        assert refused.status_code == 400, (figure, refused.content)
    # Rounded to the column's 4 places it is 0: a clear 400, not the check constraint's "already reported".
    tiny = _post(api_client, job, {"profile": "resnet50-infer", "throughput": "0.00001"})
    assert tiny.status_code == 400, tiny.content
    latency = _post(
        api_client, job, {"profile": "resnet50-infer", "throughput": "10", "p99_latency_ms": "0.001"}
    )
    assert latency.status_code == 400, latency.content
    assert not Measurement.objects.exists()
    # Everyone's reads keep working.
    assert api_client.get("/api/benchlib/measurements/").status_code == 200
    answer = api_client.get("/api/catalog/recommendations/", {"profile": "resnet50-infer", "target": "10"})
    assert answer.status_code == 200
    # A figure that fits is stored rounded to the column.
    ok = _post(api_client, job, {"profile": "resnet50-infer", "throughput": "9500.123456"})
    assert ok.status_code == 201, ok.content
    assert Measurement.objects.get(job=job).throughput == Decimal("9500.1235")


def test_the_999_billion_report_with_10000_runs_changes_no_recommendation_or_proposal(
    fleet, resnet, member_project, a100, ascend, api_client
):
    _benchmark(resnet, a100, "10000")
    _benchmark(resnet, ascend, "8000")  # 0.8 of an A100, as the coefficient says: nothing to propose
    before = _figures(recommend(profile=resnet, target=3000))
    assert _proposals() == []
    user, project = member_project
    job = _running_job(project, user, a100)
    api_client.force_authenticate(user)
    declared = _post(
        api_client, job, {"profile": "resnet50-infer", "throughput": "999999999999", "runs": 10000}
    )
    assert declared.status_code == 400 and "counted by the platform" in declared.json()["error"]["message"]
    huge = _post(api_client, job, {"profile": "resnet50-infer", "throughput": "999999999999"})
    assert huge.status_code == 400 and "not plausible" in huge.json()["error"]["message"], huge.content
    assert huge.json()["error"]["details"] == {"throughput": ["implausible"]}
    assert not Measurement.objects.filter(job=job).exists()
    # The highest figure the catalog peak allows is accepted, but as a job report that counts for no one
    # else: 312 TFLOPS / 7.6 GFLOPs × 2 (sparsity) ≈ 82,105 images/s.
    ceiling = catalog_peak_per_card(resnet, a100)
    assert Decimal("82000") < ceiling < Decimal("82200")
    high = _post(api_client, job, {"profile": "resnet50-infer", "throughput": str(int(ceiling))})
    assert high.status_code == 201, high.content
    report = Measurement.objects.get(job=job)
    assert report.source == "job" and report.runs == 1 and not report.trusted
    after = recommend(profile=resnet, target=3000)
    assert _figures(after) == before
    whole = next(o for o in after.options if o.device_model == a100 and o.template is None)
    # The report is shown as its own evidence, beside the benchmark run it does not outweigh.
    assert set(whole.by_source) == {"benchmark", "job"}
    assert whole.by_source["job"]["trusted"] is False and whole.by_source["benchmark"]["trusted"] is True
    assert whole.evidence.measurements == [
        m.pk for m in Measurement.objects.filter(source="benchmark", device_model=a100)
    ]
    assert _proposals() == []


def test_job_reports_alone_rank_after_benchmark_runs(fleet, resnet, member_project, a100, ascend, api_client):
    _benchmark(resnet, ascend, "8000")
    user, project = member_project
    job = _running_job(project, user, a100)
    api_client.force_authenticate(user)
    assert _post(api_client, job, {"profile": "resnet50-infer", "throughput": "80000"}).status_code == 201
    answer = recommend(profile=resnet, target=40000)
    # The A100 report claims 1 card for 40,000/s (1.0 CU/h); the Ascend benchmark needs 5 (4.0 CU/h) —
    # still the benchmark-backed option ranks first, the report-only one after it, marked.
    assert answer.best.device_model == ascend and answer.best.trusted
    a100_whole = next(o for o in answer.options if o.device_model == a100 and o.template is None)
    assert a100_whole.has_data and not a100_whole.trusted and a100_whole.instances == 1
    assert answer.options.index(a100_whole) > answer.options.index(answer.best)
    assert answer.as_dict()["options"][answer.options.index(a100_whole)]["trusted"] is False


def test_a_report_on_a_card_without_a_known_peak_is_checked_against_benchmark_runs(
    fleet, resnet, member_project, ascend, api_client
):
    user, project = member_project
    job = _running_job(project, user, ascend)
    api_client.force_authenticate(user)
    # The Ascend fixture has no TFLOPS in the catalog and nothing trusted measured it: nothing to check by.
    unknown = _post(api_client, job, {"profile": "resnet50-infer", "throughput": "100"})
    assert unknown.status_code == 409 and "benchmark run first" in unknown.json()["error"]["message"]
    _benchmark(resnet, ascend, "8000")
    above = _post(api_client, job, {"profile": "resnet50-infer", "throughput": "16001"})
    assert above.status_code == 400 and "twice the best benchmark run" in above.json()["error"]["message"]
    assert _post(api_client, job, {"profile": "resnet50-infer", "throughput": "16000"}).status_code == 201


def test_a_members_benchmark_job_report_is_a_job_report(fleet, resnet, member_project, a100, api_client):
    user, project = member_project
    job = submit_whole_cards(
        project, user, a100, name="my-bench", image="bench:1", kind="benchmark", workload_profile=resnet
    )
    scheduling_cycle_run(actor="test")
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    api_client.force_authenticate(user)
    assert _post(api_client, job, {"profile": "resnet50-infer", "throughput": "9000"}).status_code == 201
    m = Measurement.objects.get(job=job)
    assert m.source == "job" and not m.trusted


def test_source_label_names_the_job_only_to_its_project_and_staff(
    fleet, resnet, member_project, a100, api_client, make_user, make_project, staff_user
):
    user, project = member_project
    job = _running_job(project, user, a100)
    api_client.force_authenticate(user)
    assert _post(api_client, job, {"profile": "resnet50-infer", "throughput": "9000"}).status_code == 201
    label = f"job {job.pk} attempt {job.attempt}"

    def row_for(who):
        api_client.force_authenticate(who)
        (row,) = api_client.get("/api/benchlib/measurements/").json()["results"]
        return row

    outsider = make_user("mallory")
    make_project("other", members=[outsider])
    seen = row_for(outsider)
    assert seen["job"] is None and seen["source_label"] == "job report"
    assert str(job.pk) not in seen["source_label"]
    assert row_for(user)["source_label"] == label and row_for(user)["job"] == job.pk
    assert row_for(staff_user)["source_label"] == label


def test_a_proposal_comes_from_benchmark_runs_and_verified_reports_only(
    fleet, resnet, member_project, a100, ascend, api_client, staff_user
):
    _benchmark(resnet, a100, "10000")
    _benchmark(resnet, ascend, "8000")
    user, project = member_project
    job = _running_job(project, user, ascend)
    api_client.force_authenticate(user)
    # 15,000/s on the Ascend would put its ratio near 1.0 against 0.8 in force.
    assert _post(api_client, job, {"profile": "resnet50-infer", "throughput": "15000"}).status_code == 201
    report = Measurement.objects.get(job=job)
    assert _proposals() == []
    # A member cannot vouch for it; staff can, once, and it is audited.
    url = f"/api/benchlib/measurements/{report.pk}/verify/"
    assert api_client.post(url).status_code == 403
    api_client.force_authenticate(staff_user)
    verified = api_client.post(url)
    assert verified.status_code == 200, verified.content
    assert verified.json()["trusted"] is True and verified.json()["verified_by"] == staff_user.username
    assert api_client.post(url).status_code == 409
    record = ChangeRecord.objects.get(action="measurement.verify", object_id=str(report.pk))
    assert record.actor == staff_user and record.after["verified_by"] == staff_user.username
    # Weighted mean (8000 + 15000) / 2 = 11,500 → ratio 1.15 against 0.8: now a proposal.
    ((slug, value),) = _proposals()
    assert slug == "ascend-910b3" and value == Decimal("1.1500")
    # Its evidence counts the verified report with the two benchmark runs.
    assert CoefficientProposal.objects.get(state="open").evidence["resnet50-infer"]["measurements"] == 3


def test_the_admin_verify_action_is_audited_and_refuses_benchmark_runs(
    fleet, resnet, member_project, a100, api_client, staff_user
):
    bench = _benchmark(resnet, a100, "10000")
    user, project = member_project
    job = _running_job(project, user, a100)
    api_client.force_authenticate(user)
    assert _post(api_client, job, {"profile": "resnet50-infer", "throughput": "9000"}).status_code == 201
    report = Measurement.objects.get(job=job)
    client = Client()
    client.force_login(staff_user)
    url = reverse("admin:benchlib_measurement_changelist")
    data = {"action": "verify", helpers.ACTION_CHECKBOX_NAME: [report.pk, bench.pk], "apply": "1"}
    answer = client.post(url, data, follow=True)
    assert answer.status_code == 200
    report.refresh_from_db()
    bench.refresh_from_db()
    assert report.verified_by == staff_user.username and report.verified_at is not None
    assert bench.verified_by == ""  # a benchmark run already counts: nothing to vouch for
    (record,) = ChangeRecord.objects.filter(action="measurement.verify")
    assert record.object_id == str(report.pk) and record.actor == staff_user
    shown = [str(m) for m in answer.context["messages"]]
    assert any("already counts fleet-wide" in m for m in shown), shown


def test_benchmark_runs_alone_propose(fleet, resnet, a100, ascend):
    _benchmark(resnet, a100, "10000")
    _benchmark(resnet, ascend, "11500")
    assert _proposals() == [("ascend-910b3", Decimal("1.1500"))]


def test_an_open_proposal_no_trusted_measurement_backs_is_withdrawn(fleet, resnet, a100, ascend):
    _benchmark(resnet, a100, "10000")
    report = Measurement.objects.create(
        profile=resnet,
        device_model=ascend,
        throughput=Decimal("379000"),
        source=Measurement.Source.JOB,
        measured_at=timezone.now(),
    )
    # A proposal left from before (made from a job report), still open.
    CoefficientProposal.objects.create(
        device_model=ascend,
        reference_model=a100,
        current_value=Decimal("0.8"),
        proposed_value=Decimal("37.9"),
        evidence={"resnet50-infer": {"ratio": "37.90"}},
    )
    assert _proposals() == []
    assert report.pk and not CoefficientProposal.objects.exists()
