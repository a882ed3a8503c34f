"""The checks the card and node summaries share (issue 31): both sum rows per bucket (an hour of
5-minute rows, a day of hourly ones) and are rebuilt with the fleet rollups, so ingesting again, a late
sample, their migration's backfill, a rebuild and the purge leave them equal to the rows they sum.

Each takes the summary's table as sorted tuples (resolution, bucket_start, source, key, …) and says
what its key is (a card's id, its node's id)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from datetime import timedelta

from django.db import connection
from django.utils import timezone

from apps.telemetry import ingest, rollups, selectors, windows
from apps.telemetry.samples import Sample
from tests.telemetry.test_fleet_rollups import _samples, _util


def ingest_again_then_a_late_sample(scene, table: Callable[[], list], key: Callable) -> None:
    """Ingesting the last window again changes nothing; a late sample of one card rebuilds only the
    rows of its ``key`` (one per resolution)."""
    before = table()
    last = scene["end"] - timedelta(minutes=5)
    again = [s for s in _samples(scene["exact"], scene["start"], scene["end"], _util) if s.at >= last]
    ingest.samples_ingest(samples=again, source="t", scrape_interval_s=30)
    assert table() == before
    card = scene["devices"]["gpu-02/0"]
    late = [Sample(at=scene["end"] + timedelta(seconds=5), device_id=card.pk, utilization_pct=99.0)]
    ingest.samples_ingest(samples=late, source="t", scrape_interval_s=30)
    changed = {(r[0], r[3]) for r in set(table()) ^ set(before)}
    assert changed == {(windows.WINDOW_S, key(card)), (windows.HOUR_S, key(card))}


def backfill_and_rebuild(table: Callable[[], list], model, migration: str, rebuild: Callable) -> list:
    """The migration's backfill and a rebuild of every bucket give the rows ingest wrote (returned)."""
    written = table()
    assert written
    with connection.schema_editor() as editor:
        importlib.import_module(migration).backfill(None, editor)
    assert table() == written
    model.objects.all().delete()
    for resolution in (windows.WINDOW_S, windows.HOUR_S):
        rebuild(resolution=resolution)
    assert table() == written
    return written


def purge_past_retention(model) -> None:
    """The purge drops the 5-minute rows' summaries past their retention, then the hourly rows'."""
    rollups.rollups_purge(now=timezone.now() + timedelta(days=20))
    assert not model.objects.filter(resolution=windows.WINDOW_S).exists()
    assert model.objects.filter(resolution=windows.HOUR_S).exists()
    rollups.rollups_purge(now=timezone.now() + timedelta(days=500))
    assert not model.objects.exists()


def purge_inside_a_day(scene, from_rows: Callable, from_summaries: Callable, same: Callable) -> None:
    """The hourly retention cut falls inside a day: the rows after it stay, and so must their sum in
    that day's summaries (a report of the whole day reads it from them): ``same`` asserts what
    ``from_summaries`` gives of a period equals what ``from_rows`` gives."""
    cut = scene["start"].replace(minute=30)  # inside the first hour with rows: later hours are kept
    rollups.rollups_purge(now=cut + timedelta(days=400))  # TELEMETRY_HOURLY_RETENTION_DAYS' default
    day = cut.replace(hour=0, minute=0)
    period = selectors.period_parse(day, day + timedelta(days=3))  # hourly rows, whole days only
    assert period.resolution == windows.HOUR_S
    reference = from_rows(period)
    assert reference
    same(reference, from_summaries(period))
