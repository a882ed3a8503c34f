"""Demo jobs: a queue with placed slices, whole-card gangs, a neutral compute-unit request, seed 000
§3.2's mixed GPU + NPU request placed across one switch (cross-node), and one that waits with its
reason, so a new user sees the scheduler's decisions."""

from __future__ import annotations

from decimal import Decimal

from django.contrib.auth import get_user_model

from apps.accounts.models import Project
from apps.catalog.models import ComputeTemplate, DeviceModel, DeviceRequestTemplate
from apps.catalog.services import request_template_import
from apps.core.errors import ApplicationError
from apps.jobs.models import Job
from apps.scheduling.lifecycle import job_submit

# Seed 000 §3.2's mixed-training example, as the seed writes it (its apiVersion, model names and
# topology policy): one A100 40GB GPU and two Ascend 910B NPUs, all with RDMA, on one node, else on
# one switch. The demo fleet has no node with both, so it lands across a switch, marked cross-node.
SEED_MIXED_TRAINING = """\
apiVersion: scheduling.example.io/v1
kind: DeviceRequestTemplate
metadata:
  name: mixed-train-template
spec:
  devices:
    - type: GPU
      model: A100-NVL-40G
      count: 1
      shared: false
      needs: [RDMA]
    - type: NPU
      model: Ascend-910B
      count: 2
      shared: false
      needs: [RDMA]
  topologyPolicy:
    placement: sameNode
    preferred: sameSwitch
"""

JOBS = [
    # (project, user, name, fields)
    (
        "vision",
        "alice",
        "resnet50-train",
        {
            "kind": "training",
            "request_kind": "template",
            "template": ("A100 80GB SXM4", "3g.40gb"),
            "count": 2,
            "runtime_requirement": "cuda 12.2",
        },
    ),
    (
        "llm-train",
        "bob",
        "llama-pretrain",
        {
            "kind": "training",
            "request_kind": "whole_cards",
            "device_model": "A100 80GB SXM4",
            "count": 8,
            "checkpoint_dir": "/ckpt/llama",
            "max_retries": 3,
        },
    ),
    (
        "online-inference",
        "bob",
        "bert-serving",
        {"kind": "inference", "request_kind": "whole_cards", "device_model": "T4", "count": 1, "replicas": 2},
    ),
    (
        "llm-train",
        "alice",
        "qwen-finetune-ascend",
        {
            "kind": "finetune",
            "request_kind": "compute_units",
            "compute_units": Decimal("1.6"),
            "memory_mib": 65536,
            "allowed_vendors": ["huawei"],
            "runtime_requirement": "cann 8.0.RC3",
        },
    ),
    (
        "vision",
        "alice",
        "cuda13-experiment",
        {
            "kind": "batch",
            "request_kind": "whole_cards",
            "device_model": "A100 80GB SXM4",
            "count": 1,
            "runtime_requirement": "cuda 13.0",
        },
    ),
    (
        "llm-train",
        "bob",
        "mixed-train",
        {"kind": "training", "request_kind": "request_template", "request_template": "mixed-train-template"},
    ),
]


def _resolve(fields: dict) -> dict:
    out = dict(fields)
    if isinstance(out.get("template"), tuple):
        model, profile = out["template"]
        out["template"] = ComputeTemplate.objects.filter(
            device_model__name=model, partition_profile=profile, is_builtin=True
        ).first()
    if isinstance(out.get("device_model"), str):
        out["device_model"] = DeviceModel.objects.filter(name=out["device_model"]).first()
    if isinstance(out.get("request_template"), str):
        out["request_template"] = DeviceRequestTemplate.objects.filter(name=out["request_template"]).first()
    return out


def load(*, actor, stdout) -> int:
    User = get_user_model()
    created = 0
    # Through the import every user has (the page and POST /api/catalog/request-templates/import/);
    # the same document again is "unchanged" and writes nothing.
    request_template_import(text=SEED_MIXED_TRAINING, actor=actor)
    for project_slug, username, name, fields in JOBS:
        project = Project.objects.filter(slug=project_slug).first()
        user = User.objects.filter(username=username).first()
        if project is None or user is None or Job.objects.filter(project=project, name=name).exists():
            continue
        values = _resolve(fields)
        if any(values.get(key, 1) is None for key in ("template", "device_model", "request_template")):
            continue  # the catalog lacks it: nothing to demo
        try:
            job_submit(project=project, actor=user, name=name, image="registry.local/demo:latest", **values)
        except ApplicationError as exc:  # e.g. a runtime no driver of the fleet supports: refused at submit
            stdout.write(f"jobs: {name} refused as a user would see it: {exc.message}")
            continue
        created += 1
    return created
