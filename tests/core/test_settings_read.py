"""Every switch in settings.SUANCHI is read by the code: a key nothing reads would be documented as a
switch that does nothing (issue 16: CLUSTER_BACKEND, KUBECONFIG and PROMETHEUS_URL were such keys
until the first start read them)."""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]


def _code_outside_settings() -> str:
    texts = []
    for top in ("apps", "worker"):
        for path in (ROOT / top).rglob("*.py"):
            if "migrations" not in path.parts:
                texts.append(path.read_text(encoding="utf-8"))
    return "\n".join(texts)


def test_every_suanchi_setting_is_read_somewhere():
    code = _code_outside_settings()
    unread = sorted(key for key in settings.SUANCHI if not re.search(rf"[\"']{re.escape(key)}[\"']", code))
    assert unread == []


def test_billing_reads_its_sources_directly_not_through_hook_settings():
    assert not [key for key in settings.SUANCHI if key.endswith("_HOOK")]


def _other_reads(path: Path) -> list[str]:
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "SUANCHI"
            and (ast.unparse(node.value) == "settings" or ast.unparse(node.value).endswith(".settings"))
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} .SUANCHI")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and str(node.args[1].value).startswith("SUANCHI")
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.func.id}(…, 'SUANCHI')")
    return found


def test_settings_suanchi_is_read_only_through_suanchi_setting():
    """One reader (apps.core.conf.suanchi_setting): no ``settings.SUANCHI[…]``, ``settings.SUANCHI.get``
    or ``getattr(settings, "SUANCHI", …)`` elsewhere in apps/ or worker/ (config/settings defines it).
    The three top-level ``SUANCHI_*`` settings (the CSP, the plotly bundle, the kubeconfig exec
    allow-list) are plain Django settings, read as ``settings.SUANCHI_X``: never with a ``getattr``
    default that would hide a setting missing from config/settings/base.py."""
    reader = ROOT / "apps" / "core" / "conf.py"
    found = []
    for top in ("apps", "worker"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if path != reader and "migrations" not in path.parts:
                found += _other_reads(path)
    assert found == []


def test_suanchi_setting_reads_at_each_call_and_a_missing_key_without_default_is_an_error(settings):
    import pytest

    from apps.core.conf import suanchi_setting

    settings.SUANCHI = {**settings.SUANCHI, "TRUSTED_PROXIES": 3}
    assert suanchi_setting("TRUSTED_PROXIES") == 3
    assert suanchi_setting("NO_SUCH_SWITCH", "fallback") == "fallback"
    with pytest.raises(KeyError):
        suanchi_setting("NO_SUCH_SWITCH")
