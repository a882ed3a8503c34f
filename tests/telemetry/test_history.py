"""A card's and a node's metric history (issue 29 §5): the series each preset draws from stored
rollups (values and resolution), custom range validation (400s, never 500), what members see.

The rollups are written directly (the ingest path has its own tests); the error counter keys are the
ones ``apps.telemetry.metric_maps`` stores for dcgm-exporter (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL → ecc_dbe,
DCGM_FI_DEV_PCIE_REPLAY_COUNTER → pcie_replay).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from apps.inventory.models import Device
from apps.telemetry import history
from apps.telemetry.models import DeviceRollup

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
SOURCE = "prometheus:tele/main"


def rollup(
    device, at: datetime, *, resolution=300, util=50.0, n=10, mem=1000.0, temp=60.0, power=200.0, **extra
):
    return DeviceRollup.objects.create(
        device=device,
        resolution=resolution,
        window_start=at,
        source=extra.pop("source", SOURCE),
        quality=extra.pop("quality", "exact"),
        first_sample_at=at,
        last_sample_at=at + timedelta(seconds=resolution - 1),
        sample_count=n,
        util_sum=util * n,
        util_n=n,
        util_avg=util,
        mem_used_sum=mem * n,
        mem_used_n=n,
        mem_used_avg_mib=mem,
        temp_max_c=temp,
        power_sum=(power or 0.0) * n,
        power_n=n if power is not None else 0,
        power_avg_w=power,
        **extra,
    )


@pytest.fixture
def card(ledger):
    return ledger["devices"]["gpu-01/0"]


def test_presets_choose_resolution_by_range_and_bound_points():
    for preset, expected in (("1h", (300, 300)), ("24h", (300, 300)), ("7d", (3600, 3600))):
        rng = history.history_range({"range": preset}, now=NOW)
        assert rng.end == NOW and rng.end - rng.start == history.PRESETS[preset]
        assert history.history_resolution(rng, now=NOW) == expected
    # 60 days of hours is 1440 points: merged into 3-hour buckets (480 ≤ MAX_POINTS).
    rng = history.history_range(
        {"range": "custom", "from": "2026-09-01T00:00", "to": "2026-10-31T00:00"}, now=NOW
    )
    resolution, bucket = history.history_resolution(rng, now=NOW)
    assert (resolution, bucket) == (3600, 3 * 3600)
    assert rng.seconds / bucket <= history.MAX_POINTS
    # A short range older than the 5-minute retention is read from the hourly rows.
    old = history.history_range(
        {"range": "custom", "from": "2026-10-01T10:00", "to": "2026-10-01T12:00"}, now=NOW
    )
    assert history.history_resolution(old, now=NOW) == (3600, 3600)


def test_24h_series_values_from_five_minute_rows(card):
    t0 = NOW - timedelta(hours=2)
    rollup(card, t0, util=40.0, mem=2048.0, temp=61.0, power=210.0, error_deltas={"ecc_dbe": 0.0})
    rollup(
        card,
        t0 + timedelta(minutes=5),
        util=60.0,
        temp=70.0,
        quality="estimated",
        error_deltas={"ecc_dbe": 2.0},
    )
    rollup(card, t0, resolution=3600, util=99.0)  # the hourly row is not read for 24 h
    rollup(card, NOW - timedelta(days=2), util=1.0)  # outside the range
    rng = history.history_range({"range": "24h"}, now=NOW)
    report = history.history([card], rng, now=NOW)
    assert report["resolution"] == 300
    (line,) = report["lines"]
    assert [p["utilization"] for p in line["points"]] == [40.0, 60.0]
    assert [p["quality"] for p in line["points"]] == ["exact", "estimated"]
    assert line["points"][0]["memory"] == 2048.0
    assert [p["temperature"] for p in line["points"]] == [61.0, 70.0]
    assert line["points"][0]["power"] == 210.0
    assert report["counters"] == ["ecc_dbe"]
    assert [p["errors"]["ecc_dbe"] for p in line["points"]] == [0.0, 2.0]


def test_7d_reads_hourly_rows_and_custom_merges_buckets_exactly(card):
    start = NOW - timedelta(days=3)
    rollup(card, start, resolution=3600, util=20.0, n=12, power=100.0)
    rollup(card, start + timedelta(hours=1), resolution=3600, util=80.0, n=4, power=300.0, temp=75.0)
    rollup(card, start + timedelta(minutes=5), util=5.0)  # a 5-minute row is not read for 7 d
    report = history.history([card], history.history_range({"range": "7d"}, now=NOW), now=NOW)
    assert report["resolution"] == 3600 and report["bucket"] == 3600
    assert [p["utilization"] for p in report["lines"][0]["points"]] == [20.0, 80.0]
    # 90 days: 4-hour buckets; the two hours merge as Σ sums ÷ Σ counts (not the mean of means).
    rng = history.HistoryRange("custom", NOW - timedelta(days=90), NOW)
    report = history.history([card], rng, now=NOW)
    assert report["bucket"] == 4 * 3600
    (point,) = report["lines"][0]["points"]
    assert point["utilization"] == pytest.approx((20 * 12 + 80 * 4) / 16)
    assert point["power"] == pytest.approx((100 * 12 + 300 * 4) / 16)
    assert point["temperature"] == 75.0


def test_one_source_per_card_and_missing_metrics(card):
    t0 = NOW - timedelta(minutes=30)
    for i in range(3):
        rollup(card, t0 + timedelta(minutes=5 * i), power=None, n=5)
    rollup(card, t0, source="exporter:tele/other", util=1.0)
    report = history.history([card], history.history_range({"range": "1h"}, now=NOW), now=NOW)
    (line,) = report["lines"]
    assert line["source"] == SOURCE and len(line["points"]) == 3
    assert all(p["utilization"] == 50.0 for p in line["points"])
    assert [x["label"] for x in report["missing"]["power"]] == ["GPU0"]
    assert report["counters"] == []


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"range": "2w"}, "Unknown range '2w'"),
        ({"range": "custom", "from": "2026-12-01T00:00"}, "needs both"),
        ({"range": "custom", "from": "yesterday", "to": "2026-12-01T00:00"}, "not a date and time"),
        ({"range": "custom", "from": "0001-01-01T00:00", "to": "2026-12-01T00:00"}, "out of range"),
        ({"range": "custom", "from": "2026-12-02T00:00", "to": "2026-12-01T00:00"}, "must be before"),
        ({"range": "custom", "from": "2020-01-01T00:00", "to": "2026-12-01T00:00"}, "at most 400 days"),
        ({"range": "custom", "from": "2026-13-45T99:00", "to": "2026-12-01T00:00"}, "not a date and time"),
    ],
)
def test_bad_custom_range_is_a_400_with_the_message(staff_user, card, query, message):
    client = Client()
    client.force_login(staff_user)
    data = client.get(f"/telemetry/devices/{card.pk}/history/", query)
    assert data.status_code == 400
    assert message in data.json()["message"]
    page = client.get(f"/inventory/devices/{card.pk}/", query)
    assert page.status_code == 400
    assert message in page.content.decode().replace("&#x27;", "'")


def test_custom_range_in_the_platform_zone(staff_user, card):
    # 2026-12-03 09:00 in Asia/Shanghai is 01:00 UTC.
    rollup(card, datetime(2026, 12, 3, 1, 0, tzinfo=UTC), util=33.0)
    client = Client()
    client.force_login(staff_user)
    body = client.get(
        f"/telemetry/devices/{card.pk}/history/",
        {"range": "custom", "from": "2026-12-03T08:55", "to": "2026-12-03T09:10"},
    ).json()
    assert body["start"] == "2026-12-03T00:55:00+00:00"
    assert body["resolution_s"] == 300
    figure = body["charts"]["utilization"]["figure"]
    # Drawn in the platform's zone: the window's wall-clock time in Shanghai.
    assert figure["data"][0]["x"] == ["2026-12-03 09:00:00"]
    assert figure["data"][0]["y"] == [33.0]
    # The axis spans the range asked for, in the same zone.
    assert figure["layout"]["xaxis"]["range"] == ["2026-12-03 08:55:00", "2026-12-03 09:10:00"]
    assert body["charts"]["errors"] is None


def test_page_and_data_show_charts_and_no_data(staff_user, card, ledger):
    client = Client()
    client.force_login(staff_user)
    page = client.get(f"/inventory/devices/{card.pk}/")
    html = page.content.decode()
    assert page.status_code == 200
    assert 'data-history-url="/telemetry/devices/' in html and "No data" in html
    assert "js/history.js" in html
    rollup(card, timezone.now() - timedelta(minutes=10), error_deltas={"pcie_replay": 3.0})
    html = client.get(f"/inventory/devices/{card.pk}/").content.decode()
    assert 'id="history-device-utilization-chart"' in html and "data-plotly-figure" in html
    spec = json.loads(
        html.split('data-plotly-figure="history-device-errors-chart">')[1].split("</script>")[0]
    )
    assert spec["figure"]["data"][0]["name"] == "PCIe replays"
    node = client.get(f"/inventory/nodes/{card.node_id}/")
    assert node.status_code == 200 and 'data-history-url="/telemetry/nodes/' in node.content.decode()
    body = client.get(f"/telemetry/nodes/{card.node_id}/history/", {"range": "1h"}).json()
    assert [line["label"] for line in body["lines"]] == ["GPU0", "GPU1"]
    assert [line["points"] for line in body["lines"]] == [1, 0]


def test_zh_chart_titles(staff_user, card):
    rollup(card, timezone.now() - timedelta(minutes=10))
    client = Client()
    client.force_login(staff_user)
    body = client.get(f"/telemetry/devices/{card.pk}/history/", HTTP_ACCEPT_LANGUAGE="zh-hans").json()
    layout = body["charts"]["utilization"]["figure"]["layout"]
    assert layout["yaxis"]["title"]["text"] == "卡忙碌率（%）"
    assert layout["xaxis"]["title"]["text"].startswith("时间")


def test_members_see_only_their_cards(make_user, make_project, card, ledger):
    member = make_user("m1")
    project = make_project("vision", members=[member])
    other = make_project("other")
    hidden = ledger["devices"]["gpu-01/1"]
    Device.objects.filter(pk=hidden.pk).update(owner_project=other)
    Device.objects.filter(pk=card.pk).update(owner_project=project)
    rollup(hidden, timezone.now() - timedelta(minutes=10))
    client = Client()
    client.force_login(member)
    assert client.get(f"/telemetry/devices/{hidden.pk}/history/").status_code == 404
    assert client.get(f"/inventory/devices/{hidden.pk}/").status_code == 404
    body = client.get(f"/telemetry/nodes/{card.node_id}/history/").json()
    assert [line["device"] for line in body["lines"]] == [card.pk]
    outsider = make_user("nobody")
    client.force_login(outsider)
    assert client.get(f"/telemetry/nodes/{card.node_id}/history/").status_code == 404
