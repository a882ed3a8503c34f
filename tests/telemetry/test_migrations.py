"""Migration 0005 backfills the fleet rollups from the card rollups already stored."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("telemetry", "0004_rollup_recent_index")]
AFTER = [("telemetry", "0005_fleet_rollup")]


@pytest.mark.django_db(transaction=True)
def test_0005_backfills_fleet_rollups_from_card_rollups():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    # The ledger's tables stay at their newest migration (only telemetry went back): read them with
    # that state, so a column added there since (NOT NULL, no database default) gets its value.
    inventory_now = executor.loader.graph.leaf_nodes("inventory")
    old = executor.loader.project_state(BEFORE + inventory_now).apps
    Cluster, Pool, Node = (old.get_model("inventory", n) for n in ("Cluster", "Pool", "Node"))
    Device, DeviceModel = old.get_model("inventory", "Device"), old.get_model("catalog", "DeviceModel")
    DeviceRollup = old.get_model("telemetry", "DeviceRollup")
    cluster = Cluster.objects.create(name="c", slug="c")
    node = Node.objects.create(
        cluster=cluster, pool=Pool.objects.create(cluster=cluster, name="p", slug="p"), name="n1"
    )
    a100 = DeviceModel.objects.create(vendor="nvidia", kind="gpu", name="A100", slug="a100", memory_mib=81920)
    cards = [
        Device.objects.create(node=node, vendor="nvidia", index=0, uuid="GPU-0", device_model=a100),
        Device.objects.create(node=node, vendor="nvidia", index=1, uuid="GPU-1", device_model=a100),
        Device.objects.create(
            node=node, vendor="huawei", index=2, uuid="NPU-2", raw_model_name="Ascend 910B"
        ),
    ]
    w = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)
    for i, (card, util, quality, partition) in enumerate(
        [
            (cards[0], 30.0, "exact", ""),
            (cards[1], 50.0, "estimated", ""),
            (cards[2], 70.0, "exact", ""),
            (cards[0], 99.0, "exact", "3g.40gb/1"),
        ]  # a MIG instance: not a whole card, not counted
    ):
        DeviceRollup.objects.create(
            device=card,
            partition=partition,
            resolution=300,
            window_start=w,
            source="s",
            quality=quality,
            sample_count=10,
            first_sample_at=w,
            last_sample_at=w + timedelta(seconds=i + 1),
            util_sum=util * 10,
            util_n=10,
            util_avg=util,
            util_max=util + 1,
        )
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps
    rows = sorted(
        new.get_model("telemetry", "FleetRollup").objects.values_list(
            "resolution",
            "window_start",
            "source",
            "node_id",
            "vendor",
            "model_label",
            "cards",
            "estimated",
            "util_sum",
            "util_n",
            "util_max",
        )
    )
    assert rows == [
        (300, w, "s", node.pk, "huawei", "Ascend 910B", 1, 0, 700.0, 10, 71.0),
        (300, w, "s", node.pk, "nvidia", "A100", 2, 1, 800.0, 20, 51.0),
    ]
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
