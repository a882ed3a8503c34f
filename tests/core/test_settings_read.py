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
