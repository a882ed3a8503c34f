"""``backend_for``: the backend of a Cluster row (one interface, two implementations, DESIGN
"Cluster backends").

A ``kubernetes`` cluster gets a :class:`~apps.clusters.backend.KubernetesBackend` (its kubeconfig,
or the in-cluster service account). A ``simulated`` Cluster row gets the durable simulation whose
state lives in the database (:mod:`apps.clusters.simulation`), shared by every process; an object
that is not a model row (a test stub with ``backend``, ``slug``, ``pk``) gets an in-memory
:class:`~apps.clusters.backend.SimulatedBackend` kept per process.
"""

from __future__ import annotations

import threading

from apps.clusters.backend import ClusterBackend, KubernetesBackend, PermanentBackendError, SimulatedBackend
from apps.clusters.simulation import DurableSimulatedBackend

_simulated: dict[str, SimulatedBackend] = {}
_simulated_lock = threading.Lock()


def backend_for(cluster, **kwargs) -> ClusterBackend:
    """The backend of a Cluster row. Simulated backends are kept per cluster for the process."""
    if cluster.backend == "kubernetes":
        return KubernetesBackend(cluster, **kwargs)
    if cluster.backend == "simulated":
        if hasattr(cluster, "_meta"):  # a Cluster row: the state lives in the database, shared
            return DurableSimulatedBackend(cluster)
        key = getattr(cluster, "slug", None) or str(cluster.pk)
        with _simulated_lock:
            if key not in _simulated:
                _simulated[key] = SimulatedBackend(seed=kwargs.get("seed", 0))
            return _simulated[key]
    raise PermanentBackendError(f"cluster {cluster}: unknown backend {cluster.backend!r}")
