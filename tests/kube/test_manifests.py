"""Manifests for every device-plugin mode, validated offline with kubernetes-validate (strict)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from django.core.management import call_command
from kubernetes_validate.utils import resources_from_file

from apps.accounts.models import Project
from apps.clusters import manifests as m
from apps.inventory.models import Cluster, Device, Node
from apps.jobs.models import Allocation, Job, JobState
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards
from tests.kube.validation import assert_strict_valid

# The schema versions every rendered object is checked against: tests/kube/validation.py.
K8S_VERSION = "1.30.0"
PLATFORM_DIR = Path(__file__).resolve().parents[2] / "platform" / "kubernetes" / "base"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
TRACE = uuid.UUID("00000000-0000-4000-8000-00000000abcd")


def validate(obj: dict) -> None:
    assert_strict_valid(obj)
    meta = obj["metadata"]
    # Node and DeviceClass names are DNS subdomains (dots allowed), everything else a DNS label.
    assert DNS_LABEL.match(meta["name"]) or (
        obj["kind"] in ("Node", "DeviceClass") and all(DNS_LABEL.match(p) for p in meta["name"].split("."))
    ), meta["name"]
    if "namespace" in meta:
        assert DNS_LABEL.match(meta["namespace"])
    for labels in (
        meta.get("labels", {}),
        obj.get("spec", {}).get("template", {}).get("metadata", {}).get("labels", {}),
    ):
        for key, value in labels.items():
            assert m.valid_label_key(key), key
            assert LABEL_VALUE.match(value), (key, value)


# ---------------------------------------------------------------------------------------------------
# In-memory (unsaved) instances
# ---------------------------------------------------------------------------------------------------


def project() -> Project:
    return Project(slug="vision", name="Vision", namespace="vision")


def make_job(kind="training", **fields) -> Job:
    defaults = dict(
        id=42,
        project=project(),
        name="ResNet 50 / train!",
        kind=kind,
        image="pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
        command=["python3", "train.py"],
        env={"EPOCHS": 10},
        replicas=1,
        request_kind="whole_cards",
    )
    defaults.update(fields)
    return Job(**defaults)


def allocs(vendor, node_names, per_replica, *, profile="", memory=81920, milli=1000, first_index=0):
    """``per_replica`` devices on each listed node (one replica per node)."""
    result = []
    for replica, name in enumerate(node_names):
        node = Node(name=name)
        for i in range(per_replica):
            index = first_index + i
            device = Device(node=node, vendor=vendor, index=index, uuid=f"{vendor.upper()}-{name}-{index}")
            result.append(
                Allocation(
                    device=device,
                    node=node,
                    replica=replica,
                    memory_mib=memory,
                    compute_milli=milli,
                    whole_card=milli == 1000 and not profile,
                    partition_profile=profile,
                    trace_id=TRACE,
                )
            )
    return result


def container(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]["containers"][0]


def env(obj: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(obj)["env"]}


def limits(obj: dict) -> dict[str, str]:
    return container(obj)["resources"]["limits"]


def tolerations(obj: dict) -> list[dict]:
    return obj["spec"]["template"]["spec"].get("tolerations", [])


# ---------------------------------------------------------------------------------------------------
# Plugin modes and vendors
# ---------------------------------------------------------------------------------------------------


def test_plain_nvidia_job():
    job = make_job()
    obj = m.job_manifest(job, allocs("nvidia", ["gpu-01"], 2), Cluster(), attempt=0)
    validate(obj)
    assert obj["apiVersion"] == "batch/v1" and obj["kind"] == "Job"
    assert obj["metadata"]["name"] == "suanchi-42-a0"
    assert obj["metadata"]["namespace"] == "vision"
    assert obj["spec"]["backoffLimit"] == 0
    pod = obj["spec"]["template"]
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "gpu-01"}
    assert limits(obj) == {"nvidia.com/gpu": "2"}
    # The device plugin sets the visible devices (NVIDIA/nvidia-container-toolkit#27): never the pod.
    assert not set(env(obj)) & m.DEVICE_PLUGIN_ENV
    assert env(obj)["EPOCHS"] == "10"
    assert "SUANCHI_CHECKPOINT_DIR" not in env(obj)
    assert container(obj)["image"] == job.image and container(obj)["command"] == ["python3", "train.py"]
    assert container(obj)["name"] == "resnet-50-train"
    assert tolerations(obj) == [
        {"key": "accelerator", "operator": "Equal", "value": "nvidia-gpu", "effect": "NoSchedule"}
    ]
    for meta in (obj["metadata"], pod["metadata"]):
        assert meta["labels"]["suanchi.io/job"] == "42"
        assert meta["labels"]["suanchi.io/project"] == "vision"
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "suanchi"
        assert meta["annotations"]["suanchi.io/trace-id"] == str(TRACE)
        assert meta["annotations"]["suanchi.io/device-uuids"] == "NVIDIA-gpu-01-0,NVIDIA-gpu-01-1"
    assert "volumes" not in pod["spec"]


def test_mig_mixed_uses_the_profile_resource():
    cluster = Cluster(device_plugin_modes={"nvidia": "mig-mixed"})
    obj = m.job_manifest(
        make_job(),
        allocs("nvidia", ["gpu-01"], 1, profile="3g.40gb", memory=40960, milli=429),
        cluster,
        attempt=2,
    )
    validate(obj)
    assert obj["metadata"]["name"] == "suanchi-42-a2"
    assert limits(obj) == {"nvidia.com/mig-3g.40gb": "1"}
    assert obj["spec"]["template"]["metadata"]["labels"]["suanchi.io/attempt"] == "2"


def test_hami_memory_cores_and_uuid_pinning():
    cluster = Cluster(device_plugin_modes={"nvidia": "hami"})
    obj = m.job_manifest(
        make_job(kind="batch"),
        allocs("nvidia", ["gpu-02"], 1, memory=20480, milli=300, first_index=3),
        cluster,
        attempt=0,
    )
    validate(obj)
    assert limits(obj) == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20480", "nvidia.com/gpucores": "30"}
    annotations = obj["spec"]["template"]["metadata"]["annotations"]
    # HAMi: the UUID annotation is the binding (its scheduler reads it), no visible-devices variable.
    assert annotations["nvidia.com/use-gpuuuid"] == "NVIDIA-gpu-02-3"
    assert "NVIDIA_VISIBLE_DEVICES" not in env(obj)


def test_ascend_vnpu_with_driver_mount_and_resume_from_checkpoint():
    cluster = Cluster(device_plugin_modes={"huawei": "ascend-vnpu"})
    job = make_job(kind="finetune", checkpoint_dir="/ckpt/run-1", env={})
    alloc = allocs("huawei", ["npu-01"], 1, profile="vir05_1c_16g", memory=16384, milli=250, first_index=6)
    obj = m.job_manifest(job, alloc, cluster, attempt=1, checkpoint="/ckpt/run-1/step-900")
    validate(obj)
    assert limits(obj) == {"huawei.com/Ascend910-5c.1cpu.16g": "1"}
    assert "ASCEND_VISIBLE_DEVICES" not in env(obj)
    assert env(obj)["SUANCHI_CHECKPOINT_DIR"] == "/ckpt/run-1"
    assert env(obj)["SUANCHI_RESUME_FROM"] == "/ckpt/run-1/step-900"
    spec = obj["spec"]["template"]["spec"]
    assert spec["volumes"] == [
        {"name": "ascend-driver", "hostPath": {"path": "/usr/local/Ascend/driver", "type": "Directory"}}
    ]
    assert container(obj)["volumeMounts"] == [
        {"name": "ascend-driver", "mountPath": "/usr/local/Ascend/driver", "readOnly": True}
    ]
    assert tolerations(obj) == [
        {"key": "accelerator", "operator": "Equal", "value": "huawei-npu", "effect": "NoSchedule"}
    ]
    # First attempt without an explicit checkpoint: the directory is set, nothing to resume from.
    first = m.job_manifest(job, alloc, cluster, attempt=0)
    assert "SUANCHI_RESUME_FROM" not in env(first)
    # A retry without an explicit checkpoint resumes from the directory (newest checkpoint inside).
    assert env(m.job_manifest(job, alloc, cluster, attempt=1))["SUANCHI_RESUME_FROM"] == "/ckpt/run-1"


def test_plain_ascend_whole_cards():
    obj = m.job_manifest(make_job(), allocs("huawei", ["npu-01"], 8), Cluster(), attempt=0)
    validate(obj)
    assert limits(obj) == {"huawei.com/Ascend910": "8"}
    assert not set(env(obj)) & m.DEVICE_PLUGIN_ENV


@pytest.mark.parametrize(
    ("profile", "resource"),
    [
        ("vir05_1c_16g", "huawei.com/Ascend910-5c.1cpu.16g"),
        ("vir03_1c_8g", "huawei.com/Ascend910-3c.1cpu.8g"),
        ("vir12_3c_32g", "huawei.com/Ascend910-12c.3cpu.32g"),
        ("vir02", "huawei.com/Ascend910-2c"),
        ("vir16", "huawei.com/Ascend910-16c"),
    ],
)
def test_vnpu_resource_names_follow_the_catalog(profile, resource):
    assert m.vnpu_resource_name(profile) == resource


def test_hygon_plain_deployment_across_nodes_is_one_deployment_per_node():
    job = make_job(kind="inference", replicas=2, tolerations=[{"key": "team", "operator": "Exists"}])
    objects = m.workload_objects(job, allocs("hygon", ["dcu-01", "dcu-02"], 1), Cluster(), attempt=0)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Deployment", "suanchi-42-n0"),
        ("Deployment", "suanchi-42-n1"),
    ]
    for obj, node in zip(objects, ["dcu-01", "dcu-02"], strict=True):
        validate(obj)
        assert obj["spec"]["replicas"] == 1
        # Each Deployment selects only its own pods (the other node's carry another workload label).
        selector = obj["spec"]["selector"]["matchLabels"]
        assert selector.items() <= obj["spec"]["template"]["metadata"]["labels"].items()
        assert selector["suanchi.io/workload"] == obj["metadata"]["name"]
        assert limits(obj) == {"hygon.com/dcu": "1"}
        assert "HIP_VISIBLE_DEVICES" not in env(obj)
        spec = obj["spec"]["template"]["spec"]
        assert spec["restartPolicy"] == "Always"
        assert spec["nodeSelector"] == {"kubernetes.io/hostname": node}
        assert "affinity" not in spec
        assert tolerations(obj) == [
            {"key": "accelerator", "operator": "Equal", "value": "hygon-dcu", "effect": "NoSchedule"},
            {"key": "team", "operator": "Exists"},
        ]
    # On one node the Deployment keeps its plain name and the job's replica count.
    single = m.deployment_manifest(job, allocs("hygon", ["dcu-01"], 1), Cluster())
    assert single["metadata"]["name"] == "suanchi-42" and single["spec"]["replicas"] == 2
    assert "suanchi.io/workload" not in single["spec"]["selector"]["matchLabels"]


def test_cross_node_training_job_is_one_pinned_job_per_replica():
    objects = m.workload_objects(
        make_job(replicas=2), allocs("nvidia", ["gpu-01", "gpu-02"], 4), Cluster(), attempt=0
    )
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Service", "suanchi-42-a0"),
        ("Job", "suanchi-42-a0-r0"),
        ("Job", "suanchi-42-a0-r1"),
    ]
    service, *jobs = objects
    validate(service)
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    for rank, (obj, node) in enumerate(zip(jobs, ["gpu-01", "gpu-02"], strict=True)):
        validate(obj)
        assert obj["spec"]["parallelism"] == obj["spec"]["completions"] == 1
        assert "completionMode" not in obj["spec"]
        pod = obj["spec"]["template"]
        assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": node}
        assert pod["spec"]["hostname"] == f"r{rank}" and pod["spec"]["subdomain"] == "suanchi-42-a0"
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        assert limits(obj) == {"nvidia.com/gpu": "4"}
        assert {
            k: env(obj)[k] for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "NODE_RANK")
        } == {
            "MASTER_ADDR": "r0.suanchi-42-a0.vision.svc",
            "MASTER_PORT": "29500",
            "WORLD_SIZE": "2",
            "RANK": str(rank),
            "NODE_RANK": str(rank),
        }
        placement = json.loads(pod["metadata"]["annotations"]["suanchi.io/placement"])
        assert placement == {str(rank): {"node": node, "devices": [f"NVIDIA-{node}-{i}" for i in range(4)]}}


def test_ascend_gang_mounts_the_rank_table_when_the_job_asks():
    job = make_job(replicas=2, env={"RANK_TABLE_FILE": "/tmp/hccl.json"})
    objects = m.workload_objects(job, allocs("huawei", ["npu-01", "npu-02"], 8), Cluster(), attempt=1)
    configmap = objects[0]
    validate(configmap)
    assert configmap["kind"] == "ConfigMap" and configmap["metadata"]["name"] == "rings-config-suanchi-42-a1"
    assert json.loads(configmap["data"]["hccl.json"]) == {"status": "initializing"}
    for obj in objects[2:]:
        validate(obj)
        assert env(obj)["RANK_TABLE_FILE"] == "/user/serverid/devindex/config/hccl.json"
        assert {"name": "rank-table", "configMap": {"name": "rings-config-suanchi-42-a1"}} in obj["spec"][
            "template"
        ]["spec"]["volumes"]
    # Without the variable there is no rank table (and an NVIDIA gang never gets one).
    plain = m.workload_objects(make_job(replicas=2), allocs("huawei", ["n1", "n2"], 8), Cluster(), attempt=0)
    assert [o["kind"] for o in plain] == ["Service", "Job", "Job"]
    assert "RANK_TABLE_FILE" not in env(plain[1])


@pytest.mark.parametrize(("vendor", "resource"), [("amd", "amd.com/gpu"), ("cambricon", "cambricon.com/mlu")])
def test_other_vendors_plain(vendor, resource):
    obj = m.job_manifest(make_job(), allocs(vendor, ["n1"], 2), Cluster(), attempt=0)
    validate(obj)
    assert limits(obj) == {resource: "2"}


def test_foreign_modes_fall_back_to_plain_and_dra_without_a_driver_says_so():
    cluster = Cluster(device_plugin_modes={"nvidia": "hami", "huawei": "dra"})
    assert limits(
        m.job_manifest(
            make_job(), allocs("huawei", ["n"], 1), Cluster(device_plugin_modes={"huawei": "hami"}), attempt=0
        )
    ) == {"huawei.com/Ascend910": "1"}
    objects = m.workload_objects(make_job(), allocs("huawei", ["n"], 2), cluster, attempt=0)
    assert [o["kind"] for o in objects] == ["Job"]  # no claim: Huawei's DRA driver is mode ascend-dra
    (obj,) = objects
    assert limits(obj) == {"huawei.com/Ascend910": "2"}
    assert "is mode ascend-dra" in obj["metadata"]["annotations"]["suanchi.io/dra-fallback"]
    assert "resourceClaims" not in obj["spec"]["template"]["spec"]


def test_names_and_labels_are_sanitised():
    weird = Project(slug="Team_X", name="x", namespace="team-x")
    job = make_job(project=weird, name="--Ünïcode job__", id=7)
    obj = m.job_manifest(job, allocs("nvidia", ["gpu-01"], 1), Cluster(), attempt=3)
    validate(obj)
    assert obj["metadata"]["labels"]["suanchi.io/project"] == "Team_X"
    assert m.dns_label("A__B..c--") == "a-b-c"
    assert m.dns_label("x" * 100) == "x" * 63
    assert m.label_value("-.a b/c._") == "a-b-c"
    with pytest.raises(ValueError):
        m.job_manifest(job, [], Cluster(), attempt=0)


def test_namespace_quota_and_node_patch():
    ns = m.namespace_manifest(project())
    validate(ns)
    assert ns["metadata"] == {
        "name": "vision",
        "labels": {"app.kubernetes.io/managed-by": "suanchi", "suanchi.io/project": "vision"},
    }
    quota = m.resource_quota_manifest(
        project(), {"nvidia.com/gpu": 8, "huawei.com/Ascend910": 16, "pods": 50}
    )
    validate(quota)
    # Extended resources are quota'd as requests.<name> only (limits.<name> is never counted).
    assert quota["spec"]["hard"] == {
        "requests.huawei.com/Ascend910": "16",
        "requests.nvidia.com/gpu": "8",
        "pods": "50",
    }
    node = Node(
        name="npu-01",
        labels={"accelerator": "huawei-npu", "gpu-brand": "huawei", "npu-model": "910b", "bad key!": "x"},
        taints=[
            {"key": "accelerator", "value": "huawei-npu", "effect": "NoSchedule"},
            {"key": "suanchi.io/quarantine", "value": "", "effect": "NoExecute"},
        ],
    )
    patch = m.node_patch(node)
    validate(patch)
    assert patch["metadata"]["labels"] == {
        "accelerator": "huawei-npu",
        "gpu-brand": "huawei",
        "npu-model": "910b",
    }
    assert patch["spec"]["taints"] == [
        {"key": "accelerator", "effect": "NoSchedule", "value": "huawei-npu"},
        {"key": "suanchi.io/quarantine", "effect": "NoExecute"},
    ]


def test_strict_validation_catches_unknown_fields():
    obj = m.job_manifest(make_job(), allocs("nvidia", ["gpu-01"], 1), Cluster(), attempt=0)
    obj["spec"]["template"]["spec"]["containers"][0]["gpus"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


# ---------------------------------------------------------------------------------------------------
# platform/kubernetes (deploying Suanchi itself)
# ---------------------------------------------------------------------------------------------------


def test_platform_manifests_validate_and_are_all_in_the_kustomization():
    kustomization = yaml.safe_load((PLATFORM_DIR / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    files = {p.name for p in PLATFORM_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == files
    assert not list(PLATFORM_DIR.rglob("*.py"))
    kinds = []
    for name in sorted(files):
        for resource in resources_from_file(str(PLATFORM_DIR / name)):
            validate(resource)
            kinds.append(resource["kind"])
    assert sorted(kinds) == sorted(
        [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Secret",
            "ConfigMap",
            "Deployment",
            "Deployment",
            "Deployment",
            "Service",
        ]
    )


def test_platform_ships_the_dra_device_classes_the_claims_name():
    dra = PLATFORM_DIR.parent / "dra"
    kustomization = yaml.safe_load((dra / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["deviceclasses.yaml"]
    shipped = resources_from_file(str(dra / "deviceclasses.yaml"))
    for resource in shipped:
        validate(resource)
    # The file is what the code renders (render_manifests --all writes the same objects).
    assert shipped == m.device_class_manifests()
    assert [r["metadata"]["name"] for r in shipped] == [
        "gpu.nvidia.com",
        "mig.nvidia.com",
        "gpu.amd.com",
        "dra.hygon.com",
        "hami-vnpu-core.project-hami.io",
    ]


def test_platform_rbac_grants_only_the_worker_verbs():
    role = yaml.safe_load((PLATFORM_DIR / "clusterrole.yaml").read_text())
    granted = {
        (group, resource): set(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    full = {"create", "get", "list", "watch", "patch", "delete"}
    assert granted == {
        ("", "namespaces"): full,
        ("", "pods"): full,
        ("", "resourcequotas"): full,
        ("batch", "jobs"): full,
        ("apps", "deployments"): full,
        ("", "nodes"): {"get", "list", "watch", "patch"},
        ("", "events"): {"get", "list", "watch"},
        ("apps", "daemonsets"): {"get", "list"},
        ("resource.k8s.io", "resourceslices"): {"get", "list", "watch"},
        ("resource.k8s.io", "deviceclasses"): {"get", "list", "watch"},
        ("resource.k8s.io", "resourceclaims"): full,
        ("resource.k8s.io", "resourceclaimtemplates"): full,
        ("", "services"): full,
        ("", "configmaps"): full,
        ("authorization.k8s.io", "selfsubjectaccessreviews"): {"create"},
    }
    # Every verb Test connection asks the cluster about is one the shipped role grants.
    from apps.clusters.connect import VERBS

    assert [
        (verb, group, res) for verb, group, res in VERBS if verb not in granted.get((group, res), ())
    ] == []
    worker = yaml.safe_load((PLATFORM_DIR / "worker-deployment.yaml").read_text())
    assert worker["spec"]["template"]["spec"]["serviceAccountName"] == "suanchi-worker"
    web = yaml.safe_load((PLATFORM_DIR / "web-deployment.yaml").read_text())
    web_container = web["spec"]["template"]["spec"]["containers"][0]
    assert web_container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert web_container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert {"secretRef": {"name": "suanchi-secrets"}} in web_container["envFrom"]


# ---------------------------------------------------------------------------------------------------
# render_manifests on a small database
# ---------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_render_manifests_all_writes_valid_files(fleet, member_project, a100, ascend, tmp_path, capsys):
    user, project = member_project
    Cluster.objects.filter(slug="prod").update(device_plugin_modes={"huawei": "plain"})
    train = submit_whole_cards(
        project, user, a100, 2, name="train", image="pytorch:2.3", checkpoint_dir="/ckpt/train"
    )
    serve = submit_whole_cards(
        project, user, ascend, name="serve", kind="inference", image="vllm:0.6", replicas=2
    )
    scheduling_cycle_run()
    for job in (train, serve):
        job.refresh_from_db()
        assert job.state == JobState.SCHEDULED, job.state_reason
    Job.objects.filter(pk=train.pk).update(state=JobState.RUNNING)

    call_command("render_manifests", "--all", "--out", str(tmp_path))
    classes = [f"deviceclass-_cluster-{c['metadata']['name']}.yaml" for c in m.device_class_manifests()]
    assert f"wrote {6 + len(classes)} objects" in capsys.readouterr().out
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted(
        [
            f"deployment-vision-suanchi-{serve.pk}.yaml",
            *classes,
            f"job-vision-suanchi-{train.pk}-a{train.attempt}.yaml",
            "namespace-_cluster-vision.yaml",
            "node-_cluster-gpu-01.yaml",
            "node-_cluster-gpu-02.yaml",
            "node-_cluster-npu-01.yaml",
        ]
    )
    for path in tmp_path.iterdir():
        for resource in resources_from_file(str(path)):
            validate(resource)
    job_obj = yaml.safe_load((tmp_path / f"job-vision-suanchi-{train.pk}-a{train.attempt}.yaml").read_text())
    assert limits(job_obj) == {"nvidia.com/gpu": "2"}
    assert env(job_obj)["SUANCHI_CHECKPOINT_DIR"] == "/ckpt/train"
    deployment = yaml.safe_load((tmp_path / f"deployment-vision-suanchi-{serve.pk}.yaml").read_text())
    assert deployment["spec"]["replicas"] == 2
    assert limits(deployment) == {"huawei.com/Ascend910": "1"}
    assert (
        deployment["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"] == "/usr/local/Ascend/driver"
    )
    assert str(train.last_trace_id or "") in job_obj["metadata"]["annotations"]["suanchi.io/trace-id"]

    one = tmp_path / "one"
    call_command("render_manifests", "--job", str(train.pk), "--out", str(one))
    assert len(list(one.iterdir())) == 2


@pytest.mark.django_db
def test_render_manifests_refuses_a_job_that_is_not_active(db, tmp_path):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="not scheduled / running"):
        call_command("render_manifests", "--job", "999999", "--out", str(tmp_path))
