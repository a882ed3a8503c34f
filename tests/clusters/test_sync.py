"""Cluster sync: Kubernetes Nodes and ResourceSlices → the ledger, against the fake API server through
the official client, and offline from files (``cluster_sync --from-file``)."""

from __future__ import annotations

import json
from io import StringIO

import pytest
import yaml
from django.core.management import CommandError, call_command

from apps.clusters.models import PushAction
from apps.clusters.sync import cluster_sync, cluster_sync_apply, sync_input_load
from apps.core.errors import ValidationFailed
from apps.inventory.models import Cluster, Device, DeviceEvent, Node, Pool
from tests.kube.fake_apiserver import FakeApiServer, kubeconfig_for
from tests.kube.helpers import fake_server_fixture

pytestmark = pytest.mark.django_db

NV_UUIDS = [f"GPU-0000000{i}-aaaa-bbbb-cccc-00000000000{i}" for i in range(4)]


server = fake_server_fixture(controllers=False)


@pytest.fixture(autouse=True)
def secrets_dir(settings, tmp_path):
    """The kubeconfigs written under ``tmp_path`` are in the secrets directory (a Cluster's path must be)."""
    settings.SUANCHI = {**settings.SUANCHI, "SECRETS_DIR": str(tmp_path)}


def fill(srv: FakeApiServer) -> None:
    """Three nodes: NVIDIA (4 cards, Ready), Ascend (8 NPUs, NotReady), Hygon (4 DCUs, one dropped)."""
    srv.add_node(
        "gpu-01",
        labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "suanchi.io/pool": "training"},
        capacity={"cpu": "64", "nvidia.com/gpu": "4"},
        taints=[{"key": "accelerator", "value": "nvidia-gpu", "effect": "NoSchedule"}],
    )
    srv.add_node("npu-01", ready=False, capacity={"huawei.com/Ascend910": "8", "memory": "1Ti"})
    srv.add_node("dcu-01", capacity={"hygon.com/dcu": "4"}, allocatable={"hygon.com/dcu": "3"})


def cluster_for(srv, tmp_path) -> Cluster:
    cluster = Cluster(
        name="Prod", slug="prod", backend="kubernetes", kubeconfig_path=str(kubeconfig_for(srv, tmp_path))
    )
    cluster.full_clean()
    cluster.save()
    Pool.objects.create(cluster=cluster, name="Training", slug="training")
    return cluster


# The PCI addresses of gpu-01's cards as nvidia-smi / the agent report them (NVML's 8-digit domain,
# upper case), and as the NVIDIA DRA driver publishes them (resource.kubernetes.io/pciBusID: the
# kernel's lower-case sysfs name, go-nvlib GetPCIBusID + k8s deviceattribute).
NV_PCI = [f"00000000:{b}:00.0" for b in ("1A", "1B", "9C", "9D")]


def slice_devices():
    # No "index" attribute: NVIDIA's DRA driver publishes none (cmd/gpu-kubelet-plugin/deviceinfo.go);
    # an earlier version of this test matched cards by one.
    return [
        {
            "name": f"gpu-{i}",
            "attributes": {
                "uuid": {"string": u},
                "productName": {"string": "A100"},
                "resource.kubernetes.io/pciBusID": {"string": pci[4:].lower()},
            },
        }
        for i, (u, pci) in enumerate(zip(NV_UUIDS, NV_PCI, strict=True))
    ]


def test_a_new_cluster_syncs_nodes_cards_and_drift_through_the_real_client(server, tmp_path):
    fill(server)
    cluster = cluster_for(server, tmp_path)

    report = cluster_sync(cluster=cluster)

    assert sorted(report.created_nodes) == ["dcu-01", "gpu-01", "npu-01"]
    nodes = {n.name: n for n in Node.objects.filter(cluster=cluster)}
    assert nodes["gpu-01"].pool.slug == "training"  # the suanchi.io/pool label
    assert nodes["npu-01"].pool.slug == "default"
    assert nodes["gpu-01"].taints == [{"key": "accelerator", "value": "nvidia-gpu", "effect": "NoSchedule"}]
    cards = {(d.node.name, d.vendor) for d in Device.objects.filter(node__cluster=cluster)}
    assert cards == {("gpu-01", "nvidia"), ("npu-01", "huawei"), ("dcu-01", "hygon")}
    assert Device.objects.filter(node=nodes["npu-01"]).count() == 8
    assert Device.objects.filter(node=nodes["dcu-01"]).count() == 4
    assert Device.objects.get(node=nodes["gpu-01"], index=0).raw_model_name == "NVIDIA-A100-SXM4-80GB"

    not_ready = DeviceEvent.objects.get(node=nodes["npu-01"], kind=DeviceEvent.Kind.NOT_READY)
    assert "KubeletNotReady" in not_ready.message
    short = DeviceEvent.objects.get(node=nodes["dcu-01"], kind=DeviceEvent.Kind.CONFLICT)
    assert short.after == {"drift": "allocatable:hygon.com/dcu", "short": 1, "allocatable": 3}
    assert not DeviceEvent.objects.filter(node=nodes["gpu-01"], kind=DeviceEvent.Kind.CONFLICT).exists()
    assert {d["drift"] for d in report.drift} == {"ready", "allocatable:hygon.com/dcu"}
    ready = {n["name"]: n["ready"] for n in report.nodes}
    assert ready == {"gpu-01": True, "npu-01": False, "dcu-01": True}
    cluster.refresh_from_db()
    assert cluster.last_synced_at is not None and cluster.last_sync["created"] == 3


def test_a_second_sync_changes_nothing(server, tmp_path):
    fill(server)
    cluster = cluster_for(server, tmp_path)
    cluster_sync(cluster=cluster)
    events = DeviceEvent.objects.count()
    devices = Device.objects.count()

    again = cluster_sync(cluster=cluster)

    assert again.created_nodes == [] and again.events == 0 and again.patches == 0
    assert DeviceEvent.objects.count() == events
    assert Device.objects.count() == devices
    assert len(again.drift) == 2  # the drift is still there, reported, not recorded twice


def test_recovery_and_a_node_gone_are_events(server, tmp_path):
    fill(server)
    cluster = cluster_for(server, tmp_path)
    cluster_sync(cluster=cluster)
    server.set_node_ready("npu-01", True)
    with server._lock:
        del server._store[("nodes", "", "gpu-01")]

    cluster_sync(cluster=cluster)

    npu = Node.objects.get(name="npu-01")
    assert npu.events.filter(after__drift="ready", after__ready=True).count() == 1
    gone = Node.objects.get(name="gpu-01").events.get(after__drift="presence")
    assert gone.after == {"drift": "presence", "present": False}
    assert Node.objects.filter(name="gpu-01").exists()  # nothing is deleted


def test_resource_slices_fill_device_uuids_and_report_unknown_devices(server, tmp_path):
    fill(server)
    server.add_resource_slice("gpu-01-gpu.nvidia.com-x", "gpu-01", "gpu.nvidia.com", slice_devices())
    cluster = cluster_for(server, tmp_path)

    # Cards known by count only (no UUID, no PCI address) cannot be told apart: no UUID is learned
    # and no slice device is drift.
    report = cluster_sync(cluster=cluster)
    assert not Device.objects.filter(uuid__in=NV_UUIDS).exists()
    assert not [d for d in report.drift if d["drift"].startswith("slice-device:")]
    # Once the ledger has their PCI addresses (as the agent reports them), each card takes the UUID
    # its driver publishes at that address.
    for card, pci in zip(Device.objects.filter(node__name="gpu-01").order_by("index"), NV_PCI, strict=True):
        card.pci_bus_id = pci
        card.save(update_fields=["pci_bus_id"])
    report = cluster_sync(cluster=cluster)

    uuids = list(Device.objects.filter(node__name="gpu-01").order_by("index").values_list("uuid", flat=True))
    assert uuids == NV_UUIDS
    assert [(s["node"], s["uuid"]) for s in report.slices] == [("gpu-01", u) for u in NV_UUIDS]

    # The driver publishes a fifth card the ledger lacks, and stops publishing card 0.
    extra = "GPU-99999999-aaaa-bbbb-cccc-999999999999"
    devices = slice_devices()[1:] + [{"name": "gpu-4", "attributes": {"uuid": {"string": extra}}}]
    server.add_resource_slice("gpu-01-gpu.nvidia.com-x", "gpu-01", "gpu.nvidia.com", devices)
    report = cluster_sync(cluster=cluster)
    kinds = {d["drift"] for d in report.drift}
    assert f"slice-device:{extra}" in kinds and f"ledger-device:{NV_UUIDS[0]}" in kinds
    lost = DeviceEvent.objects.get(after__drift=f"ledger-device:{NV_UUIDS[0]}")
    assert lost.device.uuid == NV_UUIDS[0]
    assert cluster_sync(cluster=cluster).events == 0


def test_pending_nodes_kubernetes_lists_are_approved(server, tmp_path):
    fill(server)
    cluster = cluster_for(server, tmp_path)
    Node.objects.create(cluster=cluster, name="gpu-01", pending_approval=True)
    Node.objects.create(cluster=cluster, name="ghost-01", pending_approval=True)

    report = cluster_sync(cluster=cluster)

    assert report.confirmed == ["gpu-01"]
    assert not Node.objects.get(name="gpu-01").pending_approval
    assert Node.objects.get(name="ghost-01").pending_approval


def test_outside_label_changes_keep_theirs_and_restore_ours(server, tmp_path):
    fill(server)
    cluster = cluster_for(server, tmp_path)
    cluster_sync(cluster=cluster)
    node = Node.objects.get(name="gpu-01")
    node.labels = {**node.labels, "suanchi.io/cluster": "prod"}
    node.save()
    with server._lock:
        live = server._store[("nodes", "", "gpu-01")]["metadata"]["labels"]
        live["team"] = "vision"  # someone else's label
        live["suanchi.io/pool"] = "hacked"  # ours, changed outside
        live["suanchi.io/extra"] = "x"  # ours, added outside
        server._bump(server._store[("nodes", "", "gpu-01")])

    report = cluster_sync(cluster=cluster)

    node.refresh_from_db()
    assert node.labels["team"] == "vision" and node.labels["suanchi.io/pool"] == "training"
    patch = PushAction.objects.get(cluster=cluster, kind="Node", name="gpu-01", state="pending")
    assert patch.verb == "patch"
    labels = patch.object["metadata"]["labels"]
    assert labels["suanchi.io/pool"] == "training" and labels["suanchi.io/extra"] is None
    assert labels["suanchi.io/cluster"] == "prod"
    assert report.patches == 1
    assert {"labels-kept", "suanchi-labels"} <= {d["drift"] for d in report.drift}
    # Until the patch is pushed, syncing again neither queues a second patch nor repeats the events.
    again = cluster_sync(cluster=cluster)
    assert again.patches == 0 and again.events == 0


def test_a_simulated_cluster_is_refused(db):
    cluster = Cluster.objects.create(name="Sim", slug="sim", backend="simulated")
    with pytest.raises(ValidationFailed, match="simulated"):
        cluster_sync(cluster=cluster)


# -- offline: the management command ---------------------------------------------------------------


def dump(srv, kind, tmp_path, name, as_list=False) -> str:
    items = srv.objects(kind)
    doc = (
        {"apiVersion": "v1", "kind": "List", "items": items}
        if as_list
        else {
            "apiVersion": "v1" if kind == "nodes" else "resource.k8s.io/v1",
            "kind": "NodeList" if kind == "nodes" else "ResourceSliceList",
            "metadata": {"resourceVersion": "1"},
            "items": [{k: v for k, v in i.items() if k not in ("kind", "apiVersion")} for i in items],
        }
    )
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def run(*args) -> dict:
    out = StringIO()
    call_command("cluster_sync", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def test_from_file_gives_the_same_result_offline_as_json(server, tmp_path):
    fill(server)
    server.add_resource_slice("gpu-01-slice", "gpu-01", "gpu.nvidia.com", slice_devices())
    nodes = dump(server, "nodes", tmp_path, "nodes.yaml", as_list=True)  # kubectl get nodes -o yaml
    slices = dump(server, "resourceslices", tmp_path, "slices.yaml")
    cluster = cluster_for(server, tmp_path)

    dry = run("--cluster", "prod", "--from-file", nodes, "--from-file", slices, "--dry-run")
    assert dry["dry_run"] and sorted(dry["created_nodes"]) == ["dcu-01", "gpu-01", "npu-01"]
    assert not Node.objects.filter(cluster=cluster).exists() and not DeviceEvent.objects.exists()

    out = run("--cluster", "prod", "--from-file", nodes, "--from-file", slices)
    by_name = {n["name"]: n for n in out["nodes"]}
    assert by_name["dcu-01"]["capacity"] == {"hygon.com/dcu": 4}
    assert by_name["dcu-01"]["allocatable"] == {"hygon.com/dcu": 3}
    assert by_name["npu-01"]["ready"] is False
    assert [s["uuid"] for s in out["slices"]] == NV_UUIDS and {s["node"] for s in out["slices"]} == {"gpu-01"}
    assert {d["drift"] for d in out["drift"]} == {"ready", "allocatable:hygon.com/dcu"}
    # The new cards have neither UUID nor PCI address (no driver publishes an index to match them
    # by): unknown stays unknown, no drift either.
    assert not Device.objects.filter(uuid__in=NV_UUIDS).exists()
    assert run("--cluster", "prod", "--from-file", nodes, "--from-file", slices)["events"] == 0


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not: [yaml", "is not YAML"),
        ("kind: PodList\nitems: []\n", "PodList is not a NodeList"),
        ("kind: List\nitems:\n- kind: Pod\n  metadata: {name: x}\n", "is a Pod"),
        ("kind: NodeList\nitems:\n- metadata: {}\n", "metadata.name is missing"),
        (
            "kind: NodeList\nitems:\n- metadata: {name: a}\n  status: {capacity: {nvidia.com/gpu: lots}}\n",
            "not a whole number",
        ),
        (
            "kind: ResourceSliceList\nitems:\n- metadata: {name: s}\n  spec: {nodeName: a}\n",
            "spec.driver is missing",
        ),
        ("kind: NodeList\nitems: 3\n", "items must be a list"),
    ],
)
def test_bad_files_are_a_clear_error_with_nothing_written(tmp_path, text, problem):
    Cluster.objects.create(name="Prod", slug="prod", backend="simulated")
    good = tmp_path / "good.yaml"
    good.write_text("kind: NodeList\nitems:\n- metadata: {name: gpu-09}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(CommandError, match=problem):
        call_command("cluster_sync", "--cluster", "prod", "--from-file", str(good), "--from-file", str(bad))
    assert not Node.objects.exists()


def test_an_unknown_cluster_names_the_known_ones(db):
    Cluster.objects.create(name="Prod", slug="prod", backend="simulated")
    with pytest.raises(CommandError, match="known: prod"):
        call_command("cluster_sync", "--cluster", "nope", "--from-file", "x.yaml")


def test_sync_input_load_reads_a_node_list_as_the_api_returns_it():
    loaded = sync_input_load(
        '{"kind": "NodeList", "apiVersion": "v1", "items": [{"metadata": {"name": "a"}}]}'
    )
    assert loaded == {"nodes": [{"metadata": {"name": "a"}}], "slices": []}


def test_bad_input_to_the_service_writes_nothing(db):
    cluster = Cluster.objects.create(name="Prod", slug="prod", backend="simulated")
    with pytest.raises(ValidationFailed, match="listed twice"):
        cluster_sync_apply(cluster=cluster, nodes=[{"metadata": {"name": "a"}}, {"metadata": {"name": "a"}}])
    assert not Node.objects.exists()


def test_the_admin_sync_action_writes_the_audit_record_of_each_node_it_creates(
    server, tmp_path, client, staff_user
):
    from django.contrib.admin import helpers
    from django.urls import reverse

    from apps.core.models import ChangeRecord

    fill(server)
    cluster = cluster_for(server, tmp_path)
    client.force_login(staff_user)
    url = reverse("admin:inventory_cluster_changelist")
    response = client.post(url, {"action": "sync_now", helpers.ACTION_CHECKBOX_NAME: [cluster.pk]})

    assert response.status_code == 302
    records = ChangeRecord.objects.filter(action="node.sync_create")
    assert records.count() == 3
    assert {r.actor_id for r in records} == {staff_user.pk}
