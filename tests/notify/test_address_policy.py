"""Issue 27 §2: webhooks pass one outbound address policy (apps/core/outbound.py) at subscribe time and
at connect time, on the address actually dialled; redirects are not followed; the delivery log cannot
be used to scan ports.

The receivers are real sockets on 127.0.0.x. "Production" is ``OUTBOUND_ALLOWED_NETWORKS = []`` (the
test settings allow loopback). Only the OS resolver (``socket.getaddrinfo``) is replaced, for names
that must resolve to chosen addresses (DNS rebinding, TLS server names)."""

from __future__ import annotations

import socket
import ssl
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.db import transaction
from django.utils import timezone

from apps.core import outbound
from apps.core.errors import ValidationFailed
from apps.jobs.models import Job, JobState
from apps.jobs.services import job_transition
from apps.notify import services
from apps.notify.models import Delivery, Subscription

TLS = Path(__file__).parent / "tls"  # a test-only CA and a certificate for hooks.suanchi.test
REAL_GETADDRINFO = socket.getaddrinfo


class Listener:
    """An HTTP server on ``host`` recording every request (any method) and answering ``status``,
    with a ``Location`` header when told to redirect."""

    def __init__(self, host="127.0.0.1", status=200, location="", tls=False, port=0):
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                outer.requests.append(
                    {"method": self.command, "headers": dict(self.headers), "body": self.rfile.read(length)}
                )
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_PUT = _answer  # noqa: N815 - http.server API

            def log_message(self, *args):
                pass

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server_class = type("Server", (ThreadingHTTPServer,), {"address_family": family})
        self.server = server_class((host, port), Handler)
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(TLS / "hooks.pem")
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        bracketed = f"[{host}]" if family == socket.AF_INET6 else host
        self.url = f"{'https' if tls else 'http'}://{bracketed}:{self.port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class RawListener:
    """A TCP port that is open but speaks no HTTP: it accepts ``connections`` connections, writes
    ``banner`` to each (nothing: it stays silent until the client gives up) and closes it."""

    def __init__(self, banner: bytes, connections: int):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(30)  # a test that never connects does not leave the thread waiting forever
        self.port = self.sock.getsockname()[1]
        self.accepted = 0

        def serve():
            for _ in range(connections):
                try:
                    conn, _addr = self.sock.accept()
                except OSError:
                    return
                self.accepted += 1
                with conn:
                    conn.settimeout(30)
                    if banner:
                        conn.sendall(banner)
                    else:
                        try:
                            conn.recv(65536)
                            conn.recv(65536)  # silent: wait until the client closes
                        except OSError:
                            pass

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()

    def close(self):
        self.sock.close()
        self.thread.join(timeout=30)


@pytest.fixture
def listeners():
    made = []

    def make(kind=Listener, *args, **kwargs):
        listener = kind(*args, **kwargs)
        made.append(listener)
        return listener

    yield make
    for listener in made:
        listener.close()


@pytest.fixture
def production(settings):
    """The policy as a production deployment runs it: no network allowed beyond public addresses."""
    settings.SUANCHI = {**settings.SUANCHI, "OUTBOUND_ALLOWED_NETWORKS": []}
    return settings


def _allow(settings, *networks):
    settings.SUANCHI = {**settings.SUANCHI, "OUTBOUND_ALLOWED_NETWORKS": list(networks)}


@pytest.fixture
def resolver(monkeypatch):
    """``socket.getaddrinfo`` answering chosen addresses for chosen names (the rest: the real one).
    ``answers[name]`` is a list used up one answer per call; the last answer repeats."""
    answers: dict[str, list[str]] = {}
    calls: list[str] = []

    def fake(host, port, *args, **kwargs):
        if host not in answers:
            return REAL_GETADDRINFO(host, port, *args, **kwargs)
        calls.append(host)
        queue = answers[host]
        address = queue.pop(0) if len(queue) > 1 else queue[0]
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        sockaddr = (address, port, 0, 0) if family == socket.AF_INET6 else (address, port)
        return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", sockaddr)]

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return answers, calls


@pytest.fixture
def team(make_user, make_project):
    admin = make_user("hook-admin")
    project = make_project("hooks", members=[admin], role="admin")
    return project, admin


def _subscribe(team, url):
    project, admin = team
    return services.subscription_create(
        actor=admin, channel="webhook", target=url, events=["job.failed"], project=project
    )


def _stored_subscription(team, url):
    """A subscription already in the database (made before the policy, or edited in the admin)."""
    project, admin = team
    return Subscription.objects.create(
        owner=admin, project=project, channel="webhook", target=url, events=["job.failed"], secret="s" * 64
    )


def _fail_a_job(team):
    project, admin = team
    job = Job.objects.create(
        project=project,
        name="train",
        image="x:1",
        request_kind="whole_cards",
        state=JobState.RUNNING,
        submitted_by=admin,
    )
    with transaction.atomic():
        job_transition(job, to=JobState.FAILED, actor="test", reason="exit code 1")


def _send_once(sub) -> Delivery:
    services.deliveries_send()
    return Delivery.objects.get(subscription=sub)


# ---------------------------------------------------------------------------- the policy itself


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
        ("::1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("::ffff:169.254.169.254", "link-local"),
        ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64 of 169.254.169.254
        ("2002:a9fe:a9fe::1", "link-local"),  # 6to4 of 169.254.169.254
        ("fe80::1%1", "link-local"),  # scoped
        ("0.0.0.0", "unspecified"),  # noqa: S104 - an address classified, not bound
        ("::", "unspecified"),
        ("10.1.2.3", "private"),
        ("172.31.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd12:3456::1", "private"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("224.0.0.251", "multicast"),
        ("ff02::1", "multicast"),
        ("192.0.2.10", "documentation"),
        ("2001:db8::1", "documentation"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("2001::1", "reserved"),  # Teredo
        ("::7f00:1", "reserved"),  # the deprecated IPv4-compatible form
        ("64:ff9b:1::1", "reserved"),  # local-use NAT64
        ("8.8.8.8", None),
        ("::ffff:8.8.8.8", None),
        ("64:ff9b::808:808", None),
        ("2606:4700:4700::1111", None),
    ],
)
def test_the_policy_classifies_each_address_after_normalising_it(address, kind):
    assert outbound.refused_kind(address, allowed=()) == kind


def test_an_allowed_network_lets_exactly_its_addresses_through(settings):
    _allow(settings, "127.0.0.2/32")
    assert outbound.refused_kind("127.0.0.2") is None
    assert outbound.refused_kind("::ffff:127.0.0.2") is None
    assert outbound.refused_kind("127.0.0.1") == "loopback"
    _allow(settings, "not-a-network")
    with pytest.raises(Exception, match="not a CIDR"):
        outbound.refused_kind("8.8.8.8")


# ---------------------------------------------------------------------------- findings


@pytest.mark.django_db(transaction=True)
def test_an_ipv4_mapped_loopback_webhook_is_refused_and_the_listener_receives_nothing(
    team, listeners, production
):
    hook = listeners()
    url = f"http://[::ffff:127.0.0.1]:{hook.port}/hook"
    with pytest.raises(ValidationFailed) as refused:
        _subscribe(team, url)
    assert "loopback" in refused.value.message and refused.value.details == {
        "target": ["address not allowed"]
    }
    assert not Subscription.objects.exists()
    sub = _stored_subscription(team, url)  # and one stored before: refused at send time
    _fail_a_job(team)
    delivery = _send_once(sub)
    assert hook.requests == []
    assert delivery.state == "pending" and delivery.last_error == "refused by the address policy"


@pytest.mark.django_db
def test_a_mapped_metadata_address_is_refused_at_subscribe_time(team, production):
    for url in (
        "http://[::ffff:169.254.169.254]/latest/meta-data/",
        "http://[::ffff:a9fe:a9fe]/latest/meta-data/",
        "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/",
    ):
        with pytest.raises(ValidationFailed) as refused:
            _subscribe(team, url)
        assert "link-local" in refused.value.message, url
    assert not Subscription.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_name_that_does_not_resolve_is_refused_at_subscribe_and_at_send_time(team, production):
    url = "https://hooks.suanchi.invalid/x"  # RFC 2606: .invalid never resolves
    with pytest.raises(ValidationFailed) as refused:
        _subscribe(team, url)
    assert "hooks.suanchi.invalid does not resolve" in refused.value.message
    assert refused.value.details == {"target": ["unresolvable"]}
    assert not Subscription.objects.exists()
    sub = _stored_subscription(team, url)
    _fail_a_job(team)
    assert _send_once(sub).last_error == "refused by the address policy"


@pytest.mark.django_db(transaction=True)
def test_redirects_to_loopback_are_not_followed(team, listeners, settings):
    if_v4 = listeners(host="127.0.0.1")
    if_v6 = listeners(host="::1")
    first = listeners(host="127.0.0.2", status=302, location=if_v4.url)
    second = listeners(host="127.0.0.2", status=301, location=if_v6.url)
    _allow(settings, "127.0.0.2/32")  # only the first hop's listeners
    for hop in (first, second):
        sub = _subscribe(team, hop.url)
        _fail_a_job(team)
        delivery = _send_once(sub)
        assert len(hop.requests) == 1 and hop.requests[0]["method"] == "POST"
        assert delivery.state == "pending" and delivery.response_status == 300
        assert delivery.last_error == "failed: redirect not followed (HTTP 3xx)"
        Subscription.objects.filter(pk=sub.pk).update(active=False)
    assert if_v4.requests == [] and if_v6.requests == []


@pytest.mark.django_db(transaction=True)
def test_a_name_rebound_to_a_refused_address_after_subscribing_is_refused_at_send_time(
    team, listeners, settings, resolver
):
    answers, calls = resolver
    allowed = listeners(host="127.0.0.2")
    # The same port on both addresses, so only the address decides where a request lands.
    refused = listeners(host="127.0.0.1", port=allowed.port)
    port = allowed.port
    _allow(settings, "127.0.0.2/32")
    # Allowed: 127.0.0.2, written IPv4-mapped (which the old check let through even in production).
    answers["hooks.rebind.test"] = ["::ffff:127.0.0.2", "127.0.0.1"]
    sub = _subscribe(team, f"http://hooks.rebind.test:{port}/hook")  # checked: 127.0.0.2
    _fail_a_job(team)
    delivery = _send_once(sub)  # resolved again: 127.0.0.1
    assert delivery.last_error == "refused by the address policy"
    assert allowed.requests == [] and refused.requests == []
    assert calls == ["hooks.rebind.test", "hooks.rebind.test"]  # once to subscribe, once to send


@pytest.mark.django_db(transaction=True)
def test_the_sender_dials_the_address_it_checked_with_the_original_host_header(
    team, listeners, settings, resolver
):
    answers, calls = resolver
    hook = listeners(host="127.0.0.2")
    elsewhere = listeners(host="127.0.0.1", port=hook.port)
    _allow(settings, "127.0.0.2/32")
    # A resolver that changes its answer after the second call: a sender that checks one answer and
    # lets the HTTP library resolve again would post to 127.0.0.1.
    answers["hooks.pinned.test"] = ["::ffff:127.0.0.2", "::ffff:127.0.0.2", "127.0.0.1"]
    sub = _stored_subscription(team, f"http://hooks.pinned.test:{hook.port}/hook")
    _fail_a_job(team)
    delivery = _send_once(sub)  # one resolution, checked and dialled
    assert delivery.state == "delivered" and calls == ["hooks.pinned.test"]
    assert elsewhere.requests == []
    (request,) = hook.requests
    assert request["headers"]["Host"] == f"hooks.pinned.test:{hook.port}"


@pytest.mark.django_db(transaction=True)
def test_https_is_verified_against_the_urls_host_name_not_the_dialled_address(
    team, listeners, settings, resolver, monkeypatch
):
    answers, _calls = resolver
    monkeypatch.setenv("SSL_CERT_FILE", str(TLS / "ca.pem"))  # trust the test CA (OpenSSL reads it)
    hook = listeners(host="127.0.0.2", tls=True)
    _allow(settings, "127.0.0.2/32")
    answers["hooks.suanchi.test"] = ["127.0.0.2"]  # the certificate's name
    answers["other.suanchi.test"] = ["127.0.0.2"]  # the same server under a name it has no certificate for
    good = _stored_subscription(team, f"https://hooks.suanchi.test:{hook.port}/hook")
    _fail_a_job(team)
    assert _send_once(good).state == "delivered" and len(hook.requests) == 1
    Subscription.objects.filter(pk=good.pk).update(active=False)
    bad = _stored_subscription(team, f"https://other.suanchi.test:{hook.port}/hook")
    _fail_a_job(team)
    delivery = _send_once(bad)
    assert delivery.last_error == "failed: no HTTP response" and len(hook.requests) == 1


@pytest.mark.django_db(transaction=True)
def test_the_log_reads_the_same_for_a_closed_port_an_open_non_http_port_and_a_silent_one(
    team, listeners, settings, monkeypatch
):
    monkeypatch.setattr(services, "TIMEOUT_S", 0.5)  # the silent port: give up soon
    _allow(settings, "127.0.0.0/8")  # an allowed network, as a deployment's chat gateway subnet
    closed = socket.create_server(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    banner = listeners(RawListener, b"SSH-2.0-OpenSSH_9.6\r\n", connections=1)
    silent = listeners(RawListener, b"", connections=1)
    subs = [
        _subscribe(team, f"http://127.0.0.1:{port}/hook") for port in (closed_port, banner.port, silent.port)
    ]
    _fail_a_job(team)
    services.deliveries_send()
    rows = {d.subscription_id: d for d in Delivery.objects.all()}
    logged = {(rows[s.pk].state, rows[s.pk].last_error, rows[s.pk].response_status) for s in subs}
    assert logged == {("pending", "failed: no HTTP response", None)}
    assert banner.accepted == 1 and silent.accepted == 1  # both really were open and dialled


@pytest.mark.django_db(transaction=True)
def test_an_http_error_is_logged_by_its_class_only(team, listeners):
    hook = listeners(status=503)
    sub = _subscribe(team, hook.url)
    _fail_a_job(team)
    delivery = _send_once(sub)
    assert (delivery.last_error, delivery.response_status) == ("failed: HTTP 5xx", 500)
    later = services.deliveries_send(now=timezone.now() + timedelta(minutes=5))
    assert later["retrying"] == 1 and len(hook.requests) == 2


@pytest.mark.django_db(transaction=True)
def test_the_delivery_log_page_shows_the_outcome_in_the_readers_language(client, team, production):
    sub = _stored_subscription(team, "http://[::ffff:127.0.0.1]:9/hook")
    _fail_a_job(team)
    _send_once(sub)
    client.force_login(team[1])
    page = client.get("/notifications/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "refused by the address policy" not in page and "地址策略" in page
