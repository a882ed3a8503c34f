"""Index kinds the models declare that are not plain b-trees everywhere."""

from __future__ import annotations

from django.db import models


class BrinOnPostgres(models.Index):
    """A BRIN index on PostgreSQL (a few summary pages per range of heap blocks: nearly free to keep up
    on an append-only table whose column follows insertion order, such as a ledger's month), a b-tree
    elsewhere (SQLite has no BRIN). Declared in the model like any index, so migrations and SQLite's
    table rebuilds keep it."""

    def create_sql(self, model, schema_editor, using="", **kwargs):
        if schema_editor.connection.vendor == "postgresql":
            using = " USING brin"
        return super().create_sql(model, schema_editor, using=using, **kwargs)
