"""When an API token expires: one reader for what the token page and the API send, one bound for
every way a token is made (page, API, admin, services).

An expiry is a date (``2027-01-31``: the token works until the end of that day in the reader's time
zone) or an ISO 8601 date and time (``2027-01-31T18:00:00+08:00``). It lies in the future and at most
``MAX_LIFETIME`` ahead; no expiry at all is a token that works until it is revoked. A date the calendar
does not have (``2026-13-01``) or one no time zone conversion can hold (``0001-01-01``) is a 400 with
the reason, never a 500.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from django.utils.translation import gettext as _

from apps.core.errors import ValidationFailed

MAX_LIFETIME_YEARS = 10
MAX_LIFETIME = timedelta(days=365 * MAX_LIFETIME_YEARS + MAX_LIFETIME_YEARS // 4)
_SHOWN = 40  # characters of a refused value quoted back


def expiry_problem(expires_at: datetime, *, now: datetime | None = None) -> str | None:
    """Why ``expires_at`` (aware) is not an expiry a new token may have (translated), or None."""
    now = now or timezone.now()
    if expires_at <= now:
        return _("The expiry must be in the future; leave it empty for a token that does not expire.")
    if expires_at > now + MAX_LIFETIME:
        return _(
            "The expiry can be at most %(years)d years ahead (until %(limit)s); leave it empty for a "
            "token that does not expire."
        ) % {"years": MAX_LIFETIME_YEARS, "limit": timezone.localdate(now + MAX_LIFETIME).isoformat()}
    return None


def _refuse(message: str, field: str) -> ValidationFailed:
    return ValidationFailed(message, details={field: [message]})


def parse_expiry(raw, *, field: str = "expires_at") -> datetime | None:
    """The aware expiry ``raw`` names (None for an empty value); a bad one is a ``ValidationFailed``
    whose details name ``field``."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise _refuse(_("The expiry is a date as text (YYYY-MM-DD) or empty."), field)
    raw = raw.strip()
    if not raw:
        return None
    shown = repr(raw[:_SHOWN])
    try:
        day = parse_date(raw)
        moment = parse_datetime(raw) if day is None else None
    except ValueError:  # the right shape, but no such day, hour or offset
        raise _refuse(
            _(
                "%(value)s is not a date the calendar has: the month is 1–12, the day exists in that "
                "month, the hour is 0–23 and the offset within ±23:59."
            )
            % {"value": shown},
            field,
        ) from None
    if day is not None:
        # End of that day where the reader is; the bound below is checked before any conversion.
        moment = datetime.combine(day, time(23, 59, 59))
    if moment is None:
        raise _refuse(
            _("%(value)s is not a date: use YYYY-MM-DD (or a date and time such as %(example)s).")
            % {"value": shown, "example": "2027-01-31T18:00:00+08:00"},
            field,
        )
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment)
    problem = expiry_problem(moment)
    if problem is not None:
        raise _refuse(problem, field)
    return moment
