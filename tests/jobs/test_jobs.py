"""Submission, the scheduling cycle, traces, cancel and release — through the API and the services."""

from __future__ import annotations

import threading
from collections import defaultdict

import pytest
from django.db import connection

from apps.core.errors import PermissionDenied, ValidationFailed
from apps.jobs.models import Allocation, Job, JobEvent, JobState
from apps.scheduling.lifecycle import job_finish, job_submit
from apps.scheduling.models import DecisionTrace
from apps.scheduling.services import queue_position, scheduling_cycle_run
from tests.fixtures.accounts import set_role

pytestmark = pytest.mark.django_db


def submit(project, user, **fields):
    fields.setdefault("name", "job")
    fields.setdefault("image", "pytorch:2.3")
    return job_submit(project=project, actor=user, **fields)


def test_a_member_submits_through_the_api_and_the_cycle_schedules_it(api_client, fleet, member_project, a100):
    user, project = member_project
    api_client.force_authenticate(user)
    response = api_client.post(
        "/api/jobs/jobs/",
        {
            "project": "vision",
            "name": "llm",
            "image": "pytorch:2.3",
            "request_kind": "whole_cards",
            "device_model": a100.slug,
            "count": 4,
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["state"] == "pending" and body["requested_cu"] == "4.0000"
    result = scheduling_cycle_run()
    assert result.placed == 1
    job = Job.objects.get(pk=body["id"])
    assert job.state == JobState.SCHEDULED
    allocations = list(Allocation.objects.filter(job=job))
    assert len(allocations) == 4 and all(a.whole_card and a.compute_milli == 1000 for a in allocations)
    assert len({a.node_id for a in allocations}) == 1  # four cards of one NVLink group, one node
    trace = api_client.get(f"/api/jobs/jobs/{job.pk}/trace/").json()
    assert trace["outcome"] == "placed" and trace["steps"] and trace["queue_position"] is None
    assert str(job.last_trace_id) == trace["trace_id"]


def test_a_runtime_requirement_keeps_the_job_off_nodes_whose_driver_is_too_old(fleet, member_project, a100):
    user, project = member_project
    job = submit(
        project, user, request_kind="whole_cards", device_model=a100, count=4, runtime_requirement="cuda 12.4"
    )
    scheduling_cycle_run()
    nodes = set(Allocation.objects.filter(job=job).values_list("node__name", flat=True))
    assert nodes == {"gpu-01"}
    second = submit(
        project,
        user,
        name="two",
        request_kind="whole_cards",
        device_model=a100,
        count=4,
        runtime_requirement="cuda 12.4",
    )
    scheduling_cycle_run()
    second.refresh_from_db()
    assert second.state == JobState.PENDING
    assert "driver 535.154.05 < 550.54.14 required by CUDA 12.4" in second.state_reason
    assert "0/3 nodes are available" in second.state_reason


def test_why_pending_names_the_reasons_and_the_queue_position(api_client, fleet, member_project, a100):
    user, project = member_project
    for i in range(3):
        submit(project, user, name=f"big{i}", request_kind="whole_cards", device_model=a100, count=4)
    scheduling_cycle_run()
    waiting = Job.objects.get(name="big2")
    assert waiting.state == JobState.PENDING
    api_client.force_authenticate(user)
    trace = api_client.get(f"/api/jobs/jobs/{waiting.pk}/trace/").json()
    assert trace["outcome"] == "pending"
    assert trace["queue_position"] == 1
    assert "nodes are available" in trace["explanation"]
    # Another cycle with the same answer writes no new trace or event.
    traces, events = DecisionTrace.objects.count(), JobEvent.objects.count()
    scheduling_cycle_run()
    assert (DecisionTrace.objects.count(), JobEvent.objects.count()) == (traces, events)


def test_shared_slices_pack_onto_one_card_and_never_exceed_it(fleet, member_project, half_a100):
    user, project = member_project
    jobs = [
        submit(project, user, name=f"s{i}", request_kind="template", template=half_a100) for i in range(3)
    ]
    scheduling_cycle_run()
    per_device = defaultdict(int)
    for a in Allocation.objects.filter(released_at__isnull=True):
        per_device[a.device_id] += a.memory_mib
        assert not a.whole_card and a.isolation == "shared"
    assert all(total <= 81920 for total in per_device.values())
    assert min(per_device.values()) >= 40960
    assert sum(1 for j in jobs if Job.objects.get(pk=j.pk).state == JobState.SCHEDULED) == 3


def test_cancel_releases_the_cards_and_a_finished_job_releases_them_too(
    api_client, fleet, member_project, a100
):
    user, project = member_project
    job = submit(project, user, request_kind="whole_cards", device_model=a100, count=2)
    scheduling_cycle_run()
    api_client.force_authenticate(user)
    response = api_client.post(f"/api/jobs/jobs/{job.pk}/cancel/", {"reason": "wrong image"}, format="json")
    assert response.status_code == 200 and response.json()["state"] == "cancelled"
    # Issue 17: queued for Kubernetes, so the cards are releasing until the deletion is confirmed.
    live = Allocation.objects.filter(job=job, released_at__isnull=True)
    assert live.count() == 2 and not live.filter(releasing_since__isnull=True).exists()
    again = api_client.post(f"/api/jobs/jobs/{job.pk}/cancel/", {}, format="json")
    assert again.status_code == 409
    other = submit(project, user, name="done", request_kind="whole_cards", device_model=a100, count=1)
    scheduling_cycle_run()
    other.refresh_from_db()
    assert job_finish(job=other, succeeded=True, actor="worker") is True
    assert job_finish(job=other, succeeded=True, actor="worker") is False
    assert not Allocation.objects.filter(job=other, released_at__isnull=True).exists()


def test_compute_units_choose_a_vendor_at_the_coefficient_rate(fleet, member_project):
    user, project = member_project
    job = submit(project, user, request_kind="compute_units", compute_units="1.6", allowed_vendors=["huawei"])
    assert str(job.requested_cu) == "1.6000"
    scheduling_cycle_run()
    allocations = list(Allocation.objects.filter(job=job))
    assert len(allocations) == 2 and all(a.device.vendor == "huawei" and a.whole_card for a in allocations)


def test_an_impossible_request_is_a_400_naming_why(api_client, fleet, member_project, a100):
    user, project = member_project
    with pytest.raises(ValidationFailed) as excinfo:
        submit(project, user, request_kind="whole_cards", device_model=a100, count=16)
    assert "could ever satisfy" in excinfo.value.message
    api_client.force_authenticate(user)
    response = api_client.post(
        "/api/jobs/jobs/",
        {
            "project": "vision",
            "name": "x",
            "image": "x",
            "request_kind": "compute_units",
            "compute_units": "0",
        },
        format="json",
    )
    assert response.status_code == 400
    assert "compute_units" in response.json()["error"]["details"]
    assert Job.objects.count() == 0


def test_more_compute_units_than_any_node_has_says_so_not_a_model_it_tried(fleet, member_project):
    """Issue 29 §9: a 1000 CU request was refused naming "no gpu of model A100 …"."""
    user, project = member_project
    with pytest.raises(ValidationFailed) as excinfo:
        submit(project, user, request_kind="compute_units", compute_units="1000")
    message = excinfo.value.message
    assert "1000 CU is more than any node can give one replica" in message
    assert "the most is 6.4 CU (8 × Ascend 910B3 on npu-01)" in message  # 0.8 CU × 8 beats 1.0 × 4
    assert "of model" not in message
    assert Job.objects.count() == 0


def test_memory_is_echoed_as_it_was_asked(fleet, member_project):
    """Issue 29 §9: 5000 GiB was echoed as "5120000 MiB"."""
    user, project = member_project
    with pytest.raises(ValidationFailed) as excinfo:
        submit(project, user, request_kind="compute_units", compute_units="0.5", memory_mib=5000 * 1024)
    assert "0.5 CU with 5000 GiB" in excinfo.value.message and "MiB" not in excinfo.value.message


def test_viewers_and_outsiders_cannot_submit(api_client, fleet, member_project, make_user, a100):
    user, project = member_project
    set_role(user, project, "viewer")
    with pytest.raises(PermissionDenied):
        submit(project, user, request_kind="whole_cards", device_model=a100, count=1)
    outsider = make_user("eve")
    api_client.force_authenticate(outsider)
    response = api_client.post(
        "/api/jobs/jobs/",
        {
            "project": "vision",
            "name": "x",
            "image": "x",
            "request_kind": "whole_cards",
            "device_model": a100.slug,
        },
        format="json",
    )
    assert response.status_code == 400
    assert "project" in response.json()["error"]["details"]
    assert api_client.get("/api/jobs/jobs/").json()["count"] == 0


def test_queue_order_is_priority_then_age(fleet, member_project, a100):
    user, project = member_project
    low = submit(
        project,
        user,
        name="low",
        request_kind="whole_cards",
        device_model=a100,
        count=1,
        priority_class="low",
    )
    high = submit(
        project,
        user,
        name="high",
        request_kind="whole_cards",
        device_model=a100,
        count=1,
        priority_class="high",
    )
    assert queue_position(high) == 1 and queue_position(low) == 2


def test_job_list_query_count_does_not_grow(api_client, fleet, member_project, a100):
    from django.test.utils import CaptureQueriesContext

    user, project = member_project
    api_client.force_authenticate(user)

    def count(n: int) -> int:
        for i in range(Job.objects.count(), n):
            submit(project, user, name=f"j{i}", request_kind="whole_cards", device_model=a100, count=1)
        with CaptureQueriesContext(connection) as ctx:
            assert api_client.get("/api/jobs/jobs/?page_size=100").status_code == 200
        return len(ctx.captured_queries)

    assert count(2) == count(12)


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_cycles_never_double_allocate(fleet, member_project, a100, half_a100):
    user, project = member_project
    for i in range(10):
        submit(project, user, name=f"w{i}", request_kind="whole_cards", device_model=a100, count=1)
        submit(project, user, name=f"s{i}", request_kind="template", template=half_a100)
    barrier = threading.Barrier(2)
    errors = []

    def run():
        try:
            barrier.wait(timeout=10)
            scheduling_cycle_run()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    usage = defaultdict(lambda: [0, 0, 0])
    for a in Allocation.objects.filter(released_at__isnull=True):
        u = usage[a.device_id]
        u[0] += a.memory_mib
        u[1] += a.compute_milli
        u[2] += 1 if a.whole_card else 0
        if a.whole_card:
            assert Allocation.objects.filter(device_id=a.device_id, released_at__isnull=True).count() == 1
    assert all(u[0] <= 81920 and u[1] <= 1000 for u in usage.values())
    # Every job is either scheduled with allocations or still pending without any.
    for job in Job.objects.all():
        has = Allocation.objects.filter(job=job, released_at__isnull=True).exists()
        assert has == (job.state == JobState.SCHEDULED)
    # 8 A100 cards: 8 whole cards or half-card pairs fit, never more.
    assert Allocation.objects.filter(released_at__isnull=True).values("device_id").distinct().count() <= 8


def test_a_placement_from_a_stale_snapshot_is_refused_under_the_lock(
    fleet, member_project, a100, monkeypatch
):
    """The engine saw the fleet before another cycle committed: the row-locked re-check catches it."""
    from apps.scheduling import services
    from apps.scheduling.snapshot import fleet_snapshot

    user, project = member_project
    stale = fleet_snapshot()  # taken while every card is free
    for name in ("first", "second"):
        submit(project, user, name=name, request_kind="whole_cards", device_model=a100, count=4)
    scheduling_cycle_run()
    assert Job.objects.filter(state=JobState.SCHEDULED).count() == 2
    late = submit(project, user, name="late", request_kind="whole_cards", device_model=a100, count=4)
    from contextlib import contextmanager

    @contextmanager
    def stale_snapshot():  # the cycle's snapshot (issue 20: cached between cycles) is out of date
        yield stale, None

    monkeypatch.setattr(services, "cycle_snapshot", stale_snapshot)
    result = scheduling_cycle_run()
    assert (result.placed, result.conflicts) == (0, 1)
    late.refresh_from_db()
    assert late.state == JobState.PENDING
    assert not Allocation.objects.filter(job=late).exists()
    assert DecisionTrace.objects.filter(job=late, outcome="conflict").count() == 1


def test_a_card_that_runs_a_job_cannot_be_retired_until_it_is_released(fleet, member_project, a100):
    from apps.core.errors import InvalidTransition
    from apps.inventory.models import Device
    from apps.inventory.services.ledger import device_retire
    from apps.scheduling.allocations import allocations_release

    user, project = member_project
    job = submit(project, user, name="busy", request_kind="whole_cards", device_model=a100, count=1)
    scheduling_cycle_run()
    device = Allocation.objects.get(job=job).device
    with pytest.raises(InvalidTransition, match="vision/busy"):
        device_retire(device=device, reason="end of life", actor="ops")
    assert Device.objects.get(pk=device.pk).health == "healthy"
    allocations_release(job=job, reason="done", actor="test")
    device_retire(device=device, reason="end of life", actor="ops")
    assert Device.objects.get(pk=device.pk).health == "retired"
