"""Issue 29 §4: the cluster pages are linked for staff, styled, take an uploaded kubeconfig on its
own, explain TLS failures in words, and answer members with the styled 403.

The TLS failures are real: a TLS server on 127.0.0.1 (Python's ``ssl`` + ``http.server``) with a
certificate made at test time by the ``openssl`` CLI, reached through the official client exactly
as "Test connection" does. What the client raises was read from its source (kubernetes/client/
rest.py: ``urllib3.exceptions.SSLError`` becomes ``ApiException(status=0, reason="SSLError\\n…")``)
and is observed here, not assumed: the verify codes (18 self-signed, 64 IP mismatch, 10 expired) come
from OpenSSL itself during the handshake.
"""

from __future__ import annotations

import base64
import http.server
import os
import shutil
import ssl
import stat
import subprocess
import threading
from pathlib import Path

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from apps.clusters.connect import cluster_probe
from apps.clusters.tls import tls_failure
from apps.core.models import ChangeRecord
from apps.inventory.models import Cluster
from tests.kube.fake_apiserver import FakeApiServer, kubeconfig_for

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english")]

OPENSSL = shutil.which("openssl")


# -------------------------------------------------------------------------------- helpers


def _openssl(*args: str, cwd: Path) -> None:
    if not OPENSSL:
        pytest.fail("the openssl CLI is missing: install Debian's openssl package (scripts/services.sh does)")
    done = subprocess.run([OPENSSL, *args], cwd=cwd, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def make_cert(
    directory: Path, name: str, *, san: str = "IP:127.0.0.1", expired: bool = False
) -> tuple[Path, Path]:
    """A self-signed certificate (its own CA) and its key, made now by the openssl CLI. ``expired``:
    valid 2020-01-01…02 only (``openssl ca -selfsign -startdate/-enddate``: OpenSSL 3.0's ``req``
    has no start date option)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subject = ["-subj", f"/CN={name}", "-addext", f"subjectAltName={san}"]
    newkey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key)]
    if not expired:
        _openssl("req", "-x509", *newkey, "-out", str(cert), "-days", "2", *subject, cwd=directory)
        return cert, key
    ca = directory / f"{name}-ca"
    ca.mkdir()
    (ca / "index.txt").write_text("")
    (ca / "serial").write_text("01\n")
    (ca / "ca.cnf").write_text(
        "[ca]\ndefault_ca = the_ca\n[the_ca]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial\n"
        "default_md = sha256\npolicy = any\ncopy_extensions = copy\nunique_subject = no\n"
        "[any]\ncommonName = supplied\n"
    )
    _openssl("req", "-new", *newkey, "-out", "r.csr", *subject, cwd=ca)
    _openssl(
        "ca", "-batch", "-config", "ca.cnf", "-selfsign", "-keyfile", str(key), "-in", "r.csr",
        "-out", str(cert), "-startdate", "20200101000000Z", "-enddate", "20200102000000Z", "-notext",
        cwd=ca,
    )  # fmt: skip
    return cert, key


class _Version(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        body = b'{"major": "1", "minor": "34", "gitVersion": "v1.34.1"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class TlsServer:
    """HTTPS on 127.0.0.1 (ephemeral port) with ``cert``; answers ``GET /version`` once trusted."""

    def __init__(self, cert: Path, key: Path):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Version)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def write_kubeconfig(directory: Path, server: str, *, ca: Path | None = None, name: str = "tls") -> Path:
    cluster = {"server": server}
    if ca is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca.read_bytes()).decode()
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "u"}}],
        "current-context": name,
    }
    path = directory / f"kubeconfig-{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def secrets(settings, tmp_path) -> Path:
    directory = tmp_path / "secrets"
    directory.mkdir()
    settings.SUANCHI = {**settings.SUANCHI, "SECRETS_DIR": str(directory), "KUBECONFIG": ""}
    return directory


def browser_post(**fields):
    """What the form sends from a browser: every field, the empty ones empty."""
    data = {
        "name": "",
        "slug": "",
        "backend": "kubernetes",
        "kubeconfig_path": "",
        "kube_context": "",
        "description": "",
    }
    data.update(fields)
    return data


# -------------------------------------------------------------------------------- who may see it


def test_a_member_gets_the_styled_403_not_the_admin_login(client, make_user):
    cluster = Cluster.objects.create(name="prod", slug="prod", backend="simulated")
    client.force_login(make_user())
    for method, name, args in [
        ("get", "clusters:list", []),
        ("get", "clusters:create", []),
        ("get", "clusters:detail", [cluster.slug]),
        ("get", "clusters:edit", [cluster.slug]),
        ("post", "clusters:test", [cluster.slug]),
        ("post", "clusters:sync", [cluster.slug]),
    ]:
        response = getattr(client, method)(reverse(name, args=args))
        assert response.status_code == 403, (name, response.status_code, response.get("Location"))
        page = response.content.decode()
        assert "403.html" in [t.name for t in response.templates]
        assert "This page is for platform staff only." in page and 'class="topbar"' in page
        assert "/admin/login" not in page and "Django administration" not in page
    cluster.refresh_from_db()
    assert cluster.last_checked_at is None and cluster.last_synced_at is None


def test_a_visitor_is_sent_to_the_sign_in_page_not_the_admin(client):
    response = client.get(reverse("clusters:list"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login")) and "/admin/" not in response["Location"]


def test_staff_see_the_clusters_link_and_members_do_not(client, staff_user, make_user):
    link = f'href="{reverse("clusters:list")}"'
    client.force_login(staff_user)
    page = client.get(reverse("jobs:list")).content.decode()
    nav = page[page.index('class="mainnav"') : page.index("</nav>", page.index('class="mainnav"'))]
    assert link in nav and "Clusters" in nav
    # On the cluster pages the link is the current one.
    page = client.get(reverse("clusters:list")).content.decode()
    assert (
        'data-nav="clusters"' in page and 'aria-current="page"' in page.split('data-nav="clusters"')[0][-200:]
    )
    client.force_login(make_user())
    page = client.get(reverse("jobs:list")).content.decode()
    assert link not in page


def test_the_form_is_styled_like_the_other_editors(client, staff_user):
    client.force_login(staff_user)
    page = client.get(reverse("clusters:create")).content.decode()
    assert 'class="editor-form"' in page and "css/catalog.css" in page
    assert page.count('class="field') >= 8  # one styled block per field, no <p> from as_p
    assert "Kubeconfig path on the server" in page and "Leave empty when you upload a kubeconfig" in page
    assert "<p>\n    <label" not in page


# -------------------------------------------------------------------------------- upload alone


def test_an_upload_alone_creates_the_cluster_with_a_0600_file(client, staff_user, secrets, tmp_path):
    with FakeApiServer(controllers=False) as server:
        data = kubeconfig_for(server, tmp_path).read_bytes()
        client.force_login(staff_user)
        response = client.post(
            reverse("clusters:create"),
            browser_post(name="Upload", slug="upload", kubeconfig_upload=SimpleUploadedFile("config", data)),
        )
        assert response.status_code == 302, response.content.decode()[-2000:]
        cluster = Cluster.objects.get(slug="upload")
        path = Path(cluster.kubeconfig_path)
        assert path.parent == secrets and path.read_bytes() == data
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert sorted(p.name for p in secrets.iterdir()) == [path.name]  # no .tmp left
        assert ChangeRecord.objects.filter(action="cluster.create").count() == 1
        # The stored file is the one the client uses.
        client.post(reverse("clusters:test", args=[cluster.slug]))
        page = client.get(reverse("clusters:detail", args=[cluster.slug])).content.decode()
        assert "Connected: Kubernetes v1.34.1." in page


def test_an_upload_replaces_the_path_of_an_existing_cluster(client, staff_user, secrets, tmp_path):
    cluster = Cluster.objects.create(name="Sim", slug="sim", backend="simulated")
    with FakeApiServer(controllers=False) as server:
        data = kubeconfig_for(server, tmp_path).read_bytes()
    client.force_login(staff_user)
    response = client.post(
        reverse("clusters:edit", args=[cluster.slug]),
        browser_post(name="Sim", slug="sim", kubeconfig_upload=SimpleUploadedFile("config", data)),
    )
    assert response.status_code == 302
    cluster.refresh_from_db()
    assert cluster.backend == "kubernetes" and Path(cluster.kubeconfig_path).read_bytes() == data
    record = ChangeRecord.objects.get(action="cluster.update")
    assert record.before["backend"] == "simulated" and record.after["backend"] == "kubernetes"


EXEC_KUBECONFIG = b"""apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


@pytest.mark.parametrize(
    ("data", "context", "message"),
    [
        (b"{: nope", "", "not YAML"),
        (b"kind: Pod\n", "", "kind: Config"),
        (EXEC_KUBECONFIG, "", "exec is not allowed"),
        (None, "elsewhere", "no context elsewhere"),
    ],
)
def test_a_bad_upload_is_400_with_the_message_and_nothing_written(
    client, staff_user, secrets, tmp_path, data, context, message
):
    if data is None:
        with FakeApiServer(controllers=False) as server:
            data = kubeconfig_for(server, tmp_path).read_bytes()
    client.force_login(staff_user)
    response = client.post(
        reverse("clusters:create"),
        browser_post(
            name="Bad", slug="bad", kube_context=context, kubeconfig_upload=SimpleUploadedFile("c", data)
        ),
    )
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not Cluster.objects.exists() and list(secrets.iterdir()) == []
    assert not ChangeRecord.objects.filter(action__startswith="cluster.").exists()


def test_a_kubeconfig_that_cannot_be_written_is_400_and_leaves_no_row(client, staff_user, settings, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    settings.SUANCHI = {**settings.SUANCHI, "SECRETS_DIR": str(blocker / "secrets"), "KUBECONFIG": ""}
    with FakeApiServer(controllers=False) as server:
        data = kubeconfig_for(server, tmp_path).read_bytes()
    client.force_login(staff_user)
    response = client.post(
        reverse("clusters:create"),
        browser_post(name="W", slug="w", kubeconfig_upload=SimpleUploadedFile("config", data)),
    )
    assert response.status_code == 400
    assert "The kubeconfig could not be stored in" in response.content.decode()
    assert not Cluster.objects.exists()
    assert not ChangeRecord.objects.filter(action__startswith="cluster.").exists()


def test_neither_upload_nor_path_is_refused_naming_what_is_missing(client, staff_user, secrets):
    client.force_login(staff_user)
    response = client.post(reverse("clusters:create"), browser_post(name="N", slug="n"))
    assert response.status_code == 400
    assert "needs a kubeconfig path or in-cluster credentials" in response.content.decode()
    assert not Cluster.objects.exists()


# -------------------------------------------------------------------------------- TLS in words


def _tls_cluster(secrets: Path, server: str, ca: Path | None, slug: str) -> Cluster:
    path = write_kubeconfig(secrets, server, ca=ca, name=slug)
    return Cluster.objects.create(name=slug, slug=slug, backend="kubernetes", kubeconfig_path=str(path))


def test_a_self_signed_api_server_is_explained_in_words(client, staff_user, secrets, tmp_path):
    cert, key = make_cert(tmp_path / "certs", "selfsigned")
    with TlsServer(cert, key) as server:
        cluster = _tls_cluster(secrets, server.url, None, "selfsigned")
        client.force_login(staff_user)
        response = client.post(reverse("clusters:test", args=[cluster.slug]), follow=True)
    page = response.content.decode()
    alert = page[page.index('id="tls-failure"') : page.index("</div>", page.index('id="tls-failure"'))]
    assert f"The API server at {server.url} presents a self-signed certificate" in alert
    assert "certificate-authority-data" in alert
    assert "CERTIFICATE_VERIFY_FAILED" not in alert and "SSLError" not in alert
    # The raw text stays available, folded away.
    detail = page[page.index('id="tls-detail"') :]
    assert "<summary>Technical details</summary>" in detail and "CERTIFICATE_VERIFY_FAILED" in detail
    # The message after the button says it in words too.
    messages = [str(m) for m in response.context["messages"]]
    assert any("self-signed certificate that the kubeconfig does not trust" in m for m in messages), messages
    assert not any("CERTIFICATE_VERIFY_FAILED" in m for m in messages)
    cluster.refresh_from_db()
    assert cluster.last_check["ok"] is False and cluster.last_check["tls"]["verify_code"] == 18


def test_a_certificate_for_another_name_says_to_check_the_server_name(secrets, tmp_path):
    cert, key = make_cert(tmp_path / "certs", "other", san="DNS:other.example")
    with TlsServer(cert, key) as server:
        # The kubeconfig trusts this very certificate: only the name is wrong.
        result = cluster_probe(_tls_cluster(secrets, server.url, cert, "other"))
    assert result["tls"]["kind"] == "name_mismatch" and result["tls"]["verify_code"] == 64
    from apps.clusters.connect import check_lines

    text = " ".join(check_lines(result))
    assert f"not issued for the address {server.url}" in text and "tls-server-name" in text


def test_an_expired_certificate_says_to_check_the_clock(secrets, tmp_path):
    cert, key = make_cert(tmp_path / "certs", "expired", expired=True)
    with TlsServer(cert, key) as server:
        result = cluster_probe(_tls_cluster(secrets, server.url, cert, "expired"))
    assert result["tls"]["kind"] == "expired" and result["tls"]["verify_code"] == 10
    from apps.clusters.connect import check_lines

    assert "Check the clock of this server" in " ".join(check_lines(result))


def test_a_trusted_certificate_connects(secrets, tmp_path):
    """The control: the same server, trusted and correctly named, answers."""
    cert, key = make_cert(tmp_path / "certs", "good")
    with TlsServer(cert, key) as server:
        result = cluster_probe(_tls_cluster(secrets, server.url, cert, "good"))
    assert "tls" not in result and result["server_version"] == "v1.34.1"


def test_https_to_a_plain_http_port_says_it_is_not_tls(secrets):
    with FakeApiServer(controllers=False) as fake:
        result = cluster_probe(_tls_cluster(secrets, fake.url.replace("http://", "https://"), None, "plain"))
    assert result["tls"]["kind"] == "not_tls", result["tls"]
    from apps.clusters.connect import check_lines

    assert "answers, but not with TLS" in " ".join(check_lines(result))


def test_a_refused_connection_is_no_tls_failure(secrets):
    with FakeApiServer(controllers=False) as fake:
        url = fake.url
    result = cluster_probe(_tls_cluster(secrets, url, None, "gone"))
    assert "tls" not in result and "did not answer" in result["problems"][0]
    assert tls_failure(ConnectionRefusedError(111, "Connection refused")) is None


def test_sync_against_a_self_signed_server_says_it_in_words(client, staff_user, secrets, tmp_path):
    cert, key = make_cert(tmp_path / "certs", "syncself")
    with TlsServer(cert, key) as server:
        cluster = _tls_cluster(secrets, server.url, None, "syncself")
        client.force_login(staff_user)
        response = client.post(reverse("clusters:sync", args=[cluster.slug]), follow=True)
    messages = [str(m) for m in response.context["messages"]]
    assert any(m.startswith("Sync failed: The API server at") and "self-signed" in m for m in messages), (
        messages
    )
    # The stored error of that sync reads the same on the cluster's page, its raw text folded away.
    page = response.content.decode()
    alert = page[page.index('id="sync-failure"') : page.index("</div>", page.index('id="sync-failure"'))]
    assert "self-signed certificate that the kubeconfig does not trust" in alert
    assert "CERTIFICATE_VERIFY_FAILED" not in alert
    assert "CERTIFICATE_VERIFY_FAILED" in page[page.index('id="sync-failure"') :]
