"""Issue 27 §5: a proposal the snapshot refuses keeps that one job pending; the batch is placed.

Before: ``Engine.place`` applies its proposal inside the cycle and a ``CapacityError`` went up through
``scheduling_cycle_run``: the whole batch was rolled back, every cycle. The refusal here comes from a
real inconsistent snapshot, not from a mock: in the cycle's cached snapshot the A100 nodes the engine
reads (``Snapshot.nodes``) and the ones ``Snapshot.apply`` checks (``Snapshot.by_name``) disagree
about their cards — the cards changed between the engine's proposal and the apply.
"""

from __future__ import annotations

import pytest

from apps.jobs.models import Allocation, JobEvent, JobState
from apps.scheduling import services
from apps.scheduling.engine.model import Placement
from apps.scheduling.proposals import REFUSED
from apps.scheduling.snapshot import cycle_snapshot, snapshot_cache
from tests.fixtures.jobs import submit_whole_cards

pytestmark = pytest.mark.django_db


def _cards_taken_behind_the_engines_back(snapshot, node_name: str) -> None:
    """``by_name`` gets a copy of the node whose cards are all held whole; ``nodes`` keeps the old one."""
    twin = snapshot.copy().by_name[node_name]
    twin.pos = snapshot.by_name[node_name].pos
    for dev in twin.devices:
        dev.whole_by, dev.mem_used, dev.hard_used = "someone-else", dev.memory_mib, 1000
    snapshot.by_name[node_name] = twin


def test_a_refused_proposal_keeps_one_job_pending_and_the_rest_of_the_batch_is_placed(
    fleet, member_project, a100, ascend
):
    user, project = member_project
    snapshot_cache().invalidate()
    warm = submit_whole_cards(project, user, ascend, 1, name="warm")
    assert services.scheduling_cycle_run().placed_job_ids == [warm.pk]  # the cache is built
    with cycle_snapshot() as (snapshot, changes):
        assert changes is not None  # the process's cached snapshot, kept for the next cycle
        for name in ("gpu-01", "gpu-02"):
            _cards_taken_behind_the_engines_back(snapshot, name)

    refused = submit_whole_cards(project, user, a100, 1, name="refused")
    others = [submit_whole_cards(project, user, ascend, 2, name=f"npu{i}") for i in range(2)]
    result = services.scheduling_cycle_run()  # raised CapacityError: the batch was lost

    assert sorted(result.placed_job_ids) == sorted(j.pk for j in others)
    refused.refresh_from_db()
    assert refused.state == JobState.PENDING
    assert refused.state_reason.startswith(REFUSED.split("(")[0])
    assert "a whole card must be free and exclusive" in refused.state_reason
    event = JobEvent.objects.filter(job=refused, kind=JobEvent.Kind.PENDING).latest("pk")
    assert event.message == refused.state_reason
    assert not Allocation.objects.filter(job=refused).exists()
    for job in others:
        job.refresh_from_db()
        assert job.state == JobState.SCHEDULED
        assert Allocation.objects.filter(job=job, released_at__isnull=True).count() == 2
    # the inconsistent snapshot is not kept: the next cycle reads the cards from the database, and
    # the job (not parked: nothing it waits for is a capacity change) is placed then
    assert snapshot_cache().snapshot is None
    again = services.scheduling_cycle_run()
    assert again.snapshot_rebuilt
    assert refused.pk in again.placed_job_ids
    refused.refresh_from_db()
    assert refused.state == JobState.SCHEDULED


def test_a_refused_gang_probe_leaves_the_snapshot_as_it_was(fleet):
    # The engine's gang probes are applied one by one: a refusal of the second gives the first back.
    from apps.scheduling.engine import DeviceGroup, Engine, Request, Toleration
    from apps.scheduling.proposals import place_or_refuse
    from apps.scheduling.snapshot import fleet_snapshot

    snapshot = fleet_snapshot()
    _cards_taken_behind_the_engines_back(snapshot, "gpu-02")
    gang = Request(
        "gang",
        groups=(DeviceGroup(count=4, kind="gpu"),),
        replicas=2,
        tolerations=(Toleration("accelerator", "Exists"),),
    )
    before = {n.name: [(d.whole_by, d.mem_used) for d in n.devices] for n in snapshot.nodes}
    decision, refused = place_or_refuse(Engine("bestfit", tie_break="order"), snapshot, gang)
    assert refused and not decision.placed
    assert "a whole card must be free and exclusive" in decision.explanation
    assert {n.name: [(d.whole_by, d.mem_used) for d in n.devices] for n in snapshot.nodes} == before
    assert snapshot.placements == {} and not isinstance(decision.placement, Placement)
