"""Front doors: one exporter scrape, a Prometheus window, a configured source — each turned into samples
for ``samples_ingest``."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from apps.core.errors import ParseFailed, ValidationFailed
from apps.inventory.models import Cluster
from apps.telemetry import exposition
from apps.telemetry.ingest.report import IngestReport, _merge_reports
from apps.telemetry.ingest.write import samples_ingest
from apps.telemetry.models import MetricSource, Quality
from apps.telemetry.samples import Conversion, series_to_samples
from apps.telemetry.windows import HOUR_S, WINDOW_S, _dt, setting


def scrape_convert(*, text: str, at: datetime | None = None) -> tuple[Conversion, list[tuple[int, str]]]:
    """Parse one exporter page and fold it into samples (no database). Raises ParseFailed if nothing parses."""
    parsed = exposition.parse(text)
    if not parsed.samples:
        detail = {str(line): msg for line, msg in parsed.errors[:20]}
        raise ParseFailed(
            "No metric sample could be read from the exposition text."
            if parsed.errors or text.strip()
            else "The exposition text is empty.",
            details=detail or None,
        )
    default_at = (at or timezone.now()).timestamp()
    conversion = series_to_samples(
        ((s.name, s.labels, s.value, s.timestamp) for s in parsed.samples), default_at=default_at
    )
    return conversion, parsed.errors


def scrape_ingest(
    *,
    text: str,
    source: str = "exporter",
    at: datetime | None = None,
    cluster: Cluster | None = None,
    quality: str = Quality.EXACT,
    scrape_interval_s: int | None = None,
    actor: Any = "system",
    dry_run: bool = False,
    now: datetime | None = None,
) -> tuple[IngestReport, Conversion]:
    """Ingest one exporter scrape in Prometheus text format (vendor detected from the metric names)."""
    conversion, errors = scrape_convert(text=text, at=at)
    report = IngestReport(source=source, dry_run=dry_run)
    for line, message in errors:
        report.skip("malformed_line", f"line {line}: {message}")
    report.rejected_lines = list(errors)
    report.absorb(conversion)
    if not conversion.samples:
        report.received = 0
        return report, conversion
    samples_ingest(
        samples=conversion.samples,
        source=source,
        quality=quality,
        scrape_interval_s=scrape_interval_s,
        cluster=cluster,
        actor=actor,
        now=now,
        dry_run=dry_run,
        report=report,
    )
    return report, conversion


def _query_names() -> str:
    from apps.telemetry import metric_maps as mm

    names = set(mm.UNIFIED_GAUGES)
    for vmap in mm.VENDOR_MAPS.values():
        names.update(vmap.gauges)
        names.update(vmap.counters)
        names.update(vmap.health)
        names.update(vmap.pod_info)
    names.update(mm.AMD_FIELD_PREFIX + n for n in mm.AMD.gauges | mm.AMD.counters | mm.AMD.health)
    return "|".join(sorted(re.escape(n) for n in names))


def prometheus_query() -> str:
    """The one PromQL selector Suanchi reads: every mapped exporter family plus the unified series."""
    return '{__name__=~"' + _query_names() + '"}'


def prometheus_ingest(
    *,
    url: str,
    start: datetime,
    end: datetime,
    step_s: int = 10,
    source: str | None = None,
    cluster: Cluster | None = None,
    actor: Any = "system",
    chunk_s: int = HOUR_S,
    progress: Callable[[int, int], None] | None = None,
    now: datetime | None = None,
) -> IngestReport:
    """Backfill ``[start, end)`` from a Prometheus HTTP API with ``query_range``, one chunk (one
    transaction) at a time, chunks aligned to 5-minute windows. Network calls happen outside transactions."""
    from apps.telemetry.prometheus import PrometheusClient

    if end <= start:
        raise ValidationFailed("The end must be after the start.", details={"end": ["must be after start"]})
    if step_s < 1:
        raise ValidationFailed("The step must be at least one second.", details={"step": ["≥ 1 s"]})
    client = PrometheusClient(url)
    source = source or f"prometheus:{url}"
    report = IngestReport(source=source)
    query = prometheus_query()
    t0 = start.timestamp()
    t0 -= t0 % WINDOW_S
    t_end = end.timestamp()
    chunk_s = max(WINDOW_S, chunk_s - chunk_s % WINDOW_S)
    total = max(1, int((t_end - t0 + chunk_s - 1) // chunk_s))
    done = 0
    while t0 < t_end:
        t1 = min(t0 + chunk_s, t_end)
        # query_range includes both ends; stop one step short of the next chunk's first instant.
        matrix = client.query_range(
            query, start=t0, end=max(t0, t1 - (step_s if t1 < t_end else 0)), step=step_s
        )
        series = (
            (item["metric"].get("__name__", ""), item["metric"], float(v), float(ts))
            for item in matrix
            for ts, v in item.get("values", [])
        )
        conversion = series_to_samples(series, default_at=t0)
        report.absorb(conversion)
        samples_ingest(
            samples=conversion.samples,
            source=source,
            quality=Quality.EXACT,
            scrape_interval_s=step_s,
            cluster=cluster,
            actor=actor,
            now=now,
            report=report,
        )
        done += 1
        if progress:
            progress(done, total)
        t0 = t1
    return report


def source_ingest(
    *, source: MetricSource, actor: Any = "worker", now: datetime | None = None
) -> IngestReport | None:
    """Ingest a configured source's latest windows; record the outcome (and any error) on the source."""
    from apps.telemetry.prometheus import PrometheusError, scrape

    now = now or timezone.now()
    lookback = timedelta(minutes=setting("TELEMETRY_FIRST_LOOKBACK_MINUTES", 15))
    try:
        if source.kind == MetricSource.Kind.PROMETHEUS:
            since = source.ingested_until or (now - lookback)
            start_ts = since.timestamp() - since.timestamp() % WINDOW_S
            report = prometheus_ingest(
                url=source.url,
                start=_dt(start_ts),
                end=now,
                step_s=source.step_seconds,
                source=source.label,
                cluster=source.cluster,
                actor=actor,
                now=now,
            )
        else:
            report = IngestReport(source=source.label)
            for target in source.targets:
                text = scrape(target)
                part, _ = scrape_ingest(
                    text=text,
                    source=source.label,
                    at=now,
                    cluster=source.cluster,
                    scrape_interval_s=60,
                    actor=actor,
                    now=now,
                )
                _merge_reports(report, part)
    except (PrometheusError, OSError, ParseFailed) as exc:
        MetricSource.objects.filter(pk=source.pk).update(last_run_at=now, last_error=str(exc)[:2000])
        return None
    # The window now in progress is re-read next time (a covering batch replaces it).
    until = _dt(now.timestamp() - now.timestamp() % WINDOW_S)
    MetricSource.objects.filter(pk=source.pk).update(
        last_run_at=now, last_error="", ingested_until=until, last_report=report.as_dict()
    )
    return report


def sources_ingest(*, actor: Any = "worker", now: datetime | None = None) -> dict[str, Any]:
    """Every enabled source; nothing configured → nothing done."""
    results: dict[str, Any] = {}
    for source in MetricSource.objects.filter(enabled=True).select_related("cluster").order_by("pk"):
        report = source_ingest(source=source, actor=actor, now=now)
        results[source.label] = (
            report.as_dict() if report else {"error": MetricSource.objects.get(pk=source.pk).last_error}
        )
    return {"sources": len(results), "results": results}
