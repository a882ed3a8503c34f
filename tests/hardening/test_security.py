"""Security review, as tests: authentication on every route of the URLconf, the node agent's token
limited to node reports, CSRF on session writes, rate limits on login and token creation, production
cookies and headers, and an audit record for every state-changing admin action."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib import admin
from django.contrib.admin import helpers
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from apps.accounts.models import ApiToken
from apps.catalog.models import ComputeTemplate
from apps.core.models import ChangeRecord
from apps.inventory.models import AgentToken, Device, Node
from apps.inventory.services.tokens import agent_token_create
from apps.jobs.models import JobState
from tests.fixtures.jobs import submit_whole_cards
from tests.hardening.conftest import token_for

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]

# Routes an anonymous visitor may open: the login pages, logout, the health probe, the language switch,
# and the icon the login page shows too (a redirect to the static file).
PUBLIC = {"accounts/login/", "accounts/logout/", "admin/login/", "healthz", "i18n/setlang/", "favicon.ico"}


def routes(resolver=None, prefix: str = ""):
    """Every concrete route of the URLconf as (pattern text, sample path with "1" for each parameter)."""
    resolver = resolver or get_resolver()
    for entry in resolver.url_patterns:
        text = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from routes(entry, text)
        elif isinstance(entry, URLPattern):
            sample = re.sub(r"<(?:\w+:)?(\w+)>", "1", text)
            sample = re.sub(r"\(\?P<\w+>[^)]*\)", "1", sample)
            sample = sample.replace("^", "").replace("$", "").replace("\\.", ".").replace("\\Z", "")
            if "(" in sample or "[" in sample or "?" in sample or "format_suffix" in text:
                continue  # a format-suffix variant of a route listed anyway
            yield text, "/" + sample


def test_every_route_requires_authentication(client):
    checked = 0
    for text, path in routes():
        if text in PUBLIC or text.startswith("static/") or "jsi18n" in text:
            continue
        response = client.get(path)
        checked += 1
        if path.startswith("/api/"):
            assert response.status_code in (401, 403), (text, response.status_code)
        else:
            assert response.status_code in (302, 404), (text, response.status_code)
            if response.status_code == 302:  # to the login page, maybe through another page
                final = client.get(path, follow=True).redirect_chain[-1][0]
                assert "login" in final, (text, final)
    assert checked > 150


def test_every_api_write_refuses_anonymous_callers(client):
    schema = SchemaGenerator().get_schema(request=None, public=True)
    for path, ops in schema["paths"].items():
        for method in ops:
            if method in ("get", "head", "options"):
                continue
            response = getattr(client, method)(path.replace("{id}", "1"), {}, content_type="application/json")
            assert response.status_code in (401, 403), (method, path, response.status_code)
            assert response.json()["error"]["code"] in ("not_authenticated", "permission_denied")


def test_the_node_agent_token_may_only_post_node_reports(fleet):
    _, key = agent_token_create(cluster=fleet["gpu-01"].cluster, name="agent", actor="test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    schema = SchemaGenerator().get_schema(request=None, public=True)
    checked = 0
    for path, ops in schema["paths"].items():
        for method in ops:
            if (method, path) == ("post", "/api/inventory/node-reports/"):
                continue
            response = getattr(client, method)(path.replace("{id}", "1"), {}, format="json")
            assert response.status_code == 403, (method, path, response.status_code)
            checked += 1
    assert checked > 100
    # Its one permitted call works.
    response = client.post(
        "/api/inventory/node-reports/",
        {"node": "gpu-01", "kind": "nvidia-smi-csv", "text": "not a report"},
        format="json",
    )
    assert response.status_code in (201, 400)  # authenticated and allowed; the text is judged, not the caller
    assert response.status_code != 403
    # A revoked agent token is refused.
    AgentToken.objects.update(revoked=True)
    assert client.get("/api/inventory/node-reports/").status_code == 401


def test_session_writes_need_the_csrf_token(tenants, fleet, a100):
    client = Client(enforce_csrf_checks=True)
    client.force_login(tenants["member"])
    body = {
        "project": "secretvision",
        "name": "csrf",
        "image": "x",
        "request_kind": "whole_cards",
        "device_model": a100.slug,
    }
    refused = client.post("/api/jobs/jobs/", json.dumps(body), content_type="application/json")
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["error"]["message"]
    client.get("/jobs/")  # a page sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    accepted = client.post(
        "/api/jobs/jobs/", json.dumps(body), content_type="application/json", HTTP_X_CSRFTOKEN=token
    )
    assert accepted.status_code == 201, accepted.content
    # Token-authenticated API calls carry no cookie and need no CSRF token.
    api = APIClient(enforce_csrf_checks=True)
    api.credentials(HTTP_AUTHORIZATION=f"Token {token_for(tenants['member'])}")
    assert api.post("/api/jobs/jobs/", {**body, "name": "t"}, format="json").status_code == 201


def test_login_is_rate_limited_per_address(client, make_user):
    make_user("victim")
    statuses = [
        client.post(reverse("login"), {"username": "victim", "password": f"guess-{i}"}).status_code
        for i in range(12)
    ]
    assert statuses[:10] == [200] * 10  # the form again, with an error
    assert statuses[10:] == [429, 429]
    # Even the right password is refused while the limit holds.
    right = client.post(reverse("login"), {"username": "victim", "password": "pw-For-tests-1"})
    assert right.status_code == 429


def test_token_creation_is_rate_limited(api_client, make_user):
    api_client.force_authenticate(make_user("busy"))
    statuses = [api_client.post("/api/accounts/tokens/", {"name": f"t{i}"}).status_code for i in range(31)]
    assert statuses[:30] == [201] * 30 and statuses[30] == 429
    assert ApiToken.objects.filter(user__username="busy").count() == 30


def test_production_sets_secure_cookies_and_headers(tmp_path):
    """Under production settings (secret from a *_FILE), an HTTPS request gets HSTS, nosniff, DENY,
    a same-origin referrer policy and Secure + HttpOnly cookies."""
    secret = tmp_path / "secret"
    secret.write_text("Zq8-W1x_Pc4!Rv7@Ty2#Nm5$Lb9%Hk3^Gj6&Fd0*Sa1(Ew4)Qo8+Iu2\n")
    script = (
        "import django, json; django.setup()\n"
        "from django.core.management import call_command\n"
        # Production serves hashed static files from the manifest collectstatic writes (as the image
        # build does), so the pages need it collected first.
        "call_command('collectstatic', interactive=False, verbosity=0)\n"
        "from django.conf import settings\n"
        "from django.test import Client\n"
        "c = Client()\n"
        "r = c.get('/accounts/login/', secure=True, HTTP_HOST='suanchi.example.com')\n"
        "plain = c.get('/accounts/login/', HTTP_HOST='suanchi.example.com')\n"
        "print(json.dumps({'status': r.status_code, 'plain': plain.status_code,"
        " 'location': plain.get('Location', ''), 'headers': dict(r.headers),"
        " 'csrf_secure': bool(r.cookies['csrftoken']['secure']),"
        " 'secret_from_file': settings.SECRET_KEY.startswith('Zq8-'),"
        " 'session': [settings.SESSION_COOKIE_SECURE, settings.SESSION_COOKIE_HTTPONLY],"
        " 'debug': settings.DEBUG}))\n"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL", "CELERY_"))}
    env = {
        **base,
        "DJANGO_SETTINGS_MODULE": "config.settings.production",
        "DJANGO_SECRET_KEY_FILE": str(secret),
        "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/suanchi",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
        "DJANGO_ALLOWED_HOSTS": "suanchi.example.com",
        "DJANGO_STATIC_ROOT": str(tmp_path / "static"),
    }
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    headers = out["headers"]
    assert out["status"] == 200 and out["debug"] is False and out["secret_from_file"] is True
    assert out["plain"] == 301 and out["location"].startswith("https://")
    assert headers["Strict-Transport-Security"].startswith("max-age=31536000")
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["Referrer-Policy"] == "same-origin"
    assert out["csrf_secure"] is True and out["session"] == [True, True]


# ---------------------------------------------------------------------------------------------- audit
# Every admin action that changes state, run through the admin as staff, writes a ChangeRecord.
# test_connection only probes the cluster and records the answer on the row (tests/clusters/test_connect.py).
READ_ONLY_ACTIONS = {"export_csv", "export_xlsx", "delete_selected", "test_connection"}
# Audited through their services and tested by their own apps (tests/billing, tests/telemetry,
# tests/rollout); listed so that a new action cannot slip through unnoticed.
AUDITED_ELSEWHERE = {
    ("billing", "bill", "finalize"),
    ("billing", "billingperiod", "close_months"),
    ("telemetry", "metricsource", "backfill_last_day"),
    ("rollout", "graybatch", "start_soak"),
    ("rollout", "graybatch", "evaluate"),
    ("rollout", "graybatch", "admit"),
    ("rollout", "graybatch", "fail"),
    ("rollout", "graybatch", "rollback"),
    ("rollout", "upgradewave", "start"),
    ("rollout", "autoscalepolicy", "evaluate"),
    # tests/clusters/test_sync.py::test_the_admin_sync_action_writes_the_audit_record_of_each_node_it_creates
    ("inventory", "cluster", "sync_now"),
    # tests/benchlib/test_poisoning.py::test_the_admin_verify_action_is_audited_and_refuses_benchmark_runs
    ("benchlib", "measurement", "verify"),
}
AUDITED_HERE = {
    ("accounts", "apitoken", "revoke"),
    ("inventory", "agenttoken", "revoke"),
    ("catalog", "computetemplate", "retire_selected"),
    ("jobs", "job", "cancel_jobs"),
    ("inventory", "node", "approve"),
    ("inventory", "node", "maintenance_on"),
    ("inventory", "node", "maintenance_off"),
    ("inventory", "node", "quarantine"),
    ("inventory", "node", "release_from_quarantine"),
    ("inventory", "node", "retire"),
    ("inventory", "device", "quarantine"),
    ("inventory", "device", "return_to_production"),
    ("inventory", "device", "cordon"),
    ("inventory", "device", "uncordon"),
    ("inventory", "device", "retire"),
}


def test_every_state_changing_admin_action_is_covered_by_an_audit_test():
    actions = set()
    for model, model_admin in admin.site._registry.items():
        for act in model_admin.get_actions(_FakeRequest()):
            if act not in READ_ONLY_ACTIONS:
                actions.add((model._meta.app_label, model._meta.model_name, act))
    assert actions - AUDITED_HERE - AUDITED_ELSEWHERE == set()


class _FakeRequest:
    """The admin asks the request for permissions when it lists actions: a superuser's."""

    GET: dict = {}

    class user:  # noqa: N801
        is_active = is_staff = is_superuser = True

        @staticmethod
        def has_perm(*_a, **_k):
            return True


@pytest.fixture
def staff_client(staff_user):
    client = Client()
    client.force_login(staff_user)
    return client


def _run_action(client, model, name, objects):
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    data = {"action": name, helpers.ACTION_CHECKBOX_NAME: [o.pk for o in objects], "apply": "1"}
    data["reason"] = "audit test"
    return client.post(url, data)


def _objects(kind, *, fleet, tenants, a100, staff_user):
    if kind == "apitoken":
        token_for(tenants["member"])
        return ApiToken, list(ApiToken.objects.all())
    if kind == "agenttoken":
        token, _ = agent_token_create(cluster=fleet["gpu-01"].cluster, name="a", actor="test")
        return AgentToken, [token]
    if kind == "computetemplate":
        template = ComputeTemplate.objects.create(
            device_model=a100,
            name="half",
            slug="half",
            memory_mib=40960,
            compute_share=50,
            isolation="shared",
        )
        return ComputeTemplate, [template]
    if kind == "job":
        job = submit_whole_cards(tenants["project"], tenants["member"], a100, name="j")
        return type(job), [job]
    if kind == "node":
        return Node, [fleet["gpu-01"]]
    return Device, [Device.objects.filter(node=fleet["gpu-01"]).order_by("index").first()]


NODE_SETUP = {
    "maintenance_off": Node.Status.MAINTENANCE,
    "release_from_quarantine": Node.Status.QUARANTINED,
    "retire": Node.Status.MAINTENANCE,
}
DEVICE_SETUP = {"return_to_production": "quarantine", "uncordon": "cordon"}


@pytest.mark.parametrize(("app_label", "kind", "name"), sorted(AUDITED_HERE))
def test_admin_action_writes_an_audit_record(
    staff_client, staff_user, app_label, kind, name, fleet, tenants, a100
):
    model, objects = _objects(kind, fleet=fleet, tenants=tenants, a100=a100, staff_user=staff_user)
    if kind == "node" and name in NODE_SETUP:
        Node.objects.filter(pk=objects[0].pk).update(status=NODE_SETUP[name])
    if kind == "node" and name == "approve":
        Node.objects.filter(pk=objects[0].pk).update(pending_approval=True)
    if kind == "device" and name in DEVICE_SETUP:
        if DEVICE_SETUP[name] == "cordon":
            _run_action(staff_client, Device, "cordon", objects)
        else:
            _run_action(staff_client, Device, "quarantine", objects)
    before = ChangeRecord.objects.count()
    response = _run_action(staff_client, model, name, objects)
    assert response.status_code == 302, response.content[:500]
    records = ChangeRecord.objects.order_by("-id")[: ChangeRecord.objects.count() - before]
    assert records, f"{app_label}.{kind}.{name} wrote no ChangeRecord"
    assert all(r.actor_id == staff_user.pk for r in records)
    if kind == "job":
        objects[0].refresh_from_db()
        assert objects[0].state == JobState.CANCELLED


def test_admin_edits_write_django_log_entries(staff_client, staff_user):
    from django.contrib.admin.models import LogEntry

    response = staff_client.post(
        reverse("admin:accounts_department_add"), {"name": "Research", "slug": "research", "description": ""}
    )
    assert response.status_code == 302
    entry = LogEntry.objects.get()
    assert entry.user_id == staff_user.pk and entry.object_repr


# -- added with the fixes for the review's gaps ---------------------------------------------------------


@pytest.mark.django_db
def test_the_admin_login_is_rate_limited_too(client, settings):
    from django.core.cache import cache

    cache.clear()
    for _ in range(10):
        assert client.post("/admin/login/", {"username": "x", "password": "y"}).status_code == 200
    assert client.post("/admin/login/", {"username": "x", "password": "y"}).status_code == 429


@pytest.mark.django_db
def test_behind_a_trusted_proxy_clients_are_limited_one_by_one(client, settings):
    from django.core.cache import cache

    cache.clear()
    settings.SUANCHI = {**settings.SUANCHI, "TRUSTED_PROXIES": 1}
    for i in range(10):
        answer = client.post(
            "/accounts/login/",
            {"username": f"u{i}", "password": "bad"},
            HTTP_X_FORWARDED_FOR="203.0.113.7",
        )
        assert answer.status_code == 200
    blocked = client.post(
        "/accounts/login/", {"username": "u-next", "password": "bad"}, HTTP_X_FORWARDED_FOR="203.0.113.7"
    )
    assert blocked.status_code == 429
    # Another client behind the same proxy (same REMOTE_ADDR) is not locked out; a forged
    # left-most entry does not help the first one.
    other = client.post(
        "/accounts/login/", {"username": "v", "password": "bad"}, HTTP_X_FORWARDED_FOR="198.51.100.9"
    )
    assert other.status_code == 200
    forged = client.post(
        "/accounts/login/",
        {"username": "w", "password": "bad"},
        HTTP_X_FORWARDED_FOR="10.9.9.9, 203.0.113.7",
    )
    assert forged.status_code == 429


@pytest.mark.django_db
def test_one_username_is_limited_across_addresses(client):
    from django.core.cache import cache

    cache.clear()
    codes = [
        client.post(
            "/accounts/login/", {"username": "alice", "password": f"guess{i}"}, REMOTE_ADDR=f"192.0.2.{i}"
        ).status_code
        for i in range(21)
    ]
    assert codes[:20] == [200] * 20 and codes[20] == 429


def test_connection_urls_can_come_from_files(tmp_path):
    import subprocess
    import sys

    db = tmp_path / "db"
    db.write_text("postgres://suanchi:s3cret@db.internal:5432/suanchi\n")
    broker = tmp_path / "broker"
    broker.write_text("redis://:pw@redis.internal:6379/0")
    code = (
        "from django.conf import settings;"
        "print(settings.DATABASES['default']['HOST'], settings.DATABASES['default']['PASSWORD'],"
        " settings.CELERY_BROKER_URL)"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "config.settings.base",
        "DATABASE_URL_FILE": str(db),
        "CELERY_BROKER_URL_FILE": str(broker),
    }
    out = subprocess.run(
        [sys.executable, "-c", "import django; django.setup();" + code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["db.internal", "s3cret", "redis://:pw@redis.internal:6379/0"]
