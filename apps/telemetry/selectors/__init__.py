"""Telemetry reads and reports.

Scope (pages and API alike): fleet-wide reports (utilization over time, top nodes, idle cards, the
three figures, fragmentation, period comparison, raw rollups) are for platform staff only — they
describe cards and projects a member may not see. A project member sees the utilization of their
own projects and of those projects' jobs. Every figure carries ``quality``: "exact" when it rests
only on exact rows, else "estimated".

Methods (seed 001 §4.1):
- allocation ratio = Σ allocated share × time / Σ card capacity × time (in-service cards of the scope);
- physical utilization = average card busy % over every whole-card 5-minute (or hourly) rollup in the
  window: Σ utilization samples / their count;
- effective utilization = busy / allocated: Σ card-busy points attributed to jobs / Σ allocated share,
  from the job attribution rows (capped at 100 %).

The code lives by topic: ``periods`` (periods, scope, the row sets), ``fleet`` (staff reports) and
``jobs`` (project and job reports, measured CU hours, card curves); this package re-exports their
public names under the old path.
"""

from apps.telemetry.selectors.fleet import (
    fleet_utilization,
    fragmentation,
    idle_cards,
    period_comparison,
    three_figures,
    top_nodes,
)
from apps.telemetry.selectors.jobs import (
    CARD_CURVE_FINE_SPAN,
    CARD_CURVE_MAX_SPAN,
    CARD_METRICS,
    EXPORTERS,
    _exporter_name,
    job_card_curves,
    job_for_user,
    job_utilization,
    measured_cu_hours,
    measured_cu_hours_by_hour,
    project_for_user,
    project_summaries,
    project_utilization,
    visible_projects,
)
from apps.telemetry.selectors.periods import (
    GROUPS,
    MAX_SPAN,
    METHODS,
    PERIOD_MAX,
    PERIOD_MIN,
    Period,
    metric_source_list,
    period_parse,
    require_staff,
    rollup_list,
)

__all__ = [
    "CARD_CURVE_FINE_SPAN",
    "CARD_CURVE_MAX_SPAN",
    "CARD_METRICS",
    "EXPORTERS",
    "GROUPS",
    "MAX_SPAN",
    "METHODS",
    "PERIOD_MAX",
    "PERIOD_MIN",
    "Period",
    "_exporter_name",
    "fleet_utilization",
    "fragmentation",
    "idle_cards",
    "job_card_curves",
    "job_for_user",
    "job_utilization",
    "measured_cu_hours",
    "measured_cu_hours_by_hour",
    "metric_source_list",
    "period_comparison",
    "period_parse",
    "project_for_user",
    "project_summaries",
    "project_utilization",
    "require_staff",
    "rollup_list",
    "three_figures",
    "top_nodes",
    "visible_projects",
]
