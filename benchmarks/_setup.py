"""Shared by the benchmark scripts (run as ``python benchmarks/<name>.py``): each benchmark works in a
PostgreSQL database of its own, created here when missing, so it never touches the test database."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bootstrap(database: str) -> None:
    """Put the repository on ``sys.path`` and default to the test settings and this benchmark's own
    database (``DATABASE_URL`` overrides it)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
    os.environ.setdefault("DATABASE_URL", f"postgres://postgres@127.0.0.1:5432/{database}")


def ensure_database() -> None:
    """Create the database ``DATABASE_URL`` names if it does not exist yet."""
    import psycopg

    url = os.environ["DATABASE_URL"]
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
