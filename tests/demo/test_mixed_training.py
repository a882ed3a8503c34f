"""Seed 000 §3.2 on the demo fleet: the mixed GPU + NPU training example, as the seed writes it, is
placed through its sameSwitch fallback (one A100 40GB node beside the 910B nodes, RDMA on both) and
the job page marks it cross-node; both orders of the topology policy work, through the pages and the
API; the cross-node job runs as one pinned pod per node on the simulated cluster."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.urls import reverse
from rest_framework.test import APIClient

from apps.catalog.models import DeviceRequestTemplate
from apps.clusters.connections import backend_for
from apps.clusters.models import PushAction
from apps.clusters.pusher import push_due_streams, push_stream_run
from apps.core.models import ChangeRecord
from apps.demo.jobs import SEED_MIXED_TRAINING
from apps.inventory.models import Cluster, Device, DeviceEvent, DeviceLink, Node
from apps.jobs.models import Allocation, Job, JobState
from apps.scheduling.models import DecisionTrace
from apps.scheduling.reconcile import reconcile_all
from apps.scheduling.services import scheduling_cycle_run
from apps.scheduling.snapshot import fleet_snapshot

pytestmark = pytest.mark.django_db

NODE = "a100-40g-pcie-01"

# Seed 000 §3.2, key for key, as the demo imports it.
SEED_DOCUMENT = SEED_MIXED_TRAINING


def _document(name: str, placement: str, preferred: str | None) -> str:
    text = SEED_DOCUMENT.replace("name: mixed-train-template", f"name: {name}")
    text = text.replace("    placement: sameNode\n", f"    placement: {placement}\n")
    if preferred is None:
        return text.replace("    preferred: sameSwitch\n", "")
    return text.replace("    preferred: sameSwitch\n", f"    preferred: {preferred}\n")


def _user(name: str):
    return get_user_model().objects.get(username=name)


def _push_all() -> int:
    applied = 0
    for _ in range(5):  # bounded: streams written while pushing are picked up next round
        streams = push_due_streams(limit=1000)
        if not streams:
            break
        for stream in streams:
            applied += push_stream_run(stream=stream)["applied"]
    return applied


def _live(job: Job):
    return job.allocations.filter(released_at__isnull=True).select_related("node", "device__device_model")


def _assert_across_the_switch(job: Job) -> None:
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED, (job.name, job.state, job.state_reason)
    rows = list(_live(job))
    gpus = [a for a in rows if a.device.vendor == "nvidia"]
    npus = [a for a in rows if a.device.vendor == "huawei"]
    assert len(rows) == 3 and len(gpus) == 1 and len(npus) == 2
    assert gpus[0].node.name == NODE and gpus[0].device.device_model.name == "A100 40GB PCIe"
    assert {a.device.device_model.name[:11] for a in npus} == {"Ascend 910B"}
    assert len({a.node_id for a in npus}) == 1  # the NPU group stays on one node
    assert npus[0].node.name != NODE and npus[0].node.switch == gpus[0].node.switch == "leaf-03"
    assert all(a.whole_card for a in rows)  # shared: false
    trace = DecisionTrace.objects.get(trace_id=job.last_trace_id)
    assert trace.outcome == DecisionTrace.Outcome.PLACED and trace.placement["cross_node"] is True
    fallback = [s["message"] for s in trace.steps if s["tier"] == "fallback"]
    assert fallback[0] == "no single node holds every group; trying sameSwitch"
    assert "under switch leaf-03; marked cross-node" in fallback[-1]


def _page_says_cross_node(client, job: Job) -> bool:
    page = client.get(reverse("jobs:detail", args=[job.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    section = re.search(r'<section[^>]*id="why-this-card".*?</section>', html, re.S)
    assert section is not None, "the job page has no 'Why this card?' section"
    return re.search(r'<span class="badge[^"]*">\s*cross-node\s*</span>', section.group(0)) is not None


def test_the_demo_fleet_has_an_rdma_a100_40gb_node_on_the_910b_switch_and_loading_twice_changes_nothing(
    capsys,
):
    call_command("load_demo")
    capsys.readouterr()
    node = Node.objects.get(name=NODE)
    ascend = Node.objects.get(name="ascend-910b-01")
    assert node.switch == ascend.switch == "leaf-03" and node.rack == ascend.rack
    assert (node.driver_version, node.cuda_version, node.status) == ("550.54.15", "12.4", "ready")
    cards = list(node.devices.order_by("index").select_related("device_model"))
    assert [c.device_model.name for c in cards] == ["A100 40GB PCIe"] * 4
    assert all(c.health == "healthy" and c.uuid.startswith("GPU-") for c in cards)
    # The topo report's NICs (one per PCIe switch, next to two GPUs) are the node's RDMA capability.
    assert node.rdma_nics == [
        {"name": "mlx5_0", "alias": "NIC0", "nearest_gpus": [0, 1]},
        {"name": "mlx5_1", "alias": "NIC1", "nearest_gpus": [2, 3]},
    ]
    assert cards[0].pcie_switch == cards[1].pcie_switch != cards[2].pcie_switch == cards[3].pcie_switch
    assert node.labels["suanchi.io/pool"] == "training" and node.labels["accelerator"] == "nvidia-gpu"
    # The scheduler sees RDMA on both kinds of card (NVIDIA: the NICs; 910B: RoCE on the chip).
    snapshot = fleet_snapshot(empty=True)
    assert all("rdma" in d.features and d.model == "A100 40GB PCIe" for d in snapshot.by_name[NODE].devices)
    assert all("rdma" in d.features for d in snapshot.by_name["ascend-910b-01"].devices)
    # The driver/CUDA pair is one the compatibility matrix accepts.
    api = APIClient()
    api.force_authenticate(_user("admin"))
    check = api.get(f"/api/inventory/nodes/{node.pk}/precheck/", {"requirement": "cuda 12.4"})
    assert check.status_code == 200 and check.json()["ok"] is True, check.json()

    def counts():
        return (
            Node.objects.count(),
            Device.objects.count(),
            DeviceEvent.objects.count(),
            DeviceLink.objects.count(),
            ChangeRecord.objects.filter(action__in=["request_template.import", "node.labels"]).count(),
            DeviceRequestTemplate.objects.count(),
            Job.objects.filter(name="mixed-train").count(),
        )

    before, nics = counts(), node.rdma_nics
    assert before[-2:] == (1, 1)
    call_command("load_demo")
    capsys.readouterr()
    assert counts() == before
    node.refresh_from_db()
    assert node.rdma_nics == nics


def test_the_seed_example_is_placed_across_the_switch_marked_cross_node_and_runs_one_pod_per_node(
    client, capsys
):
    call_command("load_demo")
    capsys.readouterr()
    template = DeviceRequestTemplate.objects.get(name="mixed-train-template")
    assert template.api_version == "scheduling.example.io/v1"
    assert [d["model"] for d in template.devices] == ["A100-NVL-40G", "Ascend-910B"]
    assert template.topology_policy == {"placement": "sameNode", "preferred": "sameSwitch"}
    job = Job.objects.get(name="mixed-train", project__slug="llm-train")
    assert job.request_template_id == template.pk
    _assert_across_the_switch(job)

    client.force_login(job.submitted_by)
    assert _page_says_cross_node(client, job)
    event = job.events.filter(to_state=JobState.SCHEDULED).get()
    assert event.message.endswith("(cross-node)") and NODE in event.message

    # One pod template never spans nodes: each node's part is its own batch Job, pinned to that node.
    assert _push_all() > 0
    assert not PushAction.objects.filter(state=PushAction.State.FAILED).exists()
    workloads = PushAction.objects.filter(job=job, kind="Job", verb=PushAction.Verb.APPLY)
    pinned = {
        w.object["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"] for w in workloads
    }
    assert pinned == {a.node.name for a in _live(job)} and len(pinned) == 2
    backend = backend_for(Cluster.objects.get(slug="demo"))
    backend.advance(10)
    reconcile_all()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING, job.state_reason
    backend.advance(2 * 24 * 3600)
    reconcile_all()
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.state_reason
    assert not _live(job).exists()


def test_the_seed_document_through_the_pages_and_both_policy_orders_through_the_api(client, capsys):
    call_command("load_demo")
    capsys.readouterr()
    # Let the demo's batch jobs finish first, so the cards the new jobs need are free.
    _push_all()
    backend = backend_for(Cluster.objects.get(slug="demo"))
    backend.advance(2 * 24 * 3600)
    reconcile_all()
    assert not Allocation.objects.filter(job__name="mixed-train", released_at__isnull=True).exists()

    # Staff import the seed's text on the import page (the demo already did: unchanged, same reading).
    client.force_login(_user("admin"))
    page = client.post(reverse("catalog:request-template-import"), {"document": SEED_DOCUMENT}, follow=True)
    assert page.status_code == 200
    assert "Request template mixed-train-template is unchanged." in page.content.decode()
    template = DeviceRequestTemplate.objects.get(name="mixed-train-template")

    # A member submits it on the submit page.
    client.force_login(_user("alice"))
    project = _user("alice").memberships.get(project__slug="llm-train").project
    response = client.post(
        reverse("jobs:submit"),
        {
            "project": project.pk,
            "name": "mixed-from-the-page",
            "kind": "training",
            "image": "registry.local/demo:latest",
            "request_kind": "request_template",
            "request_template": template.pk,
            "replicas": 1,
            "priority_class": "normal",
            "max_retries": 0,
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    from_page = Job.objects.get(name="mixed-from-the-page")
    assert response["Location"] == reverse("jobs:detail", args=[from_page.pk])

    # The other order (sameSwitch required, sameNode preferred) through the API, as YAML.
    api = APIClient()
    api.force_authenticate(_user("admin"))
    imported = api.post(
        "/api/catalog/request-templates/import/",
        _document("mixed-train-switch-first", "sameSwitch", "sameNode"),
        content_type="application/yaml",
    )
    assert imported.status_code == 201, imported.json()
    api.force_authenticate(_user("bob"))
    submitted = api.post(
        "/api/jobs/jobs/",
        {
            "project": "llm-train",
            "name": "mixed-switch-first",
            "image": "registry.local/demo:latest",
            "request_kind": "request_template",
            "request_template": "mixed-train-switch-first",
        },
        format="json",
    )
    assert submitted.status_code == 201, submitted.json()
    # Without a fallback the same request has no home on this fleet: refused at submit, saying why.
    api.force_authenticate(_user("admin"))
    strict = api.post(
        "/api/catalog/request-templates/import/",
        _document("mixed-train-same-node-only", "sameNode", None),
        content_type="application/yaml",
    )
    assert strict.status_code == 201, strict.json()
    api.force_authenticate(_user("bob"))
    refused = api.post(
        "/api/jobs/jobs/",
        {
            "project": "llm-train",
            "name": "mixed-same-node-only",
            "image": "registry.local/demo:latest",
            "request_kind": "request_template",
            "request_template": "mixed-train-same-node-only",
        },
        format="json",
    )
    assert refused.status_code == 400, refused.json()
    assert "No device in the fleet could ever satisfy this request" in refused.json()["error"]["message"]
    assert not Job.objects.filter(name="mixed-same-node-only").exists()

    scheduling_cycle_run()
    switch_first = Job.objects.get(name="mixed-switch-first")
    _assert_across_the_switch(from_page)
    _assert_across_the_switch(switch_first)
    assert _page_says_cross_node(client, from_page)
    client.force_login(_user("bob"))
    assert _page_says_cross_node(client, switch_first)
    trace = api.get(f"/api/jobs/jobs/{switch_first.pk}/trace/")
    assert trace.status_code == 200 and trace.json()["placement"]["cross_node"] is True
