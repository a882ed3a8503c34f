"""Cluster backends: one interface, two implementations, chosen per Cluster row by its ``backend``
field (``backend_for`` in :mod:`apps.clusters.connections`).

- :mod:`~apps.clusters.backends.base`: the interface (:class:`ClusterBackend`), the kinds Suanchi
  handles, an apply's result, what is read of a pod.
- :mod:`~apps.clusters.backends.errors`: what a call raises (:class:`BackendError`, transient or
  permanent; no retries in here: retrying, with backoff, is the pusher's job).
- :mod:`~apps.clusters.backends.objects`: how an object is compared and merge-patched (client-side
  apply with a last-applied record, canonical quantities) and label selectors.
- :mod:`~apps.clusters.backends.taints`: the Node taints Suanchi owns and the patch that swaps them.
- :mod:`~apps.clusters.backends.kubernetes`: :class:`KubernetesBackend`, a real cluster through the
  official ``kubernetes`` client (kubeconfig file per cluster, or the in-cluster service account);
  its list+watch views are in :mod:`~apps.clusters.backends.watch`.
- :mod:`~apps.clusters.backends.simulated_memory`: :class:`SimulatedBackend`, objects in memory and pods
  that "run" for their expected duration, so everything above the interface (push, reconcile,
  preemption) is shared; the durable one the demo runs is :mod:`apps.clusters.backends.simulated_durable`.
"""
