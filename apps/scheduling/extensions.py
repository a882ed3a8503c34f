"""Extension points of the job pages: what layers above scheduling add to them.

The job pages live in scheduling (they show allocations, decision traces and "why pending?"), but
two things they show come from higher layers: the utilization curve (telemetry) and the cost per
hour of a request (billing's rate cards). Scheduling may not import those layers, so each one
registers a provider here in its ``AppConfig.ready()`` — an import going down the layers — and the
pages ask the slot. A slot with no provider (the app is not installed) shows nothing.
"""

from __future__ import annotations

from apps.core.slots import Slot

# provider(job, user) -> HTML of the job's utilization curve, or "" when there is none.
JOB_UTILIZATION_CHART = Slot("job_utilization_chart")
# provider(job, compute_units: Decimal) -> what an hour of the request costs, e.g. "12.50 CNY", or None.
JOB_COST_PER_HOUR = Slot("job_cost_per_hour")
# provider(job, user) -> HTML of the per-card curves (utilization, memory, temperature, power), or "".
JOB_CARD_CURVES = Slot("job_card_curves")
