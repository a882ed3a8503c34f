"""A small fleet for job and scheduling tests: two NVIDIA A100 nodes, one Ascend node."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from apps.accounts.models import Membership
from apps.catalog.models import ComputeCoefficient, ComputeTemplate, DeviceModel
from apps.inventory.models import Cluster, Device, Node, Pool
from apps.scheduling.lifecycle import job_submit


@pytest.fixture
def a100(db):
    model = DeviceModel.objects.create(
        vendor="nvidia",
        kind="gpu",
        name="A100 80GB SXM4",
        slug="a100-80gb-sxm4",
        memory_mib=81920,
        bf16_dense_tflops=312,
        fp16_dense_tflops=312,
        features=["mig", "nvlink"],
        mig_profiles={"1g.10gb": 7, "2g.20gb": 3, "3g.40gb": 2, "7g.80gb": 1},
    )
    ComputeCoefficient.objects.create(
        device_model=model, value=Decimal("1.0000"), effective_from=date(2024, 1, 1)
    )
    return model


@pytest.fixture
def ascend(db):
    model = DeviceModel.objects.create(
        vendor="huawei",
        kind="npu",
        name="Ascend 910B3",
        slug="ascend-910b3",
        memory_mib=65536,
        ai_cores=20,
    )
    ComputeCoefficient.objects.create(
        device_model=model, value=Decimal("0.8000"), effective_from=date(2024, 1, 1), basis="policy"
    )
    return model


@pytest.fixture
def fleet(a100, ascend):
    cluster = Cluster.objects.create(name="Prod", slug="prod")
    pool = Pool.objects.create(cluster=cluster, name="training", slug="training")
    nodes = {}
    for name, model, count, driver in (
        ("gpu-01", a100, 4, "550.54.15"),
        ("gpu-02", a100, 4, "535.154.05"),
        ("npu-01", ascend, 8, "24.1.rc2"),
    ):
        vendor = model.vendor
        taints = [
            {
                "key": "accelerator",
                "value": "huawei-npu" if vendor == "huawei" else "nvidia-gpu",
                "effect": "NoSchedule",
            }
        ]
        node = Node.objects.create(
            cluster=cluster,
            pool=pool,
            name=name,
            driver_version=driver,
            taints=taints,
            cann_version="8.0.RC3" if vendor == "huawei" else "",
        )
        for i in range(count):
            Device.objects.create(
                node=node,
                vendor=vendor,
                index=i,
                uuid=f"{name}-{i}",
                device_model=model,
                topology_group=f"{name}-g0",
            )
        nodes[name] = node
    return nodes


@pytest.fixture
def member_project(make_user, make_project):
    user = make_user("alice")
    project = make_project("vision", members=[user])
    return user, project


@pytest.fixture
def half_a100(a100):
    return ComputeTemplate.objects.create(
        device_model=a100,
        name="A100 half",
        slug="a100-half",
        memory_mib=40960,
        compute_share=Decimal("50"),
        isolation="shared",
        max_instances=2,
    )


def set_role(user, project, role: str) -> None:
    Membership.objects.filter(user=user, project=project).update(role=role)


def submit_whole_cards(project, user, device_model, count: int = 1, **fields):
    """``user`` submits to ``project`` a job of ``count`` whole cards of ``device_model``;
    ``fields`` are job_submit's other arguments (``name`` and ``image`` default to "t" and "x")."""
    fields.setdefault("name", "t")
    fields.setdefault("image", "x")
    return job_submit(
        project=project,
        actor=user,
        request_kind="whole_cards",
        device_model=device_model,
        count=count,
        **fields,
    )
