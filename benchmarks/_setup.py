"""Shared by the benchmark scripts (run as ``python benchmarks/<name>.py``): each benchmark works in a
PostgreSQL database of its own, created here when missing, so it never touches the test database."""

from __future__ import annotations

import os


def ensure_database() -> None:
    """Create the database ``DATABASE_URL`` names if it does not exist yet."""
    import psycopg

    url = os.environ["DATABASE_URL"]
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
