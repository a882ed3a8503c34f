#!/bin/sh
# One command: install into .venv, migrate, load the demo fleet, serve UI + API + admin with a
# Celery worker and beat. Embedded defaults: SQLite under var/, filesystem broker, simulated cluster.
# The worker and beat log to var/log/worker.log and var/log/beat.log (their warnings and errors also
# reach this terminal); a worker or beat that exits is restarted; Ctrl-C stops all three.
# Set DATABASE_URL / CELERY_BROKER_URL / REDIS_URL to use PostgreSQL and Redis instead.
set -eu
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
# Install only when the dependencies changed since the last start (a stamp of pyproject.toml).
STAMP=.venv/.suanchi-installed
WANT="$(cksum pyproject.toml)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e .
    echo "$WANT" > "$STAMP"
fi
.venv/bin/python manage.py migrate --noinput
.venv/bin/python manage.py load_demo
exec .venv/bin/python manage.py serve --host "${SUANCHI_HOST:-127.0.0.1}" --port "${SUANCHI_PORT:-8000}"
