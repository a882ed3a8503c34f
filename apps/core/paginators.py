"""A paginator for list pages over very large tables (issue 20).

Django's ``Paginator`` runs ``SELECT COUNT(*)`` on every page view; over an unfiltered table of
hundreds of thousands of rows that is a scan of the whole table each time. ``EstimatedCountPaginator``
counts exactly whenever the list is filtered, on other databases, and on tables under
``ESTIMATE_ABOVE`` rows; an unfiltered larger PostgreSQL table is counted from the planner's
statistics instead, ``pg_class.reltuples``, which ``ANALYZE`` and autovacuum keep up to date
(https://www.postgresql.org/docs/current/catalog-pg-class.html, "reltuples: Number of live rows in
the table. This is only an estimate used by the planner. It is updated by VACUUM, ANALYZE, and a
few DDL commands"; -1 when the table was never analyzed, then the count is exact). The page then
says the count is estimated (``paginator.estimated``). Since the last page number is only an
estimate, a page past it is still served and "next" is decided by reading one row more than a page,
never by the estimate.
"""

from __future__ import annotations

import json

from django.core.paginator import EmptyPage, Page, PageNotAnInteger, Paginator
from django.db import connections
from django.db.models import QuerySet
from django.utils.functional import cached_property

ESTIMATE_ABOVE = 100_000


def _estimable(object_list) -> bool:
    if not isinstance(object_list, QuerySet):
        return False
    query = object_list.query
    return (
        connections[object_list.db].vendor == "postgresql"
        and not query.where  # any filter (scope, search, state): exact count
        and not query.distinct
        and not query.combinator
        and query.low_mark == 0
        and query.high_mark is None
        and not query.group_by
    )


def _reltuples(object_list: QuerySet) -> int:
    with connections[object_list.db].cursor() as cursor:
        cursor.execute(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
            [object_list.model._meta.db_table],
        )
        row = cursor.fetchone()
    return int(row[0]) if row else -1


def _planner_rows(object_list: QuerySet) -> int:
    """The planner's estimate of how many rows ``object_list`` holds (EXPLAIN's top plan node)."""
    plan = json.loads(object_list.order_by().explain(format="json"))
    return int(plan[0]["Plan"]["Plan Rows"])


class EstimatedPage(Page):
    def __init__(self, object_list, number, paginator, has_more: bool) -> None:
        super().__init__(object_list, number, paginator)
        self._has_more = has_more

    def has_next(self) -> bool:
        return self._has_more


class EstimatedCountPaginator(Paginator):
    estimate_above = ESTIMATE_ABOVE

    @cached_property
    def estimated(self) -> bool:
        return self._estimate is not None

    # With a cap (``CappedCountPaginator``), a filtered list is counted up to cap + 1 rows only.
    count_cap: int | None = None

    @cached_property
    def _estimate(self) -> int | None:
        if self.count_cap is not None and _cappable(self.object_list):
            counted = self.object_list.order_by()[: self.count_cap + 1].count()
            if counted <= self.count_cap:
                self._counted = counted  # exact: no second COUNT
                return None
            return max(counted, _planner_rows(self.object_list))
        if not _estimable(self.object_list):
            return None
        estimate = _reltuples(self.object_list)
        return estimate if estimate >= self.estimate_above else None

    _counted: int | None = None

    @cached_property
    def count(self) -> int:
        if self.estimated:
            return self._estimate
        return self._counted if self._counted is not None else super().count

    def validate_number(self, number):
        if not self.estimated:
            return super().validate_number(number)
        try:  # no upper bound: the last page number is an estimate
            number = int(number)
        except (TypeError, ValueError):
            raise PageNotAnInteger(self.error_messages["invalid_page"]) from None
        if number < 1:
            raise EmptyPage(self.error_messages["min_page"])
        return number

    def page(self, number):
        if not self.estimated:
            return super().page(number)
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        rows = list(self.object_list[bottom : bottom + self.per_page + 1])
        return EstimatedPage(rows[: self.per_page], number, self, has_more=len(rows) > self.per_page)


def _cappable(object_list) -> bool:
    """A filtered PostgreSQL queryset (unfiltered ones are counted from ``reltuples``)."""
    return (
        isinstance(object_list, QuerySet)
        and connections[object_list.db].vendor == "postgresql"
        and bool(object_list.query.where)
        and not object_list.query.combinator
    )


class CappedCountPaginator(EstimatedCountPaginator):
    """For ledgers of millions of rows whose filters have no index of their own (a usage entry's model):
    a filtered list is counted exactly up to ``ESTIMATE_ABOVE`` rows; past that, its count is the
    planner's estimate (at least the rows counted) and the page says so, as for an unfiltered list,
    instead of a COUNT of every matching row on each page."""

    count_cap = ESTIMATE_ABOVE
