"""CSV exports of the utilization reports (one flat table per report).

Node names, model names and other texts can come from agents and imports, so every cell goes through
``apps.core.exports.csv_cell`` (spreadsheet formula injection, OWASP "CSV Injection"); numbers stay
numbers."""

from __future__ import annotations

import csv
import io
from typing import Any

from django.http import HttpResponse

from apps.core.exports import csv_row


def report_rows(name: str, report: Any) -> tuple[list[str], list[list[Any]]]:
    """Flatten a report (as returned by ``apps.telemetry.selectors``) into a header and rows."""
    if name == "fleet":
        header = ["group", "window_start", "utilization_pct", "cards", "quality"]
        rows = [
            [s["group"], p["window_start"], p["utilization_pct"], p["cards"], p["quality"]]
            for s in report["series"]
            for p in s["points"]
        ]
    elif name in ("top-nodes", "idle-cards"):
        header = list(report[0].keys()) if report else ["node"]
        rows = [[r[k] for k in header] for r in report]
    elif name == "figures":
        header = ["figure", "value_pct", "quality", "method", "start", "end"]
        rows = [
            [
                f,
                report[f"{f}_pct"],
                report[f"{f}_quality"],
                report["methods"][f],
                report["start"],
                report["end"],
            ]
            for f in ("allocation_ratio", "physical_utilization", "effective_utilization")
        ]
    elif name == "comparison":
        header = ["figure", "baseline_pct", "current_pct", "ratio", "baseline_quality", "current_quality"]
        rows = [
            [
                f,
                report["baseline"][f"{f}_pct"],
                report["current"][f"{f}_pct"],
                report["ratios"][f"{f}_pct"],
                report["baseline"][f"{f}_quality"],
                report["current"][f"{f}_quality"],
            ]
            for f in ("allocation_ratio", "physical_utilization", "effective_utilization")
        ]
    elif name == "fragmentation":
        header = [
            "device_id",
            "node",
            "index",
            "vendor",
            "model",
            "free_compute_milli",
            "free_memory_mib",
            "free_cu",
        ]
        rows = [[r[k] for k in header] for r in report["cards"]]
    elif name in ("job", "project"):
        header = ["window_start", "utilization_pct", "allocated_cards", "memory_used_mib", "cards", "quality"]
        rows = [[p[k] for k in header] for p in report["points"]]
    else:  # pragma: no cover - the views only pass known names
        raise ValueError(name)
    return header, rows


def csv_response(name: str, report: Any, filename: str) -> HttpResponse:
    header, rows = report_rows(name, report)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(csv_row(header))
    writer.writerows(csv_row(row) for row in rows)
    response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
