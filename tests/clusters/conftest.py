"""Fixtures of tests/clusters: ``server`` (the fake API server) and ``kube_cluster`` (the fleet's
cluster on it), the same as tests/kube's (defined once in tests/kube/helpers.py)."""

from tests.kube.helpers import kube_cluster, server  # noqa: F401  (fixtures: defined once there)
