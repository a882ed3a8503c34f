"""The cycle's cached snapshot: changes made behind its back (another process, a raw UPDATE) are
applied incrementally or force a rebuild; it never places onto a card the database says is used."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from apps.inventory.models import Device, Node
from apps.jobs.models import Allocation, Job, JobState
from apps.scheduling import services
from apps.scheduling.snapshot import cycle_snapshot, fleet_snapshot, snapshot_cache
from tests.fixtures.jobs import submit_whole_cards, whole_card_allocation

pytestmark = pytest.mark.django_db


def _state(snapshot) -> dict:
    """Everything a placement depends on, per node and card."""
    out = {}
    for node in snapshot.nodes:
        out[node.name] = (
            node.status,
            node.pool,
            node.factor,
            tuple(sorted(str(t) for t in node.taints)),
            tuple(
                (d.id, d.whole_by, d.mem_used, d.hard_used, d.shared_used, d.healthy, d.schedulable, d.gray)
                for d in node.devices
            ),
        )
    return out


def _submit(project, user, model, count, name):
    return submit_whole_cards(project, user, model, count, name=name)


def _refresh():
    with cycle_snapshot() as (snapshot, changes):
        return snapshot, changes


def _foreign_allocation(job: Job, device: Device) -> Allocation:
    """What another scheduler process writes (this process's cache never saw it happen)."""
    return whole_card_allocation(job, device)


def test_refresh_without_changes_keeps_the_snapshot_and_matches_a_rebuild(fleet, member_project, a100):
    user, project = member_project
    _submit(project, user, a100, 2, "a")
    services.scheduling_cycle_run()
    first, _ = _refresh()
    rebuilds = snapshot_cache().stats["rebuilds"]
    again, changes = _refresh()
    assert again is first and not changes.rebuilt
    assert snapshot_cache().stats["rebuilds"] == rebuilds
    assert _state(again) == _state(fleet_snapshot())
    assert set(again.placements) == set(
        str(j) for j in Allocation.objects.filter(released_at__isnull=True).values_list("job_id", flat=True)
    )


def test_an_allocation_written_by_another_process_is_applied_and_its_cards_are_not_reused(
    fleet, member_project, a100
):
    user, project = member_project
    services.scheduling_cycle_run()  # warm the cache (empty queue: nothing built yet)
    _refresh()
    rebuilds = snapshot_cache().stats["rebuilds"]
    other = _submit(project, user, a100, 4, "other")
    Job.objects.filter(pk=other.pk).update(state=JobState.SCHEDULED)  # the other process's cycle
    for device in Device.objects.filter(node__name="gpu-01"):
        _foreign_allocation(other, device)
    mine = _submit(project, user, a100, 4, "mine")
    result = services.scheduling_cycle_run()
    assert result.placed_job_ids == [mine.pk]
    used = set(Allocation.objects.filter(job=mine).values_list("node__name", flat=True))
    assert used == {"gpu-02"}  # not onto gpu-01's cards, which the cache never saw being taken
    assert snapshot_cache().stats["rebuilds"] == rebuilds  # applied incrementally
    snapshot, _ = _refresh()
    assert _state(snapshot) == _state(fleet_snapshot())
    # A third 4-card A100 job has nowhere to go.
    third = _submit(project, user, a100, 4, "third")
    assert third.pk not in services.scheduling_cycle_run().placed_job_ids


def test_a_release_behind_the_caches_back_frees_the_cards(fleet, member_project, a100):
    user, project = member_project
    a = _submit(project, user, a100, 4, "a")
    b = _submit(project, user, a100, 4, "b")
    assert set(services.scheduling_cycle_run().placed_job_ids) == {a.pk, b.pk}
    c = _submit(project, user, a100, 4, "c")
    assert services.scheduling_cycle_run().placed == 0
    # Another process ends job a (a raw UPDATE, as a bulk release writes it).
    Allocation.objects.filter(job=a).update(released_at=timezone.now(), release_reason="finished")
    Job.objects.filter(pk=a.pk).update(state=JobState.SUCCEEDED)
    rebuilds = snapshot_cache().stats["rebuilds"]
    assert services.scheduling_cycle_run().placed_job_ids == [c.pk]
    assert snapshot_cache().stats["rebuilds"] == rebuilds
    snapshot, _ = _refresh()
    assert _state(snapshot) == _state(fleet_snapshot())


def test_card_health_and_cordon_changes_are_patched_without_a_rebuild(fleet, member_project, a100):
    user, project = member_project
    services.scheduling_cycle_run()
    _refresh()
    rebuilds = snapshot_cache().stats["rebuilds"]
    # No updated_at bump: the row hash still sees it.
    Device.objects.filter(node__name="gpu-01", index=0).update(health=Device.Health.LOST)
    Device.objects.filter(node__name="gpu-02", index=1).update(cordoned=True)
    snapshot, changes = _refresh()
    assert not changes.rebuilt and sorted(changes.nodes_patched) == ["gpu-01", "gpu-02"]
    assert snapshot_cache().stats["rebuilds"] == rebuilds
    assert _state(snapshot) == _state(fleet_snapshot())
    job = _submit(project, user, a100, 4, "four")
    assert job.pk not in services.scheduling_cycle_run().placed_job_ids  # no node has 4 usable cards


def test_a_node_added_is_applied_and_a_retired_node_forces_a_rebuild(fleet, member_project, a100):
    user, project = member_project
    services.scheduling_cycle_run()
    _refresh()
    gpu01 = Node.objects.get(name="gpu-01")
    node = Node.objects.create(
        cluster=gpu01.cluster, pool=gpu01.pool, name="gpu-03", driver_version="550.54.15", taints=gpu01.taints
    )
    for i in range(8):
        Device.objects.create(node=node, vendor="nvidia", index=i, device_model=a100, uuid=f"GPU-03-{i}")
    rebuilds = snapshot_cache().stats["rebuilds"]
    snapshot, changes = _refresh()
    assert changes.nodes_added == ["gpu-03"] and not changes.rebuilt
    assert snapshot_cache().stats["rebuilds"] == rebuilds
    assert _state(snapshot) == _state(fleet_snapshot())
    job = _submit(project, user, a100, 8, "eight")
    assert job.pk in services.scheduling_cycle_run().placed_job_ids
    assert set(Allocation.objects.filter(job=job).values_list("node__name", flat=True)) == {"gpu-03"}

    Node.objects.filter(name="gpu-02").update(status=Node.Status.RETIRED)
    snapshot, changes = _refresh()
    assert changes.rebuilt and "retired" in changes.reason
    assert "gpu-02" not in snapshot.by_name
    assert _state(snapshot) == _state(fleet_snapshot())


def test_a_card_removed_or_a_pool_changed_rebuilds(fleet, member_project, a100):
    services.scheduling_cycle_run()
    _refresh()
    Device.objects.filter(node__name="gpu-01", index=3).update(health=Device.Health.RETIRED)
    snapshot, changes = _refresh()
    assert changes.rebuilt and "hardware" in changes.reason
    assert len(snapshot.by_name["gpu-01"].devices) == 3
    node = Node.objects.get(name="gpu-01")
    node.pool.overcommit_factor = Decimal("1.5")
    node.pool.save()
    snapshot, changes = _refresh()
    assert changes.rebuilt and snapshot.by_name["gpu-01"].factor == 150


def test_placements_the_database_does_not_hold_are_released(fleet, member_project, a100):
    """A placement left in the snapshot that no allocation backs (a cycle's own rows released or
    deleted before the next diff saw them, a persist that rolled back without the cache noticing) is
    released by the next refresh, its cards freed, without a rebuild."""
    user, project = member_project
    job = _submit(project, user, a100, 1, "ghost")
    snapshot, _ = _refresh()
    engine = services.Engine(policy=services.BEST)
    request = services.job_requests(Job.objects.get(pk=job.pk))[0][0]
    assert engine.place(snapshot, request, commit=True).placed  # in memory only
    snapshot, changes = _refresh()
    assert not changes.rebuilt and str(job.pk) in changes.released_jobs
    assert str(job.pk) not in snapshot.placements and changes.freed


def test_a_failed_cycle_drops_the_cache(fleet, member_project, a100, monkeypatch):
    user, project = member_project
    _submit(project, user, a100, 1, "x")

    def boom(*args, **kwargs):
        raise RuntimeError("database went away")

    monkeypatch.setattr(services, "_persist", boom)
    with pytest.raises(RuntimeError):
        services.scheduling_cycle_run()
    assert snapshot_cache().snapshot is None
    monkeypatch.undo()
    result = services.scheduling_cycle_run()
    assert result.placed == 1 and result.snapshot_rebuilt
