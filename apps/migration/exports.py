"""CSV exports of the cockpit: services with their tracks side by side, and vendor shares per month."""

from __future__ import annotations

import csv
import io
from datetime import datetime

from apps.core.exports import csv_cell
from apps.migration import selectors
from apps.migration.models import MigratedService

SERVICE_COLUMNS = [
    "plan",
    "project",
    "service",
    "kind",
    "phase",
    "gate_status",
    "track",
    "vendor",
    "job_id",
    "job_state",
    "replicas",
    "weight_pct",
    "requests",
    "throughput_rps",
    "p99_ms",
    "error_rate_pct",
    "cu_hours",
    "cost",
    "cost_per_1k_requests",
    "utilization_pct",
    "metric_sources",
]
VENDOR_COLUMNS = ["month", "vendor", "cu_hours", "share_pct", "amount", "ledger_entries", "month_total"]


def _cell(value) -> str:
    # Spreadsheet formula injection: one rule for every export (apps.core.exports, OWASP "CSV Injection").
    return csv_cell(value)


def services_csv(services: list[MigratedService], *, start: datetime, end: datetime) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(SERVICE_COLUMNS)
    for service in services:
        for fig in selectors.track_comparison(service=service, start=start, end=end):
            writer.writerow(
                [
                    _cell(v)
                    for v in (
                        service.plan.name,
                        service.project.slug,
                        service.name,
                        service.kind,
                        service.phase,
                        service.gate_status,
                        fig.track,
                        fig.vendor,
                        fig.job_id,
                        fig.job_state,
                        fig.replicas,
                        fig.weight,
                        fig.requests,
                        fig.throughput_rps,
                        fig.p99_ms,
                        fig.error_rate_pct,
                        fig.cu_hours,
                        fig.cost,
                        fig.cost_per_1k,
                        fig.utilization_pct,
                        " | ".join(fig.sources),
                    )
                ]
            )
    return out.getvalue()


def vendor_share_csv(months: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(VENDOR_COLUMNS)
    for month in months:
        for row in month["vendors"]:
            writer.writerow(
                [
                    _cell(v)
                    for v in (
                        month["month"].strftime("%Y-%m"),
                        row["vendor"],
                        row["cu_hours"],
                        row["share_pct"],
                        row["amount"],
                        row["entries"],
                        month["amount"],
                    )
                ]
            )
    return out.getvalue()
