"""A small mixed ledger whose cards match the exporter fixtures in ``fixtures/``."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.inventory.models import Cluster, Device, Node, Pool

FIXTURES = Path(__file__).parent / "fixtures"

# (node, vendor, index, uuid, serial, pci bus id)
CARDS = [
    ("gpu-01", "nvidia", 0, "GPU-aaaaaaaa-0000-0000-0000-000000000000", "", "0000:1A:00.0"),
    ("gpu-01", "nvidia", 1, "GPU-bbbbbbbb-0000-0000-0000-000000000000", "", "0000:1B:00.0"),
    ("gpu-02", "nvidia", 0, "GPU-cccccccc-0000-0000-0000-000000000000", "", "0000:07:00.0"),
    ("npu-01", "huawei", 0, "5A3C2F10-0000-0000-0000-000000000001", "", "0000:C1:00.0"),
    ("npu-01", "huawei", 1, "5A3C2F10-0000-0000-0000-000000000002", "", "0000:C2:00.0"),
    ("amd-01", "amd", 0, None, "692251001124", ""),
    ("dcu-01", "hygon", 0, None, "HY2210A00042", "0000:3D:00.0"),
    ("mlu-01", "cambricon", 0, "MLU-20001234-1916-0000-0000-000000000000", "SN0000AB1234", ""),
]


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.fixture
def ledger(db):
    cluster = Cluster.objects.create(name="Telemetry", slug="tele")
    pool = Pool.objects.create(cluster=cluster, name="mixed", slug="mixed")
    nodes: dict[str, Node] = {}
    devices: dict[str, Device] = {}
    for node_name, vendor, index, uuid, serial, pci in CARDS:
        node = nodes.get(node_name) or Node.objects.create(cluster=cluster, pool=pool, name=node_name)
        nodes[node_name] = node
        device = Device.objects.create(
            node=node, vendor=vendor, index=index, uuid=uuid, serial=serial, pci_bus_id=pci, memory_mib=81920
        )
        devices[f"{node_name}/{index}"] = device
    return {"cluster": cluster, "pool": pool, "nodes": nodes, "devices": devices}


def make_job(project, name: str = "train", **extra):
    from apps.jobs.models import Job

    return Job.objects.create(
        project=project, name=name, image="registry.local/train:1", request_kind="whole_cards", **extra
    )


def allocate(job, device, *, start, end=None, milli: int = 1000, profile: str = "", memory_mib: int = 1024):
    import uuid as uuidlib

    from apps.jobs.models import Allocation

    return Allocation.objects.create(
        job=job,
        device=device,
        node=device.node,
        whole_card=milli == 1000 and not profile,
        memory_mib=memory_mib,
        compute_milli=milli,
        isolation="hard" if milli == 1000 or profile else "shared",
        partition_profile=profile,
        trace_id=uuidlib.uuid4(),
        started_at=start,
        released_at=end,
    )
