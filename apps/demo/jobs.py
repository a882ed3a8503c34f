"""Demo jobs: a queue with placed slices, whole-card gangs, a neutral compute-unit request and one
that waits with its reason, so a new user sees the scheduler's decisions."""

from __future__ import annotations

from decimal import Decimal

from django.contrib.auth import get_user_model

from apps.accounts.models import Project
from apps.catalog.models import ComputeTemplate, DeviceModel
from apps.core.errors import ApplicationError
from apps.jobs.models import Job
from apps.scheduling.lifecycle import job_submit

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
    return out


def load(*, actor, stdout) -> int:
    User = get_user_model()
    created = 0
    for project_slug, username, name, fields in JOBS:
        project = Project.objects.filter(slug=project_slug).first()
        user = User.objects.filter(username=username).first()
        if project is None or user is None or Job.objects.filter(project=project, name=name).exists():
            continue
        values = _resolve(fields)
        if values.get("template", 1) is None or values.get("device_model", 1) is None:
            continue  # the catalog lacks it: nothing to demo
        try:
            job_submit(project=project, actor=user, name=name, image="registry.local/demo:latest", **values)
        except ApplicationError as exc:  # e.g. a runtime no driver of the fleet supports: refused at submit
            stdout.write(f"jobs: {name} refused as a user would see it: {exc.message}")
            continue
        created += 1
    return created
