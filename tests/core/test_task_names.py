"""Task names are constants (apps.core.task_names) tied to the registered tasks, and every task has a
soft and a hard time limit (worker/time_limits.py): a renamed task can no longer silently drop the
messages still sent under its old name, and no task holds a worker slot for ever."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import worker.tasks  # noqa: F401 - registers every task
from apps.core import task_names
from worker.celery import BEAT, app

ROOT = Path(__file__).resolve().parents[2]


def _project_tasks() -> dict:
    return {name: task for name, task in app.tasks.items() if not name.startswith("celery.")}


def test_every_constant_is_a_registered_task_and_every_task_has_a_constant():
    constants = set(task_names.all_task_names().values())
    registered = set(_project_tasks())
    assert sorted(constants - registered) == [], "constants naming no registered task"
    assert sorted(registered - constants) == [], "registered tasks without a constant in apps.core.task_names"


def test_the_beat_schedule_names_registered_tasks():
    assert sorted({task for _entry, task, _every in BEAT} - set(_project_tasks())) == []


def test_no_task_name_is_written_as_a_string_outside_the_constants():
    """Senders, ``@shared_task(name=…)`` and the beat schedule use the constants: a string literal equal
    to a task name anywhere else in apps/, worker/ or config/ is a second spelling that can drift."""
    names = set(task_names.all_task_names().values())
    found = []
    for top in ("apps", "worker", "config"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if path == ROOT / "apps" / "core" / "task_names.py" or "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and node.value in names:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value}")
    assert found == []


@pytest.mark.parametrize("name", sorted(task_names.all_task_names().values()))
def test_every_task_has_a_soft_and_a_hard_time_limit(name):
    task = _project_tasks()[name]
    soft, hard = task.soft_time_limit, task.time_limit
    assert soft and hard, f"{name}: soft_time_limit={soft}, time_limit={hard}"
    assert soft < hard, f"{name}: the soft limit ({soft}s) must come before the hard one ({hard}s)"
