"""A refused migration rollback names the real shortfall (issue 21, item 10 c): on the demo the
source track's cards sat on a node a failed gray batch had quarantined, and the refusal only said
"could reach only 1 of 2 replicas" while the fleet page showed free compute units."""

from __future__ import annotations

import pytest

from apps.core.errors import InsufficientCapacity
from apps.inventory.models import Node
from apps.jobs.models import Allocation
from apps.migration import services
from apps.migration.models import MigratedService
from apps.scheduling.faults import node_status_change
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards
from tests.fixtures.migration import samples

pytestmark = pytest.mark.django_db


@pytest.fixture
def shifted(dual, fleet, a100):
    """The service with all traffic on the target: the source keeps one A100 replica (the fallback)."""
    service, user, project = dual
    samples(service)
    services.service_promote(service=service, actor=user)
    MigratedService.objects.filter(pk=service.pk).update(capacity_replicas=2)
    service.refresh_from_db()
    services.service_shift(service=service, actor=user, target_weight=100)
    source = service.source_job
    held = set(
        Allocation.objects.filter(job=source, released_at__isnull=True).values_list("node__name", flat=True)
    )
    assert len(held) == 1
    return service, user, project, held.pop()


def test_a_refused_rollback_names_model_pool_needed_free_and_the_quarantined_node(shifted, fleet, a100):
    service, user, project, home = shifted
    other = "gpu-02" if home == "gpu-01" else "gpu-01"
    node_status_change(node=fleet[other], status=Node.Status.QUARANTINED, reason="PSU check", actor="ops")
    # Another job takes the three free A100 cards left on the source's node.
    filler = submit_whole_cards(project, user, a100, 3, name="filler", kind="training", image="pytorch:2.4")
    assert filler.pk in scheduling_cycle_run().placed_job_ids
    before = Allocation.objects.filter(released_at__isnull=True).count()

    with pytest.raises(InsufficientCapacity) as refused:
        services.service_rollback(service=service, actor=user, reason="p99 regression")

    message = refused.value.message
    assert message.startswith(
        "The source track (job chat-nvidia) could reach only 1 of 2 replicas; nothing was shifted."
    )
    assert (
        f"It needs 1 more whole {a100} card(s) in pool training and 0 of the 8 there are free "
        f"(the others: 4 busy, 4 on quarantined node(s) {other})." in message
    )
    details = refused.value.details["source"]
    assert details["wanted"] == 2 and details["reached"] == 1
    assert details["needed_cards"] == 1 and details["free_cards"] == 0 and details["total_cards"] == 8
    assert details["held"] == {"busy": 4, "quarantined_node": 4}
    assert details["quarantined_nodes"] == [other] and details["pools"] == ["training"]
    service.refresh_from_db()
    assert service.target_weight == 100
    assert Allocation.objects.filter(released_at__isnull=True).count() == before


@pytest.mark.parametrize(
    ("mine", "other", "free_then_busy"),
    [
        # A hard slice may not use the overcommit headroom: 500 hard beside 900 shared is 1,650 of 1,500.
        ("hard", "shared", (2, 1)),
        # A shared slice may: but beside 700 hard, 500 more shared is 1,550 of 1,500.
        ("shared", "hard", (2, 1)),
    ],
)
def test_a_slice_counts_a_card_free_only_when_the_share_fit_rule_lets_it_in(mine, other, free_then_busy):
    """The shortfall counts free cards by the scheduler's own share-fit rule (hard slices never use
    the pool's overcommit; memory never overcommitted), not by the card's total compute × factor."""
    from apps.migration.capacity import track_shortfall
    from tests.fixtures.factories.inventory import DeviceFactory, NodeFactory, PoolFactory
    from tests.fixtures.factories.jobs import AllocationFactory, JobFactory

    pool = PoolFactory(overcommit_factor="1.50")
    node = NodeFactory(pool=pool, cluster=pool.cluster)
    own, crowded, empty = (DeviceFactory(node=node) for _ in range(3))
    crowded.device_model = empty.device_model = own.device_model
    crowded.save(update_fields=["device_model"])
    empty.save(update_fields=["device_model"])
    job = JobFactory(state="running")
    AllocationFactory(job=job, device=own, compute_milli=500, isolation=mine)
    AllocationFactory(device=crowded, compute_milli=900 if other == "shared" else 700, isolation=other)

    short = track_shortfall(job=job, wanted=2, reached=1)

    assert (short.free, short.held["busy"]) == free_then_busy
    assert short.total == 3 and not short.whole and short.compute_milli == 500
