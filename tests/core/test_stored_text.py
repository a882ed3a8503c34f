"""Issue 21 §5: texts stored by services and workers are shown in the reader's language."""

from __future__ import annotations

import ast
from pathlib import Path

import polib
import pytest
from django.utils import translation

from apps.core import stored_text
from apps.core.stored_text import localize, stored
from tests.core.test_i18n import LOCALE


def test_a_stored_sentence_is_translated_with_its_parameters_and_unknown_text_is_kept():
    msgid = stored("moved to %(to)s (was %(was)s)")
    text = msgid % {"to": "gray", "was": "production"}
    with translation.override("en"):
        assert localize(text) == text
    with translation.override("zh-hans"):
        shown = localize(text)
    # The sentence and the pool statuses are translated (vocabulary of Device.PoolStatus).
    assert "moved to" not in shown and "production" not in shown, shown
    with translation.override("zh-hans"):
        assert localize("a sentence nobody registered") == "a sentence nobody registered"


def test_the_most_specific_pattern_wins_and_nested_texts_are_translated():
    outer = stored("submitted: %(request)s")
    inner = stored("moved to %(to)s (was %(was)s)")
    text = outer % {"request": inner % {"to": "gray", "was": "production"}}
    with translation.override("zh-hans"):
        shown = localize(text)
    assert "submitted" not in shown and "moved to" not in shown


def _import_every_app_module() -> None:
    """Import every module of apps/ (not migrations or management commands): each registers its
    stored texts at import time, wherever it lives (a service package, sync.py, compat.py, …)."""
    import importlib
    import pkgutil

    import apps

    for module in pkgutil.walk_packages(apps.__path__, "apps."):
        if ".migrations" not in module.name and ".management" not in module.name:
            importlib.import_module(module.name)


def test_every_registered_text_is_in_the_catalogue_and_translated():
    # New ids pass once their translations are in locale/zh_Hans (the helpers' TSV files, merged and
    # compiled by the lead: RULES.md §3).
    _import_every_app_module()
    po = polib.pofile(str(LOCALE / "django.po"))
    known = {e.msgid: e for e in po if not e.obsolete}
    missing = [m for m in stored_text.registered() if m not in known or not known[m].translated()]
    assert not missing, missing[:10]


def modules_registering_stored_texts(root: Path) -> list[str]:
    """The modules of apps/ (migrations aside) that call ``stored(`` or ``stored_vocabulary(``."""
    found = []
    for path in sorted((root / "apps").rglob("*.py")):
        if "migrations" in path.relative_to(root).parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(
            isinstance(node, ast.Call) and _name(node.func) in ("stored", "stored_vocabulary")
            for node in ast.walk(tree)
        ):
            parts = path.relative_to(root).with_suffix("").parts
            found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def test_every_module_that_registers_stored_texts_is_listed_in_settings():
    """Registration is explicit (settings.STORED_TEXT_MODULES, imported by ``stored_text.discover``):
    a module that calls ``stored(`` but is not listed would leave its texts English in a process that
    never imported it; a listed module that no longer registers any is dead weight (or was moved)."""
    from django.conf import settings

    found = set(modules_registering_stored_texts(Path(__file__).resolve().parents[2]))
    listed = set(settings.STORED_TEXT_MODULES)
    assert sorted(found - listed) == [], "add these to STORED_TEXT_MODULES in config/settings/base.py"
    assert sorted(listed - found) == [], "these listed modules register no stored text (moved?)"
    assert len(settings.STORED_TEXT_MODULES) == len(listed)


def test_a_whole_number_parameter_is_given_back_as_a_number():
    # "%(cards)d" refuses a string: the parameter recovered from the stored sentence is an int again.
    from apps.clusters.sync import NODE_FOUND

    text = NODE_FOUND % {"name": "gpu-09", "pool": "training", "cards": 2}
    with translation.override("zh-hans"):
        shown = localize(text)
    assert shown != text and "gpu-09" in shown and "2" in shown, shown
    # A "%d" parameter matches digits only: a sentence with a word there is not this text.
    assert localize("node gpu-09 found in Kubernetes by cluster sync (pool training, two cards)") == (
        "node gpu-09 found in Kubernetes by cluster sync (pool training, two cards)"
    )


# ---- a stored text written from an f-string or gettext would be caught here ---------------------------
#
# The calls that write a text people read later (events, state / release / status reasons, run
# progress), by the name of the function or model; the keyword that carries the text.
_SINKS = {
    "job_event", "job_transition", "job_retry_or_fail", "job_preempt", "job_push_failed", "job_finish",
    "hold_until_gone", "_release_now", "allocations_release", "_failure", "_retry", "node_status_set", "node_status_change", "node_quarantine",
    "device_cordon", "device_retire", "device_pool_status_set", "_node_transition_locked", "cards_fault",
    "_record", "drift", "run_create", "run_progress", "_progress", "DeviceEvent", "device_event_create", "JobEvent", "create",
    "update", "add",
}  # fmt: skip
_TEXT_KEYWORDS = {
    "message", "reason", "explanation", "state_reason", "release_reason", "status_reason",
    "cordon_reason", "health_reason", "stage_reason", "progress_message",
}  # fmt: skip
# (Assigned to an attribute, "message" and "reason" are too common a name: only the model fields.)
# apps/demo writes its seed data as it is; the engine (Django-free) is checked by running it
# (tests/core/test_zh_pages.py::test_the_engine_explanations_and_trace_steps_are_registered_...).
_NOT_SCANNED = ("apps/demo/", "apps/scheduling/engine/")


def _name(func) -> str | None:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _problem(value, assigned: dict) -> str | None:
    """Why ``value`` is not a registered stored text: an f-string, gettext at write time (the
    writer's language, untranslatable later), an inline literal msgid, or a literal never registered."""
    if isinstance(value, ast.JoinedStr):
        return "an f-string"
    if isinstance(value, ast.Call) and _name(value.func) in ("_", "gettext", "gettext_lazy", "gettext_noop"):
        return "gettext at write time"
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mod):
        if isinstance(value.left, ast.Constant):
            return "an inline msgid (not registered with stored())"
        return _problem(value.left, assigned)
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
        return _problem(value.left, assigned) or _problem(value.right, assigned)
    if isinstance(value, ast.Subscript):
        return _problem(value.value, assigned)
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in ("strip", "rstrip")
    ):
        return _problem(value.func.value, assigned)
    if isinstance(value, ast.IfExp):
        return _problem(value.body, assigned) or _problem(value.orelse, assigned)
    if isinstance(value, ast.BoolOp):
        return next((p for p in (_problem(v, assigned) for v in value.values) if p), None)
    if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value:
        with translation.override("en"):
            if value.value in stored_text._PLAIN or value.value in stored_text._VOCABULARY:
                return None
        return f"the literal {value.value!r}, not registered"
    if isinstance(value, ast.Name) and value.id in assigned:  # a local variable: what was assigned to it
        return next((p for p in (_problem(v, {}) for v in assigned[value.id]) if p), None)
    return None


def stored_text_problems(root: Path) -> list[str]:
    problems = []
    for path in sorted((root / "apps").rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if "/migrations/" in relative or relative.startswith(_NOT_SCANNED):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            assigned: dict[str, list] = {}
            for node in ast.walk(function):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            assigned.setdefault(target.id, []).append(node.value)
            for node in ast.walk(function):
                found = []
                if isinstance(node, ast.Assign):
                    found = [
                        (f".{t.attr} =", node.value)
                        for t in node.targets
                        if isinstance(t, ast.Attribute) and t.attr in _TEXT_KEYWORDS - {"message", "reason"}
                    ]
                elif isinstance(node, ast.Call) and _name(node.func) in _SINKS:
                    found = [
                        (f"{_name(node.func)}({k.arg}=)", k.value)
                        for k in node.keywords
                        if k.arg in _TEXT_KEYWORDS
                    ]
                for where, value in found:
                    problem = _problem(value, assigned)
                    if problem:
                        problems.append(f"{relative}:{value.lineno} {where}: {problem}")
    return problems


def test_no_stored_text_is_written_from_an_f_string_or_gettext():
    """Texts written to the database are ``stored()`` ids with parameters (apps.core.stored_text);
    an f-string or ``_()`` there would be stored in one language and shown untranslated. A static
    check of the calls above (a text built elsewhere and passed in is not followed)."""
    _import_every_app_module()
    problems = stored_text_problems(Path(__file__).resolve().parents[2])
    assert not problems, problems


def test_the_check_catches_an_f_string_gettext_and_an_unregistered_literal(tmp_path):
    source = tmp_path / "apps" / "fake" / "services.py"
    source.parent.mkdir(parents=True)
    source.write_text(
        "def f(job, node, _):\n"
        "    job_event(job, kind='x', message=f'moved {node}')\n"
        "    DeviceEvent.objects.create(node=node, message=_('node %(n)s') % {'n': node})\n"
        "    reason = f'lost {node}'\n"
        "    job_transition(job, to='failed', reason=reason)\n"
        "    job_transition(job, to='failed', reason='a sentence nobody registered')\n"
        "    job_transition(job, to='failed', reason=COMPLETED)\n"
        "    job_transition(job, to='cancelled', reason='cancelled')\n",
        encoding="utf-8",
    )
    problems = stored_text_problems(tmp_path)
    assert [p.split(" ", 1)[0] for p in problems] == [
        "apps/fake/services.py:2",
        "apps/fake/services.py:3",
        "apps/fake/services.py:5",
        "apps/fake/services.py:6",
    ], problems


@pytest.mark.parametrize("value", ["", None, 5])
def test_non_text_passes_through(value):
    assert localize(value) == value


def test_a_text_is_localized_in_a_process_that_never_imported_the_module_that_wrote_it():
    """The web process shows events written by worker code it has not imported (the scaling service's
    "scaled 2 → 1 replicas: …"): ``localize`` discovers the registered texts first."""
    import os
    import subprocess
    import sys

    code = (
        "import sys, django; django.setup()\n"
        "from django.utils import translation\n"
        "assert 'apps.scheduling.scaling' not in sys.modules, 'imported at setup already'\n"
        "from apps.core.stored_text import localize\n"
        "translation.activate('zh-hans')\n"
        "print(localize('scaled 2 → 1 replicas: by hand'))\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.test", "PYTHONIOENCODING": "utf-8"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True
    ).stdout.strip()
    assert out == "副本数 2 → 1：by hand"


def test_a_request_with_replicas_and_the_trace_tiers_are_shown_in_chinese():
    from django.utils import translation

    from apps.core.stored_text import localize

    with translation.override("zh-hans"):
        # the " × N replicas" suffix used to stay English inside the model parameter
        assert localize("submitted: 1 whole card(s) of T4 × 2 replicas") == "已提交：1 张整卡 T4 × 2 个副本"
        assert localize("submitted: 2 × template whole card (A100 80GB SXM4) × 3 replicas").endswith(
            "× 3 个副本"
        )
        assert [localize(t) for t in ("filter", "score", "assign", "result")] == [
            "过滤",
            "打分",
            "分配",
            "结果",
        ]
