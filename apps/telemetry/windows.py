"""Telemetry's time grid: 5-minute windows and hours, the settings it reads, timestamps both ways."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from apps.core.conf import suanchi_setting

WINDOW_S = 300
HOUR_S = 3600


def setting(name: str, default: Any) -> Any:
    return suanchi_setting(name, default)


def _ts(value: datetime | float) -> float:
    return value if isinstance(value, float | int) else value.timestamp()


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def _when(ts: float) -> str:
    """``ts`` as ISO 8601 for a skip example; a value no datetime can hold is shown as a number."""
    try:
        return _dt(ts).isoformat()
    except (OverflowError, OSError, ValueError):
        return f"{ts:g} s since the epoch"


def _bucket_sql(vendor: str, span: int) -> str:
    """The start of the UTC bucket of ``span`` seconds the window of a row ``r`` lies in, in SQL."""
    if vendor == "postgresql":
        return f"to_timestamp(floor(extract(epoch FROM r.window_start) / {span}) * {span})"
    return f"datetime(CAST(strftime('%%s', r.window_start) AS INTEGER) / {span} * {span}, 'unixepoch')"
