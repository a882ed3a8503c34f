"""A simulated cluster whose state lives in the database (``SimulatedCluster``).

The in-memory :class:`~apps.clusters.backend.SimulatedBackend` is per process; the demo runs a web
server, Celery workers and beat in several processes that must all see one cluster, and a restart
must not make every running job look "deleted behind our back". Each call here loads the state under
a row lock, moves the simulated clock to the wall clock (times ``SIMULATED_TIME_SCALE``, plus any
explicit :meth:`advance`), runs the in-memory backend and stores the state back. The lock is held
for microseconds of Python work, never around a network call (there is none).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.clusters.backend import ApplyResult, ClusterBackend, SimulatedBackend
from apps.clusters.models import SimulatedCluster

T = TypeVar("T")


class DurableSimulatedBackend(ClusterBackend):
    name = "simulated"

    def __init__(self, cluster: Any, time_scale: float | None = None) -> None:
        self.cluster = cluster
        self.time_scale = (
            float(settings.SUANCHI.get("SIMULATED_TIME_SCALE", 1.0)) if time_scale is None else time_scale
        )

    def _row(self) -> SimulatedCluster:
        try:
            return SimulatedCluster.objects.select_for_update().get(cluster_id=self.cluster.pk)
        except SimulatedCluster.DoesNotExist:
            try:
                with transaction.atomic():
                    SimulatedCluster.objects.create(cluster_id=self.cluster.pk, started_at=timezone.now())
            except IntegrityError:
                pass  # another process created it first
            return SimulatedCluster.objects.select_for_update().get(cluster_id=self.cluster.pk)

    def _run(self, fn: Callable[[SimulatedBackend], T], *, extra_seconds: float = 0.0) -> T:
        with transaction.atomic():
            row = self._row()
            state = row.state or {"epoch": row.started_at.isoformat()}
            sim = SimulatedBackend.from_state(state, seed=self.cluster.pk)
            offset = float(state.get("offset", 0.0)) + extra_seconds
            target = (timezone.now() - row.started_at).total_seconds() * self.time_scale + offset
            if target > sim.clock:
                sim.advance(target - sim.clock)
            result = fn(sim)
            row.state = {**sim.to_state(), "offset": offset}
            row.save(update_fields=["state", "updated_at"])
            return result

    # -- the backend interface --------------------------------------------------------------------
    def get(self, kind: str, namespace: str | None, name: str) -> dict | None:
        return self._run(lambda sim: sim.get(kind, namespace, name))

    def apply(self, obj: dict) -> ApplyResult:
        return self._run(lambda sim: sim.apply(obj))

    def delete(self, kind: str, namespace: str | None, name: str) -> bool:
        return self._run(lambda sim: sim.delete(kind, namespace, name))

    def list_owned(self, kind: str, namespace: str | None = None, selector: str | None = None) -> list[dict]:
        if selector is None:
            return self._run(lambda sim: sim.list_owned(kind, namespace))
        return self._run(lambda sim: sim.list_owned(kind, namespace, selector))

    def patch_node(self, name: str, labels: dict | None = None, taints: list | None = None) -> dict:
        def patch(sim: SimulatedBackend) -> dict:
            if sim.get("Node", None, name) is None:  # a simulated cluster knows every ledger node
                sim.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}}})
            return sim.patch_node(name, labels=labels, taints=taints)

        return self._run(patch)

    # -- simulation controls (tests, demo) ----------------------------------------------------------
    def advance(self, seconds: float) -> list[tuple[str, str, str]]:
        """Move this cluster's clock forward by ``seconds`` beyond the wall clock."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        return self._run(lambda sim: [], extra_seconds=seconds)

    def inject_failure(
        self, namespace: str, name: str, reason: str = "Error", exit_code: int = 1
    ) -> list[str]:
        return self._run(lambda sim: sim.inject_failure(namespace, name, reason=reason, exit_code=exit_code))

    def pods_of(self, namespace: str, job_name: str) -> list[dict]:
        return self._run(lambda sim: sim.pods_of(namespace, job_name))
