"""Fault handling as data: the runbook of seed 000 §4.3 and the classification of failures into it.

``apps/scheduling/data/runbook.yaml`` holds each entry (symptom, likely causes, checks, fixes in
Chinese and English, and the patterns that recognise it). ``classify_failure`` turns a failure text
(pod status reason / message, exit code, event) into an entry key; failed jobs and device events link
to the entry, and an entry marked ``hardware`` (a lost card) is what quarantines a node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

RUNBOOK_FILE = Path(__file__).resolve().parent / "data" / "runbook.yaml"


@dataclass(frozen=True)
class RunbookEntry:
    key: str
    symptom: dict
    causes: dict
    checks: dict
    fixes: dict
    hardware: bool
    patterns: tuple[re.Pattern, ...]

    def text(self, field: str, language: str) -> str:
        values = getattr(self, field)
        return values.get("zh" if language.lower().startswith("zh") else "en") or values.get("en", "")


@cache
def runbook() -> tuple[RunbookEntry, ...]:
    entries = yaml.safe_load(RUNBOOK_FILE.read_text(encoding="utf-8"))
    return tuple(
        RunbookEntry(
            key=e["key"],
            symptom=e["symptom"],
            causes=e["causes"],
            checks=e["checks"],
            fixes=e["fixes"],
            hardware=bool(e.get("hardware", False)),
            patterns=tuple(re.compile(p, re.IGNORECASE) for p in e.get("match", [])),
        )
        for e in entries
    )


def runbook_entry(key: str) -> RunbookEntry | None:
    return next((e for e in runbook() if e.key == key), None)


# Hardware first: "Xid 79 … out of memory" is a lost card, not the workload's memory.
_ORDER = ("device_lost", "runtime_mismatch", "device_not_visible", "out_of_memory", "topology_slow")


def classify_failure(text: str, exit_code: int | None = None) -> str:
    """The runbook key a failure text points at, or "" when none matches."""
    entries = {e.key: e for e in runbook()}
    keys = [k for k in _ORDER if k in entries] + [k for k in entries if k not in _ORDER]
    for key in keys:
        if any(p.search(text or "") for p in entries[key].patterns):
            return key
    if exit_code == 137 and "oom" in (text or "").lower():
        return "out_of_memory"
    return ""


def is_hardware_fault(key: str) -> bool:
    entry = runbook_entry(key) if key else None
    return bool(entry and entry.hardware)
