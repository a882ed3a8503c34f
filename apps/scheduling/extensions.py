"""Extension points of the job pages: what layers above scheduling add to them.

The job pages live in scheduling (they show allocations, decision traces and "why pending?"), but
two things they show come from higher layers: the utilization curve (telemetry) and the cost per
hour of a request (billing's rate cards). Scheduling may not import those layers, so each one
registers a provider here in its ``AppConfig.ready()`` — an import going down the layers — and the
pages ask the slot. A slot with no provider (the app is not installed) shows nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Slot:
    """A named list of providers, filled by the apps above in ``AppConfig.ready()``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._providers: list[Callable[..., Any]] = []

    def register(self, provider: Callable[..., Any]) -> Callable[..., Any]:
        """Add ``provider`` (once: ``ready()`` may run more than once, e.g. in tests)."""
        if provider not in self._providers:
            self._providers.append(provider)
        return provider

    @property
    def providers(self) -> tuple[Callable[..., Any], ...]:
        return tuple(self._providers)

    def first(self, *args: Any, **kwargs: Any) -> Any:
        """The first provider's answer that is not empty (None, ""), in registration order; else None."""
        for provider in self._providers:
            answer = provider(*args, **kwargs)
            if answer not in (None, ""):
                return answer
        return None

    def __repr__(self) -> str:
        return f"<Slot {self.name}: {len(self._providers)} provider(s)>"


# provider(job, user) -> HTML of the job's utilization curve, or "" when there is none.
JOB_UTILIZATION_CHART = Slot("job_utilization_chart")
# provider(job, compute_units: Decimal) -> what an hour of the request costs, e.g. "12.50 CNY", or None.
JOB_COST_PER_HOUR = Slot("job_cost_per_hour")
