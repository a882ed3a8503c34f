"""Fleet reports (staff): utilization over time, top nodes, idle cards, the three figures, period
comparison, fragmentation."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from typing import Any

from django.db.models import (
    Count,
    ExpressionWrapper,
    F,
    FloatField,
    IntegerField,
    Max,
    Q,
    QuerySet,
    Sum,
)
from django.db.models.functions import Cast
from django.utils.translation import gettext as _

from apps.core.errors import ValidationFailed
from apps.inventory.models import Device, Pool
from apps.jobs.models import Allocation
from apps.telemetry.models import Quality
from apps.telemetry.selectors.periods import (
    FLEET_GROUPS,
    GROUPS,
    METHODS,
    TOTAL_GROUPS,
    Period,
    _allocation_seconds,
    _annotated,
    _card_period_rows,
    _card_period_sql,
    _card_rows,
    _fleet_rows,
    _fleet_totals,
    _job_totals,
    _node_period_rows,
    _pct,
    _quality,
    require_staff,
)
from apps.telemetry.windows import setting


def fleet_utilization(*, user, period: Period, group_by: str = "vendor", source: str | None = None) -> dict:
    """Average card busy % per window and group (vendor / model / pool / node / cluster)."""
    require_staff(user)
    if group_by not in GROUPS:
        raise ValidationFailed(
            _("Unknown grouping %(name)s.") % {"name": repr(group_by)[:60]},
            details={"group_by": list(GROUPS)},
        )
    fleet = _fleet_rows(period, source)
    if fleet is not None:
        key = FLEET_GROUPS[group_by]
        if key in TOTAL_GROUPS:  # the fleet's rows of a window summed at ingest
            fleet = _fleet_totals(period, source)
        # Σ over the nodes' rows of each window: a card has one row per window and source.
        sums = {
            "u_sum": Sum("util_sum"),
            "u_n": Sum("util_n"),
            "cards": Sum("cards"),
            "estimated": Sum("estimated"),
        }
        if key == "pool_label":
            rows = _by_pool_name(fleet.values("window_start", "node__pool_id").annotate(**sums).order_by())
        else:
            rows = fleet.values("window_start", key).annotate(**sums).order_by("window_start", key)
    else:
        key = GROUPS[group_by]
        rows = _fleet_utilization_card_rows(period, source, key)
    series: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if not r["u_n"]:
            continue
        series[str(r[key])].append(
            {
                "window_start": r["window_start"].isoformat(),
                "utilization_pct": round(r["u_sum"] / r["u_n"], 2),
                "cards": r["cards"],
                "quality": _quality(r["estimated"]),
            }
        )
    return {
        "start": period.start.isoformat(),
        "end": period.end.isoformat(),
        "resolution_s": period.resolution,
        "group_by": group_by,
        "method": METHODS["physical_utilization"],
        "series": [{"group": g, "points": pts} for g, pts in sorted(series.items())],
    }


def _by_pool_name(rows) -> list[dict]:
    """Rows summed per window and pool id, summed again per pool name ("—": no pool), in window and
    name order: the nodes' pool ids joined, not their pools' names to every row (issue 31)."""
    names = dict(Pool.objects.values_list("pk", "name"))
    merged: dict[tuple, dict] = {}
    for r in rows:
        label = names.get(r["node__pool_id"], "—")
        into = merged.setdefault(
            (r["window_start"], label),
            {
                "window_start": r["window_start"],
                "pool_label": label,
                "u_sum": 0.0,
                "u_n": 0,
                "cards": 0,
                "estimated": 0,
            },
        )
        for name in ("u_sum", "u_n", "cards", "estimated"):
            into[name] += r[name]
    return [merged[k] for k in sorted(merged)]


def _fleet_utilization_card_rows(period: Period, source: str | None, key: str) -> QuerySet:
    """fleet_utilization's groups from the card rollups (two sources in the period; and the reference
    the fleet rollups are tested against)."""
    return (
        _annotated(_card_rows(period, source), *(key,) if key in ("model_label", "pool_label") else ())
        .values("window_start", key)
        .annotate(
            u_sum=Sum("util_sum"),
            u_n=Sum("util_n"),
            cards=Count("device", distinct=True),
            estimated=Count("pk", filter=Q(quality=Quality.ESTIMATED)),
        )
        .order_by("window_start", key)
    )


def top_nodes(*, user, period: Period, limit: int = 10, source: str | None = None) -> list[dict]:
    require_staff(user)
    fleet = _fleet_rows(period, source)
    if fleet is None:
        return _top_nodes_from_cards(period, limit, source)
    rows = _top_fleet_nodes(period, source, limit)
    # Distinct cards over the period, for the chosen nodes only (a card has a row in many windows).
    cards = dict(
        _card_rows(period, source)
        .filter(device__node_id__in=[r["node_id"] for r in rows])
        .order_by()
        .values("device__node_id")
        .annotate(cards=Count("device", distinct=True))
        .values_list("device__node_id", "cards")
    )
    out = [
        {
            "node_id": r["node_id"],
            "node": r["node__name"],
            "cluster": r["node__cluster__slug"],
            "cards": cards.get(r["node_id"], 0),
            "utilization_pct": round(r["u_sum"] / r["u_n"], 2),
            "peak_pct": r["peak"],
            "quality": _quality(r["estimated"]),
        }
        for r in rows
    ]
    out.sort(key=lambda r: (-r["utilization_pct"], r["node"]))
    return out[:limit]


def _summed_rows(sql: str, params: list, names: tuple[str, ...]) -> list[dict]:
    """The rows of a raw query as dicts by ``names``; ``u_n`` and ``estimated`` as ints (PostgreSQL's
    Σ of a bigint is a numeric)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    for r in rows:
        r["u_n"], r["estimated"] = int(r["u_n"]), int(r["estimated"])
    return rows


def _top_fleet_nodes(period: Period, source: str | None, limit: int) -> list[dict]:
    """The busiest nodes of the fleet rollups (their whole buckets from the node summaries): summed
    per node first, then only the nodes joined with their names (the busiest first, then by name),
    not every row of the period (issue 31)."""
    from django.db import connection

    rows, params = _node_period_rows(period, source)
    # The busiest ``limit`` nodes and those as busy as the last of them (WITH TIES), and only these
    # joined with their names for the tie-break: not every node of the fleet joined and sorted.
    # SQLite (the demo) has no WITH TIES: there every node is joined.
    ties, tie_params = "", []
    if connection.vendor == "postgresql":
        ties, tie_params = (
            "ORDER BY SUM(y.util_sum) / SUM(y.util_n) DESC FETCH FIRST %s ROWS WITH TIES",
            [limit],
        )
    sql = (
        "SELECT f.node_id, n.name, c.slug, f.u_sum, f.u_n, f.peak, f.estimated FROM ("  # noqa: S608 (constants)
        "SELECT y.node_id, SUM(y.util_sum) AS u_sum, SUM(y.util_n) AS u_n, MAX(y.util_max) AS peak, "
        f"SUM(y.estimated) AS estimated FROM ({rows}) y GROUP BY y.node_id HAVING SUM(y.util_n) > 0 {ties}) f "
        "JOIN inventory_node n ON n.id = f.node_id JOIN inventory_cluster c ON c.id = n.cluster_id "
        "ORDER BY f.u_sum / f.u_n DESC, n.name LIMIT %s"
    )
    names = ("node_id", "node__name", "node__cluster__slug", "u_sum", "u_n", "peak", "estimated")
    return _summed_rows(sql, [*params, *tie_params, limit], names)


def _top_nodes_from_cards(period: Period, limit: int, source: str | None) -> list[dict]:
    rows = (
        _card_rows(period, source)
        .values("device__node_id", "device__node__name", "device__node__cluster__slug")
        .annotate(
            u_sum=Sum("util_sum"),
            u_n=Sum("util_n"),
            cards=Count("device", distinct=True),
            peak=Max("util_max"),
            estimated=Count("pk", filter=Q(quality=Quality.ESTIMATED)),
        )
        .filter(u_n__gt=0)
        # The busiest nodes first, cut in SQL: ten rows back, not one per node of the fleet (issue 20).
        .annotate(busy=ExpressionWrapper(F("u_sum") / F("u_n"), output_field=FloatField()))
        .order_by("-busy", "device__node__name")[:limit]
    )
    out = [
        {
            "node_id": r["device__node_id"],
            "node": r["device__node__name"],
            "cluster": r["device__node__cluster__slug"],
            "cards": r["cards"],
            "utilization_pct": round(r["u_sum"] / r["u_n"], 2),
            "peak_pct": r["peak"],
            "quality": _quality(r["estimated"]),
        }
        for r in rows
    ]
    out.sort(key=lambda r: (-r["utilization_pct"], r["node"]))
    return out[:limit]


def _idle_rows(
    period: Period, threshold_pct: float | None, source: str | None, limit: int | None
) -> list[dict]:
    """The idle cards of the period, in node and index order: per card, its rollups summed (the card
    summaries of the whole buckets, the rollups of the edges: ``_card_period_sql``), kept where some
    window has a busy % and none exceeds the threshold; then only those cards joined (issue 31)."""

    threshold = setting("TELEMETRY_IDLE_UTIL_PCT", 5.0) if threshold_pct is None else threshold_pct
    # The candidates first: cards with some row at or under the threshold (a few, unlike the cards of
    # the fleet); only their rows are summed.
    low, low_params = _card_period_rows(period, source, "util_max <= %s", (threshold,))
    candidates = f"device_id IN (SELECT device_id FROM ({low}) low)"  # noqa: S608 (constants)
    cards, params = _card_period_sql(period, source, candidates, low_params)
    sql = (
        "SELECT c.device_id, n.name, d.vendor, d.\"index\", COALESCE(m.name, d.raw_model_name, '?'), d.uuid, "  # noqa: S608
        f"c.u_sum, c.u_n, c.peak, c.estimated FROM ({cards}) c "
        "JOIN inventory_device d ON d.id = c.device_id JOIN inventory_node n ON n.id = d.node_id "
        "LEFT JOIN catalog_devicemodel m ON m.id = d.device_model_id "
        # Retired: out of service, not idle capacity (issue 21).
        'WHERE c.u_n > 0 AND c.peak <= %s AND d.health <> %s ORDER BY n.name, d."index"'
    )
    params += [threshold, Device.Health.RETIRED]
    if limit is not None:
        sql += " LIMIT %s"
        params.append(limit)
    names = ("device_id", "node", "vendor", "index", "model", "uuid", "u_sum", "u_n", "peak", "estimated")
    return _summed_rows(sql, params, names)


def idle_cards(
    *,
    user,
    period: Period,
    threshold_pct: float | None = None,
    source: str | None = None,
    limit: int | None = None,
) -> list[dict]:
    """Cards whose busy % never exceeded the idle threshold in the window (with telemetry), and whether
    they were allocated meanwhile (allocated and idle = capacity held for nothing); the first ``limit``
    of them (node, index order) when given (the fleet page; its CSV export lists them all)."""
    require_staff(user)
    rows = _idle_rows(period, threshold_pct, source, limit)
    allocated = set(
        Allocation.objects.filter(device_id__in=[r["device_id"] for r in rows], started_at__lt=period.end)
        .filter(Q(released_at__isnull=True) | Q(released_at__gt=period.start))
        .values_list("device_id", flat=True)
    )
    return [
        {
            "device_id": r["device_id"],
            "node": r["node"],
            "vendor": r["vendor"],
            "index": r["index"],
            "model": r["model"],
            "uuid": r["uuid"],
            "utilization_pct": round(r["u_sum"] / r["u_n"], 2),
            "peak_pct": r["peak"],
            "allocated": r["device_id"] in allocated,
            "quality": _quality(r["estimated"]),
        }
        for r in rows
    ]


def three_figures(*, user, period: Period, source: str | None = None) -> dict:
    """Allocation ratio, physical utilization and effective utilization side by side (seed 001 §4.1)."""
    require_staff(user)
    devices = Device.objects.exclude(health__in=[Device.Health.RETIRED, Device.Health.LOST])
    device_ids = devices.order_by().values("pk")  # a subquery: no list of every card id (issue 20)
    card_count = devices.count()
    capacity_s = card_count * period.seconds
    out_of_service = Device.objects.filter(health__in=[Device.Health.RETIRED, Device.Health.LOST]).order_by()
    allocated_s = _allocation_seconds(period, excluded_device_ids=out_of_service.values("pk"))
    if _fleet_rows(period, source) is not None:
        card = _fleet_totals(period, source).aggregate(
            u_sum=Sum("util_sum"), u_n=Sum("util_n"), estimated=Sum("estimated")
        )
        card["cards"] = _cards_seen(period, source, card_count, out_of_service)
    else:
        card = _three_figures_card_rows(period, source, device_ids)
    eff = _job_totals(period, source=source)
    effective = None
    if eff["share"]:
        effective = round(min(100.0, (eff["busy"] or 0.0) / eff["share"]), 2)
    return {
        "start": period.start.isoformat(),
        "end": period.end.isoformat(),
        "cards": card_count,
        "cards_with_telemetry": card["cards"] or 0,
        "allocation_ratio_pct": _pct(allocated_s, capacity_s),
        "allocation_ratio_quality": Quality.EXACT,  # from the ledger's allocations, not from metrics
        "physical_utilization_pct": round(card["u_sum"] / card["u_n"], 2) if card["u_n"] else None,
        "physical_utilization_quality": _quality(card["estimated"] or 0),
        "effective_utilization_pct": effective,
        "effective_utilization_quality": _quality(eff["estimated"] or 0)
        if eff["rows"]
        else Quality.ESTIMATED,
        "methods": METHODS,
    }


def _cards_seen(period: Period, source: str | None, card_count: int, out_of_service: QuerySet) -> int:
    """The in-service cards with a rollup in the period (a retired card's old rows made "55 / 54":
    issue 21), from the card summaries of the whole buckets and the rollups of the edges; to be read
    only where ``_fleet_rows`` gives rows (one source).

    Where every in-service card reported in one window (a fleet whose exporters all answer), that is
    all ``card_count`` of them, read from the fleet totals: a window's totals count its cards (one
    row per card and window of one source), of which at most the out-of-service ones are not in
    service, and no more than ``card_count`` cards are. Only otherwise are the cards' rows of the
    period counted one by one (issue 31: a DISTINCT over a row per card)."""
    per_window = _fleet_totals(period, source).order_by().values("window_start").annotate(n=Sum("cards"))
    busiest = max((row["n"] for row in per_window), default=0)
    if card_count and busiest - out_of_service.count() >= card_count:
        return card_count
    return _cards_counted(period, source)


def _cards_counted(period: Period, source: str | None) -> int:
    """``_cards_seen`` counted from the cards' rows of the period."""
    from django.db import connection

    rows, params = _card_period_rows(period, source)
    # Out of service: a few cards, excluded by id (no join of every card's row with its card).
    sql = (
        f"SELECT COUNT(DISTINCT x.device_id) FROM ({rows}) x WHERE x.device_id NOT IN "  # noqa: S608
        f"(SELECT id FROM {Device._meta.db_table} WHERE health IN (%s, %s))"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, Device.Health.RETIRED, Device.Health.LOST])
        return cursor.fetchone()[0]


def _three_figures_card_rows(period: Period, source: str | None, device_ids) -> dict:
    return _card_rows(period, source).aggregate(
        u_sum=Sum("util_sum"),
        u_n=Sum("util_n"),
        cards=Count("device", distinct=True, filter=Q(device_id__in=device_ids)),
        estimated=Count("pk", filter=Q(quality=Quality.ESTIMATED)),
    )


def period_comparison(*, user, baseline: Period, current: Period, source: str | None = None) -> dict:
    """Baseline window vs current window: each figure and the current ÷ baseline ratio (e.g. 31 % → 42 % = 1.35×)."""
    require_staff(user)
    before = three_figures(user=user, period=baseline, source=source)
    after = three_figures(user=user, period=current, source=source)
    out: dict[str, Any] = {"baseline": before, "current": after, "ratios": {}}
    for name in ("allocation_ratio_pct", "physical_utilization_pct", "effective_utilization_pct"):
        a, b = before[name], after[name]
        out["ratios"][name] = round(b / a, 2) if a and b is not None else None
    out["method"] = _(
        "Each figure is computed over each window independently with the methods given; the ratio is "
        "current ÷ baseline (seed 001 §4.1: physical utilization 31 % → 42 % = 1.35×). Rollups are averages "
        "of the exporter's samples (10 s scrapes recommended: coarser ones flatten short peaks). A figure is "
        "estimated when any row under it is."
    )
    return out


def fragmentation(*, user) -> dict:
    """Free capacity (now) that no compute template of the card's model — nor a whole card — can use."""
    require_staff(user)
    from apps.catalog.models import ComputeTemplate
    from apps.catalog.selectors import coefficients_on

    in_service = Device.objects.filter(health__in=[Device.Health.HEALTHY, Device.Health.DEGRADED]).order_by()
    # The other two states: a few cards, excluded by id rather than every allocation joined with its card.
    out_of_service = Device.objects.filter(health__in=[Device.Health.LOST, Device.Health.RETIRED]).order_by()
    active = Allocation.objects.filter(released_at__isnull=True)
    # A card no active allocation touches is wholly free, hence usable (a whole card fits): counted per
    # model in SQL. Only the cards some allocation holds are read one by one (issue 20).
    idle_by_model = dict(
        in_service.exclude(pk__in=active.values("device_id"))
        .values("device_model_id")
        .annotate(cards=Count("pk"))
        .values_list("device_model_id", "cards")
    )
    # The cards some shared allocation holds (a few; not every active allocation summed per card: issue
    # 31), then all their active allocations summed: a whole card or a full share leaves nothing free.
    shared = active.filter(whole_card=False).exclude(device_id__in=out_of_service.values("pk"))
    used = {
        row["device_id"]: row
        for row in active.filter(device_id__in=set(shared.order_by().values_list("device_id", flat=True)))
        .order_by()
        .values("device_id")
        .annotate(
            mem=Sum("memory_mib"), milli=Sum("compute_milli"), whole=Max(Cast("whole_card", IntegerField()))
        )
        .filter(whole=0, milli__lt=1000)
    }
    held = list(
        in_service.filter(pk__in=list(used))
        .select_related("device_model", "node")
        .order_by("node__name", "index")
    )
    templates = defaultdict(list)
    for t in ComputeTemplate.objects.filter(is_retired=False).values(
        "device_model_id", "memory_mib", "compute_share"
    ):
        templates[t["device_model_id"]].append((t["memory_mib"], float(t["compute_share"]) * 10))
    coefficients = coefficients_on(
        {m for m in idle_by_model if m} | {d.device_model_id for d in held if d.device_model_id}
    )
    rows = []
    free_cu = Decimal(0)
    stranded_cu = Decimal(0)
    for model_id, cards in idle_by_model.items():
        coeff = coefficients.get(model_id)
        if coeff is not None:
            free_cu += coeff.quantize(Decimal("0.0001")) * cards
    for d in held:
        mem_used, milli_used = used[d.pk]["mem"] or 0, used[d.pk]["milli"] or 0
        memory = d.memory_mib or (d.device_model.memory_mib if d.device_model_id else None) or 0
        free_milli = max(0, 1000 - milli_used)
        free_mem = max(0, memory - mem_used)
        if free_milli == 0:
            continue
        coeff = coefficients.get(d.device_model_id)
        cu = (coeff * Decimal(free_milli) / 1000).quantize(Decimal("0.0001")) if coeff is not None else None
        fits = [t for t in templates.get(d.device_model_id, []) if t[0] <= free_mem and t[1] <= free_milli]
        usable = bool(fits) or (free_milli == 1000 and not mem_used)
        if cu is not None:
            free_cu += cu
            if not usable:
                stranded_cu += cu
        if not usable:
            rows.append(
                {
                    "device_id": d.pk,
                    "node": d.node.name,
                    "index": d.index,
                    "vendor": d.vendor,
                    "model": d.model_label,
                    "free_compute_milli": free_milli,
                    "free_memory_mib": free_mem,
                    "free_cu": str(cu) if cu is not None else None,
                }
            )
    return {
        "free_cu": str(free_cu),
        "fragmented_cu": str(stranded_cu),
        "fragmented_pct": _pct(float(stranded_cu), float(free_cu)),
        "method": _(
            "Per in-service card: free share = 1000‰ − active allocations; fragmented when no non-retired "
            "compute template of its model fits the free memory and share, and the card is not wholly free. "
            "CU = the model's coefficient × free share."
        ),
        "quality": Quality.EXACT,
        "cards": rows,
    }
