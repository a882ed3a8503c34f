"""Issue 22 §3: the submit page offers the library's recommendation for a profile request and can fill
the request from it; a profile request submitted from the page waits for the cheapest-per-work model."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.benchlib.models import Measurement
from apps.catalog.models import WorkloadProfile
from apps.catalog.workloads import workload_profile_sync
from apps.jobs.models import Job
from tests.jobs.test_pages import form_data

pytestmark = pytest.mark.usefixtures("english")


@pytest.fixture
def measured(fleet, a100, half_a100):
    workload_profile_sync(actor="test")
    profile = WorkloadProfile.objects.get(key="detection-infer")
    Measurement.objects.create(
        profile=profile,
        device_model=a100,
        throughput=Decimal("900"),
        runs=12,
        synthetic=True,
        source=Measurement.Source.BENCHMARK,
        measured_at=timezone.now() - timedelta(days=1),
    )
    return profile


def test_the_preview_of_a_profile_request_ranks_options_with_evidence_and_the_fields_to_fill(
    client, member_project, measured, half_a100
):
    user, project = member_project
    client.force_login(user)
    data = form_data(
        project, request_kind="profile", workload_profile="detection-infer", target_throughput="200"
    )
    body = client.post("/jobs/submit/preview/", data).json()
    assert body["valid"], body["errors"]
    reco = body["recommendation"]
    assert reco["profile"] == "detection-infer" and reco["options"]
    best = reco["options"][0]
    # 900 images/s on a whole A100 → the 50 % slice is estimated at 450/s: one slice does 200/s.
    assert best["template"] == half_a100.slug and best["template_id"] == half_a100.pk
    assert best["instances"] == 1 and best["fits"] == "slice" and best["basis"] == "estimated"
    assert best["fits_text"] == "1 slice" and best["nodes"] == 1  # the page shows words, never "1 × slice"
    assert best["evidence"]["count"] == 1 and best["evidence"]["runs"] == 12 and best["evidence"]["synthetic"]
    assert "200 images/s of detection-infer" in body["request"]
    page = client.get("/jobs/submit/")
    assert b'name="workload_profile"' in page.content and b"preview-recommendation" in page.content


def test_a_profile_request_without_a_target_is_a_field_error_and_nothing_is_created(
    client, member_project, measured
):
    user, project = member_project
    client.force_login(user)
    response = client.post(
        "/jobs/submit/", form_data(project, request_kind="profile", workload_profile="detection-infer")
    )
    assert response.status_code == 200
    assert "target_throughput" in response.context["form"].errors
    assert not Job.objects.exists()


def test_a_benchmark_run_from_the_page_must_name_its_profile(client, member_project, measured, a100):
    user, project = member_project
    client.force_login(user)
    response = client.post("/jobs/submit/", form_data(project, kind="benchmark", device_model=a100.pk))
    assert "workload_profile" in response.context["form"].errors
    ok = client.post(
        "/jobs/submit/",
        form_data(project, kind="benchmark", device_model=a100.pk, workload_profile="detection-infer"),
    )
    assert ok.status_code == 302
    job = Job.objects.get()
    assert job.kind == "benchmark" and job.workload_profile == measured


def test_the_library_page_recommends_with_evidence_and_says_no_data(
    client, member_project, measured, half_a100
):
    user, _project = member_project
    client.force_login(user)
    page = client.get("/catalog/library/", {"profile": "detection-infer", "target": "200"})
    assert page.status_code == 200
    body = page.content.decode()
    assert 'id="recommendation-table"' in body and "A100 80GB SXM4 · A100 half" in body
    assert "estimated" in body and "synthetic" in body and "no data" in body  # the Ascend has none
    bad = client.get("/catalog/library/", {"profile": "detection-infer", "target": "-1"})
    assert bad.status_code == 200 and "must be a positive number" in bad.content.decode()
    assert client.get("/catalog/library/", {"profile": "nope", "target": "1"}).status_code == 200
