"""Forecasts from the trend, the remaining footprint, and the demo cockpit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command

from apps.migration import forecast, selectors, services
from apps.migration.models import MigratedService, MigrationAction, Phase
from tests.fixtures.migration import samples

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_eta_extends_a_rising_trend_to_the_goal():
    points = [(T0, 0.0), (T0 + timedelta(days=10), 20.0), (T0 + timedelta(days=20), 40.0)]
    assert forecast.eta(points, 100.0) == T0 + timedelta(days=50)


def test_eta_gives_no_date_without_a_rising_trend():
    assert forecast.eta([(T0, 10.0)], 100.0) is None
    assert forecast.eta([(T0, 30.0), (T0 + timedelta(days=3), 10.0)], 100.0) is None
    assert forecast.eta([(T0, 10.0), (T0, 20.0)], 100.0) is None


def test_eta_is_the_last_point_once_the_goal_is_reached():
    assert forecast.eta([(T0, 50.0), (T0 + timedelta(days=1), 100.0)], 100.0) == T0 + timedelta(days=1)


@pytest.mark.django_db
def test_weight_and_phase_forecasts_follow_the_action_history(dual):
    service, user, _project = dual
    samples(service)
    services.service_shift(service=service, actor=user, target_weight=10)
    services.service_shift(service=service, actor=user, target_weight=20)
    now = datetime.now(tz=UTC)
    for i, pk in enumerate(service.actions.order_by("id").values_list("pk", flat=True)):
        MigrationAction.objects.filter(pk=pk).update(created_at=now - timedelta(days=20 - 10 * i))
    eta = selectors.weight_eta(service)
    assert eta is not None and abs(eta - (now + timedelta(days=80))) < timedelta(hours=1)
    services.service_promote(service=service, actor=user)
    MigratedService.objects.filter(pk=service.pk).update(created_at=now - timedelta(days=20))
    service.refresh_from_db()
    rows = {r["phase"]: r for r in selectors.plan_forecast(plan=service.plan, services=[service])}
    assert rows[Phase.VALIDATE]["done"] == 1 and rows[Phase.VALIDATE]["services"] == 1
    assert rows[Phase.VALIDATE]["owner"] == "platform team"
    assert rows[Phase.INFERENCE]["done"] == 0 and rows[Phase.INFERENCE]["eta"] is None


@pytest.mark.django_db
def test_footprint_counts_live_cards_and_compute_units_per_vendor(dual, staff_user, make_user):
    service, user, _project = dual
    rows = {r["vendor"]: r for r in selectors.footprint(user=staff_user)}
    assert rows["nvidia"]["cards_in_fleet"] == 8 and rows["nvidia"]["cards_allocated"] == 2
    assert str(rows["nvidia"]["compute_units"]) == "2.0000"
    assert rows["huawei"]["cards_allocated"] == 1 and str(rows["huawei"]["compute_units"]) == "0.8000"
    mine = {r["vendor"]: r for r in selectors.footprint(user=user)}
    assert mine["nvidia"]["cards_in_fleet"] is None and mine["nvidia"]["cards_allocated"] == 2
    assert selectors.footprint(user=make_user("nobody")) == []


@pytest.mark.django_db
def test_the_demo_shows_services_at_different_phases_and_is_idempotent(client, capsys):
    call_command("load_demo")
    assert "migration: plan" in capsys.readouterr().out
    phases = set(MigratedService.objects.values_list("phase", flat=True))
    assert {Phase.VALIDATE, Phase.INFERENCE, Phase.TRAINING, Phase.REDUCE} <= phases
    assert MigrationAction.objects.filter(kind="shift").exists()
    reduced = MigratedService.objects.get(phase=Phase.REDUCE)
    assert reduced.target_weight == 100 and reduced.source_job.replicas == 1
    count = MigratedService.objects.count()
    call_command("load_demo")
    assert MigratedService.objects.count() == count
    from django.contrib.auth import get_user_model

    client.force_login(get_user_model().objects.get(username="admin"))
    page = client.get("/migration/")
    assert page.status_code == 200 and b"migration-vendor-share" in page.content
    detail = client.get(f"/migration/services/{reduced.pk}/")
    assert detail.status_code == 200 and b"migration-p99" in detail.content
