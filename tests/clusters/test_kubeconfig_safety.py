"""A kubeconfig can never run a program or read a file on the server (issue 27 §1).

Refused on upload (the page), and again every time a client is built from a stored kubeconfig (Test
connection, reconcile, sync, push), so a file written by an older version or edited later cannot run
anything either. The kubeconfig path is confined to ``SUANCHI_SECRETS_DIR``. Real files, the real
official client and the fake API server; the commands a refused kubeconfig names would create a
marker file, which must never appear."""

from __future__ import annotations

import html
import os
import sys
from pathlib import Path

import pytest
import yaml
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from apps.clusters.backends.errors import PermanentBackendError
from apps.clusters.backends.kubernetes import KubernetesBackend
from apps.clusters.connect import cluster_connection_test, cluster_save, kubeconfig_check
from apps.clusters.models import PushAction
from apps.clusters.outbox import push_object_enqueue
from apps.clusters.sync import cluster_sync
from apps.core.errors import ValidationFailed
from apps.inventory.models import Cluster
from apps.scheduling.push import push_stream_run
from apps.scheduling.reconcile import reconcile_cluster_run
from tests.kube.helpers import fake_server_fixture

pytestmark = pytest.mark.django_db


server = fake_server_fixture(controllers=False)


@pytest.fixture
def secrets(tmp_path, settings):
    directory = tmp_path / "secrets"
    directory.mkdir()
    settings.SUANCHI = {**settings.SUANCHI, "SECRETS_DIR": str(directory), "KUBECONFIG": ""}
    return directory


def config(server_url: str, user: dict, cluster: dict | None = None, name: str = "admin") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server_url, **(cluster or {})}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": name}}],
        "current-context": "ctx",
    }


def exec_user(marker: Path, command: str = "touch") -> dict:
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": command,
            "args": [str(marker)],
            "interactiveMode": "Never",
        }
    }


def gcp_user(marker: Path) -> dict:
    # auth-provider gcp with cmd-path: kube_config.py CommandTokenSource runs it.
    return {"auth-provider": {"name": "gcp", "config": {"cmd-path": "touch", "cmd-args": str(marker)}}}


def dump(doc: dict) -> bytes:
    return yaml.safe_dump(doc, sort_keys=False).encode()


def stored_cluster(path: Path, doc: dict, slug: str = "old") -> Cluster:
    """A Cluster row whose kubeconfig was written without any check (an older version, or the
    file edited later): ``objects.create`` bypasses the form and ``clean``."""
    path.write_bytes(dump(doc))
    return Cluster.objects.create(name=slug, slug=slug, backend="kubernetes", kubeconfig_path=str(path))


# -- on upload ------------------------------------------------------------------------------------


def test_an_exec_kubeconfig_uploaded_through_the_page_is_refused_naming_the_field(
    client, staff_user, server, secrets, tmp_path
):
    marker = tmp_path / "ran"
    client.force_login(staff_user)
    upload = SimpleUploadedFile("kubeconfig.yaml", dump(config(server.url, exec_user(marker))))
    response = client.post(
        reverse("clusters:create"),
        {"name": "Evil", "slug": "evil", "backend": "kubernetes", "kubeconfig_upload": upload},
    )
    page = response.content.decode()
    assert response.status_code == 400
    assert "users[0] (name admin): exec is not allowed" in page
    assert not Cluster.objects.exists() and list(secrets.iterdir()) == []
    assert not marker.exists() and server.requests == []


def test_the_cluster_api_cannot_write_a_kubeconfig(api_client, staff_user, tmp_path):
    api_client.force_authenticate(staff_user)
    response = api_client.post(
        "/api/inventory/clusters/",
        {"name": "X", "slug": "x", "backend": "kubernetes", "kubeconfig_path": str(tmp_path / "k")},
        format="json",
    )
    assert response.status_code == 405 and not Cluster.objects.exists()


@pytest.mark.parametrize(
    ("user", "cluster", "named"),
    [
        ({"auth-provider": {"name": "oidc", "config": {"id-token": "x"}}}, None, "auth-provider"),
        ({"tokenFile": "/etc/hostname"}, None, "tokenFile is not allowed"),
        ({"client-certificate": "c.pem", "client-key": "k.pem"}, None, "client-certificate is not allowed"),
        ({"client-certificate": "c.pem", "client-key": "k.pem"}, None, "client-key is not allowed"),
        (
            {"token": "t"},
            {"certificate-authority": "/etc/ssl/ca.pem"},
            "certificate-authority is not allowed",
        ),
        ({"token": "t", "someCredentialFile": "/x"}, None, "someCredentialFile is not allowed"),
    ],
)
def test_every_field_the_client_would_turn_into_a_program_or_a_file_read_is_refused(user, cluster, named):
    with pytest.raises(ValidationFailed) as exc:
        kubeconfig_check(dump(config("https://k8s.example:6443", user, cluster)))
    assert named in exc.value.message
    entry = "clusters[0] (name c)" if cluster else "users[0] (name admin)"
    assert entry in exc.value.message


def test_a_token_file_is_refused_and_its_content_never_shown(client, staff_user, server, secrets, tmp_path):
    secret = tmp_path / "secret-key.txt"
    secret.write_text("s3cr3t-database-password")
    client.force_login(staff_user)
    upload = SimpleUploadedFile("k.yaml", dump(config(server.url, {"tokenFile": str(secret)})))
    response = client.post(
        reverse("clusters:create"),
        {"name": "Leak", "slug": "leak", "backend": "kubernetes", "kubeconfig_upload": upload},
    )
    page = response.content.decode()
    assert response.status_code == 400 and "tokenFile is not allowed" in page
    assert "s3cr3t" not in page and not Cluster.objects.exists()
    # Stored directly (an older version): Test connection refuses it; nothing sent, nothing shown.
    cluster = stored_cluster(secrets / "old.yaml", config(server.url, {"tokenFile": str(secret)}))
    result = cluster_connection_test(cluster=cluster, actor="t")
    text = " ".join(result["lines"])
    assert result["ok"] is False and "tokenFile is not allowed" in text and "s3cr3t" not in text
    assert server.requests == []


def test_an_unreadable_path_never_shows_the_files_content(secrets, tmp_path):
    not_yaml = tmp_path / "env"
    not_yaml.write_text("SECRET_KEY: [s3cr3t\n")
    with pytest.raises(PermanentBackendError) as exc:
        KubernetesBackend(str(not_yaml))
    assert "not YAML (line 2)" in exc.value.message and "s3cr3t" not in exc.value.message
    with pytest.raises(PermanentBackendError, match="not a regular file"):
        KubernetesBackend(str(tmp_path))


# -- every time a client is built -------------------------------------------------------------------


@pytest.mark.parametrize("user_of", [exec_user, gcp_user], ids=["exec", "auth-provider-cmd-path"])
def test_a_stored_kubeconfig_that_would_run_a_program_never_runs_it(
    client, staff_user, server, secrets, user_of
):
    marker = secrets.parent / "ran"
    cluster = stored_cluster(secrets / "old.yaml", config(server.url, user_of(marker)))

    # A quota pushed to it: the pusher builds its client and fails the action, naming the field.
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "suanchi-quota", "namespace": "team"},
        "spec": {"hard": {"requests.nvidia.com/gpu": "2"}},
    }
    action = push_object_enqueue(cluster=cluster, manifest=quota)
    push_stream_run(stream=action.stream)
    action.refresh_from_db()
    assert action.state == PushAction.State.FAILED and "is not allowed" in action.last_error

    result = cluster_connection_test(cluster=cluster, actor="t")
    assert result["ok"] is False and "is not allowed" in " ".join(result["lines"])
    client.force_login(staff_user)
    assert client.post(reverse("clusters:test", args=[cluster.slug])).status_code == 302

    run = reconcile_cluster_run(cluster_id=cluster.pk, force=True)
    assert "is not allowed" in run["list_error"]
    with pytest.raises(PermanentBackendError, match="is not allowed"):
        cluster_sync(cluster=cluster, actor="t")

    assert not marker.exists()
    assert server.requests == []


def test_the_allow_list_lets_exactly_the_listed_command_through(server, secrets, settings):
    marker = secrets.parent / "ran"
    # A credential plugin that prints an ExecCredential (the client.authentication.k8s.io contract)
    # and leaves a marker: the stand-in for aws-iam-authenticator / gke-gcloud-auth-plugin.
    plugin = secrets.parent / "cred-plugin"
    plugin.write_text(
        f"#!{sys.executable}\n"
        "import json, pathlib, sys\n"
        "pathlib.Path(sys.argv[1]).touch()\n"
        'print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",'
        ' "status": {"token": "from-plugin"}}))\n'
    )
    plugin.chmod(0o755)
    path = secrets / "cloud.yaml"
    path.write_bytes(dump(config(server.url, exec_user(marker, command=str(plugin)))))

    settings.SUANCHI_KUBECONFIG_EXEC_COMMANDS = ["aws-iam-authenticator", str(plugin) + "-other"]
    with pytest.raises(PermanentBackendError, match="is not allowed"):
        KubernetesBackend(str(path))
    assert not marker.exists()

    settings.SUANCHI_KUBECONFIG_EXEC_COMMANDS = [str(plugin)]
    backend = KubernetesBackend(str(path))
    try:
        assert backend.api_client.configuration.api_key["BearerToken"] == "Bearer from-plugin"
    finally:
        backend.close()
    assert marker.exists()
    # Even a listed command may not be handed a variable that changes what runs.
    doc = config(server.url, exec_user(marker, command=str(plugin)))
    doc["users"][0]["user"]["exec"]["env"] = [{"name": "LD_PRELOAD", "value": "/tmp/x.so"}]
    with pytest.raises(ValidationFailed, match="exec env 'LD_PRELOAD' is not allowed"):
        kubeconfig_check(dump(doc))


def test_inline_credentials_are_accepted_and_work_against_the_api_server(server, secrets):
    user = {
        "token": "inline-token",
        "client-certificate-data": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t",
        "client-key-data": "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0t",
    }
    cluster_fields = {"certificate-authority-data": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t"}
    cluster = cluster_save(
        fields={"name": "Inline", "slug": "inline", "backend": "kubernetes", "kube_context": "ctx"},
        kubeconfig=dump(config(server.url, user, cluster_fields)),
        actor="t",
    )
    assert Path(cluster.kubeconfig_path).parent == secrets
    assert cluster_connection_test(cluster=cluster, actor="t")["server_version"] == "v1.34.1"
    # username/password (basic auth) is inline too.
    kubeconfig_check(dump(config(server.url, {"username": "u", "password": "p"})))


# -- the path ---------------------------------------------------------------------------------------


def test_a_path_outside_the_secrets_dir_is_refused_on_the_page_and_by_the_model(
    client, staff_user, secrets, tmp_path
):
    outside = tmp_path / "outside.yaml"
    outside.write_text("kind: Config\n")
    link = secrets / "link.yaml"
    os.symlink(outside, link)
    (secrets / "a-dir").mkdir()
    client.force_login(staff_user)
    cases = [
        (f"{secrets}/../outside.yaml", 'must not contain ".."'),
        (str(link), "outside"),
        (str(outside), "outside"),
        ("relative.yaml", "absolute path"),
        (str(secrets / "a-dir"), "not a regular file"),
        (str(secrets / "missing.yaml"), "does not exist"),
    ]
    for path, problem in cases:
        response = client.post(
            reverse("clusters:create"),
            {"name": "P", "slug": "p", "backend": "kubernetes", "kubeconfig_path": path},
        )
        assert response.status_code == 400, path
        assert problem in html.unescape(response.content.decode()), path
        with pytest.raises(ValidationError) as exc:
            Cluster(name="P", slug="p", backend="kubernetes", kubeconfig_path=path).full_clean()
        assert problem in " ".join(exc.value.message_dict["kubeconfig_path"]), path
    assert not Cluster.objects.exists()
    inside = secrets / "ok.yaml"
    inside.write_text("kind: Config\n")
    Cluster(name="P", slug="p", backend="kubernetes", kubeconfig_path=str(inside)).full_clean()


def test_the_admin_refuses_a_path_out_of_the_secrets_dir(admin_client, secrets, tmp_path):
    cluster = Cluster.objects.create(name="A", slug="a")
    response = admin_client.post(
        reverse("admin:inventory_cluster_change", args=[cluster.pk]),
        {
            "name": "A",
            "slug": "a",
            "backend": "kubernetes",
            "kubeconfig_path": "/etc/passwd",
            "device_plugin_modes": "{}",
            "dispatch_preference-TOTAL_FORMS": "0",
            "dispatch_preference-INITIAL_FORMS": "0",
        },
    )
    assert "is outside" in response.content.decode()
    cluster.refresh_from_db()
    assert cluster.kubeconfig_path == "" and cluster.backend == "simulated"


def test_the_deployments_own_kubeconfig_is_trusted_configuration_but_its_content_is_checked(
    settings, secrets, tmp_path, server
):
    from apps.clusters.connect import default_cluster_ensure

    own = tmp_path / "operator" / "config"
    own.parent.mkdir()
    marker = tmp_path / "ran"
    own.write_bytes(dump(config(server.url, exec_user(marker))))
    settings.SUANCHI = {**settings.SUANCHI, "CLUSTER_BACKEND": "kubernetes", "KUBECONFIG": str(own)}
    cluster = default_cluster_ensure()
    assert cluster.kubeconfig_path == str(own)
    result = cluster_connection_test(cluster=cluster, actor="t")
    assert "exec is not allowed" in " ".join(result["lines"]) and not marker.exists()
