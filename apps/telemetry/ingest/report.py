"""What an ingest did: the report every front door returns (counts, skip reasons with examples)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from apps.telemetry.samples import Conversion

MAX_REJECTED_LINES = 200  # lines named one by one in an ingest report (all are counted)


@dataclass
class IngestReport:
    """What an ingest did. ``received`` / ``used`` count normalized samples (one device or partition
    instance at one instant); ``skipped`` counts by reason — exposition-level reasons
    (``malformed_line``, ``unknown_family``, ``unused_family``, ``unused_series``, ``not_a_number``,
    ``not_supported``, ``no_device_identity``, ``unknown_vendor_brand``) count lines / series, sample-level reasons (``device_not_in_ledger``,
    ``clock_skew_future``, ``older_than_retention``, ``duplicate_sample``, ``already_ingested``,
    ``bad_timestamp``) count samples, and physically impossible values (``implausible_utilization``,
    ``implausible_memory``, ``implausible_temperature``, ``implausible_power``, ``implausible_counter``)
    count values dropped from otherwise used samples. ``examples`` keeps up to five examples per
    reason; ``rejected_lines`` names every skipped line of an exposition page (number, reason)."""

    source: str
    dry_run: bool = False
    received: int = 0
    used: int = 0
    skipped: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    counter_resets: int = 0
    rollups_written: int = 0
    hourly_written: int = 0
    attributions_written: int = 0
    events_raised: int = 0
    # Read-back of the cards pods really run on (exporter pod labels vs allocations).
    placements_moved: int = 0
    placement_conflicts: int = 0
    vendors: list[str] = field(default_factory=list)
    window_start: datetime | None = None
    window_end: datetime | None = None
    rejected_lines: list[tuple[int, str]] = field(default_factory=list)

    def skip(self, reason: str, example: str, count: int = 1) -> None:
        self.skipped[reason] += count
        if len(self.examples[reason]) < 5 and example not in self.examples[reason]:
            self.examples[reason].append(example)

    def absorb(self, conversion: Conversion) -> None:
        for reason, count in conversion.skipped.items():
            self.skipped[reason] += count
            for ex in conversion.examples.get(reason, []):
                if len(self.examples[reason]) < 5 and ex not in self.examples[reason]:
                    self.examples[reason].append(ex)
        self.vendors = sorted(set(self.vendors) | set(conversion.vendors))

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "dry_run": self.dry_run,
            "vendors": self.vendors,
            "received": self.received,
            "used": self.used,
            "skipped": dict(sorted(self.skipped.items())),
            "skipped_total": sum(self.skipped.values()),
            "examples": {k: v for k, v in sorted(self.examples.items()) if v},
            "counter_resets": self.counter_resets,
            "rollups_written": self.rollups_written,
            "hourly_written": self.hourly_written,
            "attributions_written": self.attributions_written,
            "events_raised": self.events_raised,
            "placements_moved": self.placements_moved,
            "placement_conflicts": self.placement_conflicts,
            "window_start": self.window_start.isoformat() if self.window_start else None,
            "window_end": self.window_end.isoformat() if self.window_end else None,
            "rejected_lines": [
                {"line": line, "reason": reason} for line, reason in self.rejected_lines[:MAX_REJECTED_LINES]
            ],
        }


def _merge_reports(into: IngestReport, part: IngestReport) -> None:
    for name in (
        "received",
        "used",
        "counter_resets",
        "rollups_written",
        "hourly_written",
        "attributions_written",
        "events_raised",
        "placements_moved",
        "placement_conflicts",
    ):
        setattr(into, name, getattr(into, name) + getattr(part, name))
    for reason, count in part.skipped.items():
        into.skipped[reason] += count
        for ex in part.examples.get(reason, []):
            if len(into.examples[reason]) < 5:
                into.examples[reason].append(ex)
    into.vendors = sorted(set(into.vendors) | set(part.vendors))
    into.window_start = min(filter(None, [into.window_start, part.window_start]), default=None)
    into.window_end = max(filter(None, [into.window_end, part.window_end]), default=None)
