"""Shared django-filter pieces."""

from __future__ import annotations

from datetime import UTC

import django_filters
from django_filters.fields import IsoDateTimeField


class UTCIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 date-time, converted to UTC. ISO 8601 allows offsets up to ±23:59, PostgreSQL
    only ±15:59: an aware value passed through unchanged made the query fail with a 500 (found by
    fuzzing). An out-of-range value is an invalid input (400)."""

    def strptime(self, value, format):  # noqa: A002 - Django's signature
        parsed = super().strptime(value, format)
        if parsed.tzinfo is None:
            return parsed
        try:
            return parsed.astimezone(UTC)
        except OverflowError as e:
            raise ValueError(str(e)) from None


class IsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UTCIsoDateTimeField
