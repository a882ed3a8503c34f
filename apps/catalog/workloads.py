"""Workload profiles: load the built-in file, read them.

The profiles file (``data/workload-profiles.yaml``) is the seed; staff edit profiles in the admin
afterwards. ``workload_profile_sync`` upserts by key and never deletes (measurements point at rows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from django.db import transaction

from apps.catalog.models import WorkloadProfile
from apps.catalog.upsert import synced_upsert
from apps.core.errors import ParseFailed

DEFAULT_PROFILES_PATH = Path(__file__).resolve().parent / "data" / "workload-profiles.yaml"
SYNCED_FIELDS = (
    "name",
    "unit",
    "framework",
    "precision",
    "memory_mib",
    "total_memory_mib",
    "latency_bound",
    "description",
    "basis",
    "synthetic",
)


def _rows(path: Path) -> list[dict[str, Any]]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ParseFailed(f"cannot read the workload profiles file {path.name}: {exc}") from exc
    rows = (data or {}).get("profiles")
    if not isinstance(rows, list):
        raise ParseFailed(f"{path.name}: a top-level 'profiles' list is required")
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not row.get("key") or not row.get("unit"):
            raise ParseFailed(f"{path.name}: profiles[{i}] needs a key and a unit")
    return rows


@transaction.atomic
def workload_profile_sync(*, actor, path: str | Path | None = None) -> dict[str, int]:
    """Upsert the built-in profiles by key. Idempotent: returns {"created", "updated", "unchanged"}."""
    rows = _rows(Path(path) if path else DEFAULT_PROFILES_PATH)
    existing = {
        p.key: p for p in WorkloadProfile.objects.select_for_update().filter(key__in=[r["key"] for r in rows])
    }
    counts = {"created": 0, "updated": 0, "unchanged": 0}
    for row in rows:
        values = {name: row.get(name) for name in SYNCED_FIELDS}
        for text in ("framework", "precision", "description", "basis"):
            values[text] = values[text] or ""
        values["latency_bound"] = bool(values["latency_bound"])
        values["synthetic"] = values["synthetic"] or {}
        profile = existing.get(row["key"]) or WorkloadProfile(key=row["key"], is_builtin=True, **values)
        outcome, _reason = synced_upsert(
            profile,
            values,
            fields=SYNCED_FIELDS,
            save=lambda p: p.save(),
            actor=actor,
            action="workload_profile.sync",
            created_fields=["key", *SYNCED_FIELDS],
            created_message="created from the profiles file",
            updated_message="updated from the profiles file",
        )
        counts[outcome] += 1
    return counts
