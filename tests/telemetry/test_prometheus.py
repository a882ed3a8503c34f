"""Integration with a real Prometheus (Debian package ``prometheus``): it scrapes a small test exporter
serving the fixture pages every second; Suanchi ingests through the HTTP API (query_range) and the
rollups match the fixture values. Also: the platform/prometheus files load in promtool / Prometheus.

The test FAILS (never skips) when /usr/bin/prometheus is missing: ``.ci/run`` installs the package.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from datetime import timedelta
from io import StringIO

import pytest
import yaml
from django.core.management import call_command
from django.utils import timezone

from apps.telemetry import ingest, metric_sources
from apps.telemetry.models import DeviceRollup, MetricSource
from tests.fixtures.prometheus import PLATFORM, PROMTOOL, free_port, require_binary
from worker.tasks.telemetry import telemetry_ingest_task


def _assert_fixture_values(devices, source: str) -> None:
    rows = DeviceRollup.objects.filter(source=source, resolution=300)
    assert rows.exists()

    def of(key, partition=""):
        found = list(rows.filter(device=devices[key], partition=partition))
        assert found, (key, partition)
        return found

    for row in of("gpu-01/0"):
        assert (row.util_avg, row.util_max, row.mem_used_avg_mib, row.mem_total_mib) == (
            87.0,
            87.0,
            72000.0,
            81559.0,
        )
        assert (row.temp_max_c, row.power_avg_w) == (64.0, 612.48)
        assert row.pods == [{"namespace": "vision", "pod": "suanchi-12-a0-x7k2p"}]
        assert row.quality == "exact" and row.scrape_interval_s == 1
    assert {r.util_avg for r in of("gpu-01/1")} == {0.0}
    assert {r.util_avg for r in of("gpu-02/0", "3g.40gb/1")} == {62.5}
    assert {r.util_avg for r in of("gpu-02/0", "3g.40gb/2")} == {10.0}
    assert {(r.util_avg, r.mem_used_avg_mib) for r in of("npu-01/1")} == {(98.0, 60000.0)}
    assert {(r.util_avg, r.temp_max_c) for r in of("amd-01/0")} == {(73.0, 66.0)}
    assert {(r.mem_used_avg_mib, r.mem_total_mib) for r in of("dcu-01/0")} == {(32768.0, 65536.0)}
    assert {(r.util_avg, r.mem_total_mib) for r in of("mlu-01/0")} == {(33.0, 49152.0)}
    assert sum(r.sample_count for r in of("gpu-01/0")) >= 2  # several scrapes folded into a window


def test_query_range_ingest_matches_the_fixture_values_and_is_idempotent(stack, ledger):
    end = timezone.now()
    start = end - timedelta(minutes=2)
    report = ingest.prometheus_ingest(url=stack["url"], start=start, end=end, step_s=1, source="prom")
    assert report.used > 0
    assert report.skipped.get("device_not_in_ledger", 0) == 0, report.as_dict()
    assert set(report.vendors) == {"nvidia", "huawei", "amd", "hygon", "cambricon"}
    _assert_fixture_values(ledger["devices"], "prom")
    before = sorted(
        DeviceRollup.objects.filter(source="prom").values_list(
            "device_id", "partition", "resolution", "window_start", "sample_count", "util_sum", "mem_used_sum"
        )
    )
    ingest.prometheus_ingest(url=stack["url"], start=start, end=end, step_s=1, source="prom")
    after = sorted(
        DeviceRollup.objects.filter(source="prom").values_list(
            "device_id", "partition", "resolution", "window_start", "sample_count", "util_sum", "mem_used_sum"
        )
    )
    assert after == before


def test_the_periodic_task_ingests_configured_sources(stack, ledger):
    cluster = ledger["cluster"]
    prom = metric_sources.metric_source_create(
        actor="test", cluster=cluster, name="prom", url=stack["url"], step_seconds=1
    )
    scrape = metric_sources.metric_source_create(
        actor="test", cluster=cluster, name="direct", kind="exporter", targets=[stack["exporter"]]
    )
    result = telemetry_ingest_task.apply().get()
    assert result["sources"] == 2
    prom.refresh_from_db()
    scrape.refresh_from_db()
    assert prom.last_error == "" and prom.ingested_until is not None and prom.last_report["used"] > 0
    _assert_fixture_values(ledger["devices"], prom.label)
    direct = DeviceRollup.objects.get(
        source=scrape.label, device=ledger["devices"]["dcu-01/0"], resolution=300
    )
    assert direct.util_avg == 55.0


def test_the_backfill_command_prints_progress_and_a_summary(stack, ledger):
    out, err = StringIO(), StringIO()
    end = timezone.now()
    call_command(
        "ingest_prometheus",
        "--url",
        stack["url"],
        "--start",
        (end - timedelta(minutes=3)).isoformat(),
        "--end",
        end.isoformat(),
        "--step",
        "2s",
        "--source",
        "backfill",
        stdout=out,
        stderr=err,
    )
    assert "1/1 hours" in err.getvalue() and "#" in err.getvalue()
    assert "5-minute rollups" in out.getvalue()
    row = DeviceRollup.objects.filter(
        source="backfill", device=ledger["devices"]["gpu-01/0"], resolution=300
    ).first()
    assert row.util_avg == 87.0 and row.scrape_interval_s == 2


def test_a_bad_query_or_an_unreachable_prometheus_is_reported(stack, ledger):
    from apps.telemetry.prometheus import PrometheusClient, PrometheusError

    with pytest.raises(PrometheusError, match="bad_data"):
        PrometheusClient(stack["url"]).query_range("sum(", start=time.time() - 60, end=time.time(), step=1)
    source = MetricSource.objects.create(
        cluster=ledger["cluster"], name="down", url=f"http://127.0.0.1:{free_port()}"
    )
    assert ingest.source_ingest(source=source) is None
    source.refresh_from_db()
    assert "Connection refused" in source.last_error or "refused" in source.last_error.lower()
    assert not DeviceRollup.objects.filter(source=source.label).exists()


def test_platform_configs_load_in_promtool_and_the_rule_unit_tests_pass(tmp_path):
    promtool = require_binary(PROMTOOL)
    done = subprocess.run(  # noqa: S603
        [promtool, "check", "rules", str(PLATFORM / "rules" / "suanchi-gpu.rules.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run(  # noqa: S603
        [promtool, "test", "rules", str(PLATFORM / "tests" / "suanchi-gpu.rules.test.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # Debian's Prometheus is built without Kubernetes service discovery: check the scrape configs with
    # each kubernetes_sd_configs swapped for a static target (relabelling, ports and labels stay).
    config = yaml.safe_load((PLATFORM / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"nvidia-gpu", "ascend-npu", "amd-gpu", "hygon-dcu", "cambricon-mlu"}
    ports = {name: job["relabel_configs"][0]["regex"] for name, job in jobs.items()}
    assert ports == {
        "nvidia-gpu": "9400",
        "ascend-npu": "8082",
        "amd-gpu": "5000",
        "hygon-dcu": "1608[01]",
        "cambricon-mlu": "30108",
    }
    for job in config["scrape_configs"]:
        job.pop("kubernetes_sd_configs")
        job["static_configs"] = [{"targets": ["127.0.0.1:9"]}]
    shutil.copytree(PLATFORM / "rules", tmp_path / "rules")
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    done = subprocess.run(  # noqa: S603
        [promtool, "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_backfill_from_the_admin_runs_on_a_worker_with_progress(
    stack, ledger, client, staff_user, make_user, django_capture_on_commit_callbacks
):
    from unittest import mock

    from apps.core.models import BackgroundRun
    from worker.tasks.telemetry import backfill_task

    source = metric_sources.metric_source_create(
        actor="test", cluster=ledger["cluster"], name="prom-bf", url=stack["url"], step_seconds=2
    )
    client.force_login(staff_user)
    with (
        mock.patch.object(backfill_task, "apply_async") as send,
        django_capture_on_commit_callbacks(execute=True),
    ):
        answer = client.post(
            "/admin/telemetry/metricsource/",
            {"action": "backfill_last_day", "_selected_action": [source.pk]},
        )
    run = BackgroundRun.objects.get(kind="telemetry.backfill", params__source=source.pk)
    assert answer.status_code == 302 and answer["Location"] == f"/telemetry/backfills/{run.pk}/"
    send.assert_called_once_with(args=[run.pk])
    assert run.status == BackgroundRun.Status.QUEUED and run.percent == 0 and run.actor == staff_user
    waiting = client.get(f"/telemetry/backfills/{run.pk}/").content.decode()
    assert f'data-url="/runs/{run.pk}/"' in waiting and "<script>" not in waiting

    backfill_task.apply(args=[run.pk]).get()  # what the worker does with the message
    run.refresh_from_db()
    # 24 hour chunks, 25 when the start is not on a 5-minute boundary.
    assert run.status == BackgroundRun.Status.SUCCEEDED
    assert run.progress_done == run.progress_total in (24, 25)
    assert run.result["used"] > 0
    assert backfill_task.apply(args=[run.pk]).get() is None  # a redelivered message does nothing
    progress = client.get(f"/runs/{run.pk}/").json()
    assert progress["percent"] == 100 and progress["status"] == "succeeded"
    assert "prom-bf" in client.get(f"/telemetry/backfills/{run.pk}/").content.decode()

    client.force_login(make_user("nobody"))
    assert client.get(f"/telemetry/backfills/{run.pk}/").status_code == 302  # staff only
    assert client.get(f"/runs/{run.pk}/").status_code == 404  # nor its progress


def test_a_backfill_of_an_exporter_source_is_refused(ledger):
    from apps.core.errors import ValidationFailed
    from apps.core.models import BackgroundRun

    source = metric_sources.metric_source_create(
        actor="test",
        cluster=ledger["cluster"],
        name="direct",
        kind="exporter",
        targets=["http://127.0.0.1:1/metrics"],
    )
    end = timezone.now()
    with pytest.raises(ValidationFailed, match="only those can be backfilled"):
        metric_sources.backfill_request(source=source, start=end - timedelta(hours=1), end=end, actor="test")
    assert not BackgroundRun.objects.filter(kind="telemetry.backfill").exists()
