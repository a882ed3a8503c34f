"""Rooms of a readable size: no module over ``MODULE_LINES`` lines and no function over ``FUNCTION_LINES``
lines in the project's code, its tests and its benchmarks (migrations and data files aside).

A module that outgrows the budget becomes a package of modules that each hold one topic; a function that
outgrows it is cut into steps with names. The budget is the same for every folder, tests included: a
newcomer reads them too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("apps", "worker", "config", "tests", "benchmarks", "scripts")
MODULE_LINES = 800
FUNCTION_LINES = 120


def python_files() -> list[Path]:
    files = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT).parts
            if "migrations" in parts or "__pycache__" in parts or ".venv" in parts:
                continue
            files.append(path)
    return files


def oversized(
    path: Path, *, module_lines: int = MODULE_LINES, function_lines: int = FUNCTION_LINES
) -> list[str]:
    """What in ``path`` is over the budget, one line each (``path: N lines`` / ``path:L name: N lines``)."""
    text = path.read_text(encoding="utf-8")
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    found = []
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    if lines > module_lines:
        found.append(f"{name}: {lines} lines (budget {module_lines})")
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = node.end_lineno - node.lineno + 1
            if length > function_lines:
                found.append(f"{name}:{node.lineno} {node.name}: {length} lines (budget {function_lines})")
    return found


def test_the_budget_sees_long_modules_and_long_functions(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(5))
    source = f"def short():\n    return 1\n\n\ndef long():\n{body}\n"
    path = tmp_path / "m.py"
    path.write_text(source)
    assert oversized(path, module_lines=100, function_lines=10) == []
    assert oversized(path, module_lines=5, function_lines=5) == [
        f"{path}: 10 lines (budget 5)",
        f"{path}:5 long: 6 lines (budget 5)",
    ]


def test_every_module_and_function_fits_the_budget():
    problems = [problem for path in python_files() for problem in oversized(path)]
    assert problems == []
