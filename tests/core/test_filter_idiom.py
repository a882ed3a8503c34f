"""One filtering idiom for pages and API (issue 16 item 8): a list page filters with a FilterSet
through ``apps.core.filters.page_filter`` and renders that FilterSet's form; no hand-written
``*FilterForm`` is left in apps/."""

from __future__ import annotations

import ast
from pathlib import Path

from django.conf import settings

APPS = Path(settings.BASE_DIR) / "apps"
TEMPLATES = Path(settings.BASE_DIR) / "templates"
FILTER_BAR = "includes/filter_form.html"
# The shared filter bar of apps.core.filters: the one class allowed to carry the name.
SHARED = {"PageFilterForm"}
# Pages with the filter bar that are reports, not lists: their form picks a period, there is no
# queryset to filter (apps.telemetry.forms.PeriodForm / FleetReportForm).
REPORT_TEMPLATES = {"telemetry/fleet.html", "telemetry/project.html"}


def _modules():
    for path in sorted(APPS.rglob("*.py")):
        if "migrations" not in path.parts:
            yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def test_no_hand_written_filter_form_remains():
    found = [
        f"{path.relative_to(APPS.parent)}:{node.lineno} {node.name}"
        for path, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name.endswith("FilterForm") and node.name not in SHARED
    ]
    assert found == []


def _calls(function: ast.AST) -> set[str]:
    return {
        node.func.id
        for node in ast.walk(function)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }


def _uses_page_filter(function: ast.FunctionDef, module: dict[str, ast.FunctionDef]) -> bool:
    """The view calls page_filter itself or through a helper of its module (billing's _filtered)."""
    calls = _calls(function)
    return "page_filter" in calls or any(
        "page_filter" in _calls(module[name]) for name in calls if name in module
    )


def _list_templates_with_filter_bar() -> set[str]:
    names = {
        str(path.relative_to(TEMPLATES))
        for path in TEMPLATES.rglob("*.html")
        if FILTER_BAR in path.read_text(encoding="utf-8")
    }
    return names - REPORT_TEMPLATES - {FILTER_BAR}


def test_every_list_page_with_filters_uses_page_filter():
    templates = _list_templates_with_filter_bar()
    assert {"catalog/model_list.html", "inventory/device_list.html", "jobs/job_list.html"} <= templates
    rendered_by: dict[str, list[str]] = {name: [] for name in templates}
    offenders = []
    for path, tree in _modules():
        functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        for function in functions.values():
            strings = {
                n.value
                for n in ast.walk(function)
                if isinstance(n, ast.Constant) and isinstance(n.value, str)
            }
            for name in templates & strings:
                rendered_by[name].append(function.name)
                if not _uses_page_filter(function, functions):
                    offenders.append(f"{path.relative_to(APPS.parent)} {function.name} ({name})")
    assert offenders == []
    assert all(rendered_by.values()), rendered_by  # every filter bar was traced to its view


def test_the_guard_sees_a_hand_written_filter():
    """The check above would catch a view that filters with its own form."""
    source = (
        "def job_list(request):\n"
        "    form = JobFilterForm(request.GET)\n"
        "    return render(request, 'jobs/job_list.html', {'form': form})\n"
    )
    function = ast.parse(source).body[0]
    assert not _uses_page_filter(function, {"job_list": function})
    helper = ast.parse(
        "def _filtered(r):\n    return page_filter(X, r, None, fields=())\n"
        "def bill_list(r):\n    rows = _filtered(r)\n"
    )
    module = {n.name: n for n in helper.body}
    assert _uses_page_filter(module["bill_list"], module)
