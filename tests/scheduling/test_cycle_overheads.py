"""What the cycle saves besides deciding (issue 31 §2): no garbage collection while it runs (the
collector's state given back however it ends), and a snapshot built straight from the rows, where
cards alike share what their model makes of them and each keeps its own state."""

from __future__ import annotations

import gc

import pytest

from apps.inventory.models import Device, Node
from apps.scheduling import services
from apps.scheduling.snapshot import collector_paused, fleet_snapshot
from tests.fixtures.jobs import submit_whole_cards

pytestmark = pytest.mark.django_db


@pytest.fixture
def collector_on():
    enabled = gc.isenabled()
    gc.enable()
    yield
    if not enabled:
        gc.disable()


def test_the_cycle_runs_without_collection_and_gives_it_back(
    collector_on, fleet, member_project, a100, monkeypatch
):
    user, project = member_project
    job = submit_whole_cards(project, user, a100, 1, name="gc")
    seen = []
    decide = services._decide

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return decide(*args, **kwargs)

    monkeypatch.setattr(services, "_decide", spy)
    result = services.scheduling_cycle_run()
    assert result.placed_job_ids == [job.pk]
    assert seen == [False]
    assert gc.isenabled()


def test_a_failed_cycle_gives_the_collector_back(collector_on, fleet, member_project, a100, monkeypatch):
    user, project = member_project
    submit_whole_cards(project, user, a100, 1, name="boom")

    def fail(*args, **kwargs):
        raise RuntimeError("engine failed")

    monkeypatch.setattr(services, "_decide", fail)
    with pytest.raises(RuntimeError):
        services.scheduling_cycle_run()
    assert gc.isenabled()


def test_a_collector_paused_by_the_caller_stays_paused(collector_on):
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()  # not switched on behind the caller's back
    gc.enable()
    with collector_paused(), collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_cards_alike_share_their_model_and_keep_their_own_state(fleet, make_project):
    gpu = fleet["gpu-01"]
    Node.objects.filter(pk=gpu.pk).update(rdma_nics=[{"name": "mlx5_0"}])
    owner = make_project("own")
    cards = list(Device.objects.filter(node=gpu).order_by("index"))
    Device.objects.filter(pk=cards[1].pk).update(cordoned=True)
    Device.objects.filter(pk=cards[2].pk).update(pool_status=Device.PoolStatus.GRAY, owner_project=owner)
    Device.objects.filter(pk=cards[3].pk).update(health=Device.Health.DEGRADED, topology_group="")

    node = fleet_snapshot().by_name["gpu-01"]
    first, cordoned, gray, failed = node.devices
    assert first.features == frozenset({"mig", "nvlink", "rdma"})
    assert failed.features == first.features
    assert (first.kind, first.model, first.memory_mib) == ("gpu", "A100 80GB SXM4", 81920)
    assert first.mig is not None and first.mig is cordoned.mig  # the model's geometry, shared
    assert [d.schedulable for d in node.devices] == [True, False, True, True]
    assert [d.gray for d in node.devices] == [False, False, True, False]
    assert [d.healthy for d in node.devices] == [True, True, True, False]
    assert [d.owner_project for d in node.devices] == [None, None, "own", None]
    assert [d.index for d in node.devices] == [0, 1, 2, 3]
    assert [d.id for d in node.devices] == [str(c.pk) for c in cards]
    # a different node's cards: no RDMA there; a card's link feature comes with its topology group
    assert "rdma" not in fleet_snapshot().by_name["gpu-02"].devices[0].features
    npu = list(Device.objects.filter(node=fleet["npu-01"]).order_by("index"))
    Device.objects.filter(pk=npu[0].pk).update(topology_group="")
    linked = [d.features for d in fleet_snapshot().by_name["npu-01"].devices]
    assert linked[0] == frozenset() and linked[1] == frozenset({"hccs"}) and linked[2] is linked[1]

    # "could this ever fit": transient state ignored, the permanent kept; gray only for who opted in
    empty = fleet_snapshot(empty=True).by_name["gpu-01"]
    assert all(d.schedulable and d.healthy and not d.gray for d in empty.devices)
    assert [d.owner_project for d in empty.devices] == [None, None, "own", None]
    assert [d.gray for d in fleet_snapshot(gray_opt_in=True).by_name["gpu-01"].devices] == [False] * 4
