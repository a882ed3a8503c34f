"""ingest_metrics (one exporter scrape) and the periodic task with nothing configured."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from apps.telemetry.models import DeviceRollup, MetricSource
from tests.fixtures.telemetry import FIXTURES
from worker.tasks.telemetry import telemetry_ingest_task

SAMPLE_KEYS = {
    "device",
    "vendor",
    "mig_profile",
    "utilization_pct",
    "memory_used_mib",
    "memory_total_mib",
    "temperature_c",
    "power_w",
    "pod",
    "namespace",
}
DEVICE_KEYS = {"uuid", "serial", "pci_bus_id", "index", "node"}


def run(*args: str) -> str:
    out = StringIO()
    call_command("ingest_metrics", *args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize(
    "name, vendor, count",
    [
        ("dcgm.prom", "nvidia", 2),
        ("dcgm_mig.prom", "nvidia", 2),
        ("ascend.prom", "huawei", 2),
        ("amd.prom", "amd", 1),
        ("hygon.prom", "hygon", 1),
        ("cambricon.prom", "cambricon", 1),
    ],
)
def test_dry_run_json_prints_normalized_samples_and_writes_nothing(db, name, vendor, count):
    body = json.loads(
        run("--file", str(FIXTURES / name), "--dry-run", "--json", "--at", "2026-11-29T08:00:00+00:00")
    )
    assert body["vendor"] == vendor
    assert len(body["samples"]) == count
    for sample in body["samples"]:
        assert set(sample) == SAMPLE_KEYS
        assert set(sample["device"]) == DEVICE_KEYS
        assert sample["memory_used_mib"] is not None and sample["utilization_pct"] is not None
    assert body["report"]["dry_run"] is True
    assert not DeviceRollup.objects.exists()


def test_dry_run_json_keeps_nulls_where_the_exporter_does_not_say(db):
    body = json.loads(run("--file", str(FIXTURES / "dcgm_mig.prom"), "--dry-run", "--json"))
    sample = body["samples"][0]
    assert sample["mig_profile"] == "3g.40gb"
    assert sample["temperature_c"] is None and sample["power_w"] is None
    assert sample["device"]["serial"] is None


def test_it_ingests_and_summarises(ledger):
    text = run(
        "--file", str(FIXTURES / "hygon.prom"), "--at", "2026-11-29T08:00:00+00:00", "--cluster", "tele"
    )
    assert text.startswith("hygon: 1 samples, 1 used, 0 skipped")
    row = DeviceRollup.objects.get(resolution=300)
    assert (row.device, row.util_avg) == (ledger["devices"]["dcu-01/0"], 55.0)


def test_bad_input_is_a_command_error(db, tmp_path):
    bad = tmp_path / "bad.prom"
    bad.write_text("dcu_temp{device_id= 1\n")
    with pytest.raises(CommandError, match="No metric sample"):
        run("--file", str(bad))
    with pytest.raises(CommandError, match="cannot read"):
        run("--file", str(tmp_path / "missing.prom"))
    with pytest.raises(CommandError, match="--at"):
        run("--file", str(FIXTURES / "hygon.prom"), "--at", "yesterday")
    with pytest.raises(CommandError, match="unknown cluster"):
        run("--file", str(FIXTURES / "hygon.prom"), "--cluster", "nope")


def test_backfill_rejects_bad_arguments(db):
    with pytest.raises(CommandError, match="--step"):
        call_command(
            "ingest_prometheus",
            "--url",
            "http://127.0.0.1:9",
            "--start",
            "2026-11-29T07:00:00Z",
            "--end",
            "2026-11-29T08:00:00Z",
            "--step",
            "fast",
        )
    with pytest.raises(CommandError, match="end must be after"):
        call_command(
            "ingest_prometheus",
            "--url",
            "http://127.0.0.1:9",
            "--start",
            "2026-11-29T08:00:00Z",
            "--end",
            "2026-11-29T07:00:00Z",
        )
    with pytest.raises(CommandError, match="not an http"):
        call_command(
            "ingest_prometheus",
            "--url",
            "ftp://x",
            "--start",
            "2026-11-29T07:00:00Z",
            "--end",
            "2026-11-29T08:00:00Z",
        )


def test_the_task_does_nothing_when_no_source_is_configured(db):
    result = telemetry_ingest_task.apply().get()
    assert result["sources"] == 0 and result["results"] == {}
    assert not DeviceRollup.objects.exists()


def test_disabled_sources_are_left_alone(ledger):
    MetricSource.objects.create(
        cluster=ledger["cluster"], name="off", url="http://127.0.0.1:9", enabled=False
    )
    assert telemetry_ingest_task.apply().get()["sources"] == 0


def test_admin_lists_rollups_and_creates_sources_through_the_service(client, ledger, staff_user):
    from apps.core.models import ChangeRecord

    client.force_login(staff_user)
    for path in ("metricsource", "devicerollup", "jobutilization"):
        assert client.get(f"/admin/telemetry/{path}/").status_code == 200
    r = client.post(
        "/admin/telemetry/metricsource/add/",
        {
            "cluster": ledger["cluster"].pk,
            "name": "prom",
            "kind": "prometheus",
            "url": "http://prometheus:9090",
            "targets": "[]",
            "step_seconds": 10,
            "enabled": "on",
        },
    )
    assert r.status_code == 302, r.content.decode()[:2000]
    source = MetricSource.objects.get(name="prom")
    assert (
        ChangeRecord.objects.filter(action="telemetry.source.create", object_id=str(source.pk)).count() == 1
    )
