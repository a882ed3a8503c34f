"""Setup shared by the tests that drive a cluster through the fake API server (tests/kube,
tests/clusters, tests/jobs, tests/hardening): a per-test server fixture and pointing a cluster of the
database at it.

``server`` and ``kube_cluster`` below are the fixtures tests/kube and tests/clusters get from their
conftest.py; a module that needs other server options binds its own
``server = fake_server_fixture(...)``."""

from __future__ import annotations

import pytest

from apps.inventory.models import Cluster, Device, Node
from tests.kube.fake_apiserver import FakeApiServer, kubeconfig_for


def fake_server_fixture(**options):
    """A pytest fixture named ``server``: a ``FakeApiServer(**options)`` started for one test,
    stopped after it. Bind it in a test module as ``server = fake_server_fixture(timeout_delay=1.5)``."""

    @pytest.fixture
    def server():
        srv = FakeApiServer(**options).start()
        yield srv
        srv.stop()

    return server


# The fake API server of a test (controllers on; a client timing out after 1.5 s of no answer).
server = fake_server_fixture(timeout_delay=1.5)


def kube_cluster_at(server, tmp_path, *, slug: str = "prod", nodes=(), **fields) -> Cluster:
    """The cluster ``slug`` switched to the Kubernetes backend with a kubeconfig for ``server``
    (other ``fields`` set too), saved; each name in ``nodes`` is added to the server as a Node."""
    cluster = Cluster.objects.get(slug=slug)
    cluster.backend = Cluster.Backend.KUBERNETES
    cluster.kubeconfig_path = str(kubeconfig_for(server, tmp_path))
    for field, value in fields.items():
        setattr(cluster, field, value)
    cluster.save()
    for name in nodes:
        server.add_node(name)
    return cluster


@pytest.fixture
def kube_cluster(fleet, server, tmp_path):
    """The fleet's cluster "prod" on the test's fake API server, with the fleet's nodes there."""
    return kube_cluster_at(server, tmp_path, nodes=fleet)


def nvidia_node(cluster, pool, name: str, model, cards: int, *, uuid: str = "{node}-{i}") -> Node:
    """A tainted NVIDIA node of ``cards`` devices of ``model`` in one topology group; device ``i``
    gets the UUID ``uuid.format(node=name, i=i)``."""
    node = Node.objects.create(
        cluster=cluster,
        pool=pool,
        name=name,
        driver_version="550.54.15",
        taints=[{"key": "accelerator", "value": "nvidia-gpu", "effect": "NoSchedule"}],
    )
    for i in range(cards):
        Device.objects.create(
            node=node,
            vendor="nvidia",
            index=i,
            uuid=uuid.format(node=name, i=i),
            device_model=model,
            topology_group=f"{name}-g0",
        )
    return node


def fake_client_fixtures():
    """Fixtures ``server``, ``api`` and ``core``: the short names the direct fake API server tests
    use for tests/kube/conftest.py's ``fake_server``, ``fake_api`` and ``fake_core``. Bind them in a
    module as ``server, api, core = fake_client_fixtures()``."""

    @pytest.fixture
    def server(fake_server):
        return fake_server

    @pytest.fixture
    def api(fake_api):
        return fake_api

    @pytest.fixture
    def core(fake_core):
        return fake_core

    return server, api, core
