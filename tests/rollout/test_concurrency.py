"""Two batches sharing a node start their soaks at the same moment: exactly one wins."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from apps.core.errors import Conflict
from apps.rollout import services
from apps.rollout.models import GrayBatch


@pytest.mark.django_db(transaction=True)
def test_two_batches_on_one_node_never_soak_together(fleet, criteria):
    batches = [
        services.batch_create(
            actor="ops",
            name=f"race-{i}",
            slug=f"race-{i}",
            kind="driver",
            target_version=str(i),
            criteria=criteria,
            nodes=[fleet["gpu-01"], fleet["gpu-02"]] if i else [fleet["gpu-02"], fleet["gpu-01"]],
        )
        for i in range(2)
    ]
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def start(batch) -> None:
        try:
            barrier.wait(timeout=10)
            services.batch_soak_start(batch=batch, actor="ops")
            outcomes.append("started")
        except Conflict as exc:
            outcomes.append(f"refused: {exc.message}")
        finally:
            connection.close()

    threads = [threading.Thread(target=start, args=(b,)) for b in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(o.split(":")[0] for o in outcomes) == ["refused", "started"], outcomes
    assert GrayBatch.objects.filter(stage="soaking").count() == 1
