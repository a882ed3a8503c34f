"""Huawei Ascend names (issue 28): the resource a card's chip family advertises, the device plugin's
vNPU template table, and the read-back of ``huawei.com/AscendReal``.

Sources (Ascend/mind-cluster at 22bb3d987bc0208c3eb7395e222b661276133c58):
- template → vNPU type: component/ascend-device-plugin/pkg/common/device.go
  (GetTemplateName2DeviceTypeMap) and pkg/common/constants.go; the docs' "Virtual instance templates
  and vNPU types" table, docs/en/scheduling/usage/virtual_instance/virtual_instance_with_hdk/
  static_vnpu_scheduling/02_mounting_vnpu_static.md (vir10_3c_16g_nm → Ascend910-10c.3cpu.16g.ndvpp,
  vir02_1c → Ascend310P-2c.1cpu, …);
- templates per chip: component/ascend-common/devmanager/common/utils.go (templateNameLists);
- AscendReal values: docs/en/scheduling/usage/basic_scheduling/
  03_full_npu_scheduling_and_static_vnpu_scheduling_training.md (``kubectl describe pod`` output:
  ``huawei.com/AscendReal: Ascend910-3`` and the eight-chip
  ``Ascend910-1,Ascend910-2,Ascend910-3,Ascend910-4,Ascend910-5,Ascend910-6,Ascend910-7,Ascend910-0``).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from apps.catalog import services as catalog
from apps.catalog.models import DeviceModel
from apps.clusters import ascend
from apps.clusters import manifests as m
from apps.clusters.pod_report import ascend_placements
from apps.core.errors import ParseFailed, ValidationFailed
from apps.inventory.models import Cluster, Device, DeviceEvent, Node
from apps.jobs.models import Allocation, JobEvent
from apps.telemetry.readback import MOVED_MESSAGE, readback
from tests.fixtures.telemetry import allocate
from tests.fixtures.telemetry import make_job as db_job
from tests.kube.test_manifests import container, make_job, validate

# Values copied from the MindCluster docs page named above.
REAL_ONE = "Ascend910-3"
REAL_EIGHT = "Ascend910-1,Ascend910-2,Ascend910-3,Ascend910-4,Ascend910-5,Ascend910-6,Ascend910-7,Ascend910-0"

VNPU = Cluster(device_plugin_modes={"huawei": "ascend-vnpu"})


@pytest.fixture
def models(db):
    catalog.catalog_sync(actor="test")
    return {d.slug: d for d in DeviceModel.objects.filter(vendor="huawei")}


def huawei_allocs(model, count=1, *, profile=""):
    node = Node(name="npu-01")
    result = []
    for index in range(count):
        device = Device(node=node, vendor="huawei", index=index, device_model=model)
        result.append(
            Allocation(
                device=device,
                node=node,
                replica=0,
                memory_mib=16384,
                compute_milli=1000 if not profile else 250,
                whole_card=not profile,
                partition_profile=profile,
            )
        )
    return result


def limits(obj: dict) -> dict[str, str]:
    return container(obj)["resources"]["limits"]


# ---------------------------------------------------------------------------------------------------
# Whole chips: the catalog's family
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("slug", "resource"),
    [
        ("ascend-310p", "huawei.com/Ascend310P"),
        ("ascend-910a", "huawei.com/Ascend910"),
        ("ascend-910b3", "huawei.com/Ascend910"),
        ("ascend-910b4", "huawei.com/Ascend910"),
    ],
)
def test_plain_cards_ask_for_their_chip_familys_resource(models, slug, resource):
    obj = m.job_manifest(make_job(), huawei_allocs(models[slug], 4), m_cluster("plain"), attempt=0)
    validate(obj)
    assert limits(obj) == {resource: "4"}


def m_cluster(mode: str) -> Cluster:
    return Cluster(device_plugin_modes={"huawei": mode})


def test_a_card_without_a_catalog_model_keeps_the_adapters_910_resource():
    allocs = huawei_allocs(None, 2)
    assert limits(m.job_manifest(make_job(), allocs, m_cluster("plain"), attempt=0)) == {
        "huawei.com/Ascend910": "2"
    }


def test_dra_mode_falls_back_to_the_310p_count_and_says_so(models):
    obj = m.job_manifest(make_job(), huawei_allocs(models["ascend-310p"], 2), m_cluster("dra"), attempt=0)
    validate(obj)
    assert limits(obj) == {"huawei.com/Ascend310P": "2"}
    assert "huawei.com/Ascend310P" in obj["metadata"]["annotations"][m.ANN_DRA_FALLBACK]


# ---------------------------------------------------------------------------------------------------
# vNPU templates: the device plugin's table
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("slug", "template", "resource"),
    [
        ("ascend-310p", "vir01", "huawei.com/Ascend310P-1c"),
        ("ascend-310p", "vir02_1c", "huawei.com/Ascend310P-2c.1cpu"),
        ("ascend-310p", "vir04_3c", "huawei.com/Ascend310P-4c.3cpu"),
        ("ascend-310p", "vir04_3c_ndvpp", "huawei.com/Ascend310P-4c.3cpu.ndvpp"),
        ("ascend-310p", "vir04_4c_dvpp", "huawei.com/Ascend310P-4c.4cpu.dvpp"),
        ("ascend-910b4", "vir10_3c_16g", "huawei.com/Ascend910-10c.3cpu.16g"),
        ("ascend-910b4", "vir10_3c_16g_nm", "huawei.com/Ascend910-10c.3cpu.16g.ndvpp"),
        ("ascend-910b4", "vir10_4c_16g_m", "huawei.com/Ascend910-10c.4cpu.16g.dvpp"),
        ("ascend-910b3", "vir05_1c_16g", "huawei.com/Ascend910-5c.1cpu.16g"),
        ("ascend-910a", "vir16", "huawei.com/Ascend910-16c"),
    ],
)
def test_vnpu_templates_map_to_the_names_the_plugin_advertises(models, slug, template, resource):
    obj = m.job_manifest(make_job(), huawei_allocs(models[slug], profile=template), VNPU, attempt=0)
    validate(obj)
    assert limits(obj) == {resource: "1"}


def test_every_catalog_template_renders_to_a_name_the_catalog_lists(models):
    """The plugin table and the catalog's k8s_resource_names agree for every Huawei model."""
    checked = 0
    for model in models.values():
        base = ascend.whole_chip_resource(Device(device_model=model))
        for template in model.vnpu_templates:
            assert ascend.vnpu_resource_name(template, base, model=model) in model.k8s_resource_names
            checked += 1
    assert checked >= 20


@pytest.mark.parametrize(
    ("slug", "template", "chip"),
    [
        ("ascend-310p", "vir10_3c_16g_nm", "Ascend310P"),  # a 910B template on a 310P
        ("ascend-910b4", "vir02_1c", "Ascend910"),  # a 310P template on a 910
        ("ascend-910b4", "vir10_3c_16g_ndvpp", "Ascend910"),  # not a template name at all
    ],
)
def test_a_template_the_plugin_does_not_know_for_the_chip_is_refused(models, slug, template, chip):
    with pytest.raises(ValidationFailed) as err:
        m.job_manifest(make_job(), huawei_allocs(models[slug], profile=template), VNPU, attempt=0)
    assert template in err.value.message and chip in err.value.message
    assert err.value.details == {"partition_profile": template, "chip": chip}


def test_a_template_the_catalog_does_not_list_for_the_model_is_refused(models):
    # vir05_1c_16g is a 910B template, but the catalog lists it for 910B3 only, not 910B4.
    with pytest.raises(ValidationFailed) as err:
        m.job_manifest(
            make_job(), huawei_allocs(models["ascend-910b4"], profile="vir05_1c_16g"), VNPU, attempt=0
        )
    assert "vir05_1c_16g" in err.value.message and "Ascend 910B4" in err.value.message


def test_the_old_fallback_no_longer_invents_a_name():
    with pytest.raises(ValidationFailed):
        m.vnpu_resource_name("vir07_2c_9g")
    assert m.vnpu_resource_name("vir10_3c_16g_nm") == "huawei.com/Ascend910-10c.3cpu.16g.ndvpp"
    assert m.vnpu_resource_name("vir02_1c", "huawei.com/Ascend310P") == "huawei.com/Ascend310P-2c.1cpu"


def test_a_container_gets_at_most_one_vnpu(models):
    allocs = huawei_allocs(models["ascend-310p"], 2, profile="vir02")
    with pytest.raises(ValidationFailed) as err:
        m.job_manifest(make_job(), allocs, VNPU, attempt=0)
    assert "2 x huawei.com/Ascend310P-2c" in err.value.message


# ---------------------------------------------------------------------------------------------------
# Read-back: huawei.com/AscendReal
# ---------------------------------------------------------------------------------------------------


def test_ascend_real_values_parse_into_physical_chip_ids():
    assert ascend.ascend_real_chips(REAL_ONE) == [3]
    assert ascend.ascend_real_chips(REAL_EIGHT) == list(range(8))
    with pytest.raises(ParseFailed) as err:
        ascend.ascend_real_chips("Ascend910-2c-100-0")  # a vNPU device name, never written as AscendReal
    assert "Ascend910-2c-100-0" in err.value.message


NOW = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)


@pytest.fixture
def npu_node(db):
    cluster = Cluster.objects.create(name="Ascend", slug="ascend")
    node = Node.objects.create(cluster=cluster, name="npu-01")
    cards = {i: Device.objects.create(node=node, vendor="huawei", index=i) for i in range(8)}
    return cluster, node, cards


def pod(job, name: str, real: str | None, *, phase="Running") -> dict:
    """A pod of ours as the API server returns it, the device plugin's annotation added."""
    annotations = {m.ANN_TRACE: "t"}
    if real is not None:
        annotations[ascend.ASCEND_REAL_ANNOTATION] = real
    return {
        "metadata": {
            "name": name,
            "namespace": job.project.namespace,
            "labels": {m.LABEL_JOB: str(job.pk), m.LABEL_ATTEMPT: "0"},
            "annotations": annotations,
        },
        "spec": {"nodeName": "npu-01"},
        "status": {"phase": phase},
    }


def test_the_chip_the_plugin_gave_moves_the_allocation_through_the_readback(npu_node, make_project):
    cluster, node, cards = npu_node
    job = db_job(make_project("vision"))
    alloc = allocate(job, cards[0], start=NOW - timedelta(hours=1))
    pods = [pod(job, f"suanchi-{job.pk}-a0-x7k2p", REAL_ONE)]

    by_device, seen_at, problems = ascend_placements(pods, cluster, seen=time.time())
    assert (by_device, problems) == ({cards[3].pk: {("vision", f"suanchi-{job.pk}-a0-x7k2p")}}, [])
    assert set(seen_at) == {c.pk for c in cards.values()}
    result = readback(pods_by_device=by_device, seen_at=seen_at, actor_label="reconciler")

    alloc.refresh_from_db()
    assert alloc.device_id == cards[3].pk and len(result.moved) == 1
    (event,) = JobEvent.objects.filter(job=job, data__readback="moved")
    assert event.message == MOVED_MESSAGE % {
        "actual": "NPU3",
        "allocated": "NPU0",
        "node": "npu-01",
        "job": job.pk,
    }
    assert DeviceEvent.objects.filter(after__readback__readback="moved").count() == 2
    # Read again: the ledger matches, nothing moves twice.
    again = readback(pods_by_device=by_device, seen_at=seen_at, actor_label="reconciler")
    assert not again.moved and JobEvent.objects.filter(job=job, data__readback="moved").count() == 1


def test_a_pod_not_yet_annotated_confirms_nothing(npu_node, make_project):
    cluster, _node, cards = npu_node
    job = db_job(make_project("vision"))
    allocate(job, cards[0], start=NOW - timedelta(hours=1))
    allocate(job, cards[1], start=NOW - timedelta(hours=1))
    pods = [
        pod(job, f"suanchi-{job.pk}-a0-aaaaa", REAL_ONE),
        pod(job, f"suanchi-{job.pk}-a0-bbbbb", None, phase="Pending"),
    ]
    by_device, _seen, problems = ascend_placements(pods, cluster, seen=time.time())
    assert by_device == {} and problems == []


def test_chips_the_ledger_lacks_or_bad_values_are_reported_not_concluded(npu_node, make_project):
    cluster, _node, cards = npu_node
    job = db_job(make_project("vision"))
    allocate(job, cards[0], start=NOW - timedelta(hours=1))
    by_device, _seen, problems = ascend_placements(
        [pod(job, f"suanchi-{job.pk}-a0-x", "Ascend910-9")], cluster, seen=time.time()
    )
    assert by_device == {} and "9" in problems[0] and "npu-01" in problems[0]
    by_device, _seen, problems = ascend_placements(
        [pod(job, f"suanchi-{job.pk}-a0-x", "davinci3")], cluster, seen=time.time()
    )
    assert by_device == {} and "davinci3" in problems[0]


def test_eight_chip_pod_matching_the_ledger_moves_nothing(npu_node, make_project):
    cluster, _node, cards = npu_node
    job = db_job(make_project("vision"))
    allocs = [allocate(job, cards[i], start=NOW - timedelta(hours=1)) for i in range(8)]
    by_device, seen_at, _ = ascend_placements(
        [pod(job, f"suanchi-{job.pk}-a0-x", REAL_EIGHT)], cluster, seen=time.time()
    )
    assert set(by_device) == {c.pk for c in cards.values()}
    result = readback(pods_by_device=by_device, seen_at=seen_at, actor_label="reconciler")
    assert not result.moved and not result.conflicts
    assert [a.device_id for a in Allocation.objects.filter(pk__in=[a.pk for a in allocs]).order_by("pk")] == [
        cards[i].pk for i in range(8)
    ]


def test_the_job_pages_pod_rows_carry_the_chips_the_plugin_gave():
    from apps.clusters.pod_report import _pod_row

    base = {"metadata": {"name": "suanchi-7-a0-x"}, "spec": {"nodeName": "npu-01"}, "status": {}}
    given = {
        **base,
        "metadata": {**base["metadata"], "annotations": {ascend.ASCEND_REAL_ANNOTATION: REAL_EIGHT}},
    }
    assert _pod_row(given)["ascend_chips"] == list(range(8))
    assert _pod_row(base)["ascend_chips"] is None


def test_the_catalog_models_of_a_pods_cards_are_read_in_one_query(models, django_assert_num_queries):
    cluster = Cluster.objects.create(name="Infer", slug="infer")
    node = Node.objects.create(cluster=cluster, name="npu-01")
    ids = [
        Device.objects.create(node=node, vendor="huawei", index=i, device_model=models["ascend-310p"]).pk
        for i in range(4)
    ]
    devices = Device.objects.in_bulk(ids)  # as the scheduling cycle loads them: models not joined
    allocs = [
        Allocation(
            device=devices[pk], node=node, replica=0, memory_mib=1, compute_milli=1000, whole_card=True
        )
        for pk in ids
    ]
    with django_assert_num_queries(1):
        obj = m.job_manifest(make_job(), allocs, m_cluster("plain"), attempt=0)
    assert limits(obj) == {"huawei.com/Ascend310P": "4"}
