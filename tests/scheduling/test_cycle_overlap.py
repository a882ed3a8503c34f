"""The engine decides in a thread of its own while the cycle persists its first batches
(``apps.scheduling.pipeline``, issue 31 §2): the decisions are the same as a single pass's, a placement
dropped at persist time goes back to the snapshot only once every job was decided, a failure in the
thread reaches the caller with the thread ended, and the thread cannot query the database."""

from __future__ import annotations

import random
import sys
import threading
from functools import partial

import pytest

from apps.jobs.models import Allocation
from apps.scheduling import pipeline, services
from apps.scheduling.invariants import allocation_capacity_violations, project_cu_overruns
from apps.scheduling.pipeline import DecisionStream
from apps.scheduling.snapshot import snapshot_cache
from tests.scheduling.test_cycle_decisions import _bench, _decisions

pytestmark = pytest.mark.django_db


def _fleet_and_queue():
    bench = _bench()
    models, templates, projects = bench.build_fleet(24)
    bench.queue_jobs(models, templates, projects, random.Random(5), n_jobs=160)
    return bench


def _threads_seen(monkeypatch) -> list[str]:
    seen: list[str] = []
    work = DecisionStream._work

    def spy(self, *args):
        seen.append(threading.current_thread().name)
        return work(self, *args)

    monkeypatch.setattr(DecisionStream, "_work", spy)
    return seen


def test_decided_in_a_thread_or_in_one_pass_the_cycle_decides_alike(settings, monkeypatch):
    monkeypatch.setattr(services, "Engine", partial(services.Engine, seed=3))
    bench = _fleet_and_queue()
    seen = _threads_seen(monkeypatch)
    threaded = services.scheduling_cycle_run(batch=16)
    assert seen == ["scheduling-engine"]  # 160 jobs in batches of 16: decided in the engine's thread
    # the benchmark's Ascend fractions are refused at render time: placements dropped at persist
    assert threaded.placed > 0 and threaded.released_in_cycle
    assert not allocation_capacity_violations() and not project_cu_overruns()
    first = _decisions()

    bench.reset_schedule()
    services.unschedulable_queue().clear()
    snapshot_cache().invalidate()
    settings.SUANCHI = {**settings.SUANCHI, "SCHEDULER_OVERLAP": False}
    single = services.scheduling_cycle_run(batch=16)
    assert seen == ["scheduling-engine"]  # no thread this time
    assert (single.placed, single.pending, len(single.released_in_cycle)) == (
        threaded.placed,
        threaded.pending,
        len(threaded.released_in_cycle),
    )
    assert _decisions() == first


def test_a_failure_in_the_engine_thread_reaches_the_caller_with_the_thread_ended(monkeypatch):
    _fleet_and_queue()
    place = services._place_job
    calls = []

    def fail_late(*args, **kwargs):
        calls.append(1)
        if len(calls) == 40:
            raise RuntimeError("engine failed")
        return place(*args, **kwargs)

    monkeypatch.setattr(services, "_place_job", fail_late)
    interval = sys.getswitchinterval()
    with pytest.raises(RuntimeError, match="engine failed"):
        services.scheduling_cycle_run(batch=16)
    assert not [t for t in threading.enumerate() if t.name == "scheduling-engine"]
    assert sys.getswitchinterval() == interval
    # the batches decided before the failure were persisted, nothing after them
    assert Allocation.objects.exists()
    assert len(calls) == 40


def test_the_engine_thread_cannot_query_the_database():
    def decide(item):
        return Allocation.objects.count()

    stream = DecisionStream(decide, list(range(6)), 2, threaded=True)
    assert stream.threaded
    with pytest.raises(RuntimeError, match="must not query"):
        list(stream.batches())


def test_one_batch_is_decided_without_a_thread():
    stream = DecisionStream(lambda item: threading.current_thread().name, list(range(5)), 8, threaded=True)
    assert not stream.threaded
    assert list(stream.batches()) == [[threading.main_thread().name] * 5]
    assert sys.getswitchinterval() > pipeline.SWITCH_INTERVAL_S
