"""Reports (API and pages): the three figures, fleet series, top nodes, idle cards, fragmentation,
period comparison, job and project curves; scoping; CSV; bad parameters."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.catalog.models import ComputeCoefficient, ComputeTemplate, DeviceModel
from apps.telemetry import ingest
from apps.telemetry.models import Quality
from apps.telemetry.samples import Sample
from tests.fixtures.telemetry import allocate, make_job

API = "/api/telemetry/"


@pytest.fixture
def scene(ledger, make_user, make_project, staff_user):
    """Two hours of 10 s samples: gpu-01/0 at 31 % then 42 % (seed 001 §4.1), gpu-01/1 idle, allocations."""
    now = timezone.now().replace(second=0, microsecond=0)
    end = now - timedelta(minutes=now.minute % 5)
    start = end - timedelta(hours=2)
    mid = start + timedelta(hours=1)
    d = ledger["devices"]
    alice = make_user("alice")
    vision = make_project("vision", members=[alice])
    other = make_project("other")
    job = make_job(vision, "train")
    secret = make_job(other, "secret")
    allocate(job, d["gpu-01/0"], start=start, milli=500)
    allocate(secret, d["gpu-01/0"], start=start, milli=500)
    allocate(secret, d["gpu-01/1"], start=start)  # allocated and idle
    samples = []
    t = start
    while t < end:
        samples.append(Sample(at=t, device_id=d["gpu-01/0"].pk, utilization_pct=31.0 if t < mid else 42.0))
        samples.append(Sample(at=t, device_id=d["gpu-01/1"].pk, utilization_pct=1.0))
        t += timedelta(seconds=10)
    report = ingest.samples_ingest(samples=samples, source="t", scrape_interval_s=10)
    assert report.used == len(samples)
    return {
        "start": start,
        "mid": mid,
        "end": end,
        "alice": alice,
        "vision": vision,
        "other": other,
        "job": job,
        "secret": secret,
        "staff": staff_user,
        "devices": d,
    }


def local(value: datetime) -> str:
    """A datetime-local form value (the platform time zone)."""
    return timezone.localtime(value).strftime("%Y-%m-%dT%H:%M")


def iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def test_the_three_figures_side_by_side(api_client, scene):
    api_client.force_authenticate(scene["staff"])
    r = api_client.get(f"{API}reports/figures/", {"start": iso(scene["start"]), "end": iso(scene["end"])})
    assert r.status_code == 200, r.content
    body = r.json()
    cards = body["cards"]  # 8 in-service cards in the ledger fixture
    assert cards == 8 and body["cards_with_telemetry"] == 2
    # 2 cards fully allocated (0.5 + 0.5 and 1.0) of 8 for the whole window.
    assert body["allocation_ratio_pct"] == pytest.approx(25.0)
    assert body["physical_utilization_pct"] == pytest.approx((31 + 42 + 1 + 1) / 4)
    # busy ÷ allocated over the two allocated cards: (36.5 + 1) / 2 cards.
    assert body["effective_utilization_pct"] == pytest.approx((36.5 + 1.0) / 2, abs=0.01)
    assert body["physical_utilization_quality"] == Quality.EXACT
    assert body["effective_utilization_quality"] == Quality.ESTIMATED
    assert set(body["methods"]) == {"allocation_ratio", "physical_utilization", "effective_utilization"}


def test_period_comparison_states_the_ratio_and_method(api_client, scene):
    api_client.force_authenticate(scene["staff"])
    params = {
        "baseline_start": iso(scene["start"]),
        "baseline_end": iso(scene["mid"]),
        "current_start": iso(scene["mid"]),
        "current_end": iso(scene["end"]),
    }
    body = api_client.get(f"{API}reports/comparison/", params).json()
    assert body["baseline"]["physical_utilization_pct"] == pytest.approx(16.0)
    assert body["current"]["physical_utilization_pct"] == pytest.approx(21.5)
    assert body["ratios"]["physical_utilization_pct"] == pytest.approx(1.34)
    assert "current ÷ baseline" in body["method"]
    csv_response = api_client.get(f"{API}reports/comparison/", {**params, "format": "csv"})
    rows = list(csv.reader(io.StringIO(csv_response.content.decode())))
    assert rows[0] == [
        "figure",
        "baseline_pct",
        "current_pct",
        "ratio",
        "baseline_quality",
        "current_quality",
    ]
    assert rows[2][:4] == ["physical_utilization", "16.0", "21.5", "1.34"]
    missing = api_client.get(f"{API}reports/comparison/", {"baseline_start": iso(scene["start"])})
    assert missing.status_code == 400 and missing.json()["error"]["details"]["baseline_end"] == ["required"]


def test_fleet_series_top_nodes_and_idle_cards(api_client, scene):
    api_client.force_authenticate(scene["staff"])
    period = {"start": iso(scene["start"]), "end": iso(scene["end"])}
    fleet = api_client.get(f"{API}reports/fleet/", {**period, "group_by": "node"}).json()
    (series,) = fleet["series"]
    assert series["group"] == "gpu-01" and len(series["points"]) == 24  # 2 h of 5-minute windows
    assert series["points"][0]["utilization_pct"] == pytest.approx(16.0) and series["points"][0]["cards"] == 2
    top = api_client.get(f"{API}reports/top-nodes/", period).json()
    assert [(n["node"], n["utilization_pct"]) for n in top] == [("gpu-01", pytest.approx(18.75))]
    idle = api_client.get(f"{API}reports/idle-cards/", period).json()
    assert [(c["node"], c["index"], c["allocated"]) for c in idle] == [("gpu-01", 1, True)]
    assert api_client.get(f"{API}reports/idle-cards/", {**period, "threshold": "0.5"}).json() == []
    text = api_client.get(f"{API}reports/fleet/", {**period, "format": "csv"}).content.decode()
    assert text.splitlines()[0] == "group,window_start,utilization_pct,cards,quality"
    assert len(text.splitlines()) == 25


def test_fragmentation_counts_free_capacity_no_template_fits(api_client, ledger, staff_user, make_project):
    model = DeviceModel.objects.create(
        vendor="nvidia", kind="gpu", name="A100 80GB", slug="a100-80", memory_mib=81920
    )
    ComputeCoefficient.objects.create(
        device_model=model, value=Decimal("1.0000"), effective_from="2024-01-01"
    )
    ComputeTemplate.objects.create(
        device_model=model,
        name="half",
        slug="a100-half",
        memory_mib=40960,
        compute_share=Decimal("50"),
        isolation="shared",
        max_instances=2,
    )
    d = ledger["devices"]
    for key in ("gpu-01/0", "gpu-01/1"):
        d[key].device_model = model
        d[key].save()
    job = make_job(make_project("p"))
    allocate(job, d["gpu-01/0"], start=timezone.now() - timedelta(hours=1), milli=700, memory_mib=30000)
    api_client.force_authenticate(staff_user)
    body = api_client.get(f"{API}reports/fragmentation/").json()
    # gpu-01/0: 300‰ free — the 50 % template does not fit → 0.3 CU stranded; gpu-01/1 wholly free.
    assert body["fragmented_cu"] == "0.3000" and body["free_cu"] == "1.3000"
    assert [(c["node"], c["index"], c["free_compute_milli"]) for c in body["cards"]] == [("gpu-01", 0, 300)]


def test_fleet_reports_are_for_staff_only(api_client, scene):
    api_client.force_authenticate(scene["alice"])
    for name in ("fleet", "top-nodes", "idle-cards", "figures", "fragmentation"):
        r = api_client.get(f"{API}reports/{name}/")
        assert r.status_code == 403, name
        assert r.json()["error"]["code"] == "permission_denied"
    assert api_client.get(f"{API}rollups/").status_code == 403
    assert api_client.get(f"{API}sources/").status_code == 403


def test_members_see_their_projects_and_jobs_only(api_client, scene):
    api_client.force_authenticate(scene["alice"])
    r = api_client.get(f"{API}jobs/{scene['job'].pk}/")
    assert r.status_code == 200
    body = r.json()
    assert len(body["points"]) == 24 and body["quality"] == Quality.ESTIMATED
    # Half of a card 31 % busy shared with another half-card holder: 31 % busy of its half → 31 %.
    assert body["points"][0]["utilization_pct"] == pytest.approx(31.0)
    assert body["points"][0]["allocated_cards"] == pytest.approx(0.5)
    assert api_client.get(f"{API}jobs/{scene['secret'].pk}/").status_code == 404
    project = api_client.get(
        f"{API}projects/{scene['vision'].pk}/", {"start": iso(scene["start"]), "end": iso(scene["end"])}
    ).json()
    assert [j["name"] for j in project["jobs"]] == ["train"]
    assert project["allocated_card_hours"] == pytest.approx(1.0)
    assert api_client.get(f"{API}projects/{scene['other'].pk}/").status_code == 404
    text = api_client.get(f"{API}jobs/{scene['job'].pk}/", {"format": "csv"}).content.decode()
    assert (
        text.splitlines()[0] == "window_start,utilization_pct,allocated_cards,memory_used_mib,cards,quality"
    )


@pytest.mark.parametrize(
    "params, field",
    [
        ({"start": "yesterday"}, "start"),
        ({"start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, "start"),
        ({"start": "2020-01-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, "start"),
        ({"group_by": "colour"}, "group_by"),
        ({"format": "xlsx"}, "format"),
    ],
)
def test_bad_report_parameters_are_400(api_client, staff_user, params, field):
    api_client.force_authenticate(staff_user)
    r = api_client.get(f"{API}reports/fleet/", params)
    assert r.status_code == 400
    assert field in r.json()["error"]["details"]


def test_scrape_upload_ingests_or_rejects(api_client, ledger, staff_user, make_user):
    from tests.fixtures.telemetry import fixture_text

    api_client.force_authenticate(staff_user)
    r = api_client.post(
        f"{API}scrapes/", {"text": fixture_text("hygon.prom"), "dry_run": True}, format="json"
    )
    assert r.status_code == 200 and r.json()["samples"][0]["memory_used_mib"] == 32768.0
    r = api_client.post(
        f"{API}scrapes/", {"text": fixture_text("hygon.prom"), "cluster": "tele"}, format="json"
    )
    assert r.status_code == 201 and r.json()["rollups_written"] == 1
    bad = api_client.post(f"{API}scrapes/", {"text": "dcu_temp{ 1"}, format="json")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "parse_error"
    assert "1" in bad.json()["error"]["details"]
    api_client.force_authenticate(make_user("bob"))
    assert api_client.post(f"{API}scrapes/", {"text": "x 1"}, format="json").status_code == 403


def test_metric_sources_are_managed_by_staff_with_audit(api_client, ledger, staff_user):
    from apps.core.models import ChangeRecord

    api_client.force_authenticate(staff_user)
    r = api_client.post(
        f"{API}sources/", {"cluster": "tele", "name": "prom", "url": "http://prom:9090"}, format="json"
    )
    assert r.status_code == 201, r.content
    assert ChangeRecord.objects.filter(
        action="telemetry.source.create", object_id=str(r.json()["id"])
    ).exists()
    bad = api_client.post(
        f"{API}sources/", {"cluster": "tele", "name": "p2", "kind": "prometheus"}, format="json"
    )
    assert bad.status_code == 400 and "url" in bad.json()["error"]["details"]
    bad = api_client.post(
        f"{API}sources/",
        {"cluster": "tele", "name": "e", "kind": "exporter", "targets": ["ftp://x"]},
        format="json",
    )
    assert bad.status_code == 400 and "targets" in bad.json()["error"]["details"]
    dup = api_client.post(
        f"{API}sources/", {"cluster": "tele", "name": "prom", "url": "http://p:9090"}, format="json"
    )
    assert dup.status_code == 400
    r2 = api_client.patch(f"{API}sources/{r.json()['id']}/", {"enabled": False}, format="json")
    assert r2.status_code == 200 and r2.json()["enabled"] is False


def test_rollup_list_filters_and_is_not_n_plus_one(api_client, scene, django_assert_max_num_queries):
    api_client.force_authenticate(scene["staff"])
    with django_assert_max_num_queries(8):
        r = api_client.get(f"{API}rollups/", {"resolution": 300, "device": scene["devices"]["gpu-01/0"].pk})
    body = r.json()
    assert body["count"] == 24 and body["results"][0]["node"] == "gpu-01"


# --- pages --------------------------------------------------------------------------------------------


def test_staff_see_the_fleet_page_with_charts_and_exports(client, scene):
    client.force_login(scene["staff"])
    r = client.get(
        "/telemetry/", {"start": local(scene["start"]), "end": local(scene["end"]), "group_by": "vendor"}
    )
    assert r.status_code == 200
    html = r.content.decode()
    assert 'id="telemetry-fleet-chart"' in html and 'id="telemetry-figures-chart"' in html
    assert "plotly-basic.min.js" in html
    assert "/api/telemetry/reports/fleet/?" in html and "format=csv" in html
    assert "gpu-01" in html  # top nodes / idle cards
    r = client.get(
        "/telemetry/", {"baseline_start": local(scene["start"]), "baseline_end": local(scene["mid"])}
    )
    assert r.status_code == 200 and r.context["comparison"] is not None


def test_members_get_their_projects_page_and_404_elsewhere(client, scene):
    client.force_login(scene["alice"])
    r = client.get("/telemetry/")
    assert r.status_code == 200
    html = r.content.decode()
    assert "vision" in html and "other" not in html and "telemetry-fleet-chart" not in html
    r = client.get(f"/telemetry/projects/{scene['vision'].pk}/")
    assert r.status_code == 200 and 'id="telemetry-project-chart"' in r.content.decode()
    r = client.get(f"/telemetry/jobs/{scene['job'].pk}/")
    assert r.status_code == 200 and 'id="telemetry-job-chart"' in r.content.decode()
    assert client.get(f"/telemetry/projects/{scene['other'].pk}/").status_code == 404
    assert client.get(f"/telemetry/jobs/{scene['secret'].pk}/").status_code == 404


def test_anonymous_users_are_sent_to_login(client):
    r = client.get("/telemetry/")
    assert r.status_code == 302 and "/accounts/login/" in r["Location"]
