"""Issue 21: notifications — webhook (signed JSON, retried through the outbox) and e-mail, per project and
per user, delivered at least once, never inside a transaction, visible in a delivery log. The webhook
receiver is a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import transaction
from django.utils import timezone

from apps.accounts.models import Membership
from apps.core.errors import PermissionDenied, ValidationFailed
from apps.jobs.models import Job, JobState
from apps.jobs.services import job_transition
from apps.notify import services
from apps.notify.models import Delivery, Subscription


class Receiver:
    """A webhook receiver on 127.0.0.1 answering the statuses it is told to, recording every request."""

    def __init__(self, statuses=(200,)):
        self.statuses = list(statuses)
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server API
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.requests.append({"headers": dict(self.headers), "body": body})
                status = outer.statuses.pop(0) if len(outer.statuses) > 1 else outer.statuses[0]
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    made = []

    def make(statuses=(200,)):
        r = Receiver(statuses)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


@pytest.fixture
def team(make_user, make_project):
    admin = make_user("ops-admin")
    member = make_user("ops-member")
    project = make_project("ops", members=[admin], role="admin")
    Membership.objects.create(user=member, project=project, role="member")
    return project, admin, member


def _job(project, user, state=JobState.RUNNING):
    return Job.objects.create(
        project=project, name="train", image="x:1", request_kind="whole_cards", state=state, submitted_by=user
    )


def _fail(job):
    with transaction.atomic():
        job_transition(job, to=JobState.FAILED, actor="test", reason="exit code 137")


@pytest.mark.django_db(transaction=True)
def test_a_failed_job_reaches_the_project_webhook_signed_after_commit(team, receiver):
    project, admin, member = team
    hook = receiver()
    sub = services.subscription_create(
        actor=admin, channel="webhook", target=hook.url, events=["job.failed"], project=project
    )
    job = _job(project, member)
    with transaction.atomic():
        job_transition(job, to=JobState.FAILED, actor="test", reason="exit code 137")
        # Written with the event (outbox) but nothing is sent inside the transaction.
        assert Delivery.objects.filter(subscription=sub).count() == 1
        with pytest.raises(RuntimeError):
            services.deliveries_send()
    assert hook.requests == []
    assert services.deliveries_send() == {"delivered": 1, "retrying": 0, "failed": 0}
    (request,) = hook.requests
    headers = {k.lower(): v for k, v in request["headers"].items()}
    body = request["body"]
    expected = hmac.new(
        sub.secret.encode(), headers["x-suanchi-timestamp"].encode() + b"." + body, hashlib.sha256
    ).hexdigest()
    assert headers["x-suanchi-signature"] == f"sha256={expected}"
    assert headers["x-suanchi-event"] == "job.failed"
    payload = json.loads(body)
    assert payload["project"] == "ops" and "exit code 137" in payload["message"]
    assert payload["message_zh_hans"] and payload["message_zh_hans"] != payload["message"]
    delivery = Delivery.objects.get()
    assert delivery.state == "delivered" and delivery.attempts == 1 and delivery.response_status == 200


@pytest.mark.django_db(transaction=True)
def test_a_refused_delivery_is_retried_with_backoff_and_then_delivered(team, receiver):
    project, admin, member = team
    hook = receiver(statuses=(500, 200))
    services.subscription_create(
        actor=admin, channel="webhook", target=hook.url, events=["job.failed"], project=project
    )
    _fail(_job(project, member))
    first = services.deliveries_send()
    assert first == {"delivered": 0, "retrying": 1, "failed": 0}
    delivery = Delivery.objects.get()
    assert (
        delivery.last_error == "failed: HTTP 5xx"
        and delivery.next_attempt_at > timezone.now() + timedelta(seconds=20)
    )
    assert services.deliveries_send() == {"delivered": 0, "retrying": 0, "failed": 0}  # not due yet
    later = services.deliveries_send(now=timezone.now() + timedelta(minutes=2))
    assert later["delivered"] == 1 and len(hook.requests) == 2
    assert Delivery.objects.get().attempts == 2


@pytest.mark.django_db(transaction=True)
def test_an_unreachable_webhook_fails_for_good_after_the_last_attempt(team):
    project, admin, member = team
    services.subscription_create(
        actor=admin,
        channel="webhook",
        target="http://127.0.0.1:9/hook",
        events=["job.failed"],
        project=project,
    )
    _fail(_job(project, member))
    now = timezone.now()
    for i in range(services.MAX_ATTEMPTS):
        services.deliveries_send(now=now + timedelta(hours=2 * (i + 1)))
    delivery = Delivery.objects.get()
    assert delivery.state == "failed" and delivery.attempts == services.MAX_ATTEMPTS and delivery.last_error


@pytest.mark.django_db(transaction=True)
def test_the_same_event_twice_is_delivered_once_and_email_goes_to_the_submitter(team, mailoutbox):
    project, admin, member = team
    services.subscription_create(
        actor=member, channel="email", target="member@example.com", events=["job.failed"]
    )
    job = _job(project, member)
    _fail(job)
    from apps.notify.services import notify

    with transaction.atomic():  # the same event replayed (e.g. a retried worker)
        notify(
            "job.failed",
            key=f"job:{job.pk}:{job.attempt}:failed",
            message="x",
            params={},
            project=project,
            users=[member],
        )
    assert Delivery.objects.count() == 1
    services.deliveries_send()
    assert len(mailoutbox) == 1 and mailoutbox[0].to == ["member@example.com"]
    assert "train" in mailoutbox[0].body and "ops" in mailoutbox[0].body


@pytest.mark.django_db
def test_a_personal_subscription_hears_only_about_projects_its_owner_still_sees(team, make_user):
    project, admin, member = team
    services.subscription_create(actor=member, channel="email", target="m@example.com", events=["job.failed"])
    Membership.objects.filter(user=member, project=project).delete()
    _fail(_job(project, member))
    assert not Delivery.objects.exists()


@pytest.mark.django_db
def test_only_project_admins_manage_project_subscriptions_and_bad_input_writes_nothing(team):
    project, admin, member = team
    with pytest.raises(PermissionDenied):
        services.subscription_create(
            actor=member, channel="email", target="a@example.com", events=["job.failed"], project=project
        )
    for kwargs in (
        {"channel": "webhook", "target": "ftp://example.com/x", "events": ["job.failed"]},
        {"channel": "webhook", "target": "http://localhost/x", "events": ["job.exploded"]},
        {"channel": "webhook", "target": "http://localhost/x", "events": []},
        {"channel": "email", "target": "not-an-address", "events": ["job.failed"]},
        {"channel": "pager", "target": "x", "events": ["job.failed"]},
    ):
        with pytest.raises(ValidationFailed) as exc:
            services.subscription_create(actor=admin, project=project, **kwargs)
        assert exc.value.message
    assert not Subscription.objects.exists()


@pytest.mark.django_db
def test_loopback_and_metadata_webhooks_are_refused_unless_allowed(team, settings):
    project, admin, _member = team
    settings.SUANCHI = {**settings.SUANCHI, "OUTBOUND_ALLOWED_NETWORKS": []}
    for url in ("http://127.0.0.1:8000/admin/", "http://169.254.169.254/latest/meta-data/", "http://[::1]/x"):
        with pytest.raises(ValidationFailed):
            services.subscription_create(
                actor=admin, channel="webhook", target=url, events=["job.failed"], project=project
            )
    assert not Subscription.objects.exists()


@pytest.mark.django_db
def test_finalized_bills_and_failed_soaks_are_notified(team, staff_user, make_user):
    from datetime import date

    from apps.billing.models import Bill, BillingPeriod
    from apps.billing.services import _bills_finalize

    project, admin, _member = team
    services.subscription_create(
        actor=admin, channel="email", target="a@example.com", events=["bill.finalized"], project=project
    )
    period = BillingPeriod.objects.create(month=date(2026, 9, 1))
    bill = Bill.objects.create(project=project, period=period, month=date(2026, 9, 1))
    _bills_finalize(Bill.objects.filter(pk=bill.pk), now=timezone.now())
    delivery = Delivery.objects.get(event="bill.finalized")
    assert "2026-09" in delivery.payload["message"] and delivery.key == f"bill:{bill.pk}:finalized"


@pytest.mark.django_db
def test_the_page_adds_lists_and_removes_subscriptions_with_the_log(client, team):
    project, admin, member = team
    client.force_login(admin)
    response = client.post(
        "/notifications/",
        {
            "channel": "webhook",
            "target": "https://localhost/hooks/x",
            "events": ["job.failed", "bill.finalized"],
            "project": project.pk,
        },
    )
    assert response.status_code == 200
    sub = Subscription.objects.get()
    assert sub.project == project and sub.secret in response.content.decode()
    bad = client.post("/notifications/", {"channel": "webhook", "target": "nope", "events": ["job.failed"]})
    assert bad.status_code == 400 and Subscription.objects.count() == 1
    client.force_login(member)  # a member does not administer the project: it neither sees nor deletes it
    assert "https://localhost/hooks/x" not in client.get("/notifications/").content.decode()
    assert client.post(f"/notifications/{sub.pk}/delete/").status_code == 404
    client.force_login(admin)
    assert client.post(f"/notifications/{sub.pk}/delete/").status_code == 302
    assert not Subscription.objects.exists()
