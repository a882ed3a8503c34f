"""Shared django-filter pieces."""

from __future__ import annotations

import contextlib
from datetime import UTC
from typing import Any

import django_filters
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _
from django_filters import fields as df_fields
from django_filters.fields import IsoDateTimeField


class UTCIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 date-time, converted to UTC. ISO 8601 allows offsets up to ±23:59, PostgreSQL
    only ±15:59: an aware value passed through unchanged made the query fail with a 500 (found by
    fuzzing). An out-of-range value is an invalid input (400)."""

    def to_python(self, value):
        parsed = super().to_python(value)
        if parsed is None or parsed.tzinfo is None:
            return parsed
        try:
            return parsed.astimezone(UTC)
        except OverflowError:
            raise ValidationError(self.error_messages["invalid"], code="invalid") from None


class IsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UTCIsoDateTimeField


# ---------------------------------------------------------------------------------------------------
# Numeric range: every integer a filter hands to the database fits a 64-bit signed column
# ---------------------------------------------------------------------------------------------------

# SQLite stores integers as 64-bit signed values and Python's sqlite3 raises OverflowError for a larger
# one (https://www.sqlite.org/datatype3.html, "INTEGER ... stored in 0, 1, 2, 3, 4, 6, or 8 bytes");
# PostgreSQL's bigint has the same range (https://www.postgresql.org/docs/current/datatype-numeric.html).
# Django turns an out-of-range ``pk=`` into an empty result itself, but not a foreign key or ``__in``
# lookup, so ``?device=99999999999999999999999`` was a 500 on the demo's SQLite database.
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def _integer_key(model, key: str) -> bool:
    field = model._meta.pk if key == "pk" else model._meta.get_field(key)
    return field.get_internal_type() in {
        "AutoField",
        "BigAutoField",
        "SmallAutoField",
        "IntegerField",
        "BigIntegerField",
        "SmallIntegerField",
        "PositiveIntegerField",
        "PositiveBigIntegerField",
        "PositiveSmallIntegerField",
    }


def _out_of_int64(value) -> bool:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return False  # not an integer at all: the field's own validation answers
    return not INT64_MIN <= number <= INT64_MAX


class _Int64KeyMixin:
    """A model choice whose key is an integer column: a value beyond 64 bits is an invalid choice
    before any query runs."""

    to_field_name: str | None
    queryset: Any

    def _check_int64(self, values) -> None:
        key = self.to_field_name or "pk"
        if not _integer_key(self.queryset.model, key):
            return
        for value in values:
            if _out_of_int64(value):
                raise ValidationError(
                    _("%(value)s is out of range (a 64-bit integer).") % {"value": str(value)[:40]},
                    code="invalid_choice",
                )


class Int64ModelChoiceField(_Int64KeyMixin, df_fields.ModelChoiceField):
    def to_python(self, value):
        if value not in self.empty_values:
            self._check_int64([value])
        return super().to_python(value)


class Int64ModelMultipleChoiceField(_Int64KeyMixin, df_fields.ModelMultipleChoiceField):
    def _check_values(self, value):
        with contextlib.suppress(TypeError):  # not a list: the parent says so
            self._check_int64(list(value))
        return super()._check_values(value)


def bound_filter(filter_: django_filters.Filter) -> django_filters.Filter:
    """Give one filter the 64-bit range check (idempotent)."""
    if isinstance(filter_, django_filters.NumberFilter):
        filter_.extra.setdefault("min_value", INT64_MIN)
        filter_.extra.setdefault("max_value", INT64_MAX)
    elif filter_.field_class is df_fields.ModelMultipleChoiceField:
        filter_.field_class = Int64ModelMultipleChoiceField
    elif filter_.field_class is df_fields.ModelChoiceField:
        filter_.field_class = Int64ModelChoiceField
    return filter_


class FilterSet(django_filters.FilterSet):
    """The base of every FilterSet in Suanchi: numbers and object ids are range-checked (400), so no
    value the database cannot compare ever reaches a query."""

    @classmethod
    def get_filters(cls):
        filters = super().get_filters()
        for filter_ in filters.values():
            bound_filter(filter_)
        return filters


# ---------------------------------------------------------------------------------------------------
# Pages: the same FilterSet the API uses filters the page and renders its filter bar
# ---------------------------------------------------------------------------------------------------


class PageFilterForm:
    """The filter bar of a page: the bound fields of ``filterset.form`` named in ``names`` (a page
    shows fewer filters than its API takes), iterable like a form for ``includes/filter_form.html``.
    ``active``: whether any of them holds a valid, non-empty value (the template offers "Reset")."""

    def __init__(self, filterset: django_filters.FilterSet, names: tuple[str, ...]) -> None:
        self.filterset = filterset
        self.names = names

    def __iter__(self):
        form = self.filterset.form
        return (form[name] for name in self.names)

    def __getitem__(self, name: str):
        return self.filterset.form[name]

    @property
    def active(self) -> bool:
        form = self.filterset.form
        if not form.is_bound or not form.is_valid() and not form.cleaned_data:
            return False
        return any(form.cleaned_data.get(name) not in (None, "", [], False) for name in self.names)


def page_filter(filterset_class, request, queryset, *, fields: tuple[str, ...], **kwargs):
    """``(filterset, form)`` for a page: the FilterSet bound to the query string (a value that does
    not validate is ignored and shown as a field error, the others still filter: django-filter's
    ``FilterSet.qs`` applies ``form.cleaned_data``) and the filter bar showing ``fields``."""
    filterset = filterset_class(request.GET or None, queryset=queryset, request=request, **kwargs)
    return filterset, PageFilterForm(filterset, fields)


def name_search_filter(placeholder, *, field_name: str = "name") -> django_filters.CharFilter:
    """A list page's search box: a case-insensitive match on ``field_name``, at most 100 characters."""
    from django import forms

    return django_filters.CharFilter(
        field_name=field_name,
        lookup_expr="icontains",
        label=_("Search"),
        max_length=100,
        widget=forms.TextInput(attrs={"placeholder": placeholder, "type": "search"}),
    )
