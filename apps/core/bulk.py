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

Two helpers for the same hot paths: ``among`` filters a column by many values with one array
parameter (``= ANY(%s)``) instead of ``__in``, and ``unsaved`` builds a model instance by position.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from json import JSONEncoder, dumps
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from operator import itemgetter

from django.db import connection, models
from django.db.models import F, Lookup, Q
from django.db.models.base import ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query_utils import DeferredAttribute
from django.db.models.signals import post_init, pre_init
from django.utils import timezone

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


_VALUE, _JSON, _NOW, _PREP = range(4)  # how ``_row`` writes one field

# ``json.dumps(value)`` as the standard library's C encoder writes it, built once: ``dumps`` built an
# encoder per value and kept a dict of the containers it was in, to refuse circular values (ours come
# from ``json.loads`` or from renderers, never circular). Same text, a quarter less time per value, and
# most of it for the empty ``{}`` / ``[]`` defaults (10,000-node cycle, issue 31).
_ENCODE = (
    c_make_encoder(None, JSONEncoder().default, encode_basestring_ascii, None, ": ", ", ", False, False, True)
    if c_make_encoder is not None
    else None
)
_EMPTY: dict[type, str] = {dict: "{}", list: "[]"}


def json_text(value) -> str:
    """``json.dumps(value)`` (default options), for values without circular references."""
    if not value and type(value) in _EMPTY:
        return _EMPTY[type(value)]
    if _ENCODE is None:  # no C accelerator: the pure-Python encoder
        return dumps(value)
    return "".join(_ENCODE(value, 0))


@dataclass(frozen=True)
class _Plan:
    getters: list  # (how, attname, field) per column, in column order
    sql: str
    # The columns' attnames when each is a plain attribute stored in the instance's ``__dict__``
    # (``unsaved``'s condition): the row is then read in one call, and only the JSON, auto_now and
    # prepared columns are rewritten.
    fetch: Callable | None
    fixes: tuple  # (index, how, attname, field) of the columns not written as read


@cache
def _plan(model) -> _Plan:
    fields = [
        f
        for f in model._meta.concrete_fields
        if not (
            f.primary_key and isinstance(f, models.AutoField | models.BigAutoField | models.SmallAutoField)
        )
    ]
    getters = []
    for f in fields:
        auto_now = getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)
        if f.is_relation:
            getters.append((_VALUE, f.attname, f))
        elif isinstance(f, models.JSONField):
            getters.append((_JSON, f.attname, f))
        elif auto_now and type(f) is models.DateTimeField:
            getters.append((_NOW, f.attname, f))
        elif isinstance(f, _PLAIN) and not auto_now:
            getters.append((_VALUE, f.attname, f))
        else:
            getters.append((_PREP, f.attname, f))
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    sql = f"COPY {connection.ops.quote_name(model._meta.db_table)} ({columns}) FROM STDIN"  # noqa: S608
    plain = len(fields) > 1 and all(type(model.__dict__.get(f.attname)) in _PLAIN_DESCRIPTORS for f in fields)
    fetch = itemgetter(*(f.attname for f in fields)) if plain else None
    fixes = tuple((i, *getter) for i, getter in enumerate(getters) if getter[0] != _VALUE)
    return _Plan(getters, sql, fetch, fixes)


def _json(value, field):
    """The text the server parses into jsonb (SQL NULL for None)."""
    if value is None:
        return field.get_db_prep_save(value, connection)
    if field.encoder is None:
        return json_text(value)
    return dumps(value, cls=field.encoder)


def _row(obj, plan: _Plan, now) -> list:
    if plan.fetch is not None:
        try:
            out = list(plan.fetch(obj.__dict__))
        except KeyError:  # a deferred column: read through its descriptor
            pass
        else:
            for i, how, attname, field in plan.fixes:
                if how == _JSON:
                    out[i] = _json(out[i], field)
                elif how == _NOW:  # auto_now / auto_now_add: set on the instance, as ``pre_save`` would
                    setattr(obj, attname, now)
                    out[i] = now
                else:
                    out[i] = field.get_db_prep_save(field.pre_save(obj, add=True), connection)
            return out
    out = []
    for how, attname, field in plan.getters:
        if how == _VALUE:
            out.append(getattr(obj, attname))
        elif how == _JSON:
            out.append(_json(getattr(obj, attname), field))
        elif how == _NOW:
            setattr(obj, attname, now)
            out.append(now)
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
    plan = _plan(model)  # type: ignore[arg-type]  # a model class is hashable
    # ``cursor.cursor``: the psycopg cursor under Django's wrapper
    # One timestamp for the auto_now columns of every row (``pre_save`` read the clock once per
    # field and row, and prepared each value: a tenth of writing a cycle's rows).
    now = timezone.now()
    with connection.cursor() as cursor, connection.wrap_database_errors, cursor.cursor.copy(plan.sql) as copy:
        write = copy.write_row
        for obj in objs:
            write(_row(obj, plan, now))
    return len(objs)


class _AnyOf(Lookup):
    """``column = ANY(%s)``: the values travel as one array parameter. With ``__in`` Django's
    client-side binding quoted every value in Python: reading a persist batch's 430 cards took 50 ms
    that way, 16 ms this way (10,000-node cycle, issue 31)."""

    lookup_name = "any_of"
    prepare_rhs = False

    def get_prep_lookup(self):
        return list(self.rhs)

    def as_sql(self, compiler, connection):
        lhs, params = self.process_lhs(compiler, connection)
        return f"{lhs} = ANY(%s)", [*params, self.rhs]


def among(field: str, values) -> Q | Lookup:
    """A filter ``field`` in ``values``: one array parameter on PostgreSQL, ``__in`` elsewhere."""
    values = list(values)
    if connection.vendor != "postgresql":  # the SQLite demo
        return Q(**{f"{field}__in": values})
    return _AnyOf(F(field), values)


@cache
def _layout(model) -> tuple[dict[str, int], tuple, tuple, tuple[str, ...] | None]:
    fields = model._meta.concrete_fields
    index = {f.attname: i for i, f in enumerate(fields)}
    constant = tuple(None if callable(f.default) else f.get_default() for f in fields)
    computed = tuple((i, f) for i, f in enumerate(fields) if callable(f.default))
    # The attnames when every one of them is a plain attribute on the instance (the descriptors
    # Django sets for ordinary columns and foreign-key ids only store into ``__dict__``): then an
    # instance can be filled without ``Model.__init__`` (``unsaved``); None when some field has a
    # descriptor of its own (files, custom fields).
    plain = all(type(model.__dict__.get(f.attname)) in _PLAIN_DESCRIPTORS for f in fields)
    return index, constant, computed, tuple(index) if plain else None


_PLAIN_DESCRIPTORS = (DeferredAttribute, ForeignKeyDeferredAttribute)


def unsaved(model, **values):
    """``model(**values)`` (values by attname: ``job_id``, not ``job``), built by position: Django's
    keyword path cost twice as much per instance, and a cycle builds one per allocation and trace.
    Where nothing listens to ``pre_init`` / ``post_init`` and every column is a plain attribute, the
    instance is filled as ``Model.__init__`` would fill it, without its per-field loop (a third of
    building the 30,000 rows of a 10,000-node cycle). Related caches are not set: a caller that
    holds the related instances sets them (``field.set_cached_value``)."""
    index, constant, computed, attnames = _layout(model)
    row = list(constant)
    for name, value in values.items():
        row[index[name]] = value
    for i, f in computed:
        if f.attname not in values:
            row[i] = f.get_default()
    if attnames is None or pre_init.receivers or post_init.receivers or model._meta.abstract:
        return model(*row)
    obj = model.__new__(model)
    obj._state = ModelState()
    obj.__dict__.update(zip(attnames, row, strict=True))
    return obj
