"""Issue 21 §5: a zh-hans reader sees the texts that services and workers stored in Chinese.

A small fleet (tests/fixtures/inventory.py) gets real history through the services: a dual-track
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
from apps.inventory.models import Device, DeviceEvent, Node
from apps.inventory.services.ledger import device_retire, device_update
from apps.jobs.models import JobEvent
from apps.migration import services as migration
from apps.rollout import services as rollout
from apps.rollout.models import GrayBatch

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
def history(dual, fleet, staff_user, criteria, now):
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


def test_node_and_device_pages_show_the_ledger_events_in_chinese(zh, history, fleet):
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


def test_ledger_status_events_read_in_chinese(zh, fleet, staff_user):
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


# ---- issue 21 §5, item 5: the texts the lifecycle, reconcile, the pusher, faults, cluster sync, the
# ledger import and telemetry store. Each is written through the real service (or the function that
# writes it); the page must show it in Chinese, and each stored text must come from a registered id.


def _assert_timeline_in_chinese(body: str, stored: list[str], url: str) -> None:
    """Like ``_assert_shown_in_chinese`` for the event timeline's messages only (the "changes" beside
    them show the raw before/after values, a cordon reason among them, as stored)."""
    import re

    messages = re.findall(r'<p class="timeline__message">(.*?)</p>', body, re.DOTALL)
    assert messages, url
    _assert_shown_in_chinese("\n".join(messages), stored, url)


def _registered(text: str) -> bool:
    """``text`` is made from a registered message id (a plain one, or a pattern that matches it)."""
    from apps.core import stored_text

    return text in stored_text._PLAIN or any(p.fullmatch(text) for _m, p in stored_text._ordered())


def _assert_registered(texts) -> None:
    unregistered = [t for t in texts if not _registered(t)]
    assert not unregistered, f"stored without a registered id (apps.core.stored_text): {unregistered}"


def test_the_job_page_shows_the_lifecycle_reconcile_and_push_texts_in_chinese(
    zh,
    fleet,
    member_project,
    a100,
):
    from apps.clusters.pusher import PUSH_FAILED
    from apps.scheduling import lifecycle, reconcile
    from apps.scheduling.services import PREEMPTED_FOR, scheduling_cycle_run

    user, project = member_project
    with translation.override("zh-hans"):  # a Chinese submitter still stores English
        job = lifecycle.job_submit(
            project=project,
            actor=user,
            name="train",
            image="pytorch:2.3",
            request_kind="whole_cards",
            device_model=a100,
            count=1,
            checkpoint_dir="/ckpt/train",
            max_retries=2,
        )
    scheduling_cycle_run()
    job.refresh_from_db()
    assert job.state == "scheduled", job.state_reason
    node = job.allocations.get().node.name
    # reconcile: a pod failed → retried elsewhere, resuming from the checkpoint
    failed = reconcile.POD_FAILED % {
        "pod": f"suanchi-{job.pk}-a0-x7k2p",
        "reason": "main: OOMKilled, exit code 137",
    }
    assert (
        lifecycle.job_retry_or_fail(job=job, reason=failed, actor="reconciler", failed_nodes=[node])
        == "retried"
    )
    job.refresh_from_db()
    job.retry_not_before = None
    job.save(update_fields=["retry_not_before"])
    scheduling_cycle_run()
    job.refresh_from_db()
    assert job.state == "scheduled", job.state_reason
    # the pusher gave up on the workload → back to pending, its cards released
    reason = PUSH_FAILED % {
        "action": f"apply Job vision/suanchi-{job.pk}-a1",
        "error": "422 Unprocessable Entity",
    }
    assert lifecycle.job_push_failed(job=job, attempt=job.attempt, reason=reason, actor="pusher")
    scheduling_cycle_run()
    job.refresh_from_db()
    # preempted for a more urgent job (the scheduler's reason), requeued from the checkpoint
    preempted_for = PREEMPTED_FOR % {"job": "urgent"}
    assert lifecycle.job_preempt(job=job, reason=preempted_for, actor="scheduler")
    scheduling_cycle_run()
    job.refresh_from_db()
    assert lifecycle.job_to_running(job=job, actor="reconciler")
    assert lifecycle.job_finish(job=job, succeeded=True, reason=reconcile.COMPLETED, actor="reconciler")

    events = list(job.events.order_by("created_at", "id").values_list("message", flat=True))
    assert events[0].startswith("submitted: 1 whole card(s) of "), events[0]
    ours = [
        events[0],
        f"retrying: {failed}",
        next(m for m in events if m.startswith("attempt 0 ended: ")),
        reason,
        f"preempted (attempt 2): {preempted_for}",
        f"requeued after preemption: {preempted_for}",
        "pods running",
        "completed",
    ]
    assert set(ours) <= set(events), events
    assert any(", avoiding " in m and ", resuming from /ckpt/train" in m for m in events), events
    releases = [r for r in job.allocations.values_list("release_reason", flat=True) if r != "succeeded"]
    assert f"retry: {failed}" in releases and reason in releases, releases
    assert f"preempted: {preempted_for}" in releases, releases
    _assert_registered(events + releases)
    url = f"/jobs/{job.pk}/"
    _assert_shown_in_chinese(_read(zh, url), ours + [f"retry: {failed}", f"preempted: {preempted_for}"], url)
    # A refusal raised by the lifecycle is in the reader's language too (gettext, not stored).
    zh.force_login(user)
    refused = zh.post(f"/jobs/{job.pk}/cancel/", follow=True, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "it cannot be cancelled" not in refused
    with translation.override("zh-hans"):
        expected = lifecycle._("Job %(job)s is already %(state)s; it cannot be cancelled.") % {
            "job": job,
            "state": job.get_state_display(),
        }
    assert (
        expected != f"Job {job} is already succeeded; it cannot be cancelled." and escape(expected) in refused
    )


def test_the_node_and_cluster_pages_show_sync_ledger_telemetry_and_fault_texts_in_chinese(
    zh,
    fleet,
    staff_user,
):
    import time

    from apps.clusters.sync import cluster_sync_apply
    from apps.inventory.services.ledger import IMPORT_COLUMNS, ledger_import_csv
    from apps.scheduling import faults, reconcile
    from apps.telemetry.services import _health_events

    node = fleet["gpu-01"]
    cluster = node.cluster
    # cluster sync: gpu-01 NotReady and one card short in allocatable; a node new to the ledger
    kube_nodes = [
        {
            "metadata": {"name": "gpu-01", "labels": {}},
            "spec": {"taints": node.taints},
            "status": {
                "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}],
                "capacity": {"nvidia.com/gpu": "4"},
                "allocatable": {"nvidia.com/gpu": "3"},
            },
        },
        {
            "metadata": {"name": "gpu-09", "labels": {"suanchi.io/pool": "training"}},
            "spec": {},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "capacity": {"nvidia.com/gpu": "2"},
                "allocatable": {"nvidia.com/gpu": "2"},
            },
        },
    ]
    cluster_sync_apply(cluster=cluster, nodes=kube_nodes, actor=staff_user)
    # reconcile: the NotReady warning
    reconcile._note_not_ready(cluster, "gpu-01", "reconciler")
    # the ledger CSV: a card's firmware edited, a new node with a card, in maintenance
    rows = [
        {
            "cluster": "prod",
            "pool": "training",
            "node": "gpu-01",
            "vendor": "nvidia",
            "device_index": "0",
            "uuid": "gpu-01-0",
            "firmware_version": "2.0",
        },
        {
            "cluster": "prod",
            "pool": "training",
            "node": "gpu-07",
            "node_status": "maintenance",
            "vendor": "nvidia",
            "device_index": "0",
            "uuid": "GPU-7777",
        },
    ]
    csv = (
        ",".join(IMPORT_COLUMNS)
        + "\n"
        + "".join(",".join(r.get(c, "") for c in IMPORT_COLUMNS) + "\n" for r in rows)
    )
    ledger_import_csv(data=csv, actor=staff_user)
    # telemetry: an XID and a temperature limit on card 1; then the hardware fault cordons it
    card = node.devices.get(index=1)
    window = time.time() // 300 * 300
    telemetry = _health_events(
        card.pk, node.pk, "", window, {"xid": [79], "temp_over": 90.0}, {}, "dcgm", "telemetry"
    )
    DeviceEvent.objects.bulk_create(telemetry)
    faults.cards_fault(devices=[card], reason=telemetry[0].message, actor="telemetry")

    node_events = list(DeviceEvent.objects.filter(node=node).values_list("message", flat=True))
    _assert_registered(node_events)
    expected = [
        "Kubernetes reports node gpu-01 NotReady (KubeletNotReady)",
        "node gpu-01: Kubernetes can allocate 3 nvidia.com/gpu but the ledger has 4 healthy cards: "
        "the device plugin dropped 1",
        "Kubernetes reports node gpu-01 NotReady; its jobs are rescheduled",
        next(m for m in node_events if m.endswith(" updated from the ledger CSV (line 2): firmware_version")),
        *(e.message for e in telemetry),
    ]
    missing = [t for t in expected if t not in node_events]
    assert not missing, (missing, node_events)
    cordon = [
        m
        for m in node_events
        if m.endswith(f"cordoned: no new allocations: hardware fault: {telemetry[0].message}")
    ]
    assert cordon, node_events
    url = f"/inventory/nodes/{node.pk}/"
    _assert_timeline_in_chinese(_read(zh, url), expected + cordon, url)

    new = Node.objects.get(name="gpu-07")
    imported = list(DeviceEvent.objects.filter(node=new).values_list("message", flat=True))
    _assert_registered(imported)
    assert "node gpu-07 imported from the ledger CSV (line 3)" in imported, imported
    assert any(
        m.endswith(" imported from the ledger CSV (line 3)") and m.startswith("device ") for m in imported
    )
    url = f"/inventory/nodes/{new.pk}/"
    _assert_timeline_in_chinese(_read(zh, url), imported, url)

    found = "node gpu-09 found in Kubernetes by cluster sync (pool training, 2 cards)"
    assert DeviceEvent.objects.filter(node__name="gpu-09", message=found).exists()
    url = f"/clusters/{cluster.slug}/"
    body = _read(zh, url)
    drift = [
        "Kubernetes reports node gpu-01 NotReady (KubeletNotReady)",
        "node gpu-02 is in the ledger but Kubernetes no longer lists it",
    ]
    _assert_shown_in_chinese(body, drift, url)
    url = f"/inventory/nodes/{Node.objects.get(name='gpu-09').pk}/"
    _assert_timeline_in_chinese(_read(zh, url), [found], url)


def test_the_progress_of_a_month_close_reads_in_chinese_on_its_page_and_when_polled(zh, staff_user):
    from datetime import date

    from apps.billing.models import BillingPeriod
    from apps.billing.services import BILL_PROGRESS, MONTH_CLOSE_RUN_KIND
    from apps.core import runs

    text = BILL_PROGRESS % {"done": 2, "total": 7, "project": "vision"}
    run = runs.run_create(kind=MONTH_CLOSE_RUN_KIND, actor=staff_user, message=text)
    period = BillingPeriod.objects.create(month=date(2026, 9, 1), state="closing", close_run=run)
    _assert_registered([run.progress_message])
    url = f"/billing/console/periods/{period.pk}/"
    _assert_shown_in_chinese(_read(zh, url), [text], url)
    polled = zh.get(f"/runs/{run.pk}/", HTTP_ACCEPT_LANGUAGE="zh-hans").json()
    assert polled["message"] == _chinese(text) != text
    # The stored row keeps the English (the API and exports read it).
    assert BillingPeriod.objects.get(pk=period.pk).progress_message == text


def test_the_engine_explanations_and_trace_steps_are_registered_and_read_in_chinese():
    """Every explanation and trace step the engine writes (besides the device list of "assign") is
    made from an id of apps/scheduling/engine_texts.py and reads in Chinese: a gang too large, a
    mixed request placed across a switch and one no switch can hold, a request placed twice, a gang
    no single cluster can hold and one a cluster holds while another cannot."""
    from apps.scheduling.engine import DeviceGroup, DeviceState, Engine, NodeState, Request, Snapshot, Taint
    from tests.scheduling.test_engine import gpus, mixed_request, node, npu_devices, occupy, whole

    decisions = []
    snap = Snapshot([node(f"n{i}", gpus(f"n{i}", 4)) for i in range(3)])
    occupy(snap, "n2", 0)
    decisions.append(Engine("bestfit", seed=1).place(snap, Request("gang3", groups=(whole(4),), replicas=3)))
    decisions.append(Engine("bestfit", seed=1).place(snap, Request("gang2", groups=(whole(4),), replicas=2)))
    decisions.append(Engine("bestfit", seed=1).place(snap, Request("gang2", groups=(whole(4),), replicas=2)))
    npu_taint = [Taint("accelerator", "huawei-npu")]
    split = Snapshot(
        [
            node("gpu-1", gpus("gpu-1", 4), switch="leaf-1"),
            node("npu-1", npu_devices("npu-1"), switch="leaf-1", taints=npu_taint),
            node("gpu-2", gpus("gpu-2", 4), switch="leaf-2"),
        ]
    )
    decisions.append(Engine("slotfrag", seed=1).place(split, mixed_request()))
    apart = Snapshot(
        [
            node("gpu-1", gpus("gpu-1", 4), switch="leaf-1"),
            node("npu-2", npu_devices("npu-2"), switch="leaf-2", taints=npu_taint),
        ]
    )
    decisions.append(Engine("slotfrag", seed=1).place(apart, mixed_request()))

    def in_cluster(name: str, cluster: str, cards: int) -> NodeState:
        devices = [
            DeviceState(f"{name}-{i}", i, kind="gpu", vendor="nvidia", model="A100", memory_mib=65536)
            for i in range(cards)
        ]
        return NodeState(name, cpu_milli=64_000, memory_mib=512_000, devices=devices, cluster=cluster)

    clusters = Snapshot([in_cluster("a1", "east", 8), in_cluster("b1", "west", 8)])
    gang = Request("gang", replicas=2, groups=(DeviceGroup(count=8),))
    decisions.append(Engine(seed=1).place(clusters, gang))
    clusters.add_node(in_cluster("c1", "north", 8))
    clusters.add_node(in_cluster("c2", "north", 8))
    decisions.append(Engine(seed=1).place(clusters, gang))

    texts = []
    for decision in decisions:
        texts += [decision.explanation] if decision.explanation else []
        texts += [s.message for s in decision.steps if s.tier != "assign"]
    for wording in (
        "gang of 3 replicas: only 2 fit. ",
        "request gang2 is already placed",
        "placed across 2 node(s) under switch leaf-1; marked cross-node",
        " Fallback sameSwitch: no switch domain can host every part.",
        "no single cluster can hold the whole job (a job never spans clusters): ",
        "cluster north: preference ",
        "nodes pass the static filters",
        "(cross-node)",
    ):
        assert any(wording in t for t in texts), (wording, texts)
    _assert_registered(texts)
    english = [t for t in texts if _chinese(t) == t]
    assert not english, english


def test_a_runtime_precheck_refusal_reads_in_chinese_on_the_job_page(
    zh,
    fleet,
    member_project,
    a100,
):
    """The compatibility reason (apps/inventory/compat.py) inside the scheduler's explanation."""
    from apps.scheduling import lifecycle
    from apps.scheduling.services import scheduling_cycle_run

    user, project = member_project
    fields = dict(image="pytorch:2.3", request_kind="whole_cards", device_model=a100, count=4)
    lifecycle.job_submit(project=project, actor=user, name="one", runtime_requirement="cuda 12.4", **fields)
    scheduling_cycle_run()
    job = lifecycle.job_submit(
        project=project, actor=user, name="two", runtime_requirement="cuda 12.4", **fields
    )
    scheduling_cycle_run()
    job.refresh_from_db()
    assert job.state == "pending"
    assert "runtime precheck failed: driver 535.154.05 < 550.54.14 required by CUDA 12.4" in job.state_reason
    _assert_registered([job.state_reason])
    shown = _chinese(job.state_reason)
    assert "required by" not in shown and "runtime precheck" not in shown, shown
    url = f"/jobs/{job.pk}/"
    _assert_shown_in_chinese(_read(zh, url), [job.state_reason], url)
