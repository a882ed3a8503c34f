"""A card's and a node's metric history (issue 29 §5): utilization, memory used, temperature, power
and the error counters the card's exporter gives, over a preset range (1 h, 24 h, 7 d) or a custom
one, read from the finest rollup that fits.

Resolution (``history_resolution``): the 5-minute rows when the range holds at most ``MAX_POINTS`` of
them and starts inside their retention (TELEMETRY_ROLLUP_RETENTION_DAYS), else the hourly rows; a range
longer than ``MAX_POINTS`` hours merges whole hours into buckets of k hours so that a line never has
more than ``MAX_POINTS`` points. Windows merge exactly: averages are Σ sums ÷ Σ counts of the rows,
maxima are maxima, error counter increases add up.

One line per card (its whole-card rows; a card with only MIG / partition rows gets a line per
partition), one source per card (the one with the most windows in the range), so no window is counted
twice. Visibility is the ledger's: a card or node the reader may not see is a 404, and a node's history
holds only the cards the reader sees on it.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from apps.core.errors import ValidationFailed
from apps.telemetry.models import DeviceRollup
from apps.telemetry.windows import HOUR_S, WINDOW_S, setting

PRESETS: dict[str, timedelta] = {
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
}
PRESET_LABELS = {
    "1h": gettext_lazy("1 h"),
    "24h": gettext_lazy("24 h"),
    "7d": gettext_lazy("7 d"),
    "custom": gettext_lazy("Custom"),
}
DEFAULT_PRESET = "24h"
CUSTOM = "custom"
# At most this many points a line: 24 h of 5-minute windows (288) and 7 d of hours (168) fit whole.
MAX_POINTS = 600
MAX_SPAN = timedelta(days=400)
RANGE_MIN = datetime(2000, 1, 1, tzinfo=UTC)
RANGE_MAX = datetime(2100, 1, 1, tzinfo=UTC)
# The page polls its chart data this often (seconds) while the range ends now.
REFRESH_S = 60

METRICS = ("utilization", "memory", "temperature", "power")

# Error counters by the key the metric maps store them under (apps.telemetry.metric_maps).
COUNTER_LABELS = {
    "ecc_sbe": gettext_lazy("ECC single-bit errors"),
    "ecc_dbe": gettext_lazy("ECC double-bit errors"),
    "ecc_correctable": gettext_lazy("ECC correctable errors"),
    "ecc_uncorrectable": gettext_lazy("ECC uncorrectable errors"),
    "correctable_remapped_rows": gettext_lazy("correctable remapped rows"),
    "uncorrectable_remapped_rows": gettext_lazy("uncorrectable remapped rows"),
    "pcie_replay": gettext_lazy("PCIe replays"),
    "xid_errors": gettext_lazy("XID errors"),
}
XID_SHOWN = 20


def counter_label(key: str) -> str:
    return str(COUNTER_LABELS[key]) if key in COUNTER_LABELS else key


@dataclass(frozen=True)
class HistoryRange:
    preset: str
    start: datetime
    end: datetime

    @property
    def live(self) -> bool:
        """A preset range ends now: its page refreshes; a custom one stays as asked."""
        return self.preset != CUSTOM

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


def _bad(message: str, field: str) -> ValidationFailed:
    return ValidationFailed(message, details={field: [message]})


def _instant(raw: str, field: str, label: str) -> datetime:
    text = (raw or "").strip()
    parsed = None
    if text:
        try:
            parsed = parse_datetime(text.replace(" ", "T", 1) if "T" not in text else text)
        except ValueError:
            parsed = None
    if parsed is None:
        raise _bad(
            _("%(field)s: not a date and time: %(value)s (write YYYY-MM-DD HH:MM).")
            % {"field": label, "value": repr(text[:40])},
            field,
        )
    try:
        if timezone.is_naive(parsed):
            parsed = timezone.make_aware(parsed)  # in the zone the page shows (the platform's)
        parsed = parsed.astimezone(UTC)
    except (OverflowError, ValueError):
        parsed = None
    if parsed is None or not RANGE_MIN <= parsed <= RANGE_MAX:
        raise _bad(
            _("%(field)s: out of range: %(value)s; a history lies between %(min)s and %(max)s.")
            % {
                "field": label,
                "value": repr(text[:40]),
                "min": RANGE_MIN.date().isoformat(),
                "max": RANGE_MAX.date().isoformat(),
            },
            field,
        )
    return parsed


def history_range(params, *, now: datetime | None = None) -> HistoryRange:
    """The range a page or its chart data asks for: ``range`` = 1h | 24h | 7d | custom (default 24h);
    custom takes ``from`` and ``to`` (ISO date-times; without an offset, in the current zone).
    ValidationFailed (a 400) with a message saying what to fix."""
    now = now or timezone.now()
    preset = (params.get("range") or "").strip() or DEFAULT_PRESET
    if preset in PRESETS:
        return HistoryRange(preset, now - PRESETS[preset], now)
    if preset != CUSTOM:
        raise _bad(
            _("Unknown range %(value)s: choose 1h, 24h, 7d or custom.") % {"value": repr(preset[:20])},
            "range",
        )
    raw_from, raw_to = params.get("from") or "", params.get("to") or ""
    if not raw_from.strip() or not raw_to.strip():
        raise _bad(_("A custom range needs both “from” and “to”."), "from" if not raw_from.strip() else "to")
    start = _instant(raw_from, "from", _("From"))
    end = _instant(raw_to, "to", _("To"))
    if start >= end:
        raise _bad(_("“From” must be before “to”."), "from")
    if end - start > MAX_SPAN:
        raise _bad(_("A history spans at most %(days)d days.") % {"days": MAX_SPAN.days}, "from")
    return HistoryRange(CUSTOM, start, end)


def history_resolution(rng: HistoryRange, *, now: datetime | None = None) -> tuple[int, int]:
    """(rollup resolution read, bucket seconds drawn) for a range."""
    now = now or timezone.now()
    five_kept = now - timedelta(days=setting("TELEMETRY_ROLLUP_RETENTION_DAYS", 14))
    if rng.seconds / WINDOW_S <= MAX_POINTS and rng.start >= five_kept:
        return WINDOW_S, WINDOW_S
    hours = max(1, math.ceil(rng.seconds / HOUR_S / MAX_POINTS))
    return HOUR_S, hours * HOUR_S


_COLUMNS = (
    "device_id",
    "partition",
    "source",
    "quality",
    "window_start",
    "util_sum",
    "util_n",
    "util_max",
    "mem_used_sum",
    "mem_used_n",
    "mem_total_mib",
    "temp_max_c",
    "power_sum",
    "power_n",
    "error_deltas",
    "health",
)


def _bucket_start(at: datetime, bucket: int) -> datetime:
    return datetime.fromtimestamp(int(at.timestamp()) // bucket * bucket, tz=UTC)


def _merge(rows: list[dict], bucket: int) -> list[dict]:
    """Rows of one line (sorted by window) merged into buckets of ``bucket`` seconds."""
    out: dict[datetime, dict] = {}
    for r in rows:
        key = _bucket_start(r["window_start"], bucket)
        b = out.get(key)
        if b is None:
            b = out[key] = {
                "window_start": key,
                "estimated": False,
                "util_sum": 0.0,
                "util_n": 0,
                "mem_sum": 0.0,
                "mem_n": 0,
                "mem_total": None,
                "temp": None,
                "power_sum": 0.0,
                "power_n": 0,
                "errors": {},
                "xid": [],
            }
        b["estimated"] = b["estimated"] or r["quality"] == "estimated"
        b["util_sum"] += r["util_sum"] or 0.0
        b["util_n"] += r["util_n"] or 0
        b["mem_sum"] += r["mem_used_sum"] or 0.0
        b["mem_n"] += r["mem_used_n"] or 0
        if r["mem_total_mib"] is not None:
            b["mem_total"] = max(b["mem_total"] or 0.0, r["mem_total_mib"])
        if r["temp_max_c"] is not None:
            b["temp"] = r["temp_max_c"] if b["temp"] is None else max(b["temp"], r["temp_max_c"])
        b["power_sum"] += r["power_sum"] or 0.0
        b["power_n"] += r["power_n"] or 0
        for name, delta in (r["error_deltas"] or {}).items():
            if isinstance(delta, int | float):
                b["errors"][name] = b["errors"].get(name, 0.0) + delta
        for code in (r["health"] or {}).get("xid", []) or []:
            if code not in b["xid"]:
                b["xid"].append(code)
    points = []
    for b in sorted(out.values(), key=lambda item: item["window_start"]):
        points.append(
            {
                "window_start": b["window_start"],
                "quality": "estimated" if b["estimated"] else "exact",
                "utilization": round(b["util_sum"] / b["util_n"], 2) if b["util_n"] else None,
                "memory": round(b["mem_sum"] / b["mem_n"], 1) if b["mem_n"] else None,
                "memory_total": b["mem_total"],
                "temperature": b["temp"],
                "power": round(b["power_sum"] / b["power_n"], 1) if b["power_n"] else None,
                "errors": b["errors"],
                "xid": b["xid"],
            }
        )
    return points


def _card_label(device) -> str:
    from apps.core.templatetags.suanchi import DEVICE_KIND_BY_VENDOR

    return f"{DEVICE_KIND_BY_VENDOR.get(device.vendor, 'GPU')}{device.index}"


def history(devices: list, rng: HistoryRange, *, now: datetime | None = None) -> dict:
    """The lines of ``devices`` (already scoped to the reader) over ``rng``."""
    from apps.telemetry.selectors.jobs import EXPORTERS, _exporter_name

    resolution, bucket = history_resolution(rng, now=now)
    by_pk = {d.pk: d for d in devices}
    floor = _bucket_start(rng.start, resolution)
    rows = (
        DeviceRollup.objects.filter(
            device_id__in=list(by_pk),
            resolution=resolution,
            window_start__gte=floor,
            window_start__lt=rng.end,
        )
        .order_by("device_id", "window_start")
        .values(*_COLUMNS)
    )
    per_device: dict[int, list[dict]] = defaultdict(list)
    for row in rows:
        per_device[row["device_id"]].append(row)
    lines = []
    for device in devices:
        found = per_device.get(device.pk, [])
        sources = Counter(r["source"] for r in found)
        source = sources.most_common(1)[0][0] if sources else ""
        found = [r for r in found if r["source"] == source]
        partitions = sorted({r["partition"] for r in found})
        if "" in partitions:
            partitions = [""]
        base = _card_label(device)
        exporter = _exporter_name(source, device.vendor) if source else EXPORTERS.get(device.vendor, "")
        if not partitions:
            lines.append(
                {
                    "device": device.pk,
                    "label": base,
                    "partition": "",
                    "source": "",
                    "exporter": exporter,
                    "points": [],
                }
            )
            continue
        for partition in partitions:
            points = _merge([r for r in found if r["partition"] == partition], bucket)
            lines.append(
                {
                    "device": device.pk,
                    "label": f"{base} {partition}" if partition else base,
                    "partition": partition,
                    "source": source,
                    "exporter": exporter,
                    "points": points,
                }
            )
    counters = sorted({name for line in lines for p in line["points"] for name in p["errors"]})
    xid = sorted(
        (
            {"label": line["label"], "window_start": p["window_start"], "codes": p["xid"]}
            for line in lines
            for p in line["points"]
            if p["xid"]
        ),
        key=lambda item: item["window_start"],
        reverse=True,
    )
    missing = {
        metric: [line for line in lines if line["points"] and all(p[metric] is None for p in line["points"])]
        for metric in METRICS
    }
    return {
        "range": rng,
        "resolution": resolution,
        "bucket": bucket,
        "lines": lines,
        "counters": counters,
        "xid": xid[:XID_SHOWN],
        "xid_more": max(0, len(xid) - XID_SHOWN),
        "missing": missing,
        "has_data": any(line["points"] for line in lines),
    }


def device_history(*, user, pk: int, rng: HistoryRange, now: datetime | None = None) -> dict:
    """One card's history; NotFound when the reader may not see the card."""
    from apps.core.errors import NotFound
    from apps.inventory.selectors import device_list

    device = device_list(user=user).filter(pk=pk).first()
    if device is None:
        raise NotFound(_("No such device."))
    return {"device": device, **history([device], rng, now=now)}


def node_history(*, user, pk: int, rng: HistoryRange, now: datetime | None = None) -> dict:
    """A node's history: one line per card of it the reader sees (retired cards left out)."""
    from apps.core.errors import NotFound
    from apps.inventory.models import Device
    from apps.inventory.selectors import device_list, node_list

    node = node_list(user=user).filter(pk=pk).first()
    if node is None:
        raise NotFound(_("No such node."))
    devices = list(
        device_list(user=user)
        .filter(node=node)
        .exclude(health=Device.Health.RETIRED)
        .order_by("vendor", "index")
    )
    return {"node": node, **history(devices, rng, now=now)}
