"""Fault handling: the runbook as data, per-card cordon, the gray-release pool (opt-in only)."""

from __future__ import annotations

import pytest

from apps.core.errors import ValidationFailed
from apps.inventory.models import Device, DeviceEvent
from apps.inventory.services.ledger import device_cordon, device_pool_status_set
from apps.jobs.models import Allocation, JobState
from apps.scheduling.faults import classify_failure, is_hardware_fault, runbook, runbook_entry
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards

pytestmark = pytest.mark.django_db


def whole(project, user, model, name="j", **extra):
    return submit_whole_cards(project, user, model, name=name, image="pytorch:2.3", **extra)


def test_the_runbook_holds_the_seed_table_in_both_languages():
    keys = [e.key for e in runbook()]
    assert keys == [
        "runtime_mismatch",
        "device_not_visible",
        "topology_slow",
        "out_of_memory",
        "device_lost",
        "colocation_interference",
    ]
    for entry in runbook():
        for field in ("symptom", "causes", "checks", "fixes"):
            assert entry.text(field, "zh") and entry.text(field, "en")
    assert runbook_entry("runtime_mismatch").text("symptom", "zh-hans") == "容器启动报CUDA版本不匹配"
    assert is_hardware_fault("device_lost") and not is_hardware_fault("out_of_memory")
    assert not is_hardware_fault("")


def test_classification_prefers_hardware_and_leaves_the_unknown_alone():
    assert classify_failure("Xid 79: GPU has fallen off the bus; CUDA error: out of memory") == "device_lost"
    assert classify_failure("CUDA error: out of memory") == "out_of_memory"
    assert classify_failure("NCCL watchdog timeout after 1800000 ms") == "topology_slow"
    assert classify_failure("Segmentation fault", 139) == ""


def test_a_cordoned_card_takes_nothing_new_while_its_job_runs_on(fleet, member_project, a100):
    user, project = member_project
    first = whole(project, user, a100, "first")
    scheduling_cycle_run()
    running = Allocation.objects.get(job=first)
    cordoned = Device.objects.filter(vendor="nvidia").exclude(pk=running.device_id).order_by("pk").first()
    device_cordon(device=cordoned, cordoned=True, reason="ECC errors rising", actor="ops")
    device_cordon(device=Device.objects.get(pk=running.device_id), cordoned=True, reason="fan", actor="ops")
    jobs = [whole(project, user, a100, f"j{i}") for i in range(7)]
    scheduling_cycle_run()
    first.refresh_from_db()
    assert first.state == JobState.SCHEDULED
    assert Allocation.objects.filter(job=first, released_at__isnull=True).count() == 1  # untouched
    placed = Allocation.objects.filter(job__in=jobs, released_at__isnull=True)
    assert placed.count() == 6  # 8 cards − the busy one − the free cordoned one
    assert not placed.filter(device=cordoned).exists()
    event = DeviceEvent.objects.filter(device=cordoned, kind=DeviceEvent.Kind.CORDON).get()
    assert "ECC errors rising" in event.message

    device_cordon(device=cordoned, cordoned=False, actor="ops")
    scheduling_cycle_run()
    assert Allocation.objects.filter(device=cordoned, released_at__isnull=True).count() == 1


def test_cordon_needs_a_reason_and_is_staff_only(fleet, api_client, staff_user, member_project):
    device = Device.objects.filter(vendor="nvidia").first()
    with pytest.raises(ValidationFailed, match="a reason is required"):
        device_cordon(device=device, cordoned=True, actor="ops")
    user, _project = member_project
    api_client.force_authenticate(user)
    url = f"/api/inventory/devices/{device.pk}/cordon/"
    assert api_client.post(url, {"cordoned": True, "reason": "x"}, format="json").status_code == 403
    api_client.force_authenticate(staff_user)
    answer = api_client.post(url, {"cordoned": True}, format="json")
    assert answer.status_code == 400 and "reason" in answer.json()["error"]["details"]
    answer = api_client.post(url, {"cordoned": True, "reason": "thermal"}, format="json")
    assert answer.status_code == 200 and answer.json()["cordoned"] is True
    device.refresh_from_db()
    assert device.cordoned and device.cordon_reason == "thermal"


def test_gray_cards_serve_only_opted_in_jobs(fleet, member_project, a100):
    user, project = member_project
    for device in Device.objects.filter(node__name="gpu-02"):
        device_pool_status_set(device=device, pool_status=Device.PoolStatus.GRAY, actor="rollout")
    plain = [whole(project, user, a100, f"p{i}") for i in range(5)]
    scheduling_cycle_run()
    nodes = set(Allocation.objects.filter(job__in=plain).values_list("node__name", flat=True))
    assert nodes == {"gpu-01"}
    waiting = [j for j in plain if Allocation.objects.filter(job=j).count() == 0]
    assert len(waiting) == 1
    waiting[0].refresh_from_db()
    assert "gray-release" in waiting[0].state_reason

    canary = whole(project, user, a100, "canary", gray_opt_in=True)
    scheduling_cycle_run()
    assert Allocation.objects.get(job=canary).node.name == "gpu-02"


def test_a_failed_job_page_shows_its_runbook_entry(client, fleet, member_project, a100):
    from apps.jobs.models import Job

    user, project = member_project
    job = whole(project, user, a100)
    Job.objects.filter(pk=job.pk).update(state=JobState.FAILED, failure_class="runtime_mismatch")
    client.force_login(user)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert (
        "Container start fails: CUDA version mismatch" in page and "/jobs/runbook/#runtime_mismatch" in page
    )
    page = client.get("/jobs/runbook/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "容器启动报CUDA版本不匹配" in page and 'id="device_lost"' in page
