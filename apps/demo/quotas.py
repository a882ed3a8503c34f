"""Demo quotas after seed 001 §5.1: the algorithm department is guaranteed 40 % of the pool, data
analytics 20 %, the rest is an elastic pool; data analytics lends its idle guarantee at night
(22:00–08:00, Asia/Shanghai). Amounts are shares of the demo fleet's compute units."""

from __future__ import annotations

from decimal import ROUND_DOWN, Decimal

from django.utils import timezone

from apps.accounts.models import Department, Project
from apps.quotas.book import class_capacity
from apps.quotas.models import Quota
from apps.quotas.services import quota_create

# (owner kind, slug, share of the fleet, borrowing limit share or None, lending limit share or None,
#  lending windows, over-quota weight)
QUOTAS = [
    ("department", "algorithm", "0.40", None, None, [], "1"),
    ("department", "data", "0.20", "0.10", None, [], "1"),
    ("project", "vision", "0.15", None, None, [], "1"),
    ("project", "llm-train", "0.25", None, None, [], "2"),
    ("project", "bi-analytics", "0.20", "0.10", "0", [{"start": "22:00", "end": "08:00"}], "1"),
]


def load(*, actor, stdout) -> int:
    """Create the demo quotas that are missing. Returns how many were created."""
    capacity = class_capacity({"any"}, on=timezone.localdate())["any"] or Decimal(0)
    if capacity <= 0:
        return 0
    created = 0

    def cu(share: str | None) -> Decimal | None:
        if share is None:
            return None
        return (capacity * Decimal(share)).quantize(Decimal("0.1"), rounding=ROUND_DOWN)

    for kind, slug, guaranteed, borrowing, lending, windows, weight in QUOTAS:
        owner = (Department if kind == "department" else Project).objects.filter(slug=slug).first()
        if owner is None or Quota.objects.filter(**{kind: owner, "resource_class": "any"}).exists():
            continue
        quota_create(
            actor=actor,
            **{kind: owner},
            resource_class="any",
            guaranteed_cu=cu(guaranteed),
            borrowing_limit_cu=cu(borrowing),
            lending_limit_cu=cu(lending),
            lending_windows=windows,
            over_quota_weight=Decimal(weight),
        )
        created += 1
    stdout.write(f"quotas: {created} created (fleet: {capacity.normalize():f} CU)")
    return created
