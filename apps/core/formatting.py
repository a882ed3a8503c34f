"""One way to print numbers and times, on pages, charts, exports and messages.

Times are shown in the current time zone: the platform's (settings.TIME_ZONE, e.g. Asia/Shanghai) unless
a view activated the user's. Pages use Django's localized formats (``DATETIME_FORMAT`` /
``SHORT_DATETIME_FORMAT`` from ``config/formats/<lang>/formats.py``: "2026-12-01 16:38" in both languages,
https://docs.djangoproject.com/en/5.2/topics/i18n/formatting/#creating-custom-format-files); exports use
ISO 8601 with the zone's offset ("2026-12-01 16:38:00+08:00"). Decimals print without trailing zeros or
an exponent: ``Decimal("0.580100000000000")`` → "0.5801", ``Decimal("1E+1")`` → "10".
"""

from __future__ import annotations

import re
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.utils import formats, timezone

# A whole ISO 8601 date-time with an offset or "Z", as datetime.isoformat() writes it.
ISO_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})\Z")


def zone_name() -> str:
    """The name of the zone times are shown in (the platform's, or the user's where activated)."""
    return str(timezone.get_current_timezone())


def as_local(value: Any) -> Any:
    """An aware datetime (or an ISO string with an offset) in the current zone; anything else as is."""
    if isinstance(value, str) and ISO_DATETIME.match(value):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if isinstance(value, datetime) and timezone.is_aware(value):
        return timezone.localtime(value)
    return value


def iso_local(value: Any) -> Any:
    """For exports: an aware datetime as ISO 8601 in the current zone with its offset; else unchanged."""
    local = as_local(value)
    if isinstance(local, datetime) and timezone.is_aware(local):
        return local.isoformat(sep=" ")
    return value


def chart_time(value: Any) -> Any:
    """For plotly: the wall-clock time in the current zone, without offset. plotly.js has no time zones:
    it draws a date string's digits as they are (src/lib/dates.js dateTime2ms), so a UTC string was
    drawn as UTC on pages that say Asia/Shanghai (issue 21, defect 1)."""
    local = as_local(value)
    if isinstance(local, datetime):
        return local.replace(tzinfo=None).isoformat(sep=" ", timespec="seconds")
    return value


def format_datetime(value: Any, *, short: bool = True) -> str:
    """A time as the page shows it, localized, in the current zone ("2026-12-01 16:38")."""
    if value in (None, ""):
        return ""
    local = as_local(value)
    if isinstance(local, datetime):
        return formats.date_format(local, "SHORT_DATETIME_FORMAT" if short else "DATETIME_FORMAT")
    if isinstance(local, date):
        return formats.date_format(local, "SHORT_DATE_FORMAT")
    return str(value)


def plain_decimal(value: Any, places: int | None = None) -> str:
    """A number without exponent or trailing zeros ("0.5801", "10"); ``places`` rounds first."""
    if value in (None, ""):
        return ""
    try:
        number = value if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError):
        return str(value)
    if not number.is_finite():
        return str(value)
    if places is not None:
        number = number.quantize(Decimal(1).scaleb(-places))
    text = f"{number:f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def format_number(value: Any, places: int | None = None, *, grouping: bool = False) -> str:
    """``plain_decimal`` with the language's decimal separator (and thousands grouping when asked)."""
    text = plain_decimal(value, places)
    if not text or not re.fullmatch(r"-?\d+(?:\.\d+)?", text):
        return text
    decimals = len(text.split(".")[1]) if "." in text else 0
    return formats.number_format(Decimal(text), decimal_pos=decimals, use_l10n=True, force_grouping=grouping)
