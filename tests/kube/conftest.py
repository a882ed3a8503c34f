"""Fixtures of tests/kube: ``server`` (the fake API server) and ``kube_cluster`` (the fleet's
cluster on it), defined once in tests/kube/helpers.py, and the fixtures for tests that talk to the
fake API server directly through the official client."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tests.kube.fake_apiserver import FakeApiServer, kubeconfig_for
from tests.kube.helpers import kube_cluster, server  # noqa: F401  (fixtures: defined once there)


@pytest.fixture
def fake_server():
    srv = FakeApiServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def fake_api(fake_server, tmp_path):
    api_client = k8s_config.new_client_from_config(config_file=str(kubeconfig_for(fake_server, tmp_path)))
    yield api_client
    api_client.close()


@pytest.fixture
def fake_core(fake_api):
    return k8s.CoreV1Api(fake_api)
