"""Issue 21 §5: a zh-hans reader sees the texts that services and workers stored in Chinese.

A small fleet (tests/jobs/conftest.py) gets real history through the services: a dual-track
migration shift (job scale events), a card edit and a retirement (ledger events), a gray batch's soak
(node events, stage reason, what is still missing). Each page is then read in Chinese; every stored
English sentence must be gone and its translation (``apps.core.stored_text.localize``) be there.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import translation
from django.utils.html import escape

from apps.core.stored_text import localize
from apps.inventory.models import Device, DeviceEvent
from apps.inventory.services.ledger import device_retire, device_update
from apps.jobs.models import JobEvent
from apps.migration import services as migration
from apps.rollout import services as rollout
from apps.rollout.models import GrayBatch
from tests.migration.conftest import a100, ascend, dual, fleet, member_project, plan  # noqa: F401
from tests.rollout.conftest import criteria, now  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.fixture
def zh(client, staff_user):
    client.force_login(staff_user)
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    yield client
    translation.activate(settings.LANGUAGE_CODE)  # LocaleMiddleware leaves the thread in zh-hans


def _read(client, url: str) -> str:
    response = client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert response.status_code == 200, url
    return response.content.decode()


def _chinese(text: str) -> str:
    with translation.override("zh-hans"):
        return localize(text)


def _assert_shown_in_chinese(body: str, stored: list[str], url: str) -> None:
    for text in stored:
        shown = _chinese(text)
        assert shown != text, f"no zh-hans translation for the stored text {text!r}"
        assert escape(text) not in body, f"{url} shows the English {text!r}"
        assert escape(shown) in body, f"{url} lacks {shown!r} (for {text!r})"


@pytest.fixture
def history(dual, fleet, staff_user, criteria, now):  # noqa: F811
    service, user, project = dual
    # Migration shift: the source track scales 2 → 4 replicas with the migration's reason.
    migration.service_shift(service=service, actor=user, target_weight=20, reason="canary")
    # Ledger: a card edit and a retirement on the NPU node.
    idle = Device.objects.filter(node=fleet["npu-01"], allocations__isnull=True).order_by("-index").first()
    device_update(device=idle, actor=staff_user, owner_project=project)
    device_retire(device=idle, actor=staff_user, reason="fan failure")
    # Rollout: a driver batch soaks on gpu-02 (nothing measured yet, so things are still missing).
    batch = rollout.batch_create(
        actor=staff_user,
        name="drv canary",
        slug="drv-canary",
        kind="driver",
        target_version="560.1",
        criteria=criteria,
        nodes=[fleet["npu-01"]],
    )
    rollout.batch_soak_start(batch=batch, actor=staff_user, now=now - timedelta(hours=1))
    rollout.batch_evaluate(batch=batch, actor="worker", now=now)
    return {"service": service, "device": idle, "batch": GrayBatch.objects.get(pk=batch.pk)}


def test_job_pages_show_the_scale_events_in_chinese(zh, history):
    job = history["service"].source_job
    scaled = list(
        JobEvent.objects.filter(job=job, kind=JobEvent.Kind.SCALED).values_list("message", flat=True)
    )
    assert scaled and all("migration chat: target weight 0 → 20 % (canary)" in m for m in scaled)
    url = f"/jobs/{job.pk}/"
    _assert_shown_in_chinese(_read(zh, url), scaled, url)


def test_node_and_device_pages_show_the_ledger_events_in_chinese(zh, history, fleet):  # noqa: F811
    device = history["device"]
    events = list(DeviceEvent.objects.filter(device=device).values_list("message", flat=True))
    updated = f"device {device} updated: owner_project"
    retired = f"device {device} retired: fan failure"
    assert updated in events and retired in events
    url = f"/inventory/devices/{device.pk}/"
    _assert_shown_in_chinese(_read(zh, url), [updated, retired], url)
    joins = f"node npu-01 joins gray batch {history['batch'].name}"
    assert DeviceEvent.objects.filter(node=fleet["npu-01"], message=joins).exists()
    url = f"/inventory/nodes/{fleet['npu-01'].pk}/"
    _assert_shown_in_chinese(_read(zh, url), [joins], url)


def test_the_batch_page_shows_its_reason_and_what_is_missing_in_chinese(zh, history):
    batch = history["batch"]
    assert batch.stage_reason == "soak started on 1 node(s)"
    missing = batch.results.order_by("-computed_at").first().missing
    assert "a baseline benchmark run" in missing and any(m.startswith("soak time: ") for m in missing)
    url = f"/rollout/batches/{batch.pk}/"
    _assert_shown_in_chinese(_read(zh, url), [batch.stage_reason, *missing], url)


def test_the_migration_pages_load_in_chinese_without_the_stored_english(zh, history):
    service = history["service"]
    for url in ("/migration/", f"/migration/services/{service.pk}/"):
        body = _read(zh, url)
        assert "target weight 0 → 20 %" not in body, url
        assert 'lang="zh-hans"' in body or "迁移" in body, url


def test_every_engine_reason_is_registered_and_an_explanation_reads_in_chinese():
    from apps.core.stored_text import registered
    from apps.scheduling import engine_texts
    from apps.scheduling.engine import filters

    reasons = [*filters.STATUS_REASONS.values()]
    reasons += [v for k, v in vars(filters).items() if k.isupper() and isinstance(v, str)]
    known = set(registered())
    missing = [
        r
        for r in reasons
        if r not in engine_texts.LEFT_IN_ENGLISH and "%(count)s " + r.replace("{}", "%(detail)s") not in known
    ]
    assert not missing, missing
    text = filters.explain_counts(9, {filters.CARDS: 6, filters.STATUS_REASONS["quarantined"]: 3})
    assert text == "0/9 nodes are available: 6 insufficient free cards, 3 node quarantined."
    shown = _chinese(text)
    assert "nodes are available" not in shown and "insufficient" not in shown and "quarantined" not in shown
    assert "6" in shown and "3" in shown and "0/9" in shown


def test_ledger_status_events_read_in_chinese(zh, fleet, staff_user):  # noqa: F811
    from apps.inventory.services.ledger import device_cordon, device_pool_status_set, node_status_set

    node = fleet["gpu-01"]
    node_status_set(node=node, status="maintenance", reason="", actor=staff_user)
    device = node.devices.order_by("index").first()
    device_pool_status_set(device=device, pool_status="gray", reason="canary", actor=staff_user)
    device_cordon(device=device, cordoned=True, reason="flaky fan", actor=staff_user)
    texts = [
        "node gpu-01 maintenance on",
        f"device {device} moved to gray (was production): canary",
        f"device {device} cordoned: no new allocations: flaky fan",
    ]
    stored_texts = set(DeviceEvent.objects.filter(node=node).values_list("message", flat=True))
    assert set(texts) <= stored_texts, stored_texts
    url = f"/inventory/nodes/{node.pk}/"
    _assert_shown_in_chinese(_read(zh, url), texts, url)
