"""Issue 22: the benchmark library — profiles, measurements from every source, recommendations by cost
per unit of work, profile-based scheduling, and coefficient proposals that change future metering only."""

from __future__ import annotations

import json
from datetime import date, timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from apps.benchlib import services
from apps.benchlib.models import CoefficientProposal, Measurement
from apps.benchlib.recommend import recommend
from apps.billing.models import RateCard
from apps.catalog.models import ComputeCoefficient, WorkloadProfile
from apps.catalog.selectors import coefficients_on
from apps.catalog.workloads import workload_profile_sync
from apps.jobs.models import Allocation, Job, JobState
from apps.scheduling import lifecycle
from apps.scheduling.models import DecisionTrace
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards


@pytest.fixture
def profiles(db):
    workload_profile_sync(actor="test")
    return {p.key: p for p in WorkloadProfile.objects.all()}


def _measure(profile, model, throughput, *, share=100, template=None, cards=1, latency=None, synthetic=False):
    return Measurement.objects.create(
        profile=profile,
        device_model=model,
        template=template,
        compute_share=Decimal(share),
        cards=cards,
        throughput=Decimal(str(throughput)),
        p99_latency_ms=None if latency is None else Decimal(str(latency)),
        runs=3,
        synthetic=synthetic,
        source=Measurement.Source.BENCHMARK,
        measured_at=timezone.now() - timedelta(days=1),
    )


def test_profile_sync_is_idempotent_and_every_profile_has_a_unit_and_a_basis(db):
    first = workload_profile_sync(actor="test")
    second = workload_profile_sync(actor="test")
    assert first["created"] >= 5 and first["updated"] == 0
    assert second == {"created": 0, "updated": 0, "unchanged": first["created"]}
    for profile in WorkloadProfile.objects.all():
        assert profile.unit and profile.basis, profile.key


def test_recommendation_ranks_by_cost_per_unit_of_work_with_evidence_and_no_data(
    fleet, profiles, a100, ascend, half_a100
):
    resnet = profiles["resnet50-infer"]
    whole = _measure(resnet, a100, 10000)
    _measure(resnet, ascend, 9000)
    answer = recommend(profile="resnet50-infer", target=3000)
    by_label = {o.label: o for o in answer.options}
    whole_a100 = by_label["A100 80GB SXM4 · whole card"]
    assert whole_a100.basis == "measured" and whole_a100.instances == 1 and whole_a100.fits == "card"
    assert whole_a100.evidence.measurements == [whole.pk] and whole_a100.deciding == whole.pk
    # A 50 % slice has no measurement of its own: estimated linearly from the whole card (5000/s).
    half = by_label["A100 80GB SXM4 · A100 half"]
    assert half.basis == "estimated" and half.per_instance == Decimal("5000.0000") and half.fits == "slice"
    # CU/h: 1.0 × 50 % = 0.5 for the slice, cheaper than the whole A100 (1.0) or the Ascend (0.8).
    assert answer.options[0] is half
    assert half.cu_hours_per_million == (Decimal("0.5") / (3000 * 3600) * 1_000_000).quantize(
        Decimal("0.0001")
    )
    assert answer.ranked_by == "cu_hours_per_million"
    # A profile never measured on a model says "no data", never an extrapolation.
    bert = recommend(profile="bert-finetune", target=10)
    assert all(not o.has_data for o in bert.options) and all(o.reason for o in bert.options)


def test_never_scaled_up_from_a_smaller_share_and_latency_bound_needs_its_own_measurement(
    fleet, profiles, a100, half_a100
):
    serve = profiles["llm-serve-7b"]
    _measure(serve, a100, 600, share=50, template=half_a100, latency=80)
    answer = recommend(profile="llm-serve-7b", target=1000)
    by_label = {o.label: o for o in answer.options}
    assert not by_label["A100 80GB SXM4 · whole card"].has_data  # only a smaller share was measured
    assert by_label["A100 80GB SXM4 · A100 half"].instances == 2  # 600/s per slice → 2 for 1000/s
    tight = recommend(profile="llm-serve-7b", target=500, latency_ms=50)
    assert not any(o.has_data for o in tight.options)  # 80 ms measured > 50 ms asked
    loose = recommend(profile="llm-serve-7b", target=500, latency_ms=100)
    assert {o.label for o in loose.options if o.has_data} == {"A100 80GB SXM4 · A100 half"}


def test_money_ranking_uses_the_rate_card_in_force(fleet, profiles, a100, ascend):
    resnet = profiles["resnet50-infer"]
    _measure(resnet, a100, 10000)
    _measure(resnet, ascend, 9000)
    RateCard.objects.create(
        name="all", scope="default", price_per_cu_hour=Decimal("10"), effective_from=date(2024, 1, 1)
    )
    RateCard.objects.create(
        name="cheap a100",
        scope="device_model",
        device_model=a100,
        price_per_cu_hour=Decimal("2"),
        effective_from=date(2024, 1, 1),
    )
    answer = recommend(profile="resnet50-infer", target=3000)
    assert answer.ranked_by == "money_per_million"
    best = answer.best
    # A100: 1.0 CU/h × 2 = 2/h; Ascend: 0.8 CU/h × 10 = 8/h, although it costs fewer CU.
    assert best.device_model == a100 and best.money_per_hour == Decimal("2.00")


def test_command_and_api_give_the_same_answer(fleet, profiles, a100, api_client, make_user):
    _measure(profiles["detection-infer"], a100, 800)
    out = StringIO()
    call_command("recommend", "--profile", "detection-infer", "--target", "200", "--json", stdout=out)
    from_command = json.loads(out.getvalue())
    api_client.force_authenticate(make_user())
    response = api_client.get(
        "/api/catalog/recommendations/", {"profile": "detection-infer", "target": "200"}
    )
    assert response.status_code == 200
    assert response.json()["options"] == from_command["options"]
    assert from_command["options"][0]["evidence"]["count"] == 1
    listed = StringIO()
    call_command("recommend", "--profiles", "--json", stdout=listed)
    counts = {p["profile"]: p["measurements"] for p in json.loads(listed.getvalue())["profiles"]}
    assert counts["detection-infer"] == 1 and counts["bert-finetune"] == 0


@pytest.mark.parametrize(
    "params, status",
    [
        ({"profile": "nope", "target": "1"}, 404),
        ({"profile": "resnet50-infer", "target": "-5"}, 400),
        ({"profile": "resnet50-infer", "target": "abc"}, 400),
        ({"profile": "resnet50-infer"}, 400),
        ({"profile": "resnet50-infer", "target": "1", "vendor": "acme"}, 400),
    ],
)
def test_bad_recommendation_queries_are_clear_errors(profiles, api_client, make_user, params, status):
    api_client.force_authenticate(make_user())
    response = api_client.get("/api/catalog/recommendations/", params)
    assert response.status_code == status, response.content
    assert response.json()["error"]["message"]


def _running_job(project, user, model, **fields):
    job = submit_whole_cards(project, user, model, name="bench", image="bench:1", **fields)
    scheduling_cycle_run(actor="test")
    job.refresh_from_db()
    assert Allocation.objects.filter(job=job, released_at__isnull=True).exists()
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    job.refresh_from_db()
    return job


def test_a_job_posting_its_throughput_adds_a_weighted_measurement(
    fleet, profiles, member_project, a100, api_client
):
    user, project = member_project
    job = _running_job(project, user, a100)
    api_client.force_authenticate(user)
    url = f"/api/jobs/jobs/{job.pk}/throughput/"
    response = api_client.post(
        url, {"profile": "resnet50-infer", "throughput": "9500.5", "p99_latency_ms": "7"}, format="json"
    )
    assert response.status_code == 201, response.content
    m = Measurement.objects.get(job=job)
    assert m.device_model == a100 and m.compute_share == 100 and m.cards == 1 and m.source == "job"
    assert not m.synthetic and m.node.name in ("gpu-01", "gpu-02")
    # The same attempt reporting twice is a conflict, nothing double-counted.
    again = api_client.post(url, {"profile": "resnet50-infer", "throughput": "9000"}, format="json")
    assert again.status_code == 409 and Measurement.objects.filter(job=job).count() == 1


@pytest.mark.parametrize(
    "body, status",
    [
        ({"profile": "resnet50-infer", "throughput": "-3"}, 400),
        ({"profile": "resnet50-infer", "throughput": "0"}, 400),
        ({"profile": "resnet50-infer", "throughput": "NaN"}, 400),
        ({"profile": "no-such-profile", "throughput": "10"}, 400),
        ({"profile": "resnet50-infer", "throughput": "10", "gpu": "GPU-1"}, 400),
        ({"profile": "resnet50-infer", "throughput": "10", "measured_at": "2999-01-01T00:00:00+00:00"}, 400),
        ({"profile": "resnet50-infer", "throughput": "10", "p99_latency_ms": "-1"}, 400),
    ],
)
def test_bad_reports_are_refused_with_nothing_written(
    fleet, profiles, member_project, a100, api_client, body, status
):
    user, project = member_project
    job = _running_job(project, user, a100)
    api_client.force_authenticate(user)
    response = api_client.post(f"/api/jobs/jobs/{job.pk}/throughput/", body, format="json")
    assert response.status_code == status, response.content
    assert response.json()["error"]["message"]
    assert not Measurement.objects.exists()


def test_a_job_of_another_project_cannot_report(
    fleet, profiles, member_project, a100, api_client, make_user, make_project
):
    user, project = member_project
    job = _running_job(project, user, a100)
    outsider = make_user("mallory")
    make_project("other", members=[outsider])
    viewer = make_user("victor")
    from apps.accounts.models import Membership

    Membership.objects.create(user=viewer, project=project, role="viewer")
    for who, expected in ((outsider, 403), (viewer, 403)):
        api_client.force_authenticate(who)
        response = api_client.post(
            f"/api/jobs/jobs/{job.pk}/throughput/",
            {"profile": "resnet50-infer", "throughput": "10"},
            format="json",
        )
        assert response.status_code == expected, (who.username, response.content)
    assert not Measurement.objects.exists()


def test_a_profile_submission_lands_on_the_cheapest_per_work_model_and_the_trace_names_the_measurement(
    fleet, profiles, member_project, a100, ascend
):
    user, project = member_project
    resnet = profiles["resnet50-infer"]
    _measure(resnet, a100, 4000)
    deciding = _measure(resnet, ascend, 9000)  # 0.8 CU/h for 9000/s beats 1.0 CU/h for 4000/s
    job = lifecycle.job_submit(
        project=project,
        actor=user,
        name="detect",
        image="trt:1",
        kind="inference",
        request_kind="profile",
        workload_profile=resnet,
        target_throughput=Decimal("3000"),
    )
    scheduling_cycle_run(actor="test")
    cards = Allocation.objects.filter(job=job, released_at__isnull=True).select_related(
        "device__device_model"
    )
    assert {a.device.device_model for a in cards} == {ascend}
    trace = DecisionTrace.objects.filter(job=job, outcome="placed").latest("created_at")
    library = [s for s in trace.steps if s.get("tier") == "library"]
    assert library and library[0]["data"]["measurement"] == deciding.pk, trace.steps


def test_a_profile_submission_without_any_measurement_is_refused_with_the_reason(
    fleet, profiles, member_project
):
    user, project = member_project
    from apps.core.errors import ValidationFailed

    with pytest.raises(ValidationFailed) as exc:
        lifecycle.job_submit(
            project=project,
            actor=user,
            name="x",
            image="x:1",
            request_kind="profile",
            workload_profile=profiles["bert-finetune"],
            target_throughput=Decimal("10"),
        )
    assert "benchmark library has no measurement" in exc.value.message
    assert not Job.objects.exists()


def test_synthetic_results_come_from_the_catalog_peak_and_are_marked(
    fleet, profiles, member_project, a100, ascend
):
    user, project = member_project
    job = _running_job(project, user, a100, kind="benchmark", workload_profile=profiles["resnet50-infer"])
    m = services.synthetic_result(job=job)
    assert m is not None and m.synthetic and m.source == "benchmark"
    # 0.25 × 312 TFLOPS / 7.6 GFLOPs per image ≈ 10,263 images/s, ±3 % noise.
    assert Decimal("9900") < m.throughput < Decimal("10600")
    assert services.synthetic_result(job=job) is None  # idempotent
    # The Ascend fixture has no TFLOPS in the catalog: no synthetic figure is made up for it.
    assert services.synthetic_throughput(profiles["resnet50-infer"], ascend, Decimal(100)) is None


def test_benchmark_jobs_must_name_their_profile(fleet, member_project, a100):
    user, project = member_project
    from apps.core.errors import ValidationFailed

    with pytest.raises(ValidationFailed) as exc:
        submit_whole_cards(project, user, a100, name="b", image="b:1", kind="benchmark")
    assert "workload_profile" in exc.value.details


def test_a_contradicted_coefficient_is_proposed_and_accepting_changes_future_metering_only(
    fleet, profiles, a100, ascend, staff_user
):
    _measure(profiles["llm-serve-7b"], a100, 1000)
    _measure(profiles["llm-serve-7b"], ascend, 820)
    _measure(profiles["resnet50-infer"], a100, 10000)
    _measure(profiles["resnet50-infer"], ascend, 5500)
    (proposal,) = services.coefficient_proposals_refresh()
    assert proposal.device_model == ascend and proposal.current_value == Decimal("0.8000")
    assert proposal.evidence["llm-serve-7b"]["ratio"] == "0.82"
    assert proposal.evidence["resnet50-infer"]["ratio"] == "0.55"
    # geometric mean of 0.82 and 0.55 ≈ 0.6716 → 0.6716 CU (the reference is 1.0)
    assert Decimal("0.66") < proposal.proposed_value < Decimal("0.68")
    today = timezone.localdate()
    from apps.core.errors import ValidationFailed

    with pytest.raises(ValidationFailed):
        services.coefficient_proposal_decide(
            proposal=proposal, accept=True, actor=staff_user, effective_from=today
        )
    services.coefficient_proposal_decide(proposal=proposal, accept=True, actor=staff_user)
    proposal.refresh_from_db()
    assert proposal.state == "accepted" and proposal.effective_from == today + timedelta(days=1)
    assert coefficients_on([ascend.pk])[ascend.pk] == Decimal("0.8000")  # today: unchanged
    assert coefficients_on([ascend.pk], on=today + timedelta(days=1))[ascend.pk] == proposal.proposed_value
    assert ComputeCoefficient.objects.filter(device_model=ascend, basis="benchmark").count() == 1


def test_the_api_lists_measurements_and_only_staff_decide_proposals(
    fleet, profiles, a100, ascend, api_client, make_user, staff_user
):
    _measure(profiles["llm-serve-7b"], a100, 1000)
    _measure(profiles["llm-serve-7b"], ascend, 400)
    (proposal,) = services.coefficient_proposals_refresh()
    member = make_user()
    api_client.force_authenticate(member)
    listed = api_client.get("/api/benchlib/measurements/")
    assert listed.status_code == 200 and listed.json()["count"] == 2
    assert api_client.post(f"/api/benchlib/coefficient-proposals/{proposal.pk}/accept/").status_code == 403
    api_client.force_authenticate(staff_user)
    assert api_client.post(f"/api/benchlib/coefficient-proposals/{proposal.pk}/dismiss/").status_code == 200
    again = api_client.post(f"/api/benchlib/coefficient-proposals/{proposal.pk}/accept/")
    assert again.status_code == 409
    assert CoefficientProposal.objects.get().state == "dismissed"
