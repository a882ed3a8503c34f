"""Every vendor, in every device-plugin mode Suanchi renders for it, end to end (issue 28 acceptance):
a ledger card → submit → scheduling cycle (which renders the objects) → push to the fake API server →
the fake's kube-scheduler binds the pod only to a node whose ``status.allocatable`` carries what the
pod asks for (NodeResourcesFit; tests/kube/fake_apiserver/scheduler.py ``_extended_shortfall``) → the kubelet
starts it → reconcile reads the pod back as Running. No pod is left Pending, every pushed object is
strict-valid, and a fraction no mode of the cluster can share is refused with the reason.

Each fake node advertises what the vendor's own device plugin registers with the kubelet (``ADVERTISED``
below names the source of each name; read in source or docs, not run against real hardware). In
``hami`` mode the fake's scheduler leaves HAMi's ``managedResources`` (``ignoredByScheduler: true``,
Project-HAMi/HAMi@4707fb02c91c545bc7343ce26dba4c32919f9a3e charts/hami/templates/_helpers.tpl
"hami-vgpu.scheduler.managedResources" with charts/hami/values.yaml) to HAMi's extender, as the real
hami-scheduler (kube-scheduler + extender) does; the other names must be on the node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from apps.catalog.models import ComputeCoefficient, DeviceModel
from apps.clusters import sharing
from apps.clusters.models import PushAction
from apps.inventory.models import Cluster, Device, Node, Pool
from apps.inventory.vendors import ADAPTERS
from apps.jobs.models import Allocation, Job, JobState
from apps.scheduling.lifecycle import job_submit
from apps.scheduling.push import push_job_run
from apps.scheduling.reconcile import reconcile_cluster
from apps.scheduling.services import scheduling_cycle_run
from tests.kube.fake_apiserver import kubeconfig_for, parse_quantity
from tests.kube.validation import assert_strict_valid

pytestmark = pytest.mark.django_db


HAMI = "Project-HAMi/HAMi@4707fb02c91c545bc7343ce26dba4c32919f9a3e"
# HAMi's managedResources with ignoredByScheduler (charts/hami/templates/_helpers.tpl): the names
# Suanchi renders in hami mode for the vendors HAMI_SHARES knows. Cambricon's vmemory / vcore and
# Moore Threads' sgpu-memory / sgpu-core are *not* in the list: the vendors' plugins advertise them
# on the node (HAMi's GetNodeDevices reads them from node capacity, pkg/device/cambricon/device.go and
# pkg/device/mthreads/device.go), so kube-scheduler checks them.
HAMI_IGNORED = {
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpucores",
    "cambricon.com/vmlu",  # mluResourceName
    "hygon.com/dcunum",  # dcuResourceName, dcuResourceMem, dcuResourceCores
    "hygon.com/dcumem",
    "hygon.com/dcucores",
    "mthreads.com/vgpu",  # devices.mthreads.customresources
}
NODE_BASE = {"cpu": "64", "memory": "512Gi", "pods": "110"}


@dataclass(frozen=True)
class Card:
    vendor: str
    kind: str
    model: str
    memory_mib: int | None
    k8s_resource_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Path:
    """One vendor × mode: what the node's plugin advertises for 4 cards, what the pod must ask for."""

    id: str
    card: Card
    mode: str
    advertised: dict[str, str]
    wants: dict[str, str]
    fraction: tuple[Decimal, int] | None = None  # (compute units, memory MiB) of a slice request
    annotations: dict[str, str] = field(default_factory=dict)  # pod annotations, "{node}" filled in


ASCEND_910 = Card("huawei", "npu", "Ascend 910B3", 65536, ("huawei.com/Ascend910",))
ASCEND_310P = Card("huawei", "npu", "Ascend 310P", None, ("huawei.com/Ascend310P",))
HYGON = Card("hygon", "dcu", "DCU K100_AI", 65536)
CAMBRICON = Card("cambricon", "mlu", "MLU370-X8", 49152)
KUNLUNXIN = Card("kunlunxin", "npu", "P800 OAM", 98304)
METAX = Card("metax", "gpu", "C550", 65536)
ILUVATAR = Card("iluvatar", "gpu", "BI-V150", 32768)
ENFLAME = Card("enflame", "npu", "S60", 49152)
MTHREADS = Card("mthreads", "gpu", "MTT S4000", 49152)
AMD = Card("amd", "gpu", "Instinct MI210", 65536)

PATHS = [
    # Ascend/mind-cluster@22bb3d987bc0208c3eb7395e222b661276133c58 component/ascend-common/api/
    # default_name.go: the plugin advertises huawei.com/Ascend910 for the 910 family, Ascend310P for 310P.
    Path(
        "ascend-910-plain", ASCEND_910, "plain", {"huawei.com/Ascend910": "4"}, {"huawei.com/Ascend910": "1"}
    ),
    Path(
        "ascend-910-vnpu-whole",
        ASCEND_910,
        "ascend-vnpu",
        {"huawei.com/Ascend910": "4"},
        {"huawei.com/Ascend910": "1"},
    ),
    Path(
        "ascend-310p-plain",
        ASCEND_310P,
        "plain",
        {"huawei.com/Ascend310P": "4"},
        {"huawei.com/Ascend310P": "1"},
    ),
    # hygon.com/dcu: the DCU device plugin's name (apps/inventory/vendors/hygon.py). HAMi: dcunum +
    # dcumem (MiB) + dcucores (percent), all left to HAMi's extender (nothing on the node).
    Path("hygon-dcu-plain", HYGON, "plain", {"hygon.com/dcu": "4"}, {"hygon.com/dcu": "1"}),
    Path(
        "hygon-dcu-hami-whole",
        HYGON,
        "hami",
        {},
        {"hygon.com/dcunum": "1", "hygon.com/dcumem": "65536", "hygon.com/dcucores": "100"},
        annotations={"hygon.com/use-gpuuuid": "{node}-3"},
    ),
    Path(
        "hygon-dcu-hami-slice",
        HYGON,
        "hami",
        {},
        {"hygon.com/dcunum": "1", "hygon.com/dcumem": "2000", "hygon.com/dcucores": "50"},
        fraction=(Decimal("0.5"), 2000),
        annotations={"hygon.com/use-gpuuuid": "{node}-3"},
    ),
    # Cambricon/cambricon-k8s-device-plugin@214c3413 device-plugin/examples/deployment.yaml asks for
    # cambricon.com/mlu. HAMi (dynamic sMLU): vmlu to the extender; vcore (100 per card) and vmemory
    # (256 MiB units) on the node, read by HAMi's GetNodeDevices from node capacity.
    Path("cambricon-plain", CAMBRICON, "plain", {"cambricon.com/mlu": "4"}, {"cambricon.com/mlu": "1"}),
    Path(
        "cambricon-hami-slice",
        CAMBRICON,
        "hami",
        {"cambricon.com/mlu.smlu.vcore": "400", "cambricon.com/mlu.smlu.vmemory": "768"},
        {
            "cambricon.com/vmlu": "1",
            "cambricon.com/mlu.smlu.vmemory": "20",
            "cambricon.com/mlu.smlu.vcore": "25",
        },
        fraction=(Decimal("0.25"), 5000),
        annotations={"cambricon.com/use-gpuuuid": "{node}-3"},
    ),
    # HAMi's defaults for the vendors' own plugins (the adapters' docstrings): kunlunxin.com/xpu
    # (pkg/device/kunlun/config.go), metax-tech.com/gpu (pkg/device/metax/config.go), enflame.com/gcu
    # (pkg/device/enflame/config.go); iluvatar.com/gpu from Deep-Spark/ix-device-plugin.
    Path("kunlunxin-plain", KUNLUNXIN, "plain", {"kunlunxin.com/xpu": "4"}, {"kunlunxin.com/xpu": "1"}),
    Path("metax-plain", METAX, "plain", {"metax-tech.com/gpu": "4"}, {"metax-tech.com/gpu": "1"}),
    Path("iluvatar-plain", ILUVATAR, "plain", {"iluvatar.com/gpu": "4"}, {"iluvatar.com/gpu": "1"}),
    Path("enflame-plain", ENFLAME, "plain", {"enflame.com/gcu": "4"}, {"enflame.com/gcu": "1"}),
    # Moore Threads (Project-HAMi/website@22ec2772 docs/installation/how-to-use-mthreads-s5000.md): the
    # Mthreads GPU Operator reports whole cards as mthreads.com/gpu and the sGPU pool as
    # mthreads.com/sgpu-core (16 per sliced card) + mthreads.com/sgpu-memory (512 MiB units; 96 per
    # S4000, HAMi's memoryPerMthreadsGPU). The cluster's mode is per vendor: in plain mode no card is
    # bound to sgpu_km, in hami mode every card is (a whole card is then one vgpu with the full slice).
    Path("mthreads-plain", MTHREADS, "plain", {"mthreads.com/gpu": "4"}, {"mthreads.com/gpu": "1"}),
    Path(
        "mthreads-hami-whole",
        MTHREADS,
        "hami",
        {"mthreads.com/sgpu-core": "64", "mthreads.com/sgpu-memory": "384"},
        {"mthreads.com/vgpu": "1"},  # "request mthreads.com/vgpu alone. The webhook fills in the full card"
        annotations={"mthreads.ai/use-gpuuuid": "{node}-mthreads-3"},
    ),
    Path(
        "mthreads-hami-slice",
        MTHREADS,
        "hami",
        {"mthreads.com/sgpu-core": "64", "mthreads.com/sgpu-memory": "384"},
        # examples/mthreads/default_use.yaml's shape: 16 GiB = 32 units, half the cores = 8 of 16.
        {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "32", "mthreads.com/sgpu-core": "8"},
        fraction=(Decimal("0.5"), 16384),
        annotations={"mthreads.ai/use-gpuuuid": "{node}-mthreads-3"},
    ),
    # ROCm/k8s-device-plugin@1563a5fd example/pod/alexnet-gpu.yaml asks for amd.com/gpu.
    Path("amd-plain", AMD, "plain", {"amd.com/gpu": "4"}, {"amd.com/gpu": "1"}),
]


@pytest.fixture
def core(server, tmp_path):
    """The official client's CoreV1Api on the fake, for pods created as a user would."""
    api_client = k8s_config.new_client_from_config(config_file=str(kubeconfig_for(server, tmp_path)))
    yield k8s.CoreV1Api(api_client)
    api_client.close()


def default_namespace(core) -> None:
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})


@pytest.fixture(autouse=True)
def secrets_dir(settings, tmp_path):
    settings.SUANCHI = {**settings.SUANCHI, "SECRETS_DIR": str(tmp_path)}


def catalog_row(card: Card) -> DeviceModel:
    model = DeviceModel.objects.create(
        vendor=card.vendor,
        kind=card.kind,
        name=card.model,
        slug=card.model.lower().replace(" ", "-"),
        memory_mib=card.memory_mib,
        k8s_resource_names=list(card.k8s_resource_names),
    )
    ComputeCoefficient.objects.create(
        device_model=model, value=Decimal("1.0000"), effective_from=date(2024, 1, 1)
    )
    return model


def fleet_node(server, tmp_path, path: Path, name: str = "acc-01") -> tuple[Cluster, DeviceModel]:
    """The cluster in ``path.mode`` for the vendor, a ledger node of 4 cards (the first three taken
    by another job, so the ledger's choice is the last card), and the same node in the fake API server
    as the vendor's plugin registers it."""
    card = path.card
    adapter = ADAPTERS[card.vendor]
    model = catalog_row(card)
    cluster = Cluster.objects.create(
        name="Prod",
        slug="prod",
        backend=Cluster.Backend.KUBERNETES,
        kubeconfig_path=str(kubeconfig_for(server, tmp_path)),
        device_plugin_modes={card.vendor: path.mode},
    )
    pool = Pool.objects.create(cluster=cluster, name="training", slug="training")
    node = Node.objects.create(
        cluster=cluster,
        pool=pool,
        name=name,
        labels=adapter.node_labels(card.model),
        taints=adapter.taints(),
    )
    for i in range(4):
        Device.objects.create(
            node=node,
            vendor=card.vendor,
            index=i,
            uuid=f"{name}-{i}",
            device_model=model,
            memory_mib=card.memory_mib,
            topology_group=f"{name}-g0",
        )
    server.add_node(
        name,
        adapter.node_labels(card.model),
        capacity={**NODE_BASE, **path.advertised},
        taints=adapter.taints(),
    )
    if path.mode == "hami":
        server.ignored_by_scheduler = set(HAMI_IGNORED)
    return cluster, model


def submit(project, user, model, *, name: str, fraction=None) -> Job:
    fields = {"name": name, "image": "x:1", "allowed_vendors": [model.vendor]}
    if fraction is None:
        fields.update(request_kind="whole_cards", device_model=model, count=1)
    else:
        units, memory = fraction
        fields.update(request_kind="compute_units", compute_units=units, memory_mib=memory)
    return job_submit(project=project, actor=user, **fields)


def pods_of(server, job: Job) -> list[dict]:
    return [
        p
        for p in server.objects("Pod", job.project.namespace)
        if (p["metadata"].get("labels") or {}).get("suanchi.io/job") == str(job.pk)
    ]


def quantities(limits: dict) -> dict:
    """Limits as numbers (the API server stores ``2000`` canonical, as ``2k``)."""
    return {name: parse_quantity(str(qty))[0] for name, qty in limits.items()}


def unbound(server) -> list[str]:
    return [p["metadata"]["name"] for p in server.objects("Pod") if not p["spec"].get("nodeName")]


@pytest.mark.parametrize("path", PATHS, ids=[p.id for p in PATHS])
def test_a_card_of_each_vendor_and_mode_runs_on_the_node_that_advertises_it(
    server, tmp_path, member_project, path
):
    cluster, model = fleet_node(server, tmp_path, path)
    user, project = member_project
    blockers = [submit(project, user, model, name=f"blocker-{i}") for i in range(3)]
    job = submit(project, user, model, name="train", fraction=path.fraction)
    placed = scheduling_cycle_run().placed_job_ids
    assert {j.pk for j in [*blockers, job]} <= set(placed), [j.state_reason for j in Job.objects.all()]
    (alloc,) = Allocation.objects.filter(job=job, released_at__isnull=True).select_related("device")
    assert alloc.device.index == 3 and alloc.whole_card == (path.fraction is None)
    for j in [*blockers, job]:
        assert push_job_run(job_id=j.pk)["failed"] == 0

    for action in PushAction.objects.filter(job=job):
        assert_strict_valid(action.object)
    server.advance(1)
    assert unbound(server) == []  # 0 pods Pending for a name no node advertises
    (pod,) = pods_of(server, job)
    assert pod["spec"]["nodeName"] == "acc-01"
    (ctr,) = pod["spec"]["containers"]
    assert quantities(ctr["resources"]["limits"]) == quantities(path.wants)
    for key, value in path.annotations.items():
        assert pod["metadata"]["annotations"][key] == value.format(node="acc-01")
    assert ADAPTERS[path.card.vendor].visible_devices_env not in {e["name"] for e in ctr.get("env", [])}
    scheduled = [e for e in server.objects("Event") if e["involvedObject"]["name"] == pod["metadata"]["name"]]
    assert [e["reason"] for e in scheduled] == ["Scheduled"]

    # The kubelet starts it; reconcile reads the pod back.
    for p in server.objects("Pod"):
        server.set_pod_phase(p["metadata"]["namespace"], p["metadata"]["name"], "Running")
    assert reconcile_cluster(cluster=cluster).running == 4
    job.refresh_from_db()
    assert job.state == JobState.RUNNING


# -- the fake's scheduler says what kube-scheduler says ------------------------------------------------


def test_a_pod_asking_for_a_name_the_node_does_not_advertise_stays_pending_with_failed_scheduling(
    server, tmp_path, member_project, core
):
    # The pre-issue-28 rendering of a 310P card (huawei.com/Ascend910) on a node whose plugin
    # advertises huawei.com/Ascend310P.
    path = next(p for p in PATHS if p.id == "ascend-310p-plain")
    fleet_node(server, tmp_path, path)
    server.add_node("cpu-01", capacity=NODE_BASE)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "old-310p", "namespace": "default"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "acc-01"},
            "tolerations": [{"key": "accelerator", "operator": "Exists"}],
            "containers": [
                {"name": "c", "image": "x:1", "resources": {"limits": {"huawei.com/Ascend910": "1"}}}
            ],
        },
    }
    default_namespace(core)
    core.create_namespaced_pod("default", pod)
    server.advance(1)
    (stored,) = [p for p in server.objects("Pod", "default") if p["metadata"]["name"] == "old-310p"]
    assert not stored["spec"].get("nodeName") and stored["status"]["phase"] == "Pending"
    (cond,) = [c for c in stored["status"]["conditions"] if c["type"] == "PodScheduled"]
    message = "0/2 nodes are available: 1 Insufficient huawei.com/Ascend910, 1 node(s) didn't match Pod's node affinity/selector."
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Unschedulable", message)
    (event,) = [e for e in server.objects("Event", "default") if e["reason"] == "FailedScheduling"]
    assert event["message"] == message and event["source"]["component"] == "default-scheduler"


def test_a_pod_that_does_not_fit_is_bound_once_the_cards_it_waits_for_are_free(server, core):
    server.add_node("acc-01", capacity={**NODE_BASE, "mthreads.com/gpu": "1"})

    def pod(name: str) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": "acc-01"},
                "containers": [
                    {"name": "c", "image": "x:1", "resources": {"limits": {"mthreads.com/gpu": "1"}}}
                ],
            },
        }

    default_namespace(core)
    core.create_namespaced_pod("default", pod("first"))
    core.create_namespaced_pod("default", pod("second"))
    by_name = {p["metadata"]["name"]: p for p in server.objects("Pod", "default")}
    assert by_name["first"]["spec"]["nodeName"] == "acc-01"
    assert not by_name["second"]["spec"].get("nodeName")  # the one card is taken
    server.set_pod_phase("default", "first", "Succeeded")
    server.advance(1)
    by_name = {p["metadata"]["name"]: p for p in server.objects("Pod", "default")}
    assert by_name["second"]["spec"]["nodeName"] == "acc-01"
    (cond,) = [c for c in by_name["second"]["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert cond["status"] == "True"


def test_a_name_hamis_extender_manages_is_left_to_it_and_nothing_else_is(server, core):
    server.add_node("acc-01", capacity={**NODE_BASE, "mthreads.com/sgpu-core": "16"})
    server.ignored_by_scheduler = {"mthreads.com/vgpu"}
    limits = {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "32", "mthreads.com/sgpu-core": "8"}
    default_namespace(core)
    core.create_namespaced_pod(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "slice", "namespace": "default"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": "acc-01"},
                "containers": [{"name": "c", "image": "x:1", "resources": {"limits": limits}}],
            },
        },
    )
    (stored,) = server.objects("Pod", "default")
    assert not stored["spec"].get("nodeName")  # sgpu-memory is not on the node
    (cond,) = [c for c in stored["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert cond["message"] == "0/1 nodes are available: 1 Insufficient mthreads.com/sgpu-memory."


# -- fractions: rendered in the mode that shares, or refused with the reason ----------------------------


@pytest.mark.parametrize(
    ("card", "mode", "says"),
    [
        (HYGON, "plain", "hami"),
        (CAMBRICON, "plain", "hami"),
        (MTHREADS, "plain", "hami"),
    ],
    ids=["hygon-plain", "cambricon-plain", "mthreads-plain"],
)
def test_a_fraction_in_a_mode_that_cannot_share_is_refused_with_the_reason_and_nothing_is_pushed(
    server, tmp_path, member_project, card, mode, says
):
    path = Path("x", card, mode, {ADAPTERS[card.vendor].resource_name: "4"}, {})
    _cluster, model = fleet_node(server, tmp_path, path)
    user, project = member_project
    job = submit(project, user, model, name="slice", fraction=(Decimal("0.5"), 8192))
    assert job.pk not in scheduling_cycle_run().placed_job_ids
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert sharing.fraction_refusal(card.vendor, mode) in job.state_reason
    assert says in job.state_reason and card.vendor in job.state_reason
    assert not PushAction.objects.filter(job=job).exists()
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()
    assert server.objects("Pod") == []


def test_a_moore_threads_slice_of_a_size_hami_refuses_is_refused_naming_the_sizes(
    server, tmp_path, member_project
):
    path = next(p for p in PATHS if p.id == "mthreads-hami-slice")
    _cluster, model = fleet_node(server, tmp_path, path)
    user, project = member_project
    job = submit(project, user, model, name="slice", fraction=(Decimal("0.5"), 20000))  # 40 units
    assert job.pk not in scheduling_cycle_run().placed_job_ids
    job.refresh_from_db()
    assert "20000 MiB" in job.state_reason and "16384 MiB" in job.state_reason
    assert not PushAction.objects.filter(job=job).exists()


@pytest.mark.parametrize("card", [METAX, KUNLUNXIN, ILUVATAR, ENFLAME, AMD], ids=lambda c: c.vendor)
def test_a_fraction_of_a_vendor_no_mode_shares_is_granted_and_billed_as_a_whole_card(
    server, tmp_path, member_project, card
):
    resource = ADAPTERS[card.vendor].resource_name
    path = Path("x", card, "hami", {resource: "4"}, {resource: "1"})
    _cluster, model = fleet_node(server, tmp_path, path)
    user, project = member_project
    job = submit(project, user, model, name="slice", fraction=(Decimal("0.3"), 1024))
    assert job.pk in scheduling_cycle_run().placed_job_ids
    (alloc,) = Allocation.objects.filter(job=job, released_at__isnull=True)
    assert alloc.whole_card and alloc.compute_milli == 1000
    assert push_job_run(job_id=job.pk)["failed"] == 0
    server.advance(1)
    (pod,) = pods_of(server, job)
    assert pod["spec"]["nodeName"] == "acc-01"
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {resource: "1"}


def test_a_moore_threads_slice_on_more_than_one_card_is_refused_and_whole_cards_ask_for_vgpu_alone():
    from apps.clusters import manifests as m
    from apps.core.errors import ValidationFailed
    from tests.kube.test_manifests import allocs, make_job

    cluster = Cluster(device_plugin_modes={"mthreads": "hami"})
    slices = allocs("mthreads", ["node-01"], 2, memory=8192, milli=500)
    for a in slices:
        a.whole_card = False
    # HAMi's MutateAdmission turns a count > 1 into whole cards: never two slices billed as slices.
    with pytest.raises(ValidationFailed) as err:
        m.job_manifest(make_job(), slices, cluster, attempt=0)
    assert err.value.code == "fraction_not_shareable" and "one card" in err.value.message
    whole = m.job_manifest(make_job(), allocs("mthreads", ["node-01"], 2), cluster, attempt=0)
    assert_strict_valid(whole)
    template = whole["spec"]["template"]
    assert template["spec"]["containers"][0]["resources"]["limits"] == {"mthreads.com/vgpu": "2"}
    # HAMi's own device ids (GetNodeDevices: "<node>-mthreads-<i>"), not the cards' UUIDs.
    assert (
        template["metadata"]["annotations"]["mthreads.ai/use-gpuuuid"]
        == "node-01-mthreads-0,node-01-mthreads-1"
    )
