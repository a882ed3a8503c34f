"""Bulk inserts that stay fast at scale: ``COPY … FROM STDIN`` on PostgreSQL, ``bulk_create`` elsewhere.

Django 5.2's ``bulk_create`` on PostgreSQL sends each column as one array (``INSERT … SELECT * FROM
UNNEST(%s, …)``); with Django's client-side parameter binding, psycopg quotes every element of those
arrays in Python, which made the inserts of one 5,000-job scheduling cycle (allocations, decision
traces, job events, push actions) most of its persist time at 10,000 nodes. ``COPY`` hands the rows to
psycopg's C row writer instead (https://www.psycopg.org/psycopg3/docs/basic/copy.html).

The rows are the instances' field values as ``save()`` would write them (``get_db_prep_save``); an
auto-incremented primary key is left to the database and **not** set on the instances — use this only
where the caller does not read the new keys. Constraints are checked as for any insert: a violation
raises ``IntegrityError`` and the transaction is rolled back by its caller. No signals are sent (as
with ``bulk_create``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from json import dumps

from django.db import connection, models

# Below this many rows a COPY round trip gains nothing over one INSERT.
_MIN_ROWS = 20


# Fields whose Python values psycopg writes as they are (what ``get_db_prep_save`` returns for them on
# PostgreSQL, for the values models hold); any other field goes through ``get_db_prep_save``.
_PLAIN = (
    models.CharField,
    models.TextField,
    models.IntegerField,  # and its small / big / positive kinds
    models.BooleanField,
    models.FloatField,
    models.UUIDField,
    models.DateTimeField,
    models.DateField,
    models.DecimalField,
    models.DurationField,
)


@cache
def _plan(model) -> tuple[list, str]:
    fields = [
        f
        for f in model._meta.concrete_fields
        if not (
            f.primary_key and isinstance(f, models.AutoField | models.BigAutoField | models.SmallAutoField)
        )
    ]
    getters = []
    for f in fields:
        if f.is_relation:
            getters.append((f.attname, None))
        elif isinstance(f, models.JSONField):
            getters.append((f.attname, f))
        elif (
            isinstance(f, _PLAIN)
            and not getattr(f, "auto_now", False)
            and not getattr(f, "auto_now_add", False)
        ):
            getters.append((f.attname, None))
        else:
            getters.append((None, f))
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    return getters, f"COPY {connection.ops.quote_name(model._meta.db_table)} ({columns}) FROM STDIN"  # noqa: S608


def _row(obj, getters) -> list:
    out = []
    for attname, field in getters:
        if field is None:
            out.append(getattr(obj, attname))
        elif attname is not None:  # JSON: the text the server parses into jsonb
            value = getattr(obj, attname)
            out.append(
                dumps(value, cls=field.encoder)
                if value is not None
                else field.get_db_prep_save(value, connection)
            )
        else:
            out.append(field.get_db_prep_save(field.pre_save(obj, add=True), connection))
    return out


def copy_create(objs: Sequence[models.Model]) -> int:
    """Insert ``objs`` (instances of one model); returns how many rows were written."""
    if not objs:
        return 0
    model = type(objs[0])
    if connection.vendor != "postgresql" or len(objs) < _MIN_ROWS:
        model.objects.bulk_create(objs)
        return len(objs)
    for obj in objs:
        if type(obj) is not model:
            raise TypeError(f"copy_create: {type(obj).__name__} among {model.__name__} rows")
    getters, sql = _plan(model)  # type: ignore[arg-type]  # a model class is hashable
    # ``cursor.cursor``: the psycopg cursor under Django's wrapper
    with connection.cursor() as cursor, connection.wrap_database_errors, cursor.cursor.copy(sql) as copy:
        write = copy.write_row
        for obj in objs:
            write(_row(obj, getters))
    return len(objs)
