"""Issue 15, findings 5 and 6: far-off report dates, exposition timestamps beyond any date and readings no
card can produce. Each is a 400 or a counted skip, never a 500, and never a number in a rollup."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from apps.core.errors import ValidationFailed
from apps.telemetry import exposition, ingest, selectors
from apps.telemetry.models import DeviceRollup
from apps.telemetry.samples import Sample, plausible
from tests.fixtures.telemetry import make_job

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
FAR = ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "1999-12-31T23:59:59Z", "2100-01-01T00:00:01Z"]
REPORTS = ["fleet", "top-nodes", "idle-cards", "figures"]


@pytest.mark.parametrize("when", FAR)
@pytest.mark.parametrize("param", ["end", "start"])
def test_a_far_off_period_date_is_a_400_on_every_report(api_client, staff_user, when, param):
    api_client.force_authenticate(staff_user)
    for name in REPORTS:
        response = api_client.get(f"/api/telemetry/reports/{name}/", {param: when})
        assert response.status_code == 400, (name, response.content)
        error = response.json()["error"]
        assert param in error["details"] and "2000-01-01" in error["message"]
    response = api_client.get(
        "/api/telemetry/reports/comparison/", {"baseline_start": "2026-01-01T00:00:00Z", "baseline_end": when}
    )
    assert response.status_code == 400


def test_a_member_gets_the_403_before_any_parsing_of_the_period(api_client, make_user):
    api_client.force_authenticate(make_user("member-x"))
    for name in [*REPORTS, "comparison", "fragmentation"]:
        response = api_client.get(f"/api/telemetry/reports/{name}/", {"end": "0001-01-01T00:00:00Z"})
        assert response.status_code == 403, (name, response.content)


def test_project_and_job_reports_check_visibility_first_then_bound_the_period(
    api_client, make_user, make_project
):
    member, outsider = make_user("m1"), make_user("o1")
    project = make_project("vis", members=[member])
    job = make_job(project)
    hostile = {"end": "0001-01-01T00:00:00Z"}
    api_client.force_authenticate(outsider)
    assert api_client.get(f"/api/telemetry/projects/{project.pk}/", hostile).status_code == 404
    assert api_client.get(f"/api/telemetry/jobs/{job.pk}/", hostile).status_code == 404
    api_client.force_authenticate(member)
    assert api_client.get(f"/api/telemetry/projects/{project.pk}/", hostile).status_code == 400
    assert api_client.get(f"/api/telemetry/jobs/{job.pk}/", hostile).status_code == 400
    assert api_client.get(f"/api/telemetry/projects/{project.pk}/").status_code == 200


def test_the_pages_show_the_period_error_instead_of_a_500(client, staff_user, make_user, make_project):
    member = make_user("m2")
    project = make_project("pages", members=[member])
    client.force_login(staff_user)
    response = client.get("/telemetry/", {"end": "0001-01-01T00:00:00"})
    assert response.status_code == 200
    client.force_login(member)
    assert client.get("/telemetry/", {"end": "0001-01-01T00:00:00"}).status_code == 200
    assert client.get(f"/telemetry/projects/{project.pk}/", {"end": "0001-01-01T00:00:00"}).status_code == 200


def test_period_parse_bounds_dates_before_any_arithmetic():
    with pytest.raises(ValidationFailed) as excinfo:
        selectors.period_parse(None, "0001-01-01T00:00:00Z")
    assert excinfo.value.details == {"end": ["between 2000-01-01 and 2100-01-01"]}
    period = selectors.period_parse("2000-01-01T00:00:00Z", "2000-01-02T00:00:00Z")
    assert period.seconds == 86400


# ---- exposition timestamps ----------------------------------------------------------------------

GOOD = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-aaaaaaaa-0000-0000-0000-000000000000",Hostname="gpu-01"} 40'
BAD_TS = (
    'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-bbbbbbbb-0000-0000-0000-000000000000",Hostname="gpu-01"} 50 '
    "99999999999999999999"
)


def test_a_timestamp_beyond_any_date_rejects_its_line_only():
    parsed = exposition.parse(f"# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n{GOOD}\n{BAD_TS}\n")
    assert [s.line for s in parsed.samples] == [2]
    assert len(parsed.errors) == 1
    line, reason = parsed.errors[0]
    assert line == 3 and "out of range" in reason
    for ts in ("-1", "0", "4102444800000"):  # before 2000, 1970, exactly 2100
        assert exposition.parse(f"x_total 1 {ts}").errors
    assert exposition.parse("x_total 1 1764400000123").samples[0].timestamp == 1764400000.123


def test_a_scrape_with_a_bad_timestamp_keeps_its_good_lines_and_names_the_bad_one(
    api_client, staff_user, ledger
):
    api_client.force_authenticate(staff_user)
    response = api_client.post(
        "/api/telemetry/scrapes/", {"text": f"{GOOD}\n{BAD_TS}\n", "source": "hostile"}, format="json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["used"] == 1 and body["skipped"]["malformed_line"] == 1
    assert body["rejected_lines"] == [{"line": 2, "reason": body["rejected_lines"][0]["reason"]}]
    assert "out of range" in body["rejected_lines"][0]["reason"]
    row = DeviceRollup.objects.get(source="hostile", resolution=300)
    assert row.device == ledger["devices"]["gpu-01/0"] and row.util_avg == 40.0


def test_a_sample_time_no_datetime_can_hold_is_counted_not_a_crash(ledger):
    device = ledger["devices"]["gpu-01/0"]
    report = ingest.samples_ingest(
        samples=[
            Sample(at=1e17, device_id=device.pk, utilization_pct=5.0),
            Sample(at=float("nan"), device_id=device.pk, utilization_pct=5.0),
        ],
        source="t",
        now=NOW,
    )
    assert report.skipped == {"clock_skew_future": 1, "bad_timestamp": 1}
    assert "s since the epoch" in report.examples["clock_skew_future"][0]


# ---- physical bounds ----------------------------------------------------------------------------


def test_impossible_readings_are_dropped_counted_and_never_rolled_up(ledger):
    device = ledger["devices"]["gpu-01/0"]
    at = NOW - timedelta(minutes=3)
    hostile = Sample(
        at=at,
        device_id=device.pk,
        utilization_pct=-1e308,
        memory_used_mib=1e308,
        memory_total_mib=float("inf"),
        temperature_c=1e308,
        power_w=1e308,
        counters={"ecc_dbe": -5.0},
    )
    good = Sample(
        at=at + timedelta(seconds=10),
        device_id=device.pk,
        utilization_pct=60.0,
        memory_used_mib=1000.0,
        temperature_c=70.0,
        power_w=400.0,
    )
    report = ingest.samples_ingest(samples=[hostile, good], source="fuzzed-exporter", now=NOW)
    assert report.skipped == {
        "implausible_utilization": 1,
        "implausible_memory": 2,
        "implausible_temperature": 1,
        "implausible_power": 1,
        "implausible_counter": 1,
    }
    assert "from fuzzed-exporter" in report.examples["implausible_utilization"][0]
    assert report.used == 2  # the samples are used, their impossible values are not
    row = DeviceRollup.objects.get(device=device, resolution=300, source="fuzzed-exporter")
    assert (row.util_avg, row.util_max, row.mem_used_max_mib, row.temp_max_c, row.power_avg_w) == (
        60.0,
        60.0,
        1000.0,
        70.0,
        400.0,
    )
    assert hostile.utilization_pct == -1e308  # the caller's sample is not changed


@pytest.mark.parametrize(
    ("field", "value", "ok"),
    [
        ("utilization_pct", 100.0, True),
        ("utilization_pct", 100.5, False),
        ("utilization_pct", 0.0, True),
        ("temperature_c", -40.0, True),
        ("temperature_c", 151.0, False),
        ("memory_used_mib", 81920.0 * 1.1, True),
        ("memory_used_mib", 81920.0 * 1.2, False),
        ("power_w", 600.0, True),
        ("power_w", 700.0 * 1.5 + 1, False),
        ("power_w", float("nan"), False),
    ],
)
def test_the_bounds_follow_the_card(field, value, ok):
    sample = Sample(at=0.0, device_id=1, **{field: value})
    checked, dropped = plausible(sample, memory_cap=81920 * 1.1, power_cap=700 * 1.5)
    assert (getattr(checked, field) is not None) is ok
    assert bool(dropped) is not ok


def test_a_card_without_known_memory_or_tdp_gets_the_generous_caps(ledger):
    resolver = ingest.DeviceResolver()
    device = ledger["devices"]["gpu-01/0"]
    memory_cap, power_cap = resolver.limits[device.pk]
    assert memory_cap == pytest.approx(81920 * 1.1)  # the card's own memory_mib
    assert power_cap == 2000.0  # no device model, no TDP
