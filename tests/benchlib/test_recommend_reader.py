"""Issue 29 §8: recommendations a reader can act on — only cards their projects may use, marked when over
their quota, memory feasibility per profile, multi-card scaling that is not linear across nodes, and the
option in words ("7 cards on 2 nodes", tokens/s).

The efficiency figures asserted here are the table of assumptions in ``apps.benchlib.scaling``
(platform defaults, not vendor figures); the tests check the arithmetic and the rules, not the defaults'
truth."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.benchlib.models import Measurement
from apps.benchlib.recommend import recommend
from apps.benchlib.scaling import CROSS_NODE_EFFICIENCY, INTRA_NODE_EFFICIENCY
from apps.catalog.models import ComputeCoefficient, ComputeTemplate, DeviceModel, WorkloadProfile
from apps.catalog.workloads import workload_profile_sync
from apps.inventory.models import Device, Node, Pool
from apps.quotas.library import quota_ceiling
from apps.quotas.models import Quota

A100_WHOLE = "A100 80GB SXM4 · whole card"


@pytest.fixture
def profiles(db):
    workload_profile_sync(actor="test")
    return {p.key: p for p in WorkloadProfile.objects.all()}


def _measure(profile, model, throughput, *, share=100, template=None, cards=1, latency=None):
    return Measurement.objects.create(
        profile=profile,
        device_model=model,
        template=template,
        compute_share=Decimal(share),
        cards=cards,
        throughput=Decimal(str(throughput)),
        p99_latency_ms=None if latency is None else Decimal(str(latency)),
        runs=3,
        source=Measurement.Source.BENCHMARK,
        measured_at=timezone.now() - timedelta(days=1),
    )


@pytest.fixture
def reserved_h100(fleet, make_project):
    """A cheap, fast model whose only node sits in a pool reserved for another project."""
    other = make_project("other-team")
    model = DeviceModel.objects.create(
        vendor="nvidia", kind="gpu", name="H100 SXM5", slug="h100-sxm5", memory_mib=81920, features=["nvlink"]
    )
    ComputeCoefficient.objects.create(
        device_model=model, value=Decimal("0.1000"), effective_from=date(2024, 1, 1)
    )
    cluster = fleet["gpu-01"].cluster
    pool = Pool.objects.create(cluster=cluster, name="reserved", slug="reserved", owner_project=other)
    node = Node.objects.create(cluster=cluster, pool=pool, name="h100-01")
    for i in range(8):
        Device.objects.create(node=node, vendor="nvidia", index=i, uuid=f"h100-{i}", device_model=model)
    return model


def test_a_member_never_gets_an_option_on_a_pool_reserved_for_another_project(
    reserved_h100, profiles, a100, member_project, staff_user, api_client
):
    user, project = member_project
    resnet = profiles["resnet50-infer"]
    _measure(resnet, a100, 10000)
    _measure(resnet, reserved_h100, 30000)
    for answer in (
        recommend(profile="resnet50-infer", target=3000, project_id=project.pk),
        recommend(profile="resnet50-infer", target=3000, user=user),
    ):
        assert "H100 SXM5" not in {o.device_model.name for o in answer.options}
        assert answer.best.label == A100_WHOLE
    api_client.force_authenticate(user)
    body = api_client.get(
        "/api/catalog/recommendations/", {"profile": "resnet50-infer", "target": "3000"}
    ).json()
    assert "H100 SXM5" not in {row["device_model"] for row in body["options"]}
    # Platform staff see the whole fleet, where the reserved model is the top pick.
    assert (
        recommend(profile="resnet50-infer", target=3000, user=staff_user).best.device_model == reserved_h100
    )
    # A card another project owns, in a shared pool, is not the member's either.
    Device.objects.filter(device_model=a100).update(
        owner_project=reserved_h100.devices.first().node.pool.owner_project
    )
    assert not any(
        o.device_model == a100 for o in recommend(profile="resnet50-infer", target=3000, user=user).options
    )


def test_an_option_over_the_projects_quota_is_marked_and_ranked_after_the_others(
    fleet, profiles, a100, ascend, half_a100, member_project, api_client
):
    user, project = member_project
    resnet = profiles["resnet50-infer"]
    _measure(resnet, a100, 10000)
    _measure(resnet, ascend, 9000)
    free = recommend(profile="resnet50-infer", target=3000, project_id=project.pk)
    assert free.options[0].label == "A100 80GB SXM4 · A100 half" and not free.options[0].over_quota
    # At most 0.25 CU on A100s: the half card (0.5 CU/h) and the whole card (1.0) are over it.
    Quota.objects.create(
        project=project,
        resource_class="device_model",
        device_model=a100,
        guaranteed_cu=Decimal("0.2500"),
        borrowing_limit_cu=Decimal("0"),
    )
    answer = recommend(
        profile="resnet50-infer", target=3000, project_id=project.pk, quota_ceiling=quota_ceiling
    )
    by_label = {o.label: o for o in answer.options}
    half = by_label["A100 80GB SXM4 · A100 half"]
    assert half.over_quota and half.quota_cu == Decimal("0.2500")
    assert any("over your quota" in note for note in half.notes)
    assert answer.options[0].device_model == ascend and not answer.options[0].over_quota
    assert answer.options.index(half) > answer.options.index(by_label["Ascend 910B3 · whole card"])
    api_client.force_authenticate(user)
    rows = api_client.get(
        "/api/catalog/recommendations/", {"profile": "resnet50-infer", "target": "3000"}
    ).json()
    row = next(r for r in rows["options"] if r["option"] == "A100 80GB SXM4 · A100 half")
    assert row["over_quota"] is True and row["quota_cu_per_hour"] == "0.2500"


def test_memory_feasibility_per_profile(fleet, profiles, a100):
    # llm-train-7b: 104.3 GiB of model state (ZeRO s3.1, the profile's data) needs two 80 GiB cards even
    # when one card's throughput would meet the target.
    _measure(profiles["llm-train-7b"], a100, 5000)
    train = {o.label: o for o in recommend(profile="llm-train-7b", target=100).options}[A100_WHOLE]
    assert train.memory_need == "sharded" and train.memory_cards == 2 and train.instances == 2
    # llm-serve-7b needs 16 GiB per instance: a 10 GiB slice is not offered.
    small = ComputeTemplate.objects.create(
        device_model=a100,
        name="A100 1g.10gb",
        slug="a100-1g",
        memory_mib=10240,
        compute_share=Decimal("14"),
        isolation="shared",
        max_instances=7,
    )
    _measure(profiles["llm-serve-7b"], a100, 2000, latency=40)
    serve = {
        (o.template.pk if o.template else o.device_model.pk): o
        for o in recommend(profile="llm-serve-7b", target=100).options
    }
    assert not serve[small.pk].has_data and "16,384 MiB" in serve[small.pk].reason
    assert serve[a100.pk].memory_need == "fits"
    # A profile that states no memory need: offered, marked unknown, never a made-up figure.
    bare = WorkloadProfile.objects.create(
        key="custom-batch", name="Custom", unit="items/s", latency_bound=True
    )
    _measure(bare, a100, 100)
    option = {o.label: o for o in recommend(profile=bare, target=50).options}[A100_WHOLE]
    assert option.has_data and option.memory_need == "unknown"
    assert any("unknown" in note for note in option.notes)


def test_an_option_spanning_nodes_gets_an_efficiency_below_one_and_more_cards(fleet, profiles, a100):
    Node.objects.filter(name__in=["gpu-01", "gpu-02"]).update(
        rdma_nics=[{"name": "mlx5_0", "numa_node": 0, "link": "RoCE"}]
    )
    _measure(profiles["llm-train-7b"], a100, 1000)
    # 4 cards within one node: NVLink's assumed 0.95 → 3 cards give 2850 < 3000, so 4.
    one = {o.label: o for o in recommend(profile="llm-train-7b", target=3000).options}[A100_WHOLE]
    assert (one.instances, one.nodes) == (4, 1)
    assert one.efficiency == INTRA_NODE_EFFICIENCY["nvlink"] and one.efficiency_basis == "assumed"
    # 5000 tokens/s: linear would be 5 cards; on 4-card nodes with RoCE between them it takes 7 on 2.
    two = {o.label: o for o in recommend(profile="llm-train-7b", target=5000).options}[A100_WHOLE]
    eff = INTRA_NODE_EFFICIENCY["nvlink"] * CROSS_NODE_EFFICIENCY["roce"]
    assert two.efficiency == eff and two.efficiency < 1 and two.links == ["nvlink", "roce"]
    assert (two.instances, two.nodes) == (7, 2) and two.fits_text == "7 cards on 2 nodes"
    assert two.cu_per_hour == Decimal("7.0000")
    # Without RDMA the cross-node figure is lower still: more cards, more nodes, marked beyond the 8 usable.
    Node.objects.filter(name__in=["gpu-01", "gpu-02"]).update(rdma_nics=[])
    tcp = {o.label: o for o in recommend(profile="llm-train-7b", target=5000).options}[A100_WHOLE]
    assert tcp.instances > two.instances and tcp.nodes > 2 and tcp.over_capacity
    # Serving replicas are independent: linear, whatever the node count.
    _measure(profiles["resnet50-infer"], a100, 1000)
    serve = {o.label: o for o in recommend(profile="resnet50-infer", target=5000).options}[A100_WHOLE]
    assert (serve.instances, serve.nodes, serve.efficiency) == (5, 2, Decimal(1))
    assert serve.fits_text == "5 cards on 2 nodes"


def test_multi_card_measurements_refine_the_efficiency(fleet, profiles, a100):
    train = profiles["llm-train-7b"]
    _measure(train, a100, 1000)
    _measure(train, a100, 3600, cards=4)  # 900 per card: 0.90 of the single card
    option = {o.label: o for o in recommend(profile="llm-train-7b", target=3000).options}[A100_WHOLE]
    assert option.efficiency == Decimal("0.90") and option.efficiency_basis == "measured"
    assert option.per_instance == Decimal("1000.0000")  # the per-card figure comes from the single card
    assert option.instances == 4  # 3 × 1000 × 0.90 = 2700 < 3000
    assert "measured" in option.efficiency_text
    # Eight cards over two 4-card nodes at 720 per card: 0.90 within a node × 0.80 across (fitted), where
    # the assumed figure for these nodes (no RDMA NICs) would be 0.60.
    _measure(train, a100, 5760, cards=8)
    spans = {o.label: o for o in recommend(profile="llm-train-7b", target=5000).options}[A100_WHOLE]
    assert spans.efficiency == Decimal("0.7200") and (spans.instances, spans.nodes) == (7, 2)
    assert spans.efficiency_basis == "measured"


def test_the_fits_column_reads_as_words_with_the_profiles_unit(
    fleet, profiles, a100, half_a100, client, make_user
):
    Node.objects.filter(name__in=["gpu-01", "gpu-02"]).update(rdma_nics=[{"name": "mlx5_0", "link": "RoCE"}])
    _measure(profiles["llm-train-7b"], a100, 1000)
    _measure(profiles["resnet50-infer"], a100, 10000)
    by_label = {o.label: o for o in recommend(profile="resnet50-infer", target=3000).options}
    assert by_label[A100_WHOLE].fits_text == "1 card"
    assert by_label["A100 80GB SXM4 · A100 half"].fits_text == "1 slice"
    assert by_label[A100_WHOLE].per_instance_text == "10,000 images/s"
    staff = make_user("ops", staff=True)
    client.force_login(staff)
    page = client.get("/catalog/library/", {"profile": "llm-train-7b", "target": "5000"})
    html = page.content.decode()
    assert page.status_code == 200
    assert "7 cards on 2 nodes" in html
    table = html.split('id="recommendation-table"')[1].split("</table>")[0]
    assert "several" not in table and " × " not in table
    assert "1,000 tokens/s" in html
    assert 'id="scaling-assumptions"' in html and "not measurements" in html


@pytest.mark.parametrize(
    "params",
    [
        {"profile": "resnet50-infer", "target": "NaN"},
        {"profile": "resnet50-infer", "target": "Infinity"},
        {"profile": "resnet50-infer", "target": "1e13"},
        {"profile": "resnet50-infer", "target": "0"},
        {"profile": "resnet50-infer", "target": "10", "latency_ms": "abc"},
        {"profile": "resnet50-infer", "target": "10", "latency_ms": "-1"},
    ],
)
def test_bad_query_params_are_400_with_a_message(profiles, api_client, make_user, params, client):
    user = make_user()
    api_client.force_authenticate(user)
    response = api_client.get("/api/catalog/recommendations/", params)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["message"]
    client.force_login(user)
    page = client.get("/catalog/library/", params)
    assert page.status_code == 200 and 'class="alert alert--bad"' in page.content.decode()
