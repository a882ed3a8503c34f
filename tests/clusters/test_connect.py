"""Connecting a cluster: Test connection through the real client against the fake API server,
saving a connection with an uploaded kubeconfig, the pages, and the first start from the environment."""

from __future__ import annotations

import os
import stat

import pytest
from django.urls import reverse

from apps.clusters.connect import cluster_connection_test, cluster_save, default_cluster_ensure
from apps.core.errors import ValidationFailed
from apps.inventory.models import Cluster, Node
from apps.telemetry.first_start import default_metric_source_ensure
from apps.telemetry.models import MetricSource
from tests.kube.fake_apiserver import kubeconfig_for
from tests.kube.helpers import fake_server_fixture

pytestmark = pytest.mark.django_db


server = fake_server_fixture(controllers=False)


def k8s_cluster(srv, tmp_path, slug="prod") -> Cluster:
    return Cluster.objects.create(
        name=slug, slug=slug, backend="kubernetes", kubeconfig_path=str(kubeconfig_for(srv, tmp_path))
    )


def test_test_connection_answers_version_rbac_plugins_and_device_classes(server, tmp_path):
    server._store[("daemonsets", "gpu-operator", "nvidia-device-plugin-daemonset")] = {
        "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "gpu-operator"},
        "status": {"numberReady": 2, "desiredNumberScheduled": 3},
    }
    server._store[("deviceclasses", "", "gpu.nvidia.com")] = {"metadata": {"name": "gpu.nvidia.com"}}
    server.rbac_denied.add(("patch", "", "nodes"))
    cluster = k8s_cluster(server, tmp_path)

    result = cluster_connection_test(cluster=cluster, actor="test")

    assert result["server_version"] == "v1.34.1"
    assert result["verbs"]["patch nodes"] is False and result["verbs"]["list nodes"] is True
    assert result["ok"] is False
    text = " ".join(result["lines"])
    assert "RBAC denies: patch nodes" in text
    assert (
        "NVIDIA device plugin runs as DaemonSet gpu-operator/nvidia-device-plugin-daemonset (2 of 3 ready)"
        in text
    )
    assert "gpu.nvidia.com" in text
    cluster.refresh_from_db()
    assert cluster.last_checked_at is not None and cluster.last_check["verbs"]["patch nodes"] is False


def test_test_connection_to_a_dead_server_says_so(server, tmp_path):
    cluster = k8s_cluster(server, tmp_path)
    server.stop()
    result = cluster_connection_test(cluster=cluster, actor="test")
    assert result["ok"] is False and "did not answer" in result["lines"][0]


def test_an_uploaded_kubeconfig_is_stored_as_a_secret_file(server, tmp_path, settings):
    settings.SUANCHI = {**settings.SUANCHI, "SECRETS_DIR": str(tmp_path / "secrets")}
    data = kubeconfig_for(server, tmp_path).read_bytes()
    cluster = cluster_save(
        fields={"name": "Up", "slug": "up", "backend": "kubernetes", "kube_context": "fake"},
        kubeconfig=data,
        actor="t",
    )
    path = cluster.kubeconfig_path
    assert path.startswith(str(tmp_path / "secrets")) and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert cluster_connection_test(cluster=cluster, actor="t")["server_version"] == "v1.34.1"


@pytest.mark.parametrize(
    ("data", "context", "problem"),
    [(b"{: nope", "", "not YAML"), (b"kind: Pod\n", "", "kind: Config"), (None, "other", "no context other")],
)
def test_a_bad_kubeconfig_is_refused_and_nothing_saved(server, tmp_path, settings, data, context, problem):
    settings.SUANCHI = {**settings.SUANCHI, "SECRETS_DIR": str(tmp_path / "secrets")}
    data = data or kubeconfig_for(server, tmp_path).read_bytes()
    with pytest.raises(ValidationFailed, match=problem):
        cluster_save(
            fields={"name": "B", "slug": "b", "backend": "kubernetes", "kube_context": context},
            kubeconfig=data,
            actor="t",
        )
    assert not Cluster.objects.exists() and not (tmp_path / "secrets").exists()


def test_first_start_creates_the_default_cluster_and_its_metric_source(settings, tmp_path):
    settings.SUANCHI = {
        **settings.SUANCHI,
        "CLUSTER_BACKEND": "kubernetes",
        "KUBECONFIG": str(tmp_path / "kubeconfig"),
        "PROMETHEUS_URL": "http://prometheus.monitoring:9090",
    }
    cluster = default_cluster_ensure()
    assert (cluster.slug, cluster.backend, cluster.kubeconfig_path) == (
        "default",
        "kubernetes",
        str(tmp_path / "kubeconfig"),
    )
    source = default_metric_source_ensure()
    assert source.cluster == cluster and source.url == "http://prometheus.monitoring:9090"
    # Second start: nothing more.
    assert default_cluster_ensure() is None and default_metric_source_ensure() is None
    assert MetricSource.objects.count() == 1


def test_first_start_in_cluster_and_a_bad_backend(settings):
    settings.SUANCHI = {**settings.SUANCHI, "CLUSTER_BACKEND": "kubernetes", "KUBECONFIG": ""}
    assert default_cluster_ensure().in_cluster is True
    Cluster.objects.all().delete()
    settings.SUANCHI = {**settings.SUANCHI, "CLUSTER_BACKEND": "openstack"}
    with pytest.raises(ValidationFailed, match="simulated or kubernetes"):
        default_cluster_ensure()


def test_pages_list_detail_test_and_sync(client, staff_user, server, tmp_path):
    server.add_node("gpu-01", capacity={"nvidia.com/gpu": "2"})
    cluster = k8s_cluster(server, tmp_path)
    client.force_login(staff_user)
    assert cluster.name in client.get(reverse("clusters:list")).content.decode()
    assert client.post(reverse("clusters:test", args=[cluster.slug])).status_code == 302
    page = client.get(reverse("clusters:detail", args=[cluster.slug])).content.decode()
    assert "Kubernetes v1.34.1" in page
    assert client.post(reverse("clusters:sync", args=[cluster.slug])).status_code == 302
    assert Node.objects.filter(cluster=cluster, name="gpu-01").exists()


def test_pages_refuse_non_staff(client, make_user, server, tmp_path):
    cluster = k8s_cluster(server, tmp_path)
    client.force_login(make_user())
    response = client.post(reverse("clusters:sync", args=[cluster.slug]))
    assert response.status_code == 403  # the styled page (tests/clusters/test_pages.py), not a login
    assert not Node.objects.exists()


def test_the_create_page_refuses_a_kubernetes_cluster_without_credentials(client, staff_user):
    client.force_login(staff_user)
    response = client.post(reverse("clusters:create"), {"name": "X", "slug": "x", "backend": "kubernetes"})
    assert response.status_code == 400 and not Cluster.objects.exists()


def test_test_connection_names_the_exporters_by_their_upstream_daemonset_names(server, tmp_path):
    # DaemonSet names from the vendors' manifests: MetaX-MACA/mxExporter deployment/mx-exporter
    # ("metax-mx-exporter"), EnflameTechnology/gcu-exporter deployments/yaml/gcu-exporter.yaml
    # ("gcu-exporter-daemonset"), HYGON-AI/hcu-exporter deployment/static/hcu-exporter.yaml.
    for namespace, name in (
        ("metax-monitor", "metax-mx-exporter"),
        ("kube-system", "gcu-exporter-daemonset"),
        ("kube-system", "hcu-exporter"),
    ):
        server._store[("daemonsets", namespace, name)] = {
            "metadata": {"name": name, "namespace": namespace},
            "status": {"numberReady": 1, "desiredNumberScheduled": 1},
        }
    result = cluster_connection_test(cluster=k8s_cluster(server, tmp_path), actor="test")
    text = " ".join(result["lines"])
    assert "MetaX mx-exporter runs as DaemonSet metax-monitor/metax-mx-exporter (1 of 1 ready)" in text
    assert "Enflame gcu-exporter runs as DaemonSet kube-system/gcu-exporter-daemonset (1 of 1 ready)" in text
    assert "Hygon HCU exporter runs as DaemonSet kube-system/hcu-exporter (1 of 1 ready)" in text


def test_a_bad_field_names_the_field_and_its_problem(settings):
    """Validation goes through apps.core.validation: one ValidationFailed (400) that names the row,
    the field and Django's message for it (never a bare "Invalid input.")."""
    with pytest.raises(ValidationFailed, match=r"^cluster Bad is invalid: slug: ") as caught:
        cluster_save(fields={"name": "Bad", "slug": "no spaces allowed", "backend": "simulated"}, actor="ops")
    assert set(caught.value.details) == {"slug"} and not Cluster.objects.filter(name="Bad").exists()
    cluster = Cluster.objects.create(name="Default", slug="default", backend="simulated")
    settings.SUANCHI = {**settings.SUANCHI, "PROMETHEUS_URL": "not a url"}
    with pytest.raises(ValidationFailed, match=r"^PROMETHEUS_URL='not a url' is invalid: url: ") as caught:
        default_metric_source_ensure()
    assert set(caught.value.details) == {"url"} and not cluster.metric_sources.exists()
