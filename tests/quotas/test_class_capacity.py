"""The quota book's capacity per class: counted per node from the capacity index, the same numbers as
the per-card join it replaced (lost and retired cards, retired nodes, several pools and models)."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from django.db.models import Count

from apps.inventory.models import Device, Node
from apps.quotas.book import _usable_card_counts, class_capacity, device_classes
from tests.inventory.test_pages import make_cluster, make_device, make_node, make_pool


def _per_card_join():
    """The query class_capacity ran before (every card joined to its node, grouped)."""
    return sorted(
        Device.objects.exclude(health__in=[Device.Health.LOST, Device.Health.RETIRED])
        .exclude(node__status="retired")
        .order_by()
        .values_list("vendor", "device_model_id", "node__pool_id")
        .annotate(cards=Count("pk")),
        key=repr,
    )


def _fleet(a100, ascend):
    cluster = make_cluster()
    train, infer = make_pool(cluster, "train"), make_pool(cluster, "infer")
    health = ["healthy", "degraded", "lost", "retired", "healthy"]
    nodes = []
    for i, (pool, status) in enumerate(
        [
            (train, "ready"),
            (train, "retired"),
            (infer, "draining"),
            (infer, "ready"),
            (None, "maintenance"),
            (None, "retired"),
            (train, "quarantined"),
        ]
    ):
        nodes.append(make_node(cluster, f"n{i}", pool=pool, status=status))
    for i, node in enumerate(nodes):
        for index in range(5 + i % 3):
            model = [a100, ascend, None][(i + index) % 3]
            fields = {"health": health[(i * 2 + index) % 5], "cordoned": index % 4 == 1}
            if model is None:
                fields["vendor"] = ["nvidia", "huawei"][index % 2]
            make_device(node, index, model=model, **fields)
    return nodes, train, infer


def test_counts_per_node_equal_the_per_card_join(a100, ascend):
    nodes, _train, _infer = _fleet(a100, ascend)
    new = sorted(_usable_card_counts(), key=repr)
    assert new == _per_card_join()
    assert len({pool for _v, _m, pool, _n in new}) == 3  # both pools and the pool-less nodes
    assert sum(n for *_k, n in new) < Device.objects.count()  # some cards and nodes left out
    Node.objects.filter(pk=nodes[0].pk).update(status="retired")
    Device.objects.filter(node=nodes[3]).update(health="lost")
    assert sorted(_usable_card_counts(), key=repr) == _per_card_join()


def test_class_capacity_sums_the_coefficients_of_the_usable_cards(a100, ascend):
    _nodes, train, infer = _fleet(a100, ascend)
    classes = {
        "any",
        f"pool:{train.pk}",
        f"pool:{infer.pk}",
        "vendor:nvidia",
        "vendor:huawei",
        f"model:{a100.pk}",
        f"model:{ascend.pk}",
        "pool:999999",
    }
    coef = {a100.pk: Decimal("1.0000"), ascend.pk: Decimal("0.8000")}
    expected = dict.fromkeys(classes, Decimal(0))
    for card in Device.objects.select_related("node"):
        if card.health in ("lost", "retired") or card.node.status == "retired":
            continue
        for cls in device_classes(card.vendor, card.device_model_id, card.node.pool_id):
            if cls in expected:
                expected[cls] += coef.get(card.device_model_id, Decimal(0))
    got = class_capacity(classes, on=date(2026, 1, 1))
    assert got == expected
    assert got["any"] > 0 and got["pool:999999"] == 0
