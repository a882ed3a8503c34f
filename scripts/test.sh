#!/bin/sh
# The test command: the whole suite on real PostgreSQL and Redis (started here if they are down), plus ruff and mypy.
set -eu
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[test]"
sh scripts/services.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy apps/core apps/scheduling/engine apps/billing
.venv/bin/python manage.py makemigrations --check --dry-run --settings=config.settings.test >/dev/null
exec .venv/bin/pytest "$@"
