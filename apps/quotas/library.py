"""The quota's answer to the benchmark library (``recommend(quota_ceiling=quota_ceiling)``, passed by the
pages, the API and the scheduler, which sit above quotas): the most
compute units per hour the reader's projects may hold on one option, so a recommendation marks the
options that need more than that "over your quota"."""

from __future__ import annotations

from decimal import Decimal

from apps.quotas.admission import INF
from apps.quotas.book import may_cover
from apps.quotas.models import Quota, ResourceClass


def quota_ceiling(*, project_ids, vendor: str, device_model_id: int, pool_ids) -> tuple[Decimal, str] | None:
    """``(ceiling CU, project slug)`` — the guarantee plus the borrowing limit of the quota row that
    allows the most for this option, over the projects ``project_ids`` (the reader may pick any of
    them) — or None when one of the projects has no quota row covering the option (no quota bounds it).

    A row of class ``pool`` covers the option only when the model has cards in that pool; a row
    without a borrowing limit allows any amount (the ceiling is then unbounded: None).
    """
    project_ids = set(project_ids or ())
    if not project_ids:
        return None
    rows: dict[int, list[Quota]] = {pid: [] for pid in project_ids}
    for q in Quota.objects.filter(project_id__in=project_ids).select_related("project", "device_model"):
        rows[q.project_id].append(q)
    best: tuple[Decimal, str] | None = None
    for quotas in rows.values():
        covering = [
            q
            for q in quotas
            if (q.pool_id in set(pool_ids or ()) if q.resource_class == ResourceClass.POOL else True)
            and may_cover(q, {vendor}, device_model_id)
        ]
        if not covering:
            return None  # this project has no quota row for the option: nothing bounds it
        for q in covering:
            ceiling = INF if q.borrowing_limit_cu is None else q.guaranteed_cu + q.borrowing_limit_cu
            if ceiling == INF:
                return None
            if best is None or ceiling > best[0]:
                best = (ceiling, q.project.slug)
    return best
