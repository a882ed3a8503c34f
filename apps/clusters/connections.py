"""``backend_for``: the backend of a Cluster row (one interface, two implementations, DESIGN
"Cluster backends"), chosen by the row's ``backend`` field and nothing else.

A ``kubernetes`` cluster gets a :class:`~apps.clusters.backends.kubernetes.KubernetesBackend` (its
kubeconfig, or the in-cluster service account). A ``simulated`` cluster gets the durable simulation
whose state lives in the database (:mod:`apps.clusters.backends.simulated_durable`), shared by every process. A test
that wants a cluster in memory builds a
:class:`~apps.clusters.backends.simulated_memory.SimulatedBackend` itself.
"""

from __future__ import annotations

from apps.clusters.backends.base import ClusterBackend
from apps.clusters.backends.errors import PermanentBackendError
from apps.clusters.backends.kubernetes import KubernetesBackend
from apps.clusters.backends.simulated_durable import DurableSimulatedBackend


def backend_for(cluster, **kwargs) -> ClusterBackend:
    """The backend of a Cluster row, by its ``backend`` field (``Cluster.Backend``)."""
    if cluster.backend == "kubernetes":
        return KubernetesBackend(cluster, **kwargs)
    if cluster.backend == "simulated":
        return DurableSimulatedBackend(cluster)
    raise PermanentBackendError(f"cluster {cluster}: unknown backend {cluster.backend!r}")
