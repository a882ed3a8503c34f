"""Issue 29 §6: alert rules on measurements, with hysteresis — every kind fires and resolves, a value
wavering around the threshold does not flap, one open alert per rule and subject, firing and resolved
notifications in both languages, the staff page (members get 403)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone, translation

from apps.core.errors import PermissionDenied, ValidationFailed
from apps.core.stored_text import localize
from apps.inventory.models import Cluster, Device, Node, Pool
from apps.jobs.models import Allocation, Job
from apps.notify import alerts, services
from apps.notify.models import Alert, AlertRule, Delivery, Subscription
from apps.telemetry.alerts import alerts_evaluate
from apps.telemetry.models import DeviceRollup

T0 = datetime(2026, 12, 3, 8, 0, tzinfo=timezone.get_fixed_timezone(0))


@pytest.fixture
def world(make_user, make_project, staff_user):
    project = make_project("vision")
    user = make_user("alice")
    cluster = Cluster.objects.create(name="Beijing A", slug="bj-a")
    pool = Pool.objects.create(cluster=cluster, name="train", slug="train")
    node = Node.objects.create(cluster=cluster, pool=pool, name="gpu-07")
    device = Device.objects.create(node=node, vendor="nvidia", index=3, memory_mib=81920)
    job = Job.objects.create(
        project=project, name="train", image="x:1", request_kind="whole_cards", submitted_by=user
    )
    allocation = Allocation.objects.create(
        job=job,
        device=device,
        node=node,
        whole_card=True,
        memory_mib=1024,
        compute_milli=1000,
        compute_units=Decimal("1.9"),
        trace_id=uuid.uuid4(),
        started_at=T0 - timedelta(days=1),
    )
    sub = services.subscription_create(
        actor=staff_user,
        channel="email",
        target="oncall@example.com",
        events=["alert.firing", "alert.resolved"],
    )
    return {
        "project": project,
        "cluster": cluster,
        "node": node,
        "device": device,
        "allocation": allocation,
        "staff": staff_user,
        "sub": sub,
    }


def _rule(world, kind, threshold, **extra):
    return alerts.alert_rule_create(
        actor=world["staff"],
        name=extra.pop("name", f"{kind} rule"),
        kind=kind,
        threshold=threshold,
        subscriptions=[world["sub"]],
        **extra,
    )


def _measure(device, at: datetime, **fields):
    """A 5-minute rollup whose window ends at ``at`` (what the ingest writes from exporter samples)."""
    start = at - timedelta(minutes=5)
    return DeviceRollup.objects.create(
        device=device,
        window_start=start,
        source="test",
        first_sample_at=start,
        last_sample_at=at - timedelta(seconds=1),
        sample_count=10,
        **fields,
    )


def _events():
    return list(Delivery.objects.order_by("pk").values_list("event", flat=True))


def _open(rule):
    return Alert.objects.filter(rule=rule, state__in=["pending", "firing"]).first()


@pytest.mark.django_db
def test_utilization_below_a_floor_does_not_flap_around_the_threshold(world):
    """Floor 10 %, held 2 h, cleared by 5 points for 10 min. A card wavering 9 ↔ 11 never fires; once
    it stays low for 2 h it fires once; wavering 9 ↔ 13 (inside the margin) keeps it firing without a
    second notification; 20 % for 10 min resolves it once."""
    rule = _rule(
        world,
        "utilization_low",
        10,
        duration_s=7200,
        clear_margin=5,
        clear_duration_s=600,
        project=world["project"],
    )
    device, now = world["device"], T0
    for i in range(12):  # 6 hours of 9, 11, 9, 11 … every 30 min
        now = T0 + timedelta(minutes=30 * i)
        _measure(device, now, util_avg=9.0 if i % 2 == 0 else 11.0)
        assert alerts_evaluate(now=now)["rules"] == 1  # evaluated, not failed
    assert _events() == [] and not Alert.objects.filter(state="firing").exists()
    start = now + timedelta(minutes=30)
    for step in range(0, 130, 10):  # 2 h 10 min at 4 %
        now = start + timedelta(minutes=step)
        _measure(device, now, util_avg=4.0)
        alerts_evaluate(now=now)
    alert = _open(rule)
    assert alert.state == "firing" and alert.fired_at == start + timedelta(minutes=120)
    assert _events() == ["alert.firing"]
    assert "gpu-07" in alert.message and "below 10% utilization for 120 minutes" in alert.message
    for value in [9.0, 13.0, 9.0, 14.9, 11.0, 13.0]:  # around the floor, inside the margin
        now += timedelta(minutes=10)
        _measure(device, now, util_avg=value)
        alerts_evaluate(now=now)
    assert _open(rule).state == "firing" and _events() == ["alert.firing"]
    now += timedelta(minutes=10)
    _measure(device, now, util_avg=20.0)
    alerts_evaluate(now=now)
    assert _open(rule).clear_since == now  # cleared, not yet for 10 minutes
    now += timedelta(minutes=5)
    _measure(device, now, util_avg=12.0)  # back inside the margin: the clear period starts over
    alerts_evaluate(now=now)
    assert _open(rule).clear_since is None
    for _ in range(3):
        now += timedelta(minutes=5)
        _measure(device, now, util_avg=25.0)
        alerts_evaluate(now=now)
    alert.refresh_from_db()
    assert alert.state == "resolved" and alert.resolved_at == now and _open(rule) is None
    assert _events() == ["alert.firing", "alert.resolved"]
    assert "back to 25% utilization" in alert.resolved_message


@pytest.mark.django_db
def test_no_fresh_measurement_keeps_the_alert_as_it_is(world):
    rule = _rule(world, "temperature", 85, clear_margin=5)
    _measure(world["device"], T0, temp_max_c=92.0)
    alerts_evaluate(now=T0)
    assert _open(rule).state == "firing"
    alerts_evaluate(now=T0 + timedelta(hours=2))  # the exporter went quiet: unknown, not good
    assert _open(rule).state == "firing" and _events() == ["alert.firing"]


def _setup_temperature(world, now, bad):
    _measure(world["device"], now, temp_max_c=91.0 if bad else 70.0)


def _setup_errors(world, now, bad):
    if bad:
        _measure(world["device"], now, error_deltas={"ecc_dbe": 2.0}, health={"xid": [79]})
    else:
        _measure(world["device"], now, error_deltas={"ecc_sbe": 5.0})  # correctable: not a fault


def _setup_silent(world, now, bad):
    if not bad:
        _measure(world["device"], now)
    elif not DeviceRollup.objects.exists():
        _measure(world["device"], now - timedelta(minutes=40))  # last sample 40 minutes ago


def _setup_quota(world, now, bad):
    from apps.quotas.models import Quota

    if not Quota.objects.exists():
        Quota.objects.create(project=world["project"], resource_class="any", guaranteed_cu=Decimal("2"))
    if not bad:
        Allocation.objects.filter(pk=world["allocation"].pk).update(released_at=now, release_reason="done")


def _setup_cluster(world, now, bad):
    from apps.clusters import health

    if bad:
        health.loop_failed(
            cluster=world["cluster"],
            loop="reconcile",
            error="timed out",
            started_at=now,
            actor="test",
            now=now,
        )
    else:
        health.loop_succeeded(
            cluster=world["cluster"], loop="reconcile", started_at=now, actor="test", now=now
        )


def _setup_utilization(world, now, bad):
    _measure(world["device"], now, util_avg=2.0 if bad else 60.0)


KIND_CASES = [
    # kind, threshold, extra, setup, subject, words in the firing text, words in the resolved text
    ("utilization_low", 10, {"clear_margin": 5}, _setup_utilization, "device", "below 10%", "back to 60%"),
    ("temperature", 85, {"clear_margin": 5}, _setup_temperature, "device", "91 °C", "cooled down to 70 °C"),
    (
        "device_errors",
        1,
        {"duration_s": 600, "clear_margin": 1},
        _setup_errors,
        "device",
        "3 hardware",
        "stopped",
    ),
    ("card_silent", 15, {"clear_margin": 10}, _setup_silent, "device", "for 40 minutes", "again"),
    ("quota_used", 90, {"clear_margin": 10}, _setup_quota, "quota", "95%", "back to 0%"),
    (
        "cluster_unreachable",
        1,
        {"clear_margin": 1},
        _setup_cluster,
        "cluster",
        "bj-a is unreachable",
        "reachable again",
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize("kind,threshold,extra,setup,subject,fired_words,resolved_words", KIND_CASES)
def test_each_kind_fires_and_resolves(
    world, kind, threshold, extra, setup, subject, fired_words, resolved_words
):
    rule = _rule(world, kind, threshold, **extra)
    setup(world, T0, True)
    assert alerts_evaluate(now=T0)["fired"] == 1
    alert = _open(rule)
    assert alert.state == "firing" and alert.subject.startswith(f"{subject}:")
    assert fired_words in alert.message, alert.message
    later = T0 + timedelta(minutes=20)  # past the error look-back window
    setup(world, later, False)
    assert alerts_evaluate(now=later)["resolved"] == 1
    alert.refresh_from_db()
    assert alert.state == "resolved" and resolved_words in alert.resolved_message, alert.resolved_message
    assert _events() == ["alert.firing", "alert.resolved"]
    # Resolved stays resolved; a new episode is a new alert.
    assert alerts_evaluate(now=later + timedelta(minutes=1))["fired"] == 0


@pytest.mark.django_db
def test_a_released_card_resolves_its_alert_and_one_open_alert_per_subject(world):
    rule = _rule(world, "utilization_low", 10)
    _measure(world["device"], T0, util_avg=1.0)
    alerts_evaluate(now=T0)
    alert = _open(rule)
    with pytest.raises(IntegrityError), transaction.atomic():
        Alert.objects.create(
            rule=rule, subject=alert.subject, subject_label="x", since=T0, evaluated_at=T0, state="pending"
        )
    Allocation.objects.filter(pk=world["allocation"].pk).update(released_at=T0)
    alerts_evaluate(now=T0 + timedelta(minutes=1))
    alert.refresh_from_db()
    assert alert.state == "resolved" and "no longer watched" in alert.resolved_message
    assert _events() == ["alert.firing", "alert.resolved"]


@pytest.mark.django_db(transaction=True)
def test_notifications_carry_the_text_in_english_and_chinese(world, mailoutbox):
    rule = _rule(world, "temperature", 85, name="机房过热 hot room")
    _measure(world["device"], T0, temp_max_c=91.0)
    alerts_evaluate(now=T0)
    delivery = Delivery.objects.get()
    alert = _open(rule)
    payload = delivery.payload
    assert payload["message"] == f"Alert 机房过热 hot room: {alert.message}"
    with translation.override("zh-hans"):
        zh = translation.gettext("Alert %(rule)s: %(text)s") % {
            "rule": rule.name,
            "text": localize(alert.message),
        }
    assert payload["message_zh_hans"] == zh and "机房过热 hot room" in zh
    assert payload["data"]["kind"] == "temperature" and payload["data"]["value"] == 91.0
    # The stored English text is a registered id: shown in the reader's language, parameters kept.
    with translation.override("en"):
        assert localize(alert.message) == alert.message
    # The e-mail goes out in the subscriber's language (blank: the platform's, English here).
    assert services.deliveries_send(now=T0 + timedelta(minutes=1))["delivered"] == 1
    (mail,) = mailoutbox
    assert mail.subject == "[Suanchi] alert firing" and alert.message in mail.body


@pytest.mark.django_db
def test_only_subscriptions_hearing_the_event_get_it(world, staff_user):
    fire_only = services.subscription_create(
        actor=staff_user, channel="email", target="fire@example.com", events=["alert.firing"]
    )
    rule = alerts.alert_rule_create(
        actor=staff_user,
        name="hot",
        kind="temperature",
        threshold=85,
        subscriptions=[world["sub"], fire_only],
    )
    _measure(world["device"], T0, temp_max_c=91.0)
    alerts_evaluate(now=T0)
    _measure(world["device"], T0 + timedelta(minutes=5), temp_max_c=60.0)
    alerts_evaluate(now=T0 + timedelta(minutes=5))
    got = sorted(Delivery.objects.values_list("subscription__target", "event"))
    assert got == [
        ("fire@example.com", "alert.firing"),
        ("oncall@example.com", "alert.firing"),
        ("oncall@example.com", "alert.resolved"),
    ]
    assert rule.alerts.get().state == "resolved"


@pytest.mark.django_db
def test_rules_refuse_bad_input_precisely_and_only_staff_make_them(world, make_user):
    member = make_user("bob")
    with pytest.raises(PermissionDenied):
        alerts.alert_rule_create(actor=member, name="x", kind="temperature", threshold=85)
    deaf = services.subscription_create(
        actor=world["staff"], channel="email", target="deaf@example.com", events=["job.failed"]
    )
    cases = [
        ({"name": "", "kind": "temperature", "threshold": 85}, "name"),
        ({"name": "x", "kind": "humidity", "threshold": 85}, "kind"),
        ({"name": "x", "kind": "temperature", "threshold": "hot"}, "not a number"),
        ({"name": "x", "kind": "utilization_low", "threshold": 120}, "from 0 to 100"),
        ({"name": "x", "kind": "utilization_low", "threshold": 90, "clear_margin": 20}, "never resolve"),
        ({"name": "x", "kind": "temperature", "threshold": 85, "clear_margin": -1}, "negative"),
        ({"name": "x", "kind": "temperature", "threshold": 85, "duration_s": -5}, "whole number of seconds"),
        (
            {"name": "x", "kind": "quota_used", "threshold": 90, "cluster": world["cluster"]},
            "not scoped by cluster",
        ),
        (
            {"name": "x", "kind": "cluster_unreachable", "threshold": 1, "project": world["project"]},
            "not scoped by project",
        ),
        ({"name": "x", "kind": "temperature", "threshold": 85, "subscriptions": [deaf]}, "no alert events"),
    ]
    for kwargs, words in cases:
        with pytest.raises(ValidationFailed) as exc:
            alerts.alert_rule_create(actor=world["staff"], **kwargs)
        assert words in exc.value.message, (kwargs, exc.value.message)
    assert not AlertRule.objects.exists()


@pytest.mark.django_db
def test_the_staff_page_manages_rules_and_lists_open_alerts_members_get_403(client, world, make_user):
    member = make_user("carol")
    client.force_login(member)
    response = client.get("/notifications/alerts/")
    assert response.status_code == 403 and "staff" in response.content.decode()
    assert client.post("/notifications/alerts/", {"name": "x"}).status_code == 403
    client.force_login(world["staff"])
    response = client.post(
        "/notifications/alerts/",
        {
            "name": "idle cards",
            "kind": "utilization_low",
            "threshold": "10",
            "duration_min": "120",
            "clear_margin": "5",
            "clear_duration_min": "10",
            "project": world["project"].pk,
            "subscriptions": [world["sub"].pk],
        },
    )
    assert response.status_code == 200
    rule = AlertRule.objects.get()
    assert (rule.duration_s, rule.clear_duration_s, rule.project, list(rule.subscriptions.all())) == (
        7200,
        600,
        world["project"],
        [world["sub"]],
    )
    bad = client.post("/notifications/alerts/", {"name": "x", "kind": "temperature", "threshold": "999"})
    assert bad.status_code == 400 and AlertRule.objects.count() == 1
    assert "from 1 to 150" in bad.content.decode()
    bad = client.post(
        "/notifications/alerts/",
        {"name": "x", "kind": "temperature", "threshold": "90", "duration_min": "soon"},
    )
    assert bad.status_code == 400 and AlertRule.objects.count() == 1
    _measure(world["device"], T0, util_avg=1.0)
    Alert.objects.create(
        rule=rule,
        subject="device:1",
        subject_label="gpu-07#nvidia3",
        since=T0,
        evaluated_at=T0,
        state="firing",
        message=alerts.UTIL_LOW_FIRING
        % {
            "device": "nvidia3",
            "node": "gpu-07",
            "project": "vision",
            "threshold": "10",
            "minutes": 120,
            "value": "1",
        },
    )
    page = client.get("/notifications/alerts/").content.decode()
    assert "idle cards" in page and "gpu-07#nvidia3" in page and "below 10% utilization" in page
    assert client.get("/notifications/alerts/", HTTP_ACCEPT_LANGUAGE="zh-hans").status_code == 200
    assert client.post(f"/notifications/alerts/{rule.pk}/delete/").status_code == 302
    assert not AlertRule.objects.exists()


def test_the_evaluator_is_on_the_beat_schedule():
    from apps.core import task_names
    from worker.celery import BEAT
    from worker.tasks.notify import alerts_evaluate_task

    assert ("notify-alerts", task_names.ALERTS_EVALUATE, 60.0) in BEAT
    assert (
        alerts_evaluate_task.name == task_names.ALERTS_EVALUATE == "worker.tasks.notify.alerts_evaluate_task"
    )


def test_every_alert_text_is_a_registered_stored_text():
    from apps.core.stored_text import registered

    ids = set(registered())
    for text in (
        alerts.UTIL_LOW_FIRING,
        alerts.UTIL_LOW_RESOLVED,
        alerts.TEMP_FIRING,
        alerts.TEMP_RESOLVED,
        alerts.ERRORS_FIRING,
        alerts.ERRORS_RESOLVED,
        alerts.SILENT_FIRING,
        alerts.SILENT_RESOLVED,
        alerts.QUOTA_FIRING,
        alerts.QUOTA_RESOLVED,
        alerts.CLUSTER_FIRING,
        alerts.CLUSTER_RESOLVED,
        alerts.SUBJECT_GONE,
    ):
        assert text in ids
    assert Subscription.Channel.DINGTALK in Subscription.ROBOTS
