"""Forecasts of phase completion from the trend so far. Pure Python: no Django import.

A least-squares line through (time, progress) points, extended to the goal. No trend (fewer than two
points at distinct times, or progress not rising) gives no date rather than a made-up one.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime


def linear_fit(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """(slope, intercept) of the least-squares line, or None for fewer than two distinct x."""
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return slope, my - slope * mx


def eta(points: Sequence[tuple[datetime, float]], goal: float) -> datetime | None:
    """When the trend through ``points`` reaches ``goal`` (the last point's time if it already has);
    None without a rising trend."""
    if not points:
        return None
    points = sorted(points)
    last_t, last_y = points[-1]
    if last_y >= goal:
        return last_t
    fit = linear_fit([(t.timestamp(), y) for t, y in points])
    if fit is None or fit[0] <= 0:
        return None
    slope, intercept = fit
    seconds = (goal - intercept) / slope
    if seconds < last_t.timestamp():
        # The line says "already there" while the data do not: progress from the last point instead.
        seconds = last_t.timestamp() + (goal - last_y) / slope
    try:
        return datetime.fromtimestamp(seconds, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None
