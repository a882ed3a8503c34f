"""The demo fleet, mirroring the seeds (seed 001 §3.1 batch table, seed 004 node pools, and an A100
40GB node beside the 910B nodes on one switch for seed 000 §3.2's mixed GPU + NPU training example).

It arrives through the product's own paths: the ledger CSV import, node reports (nvidia-smi topo
and CSV outputs run through the real parsers), and the label service. Loading twice changes nothing.

Versions are real, paired releases from ``runtime-compat.yaml`` (CUDA 12.2 ↔ 535.x, CUDA 12.4 ↔
550.54.15, CANN 8.0.RC3 ↔ driver 24.1.rc2 / firmware 7.3.0.1.231, CANN 7.0.0 ↔ 23.0.3 / 7.1.0.5.220,
DTK 24.04.1 ↔ rock-5.7.1-6.2.13). Serial numbers and UUIDs are generated, deterministically.
"""

from __future__ import annotations

import csv
import io
import uuid
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from apps.accounts.models import Project
from apps.catalog.models import ComputeCoefficient, DeviceModel
from apps.catalog.services import compute_coefficient_set
from apps.clusters.outbox import node_patch_enqueue
from apps.inventory.models import AgentToken, Cluster, Device, Node, Pool
from apps.inventory.services import discovery, labels, ledger, tokens
from apps.inventory.services.ledger import IMPORT_COLUMNS

_NS = uuid.UUID("7d3c5f0e-5a1b-4b7e-9a55-5c1a2f0b9d11")
CLUSTER = ("demo", "Demo cluster (simulated)")
POOLS = [
    ("training", "Training 训练池", None, Decimal("1.00")),
    ("inference", "Inference 推理池", None, Decimal("1.20")),
    ("vision-dedicated", "Vision dedicated 视觉专属", "vision", Decimal("1.00")),
]
# HGX A100 bus ids: two per PCIe switch, four per NUMA node.
HGX_BUS = ["07", "0B", "48", "4C", "88", "8B", "C8", "CB"]


@dataclass(frozen=True)
class DemoNode:
    name: str
    pool: str
    vendor: str
    model: str  # catalog name
    count: int
    cpu_arch: str
    driver: str
    firmware: str
    rack: str
    switch: str
    cuda: str = ""
    cann: str = ""
    dtk: str = ""


NODES = [
    DemoNode(
        "a100-sxm-01",
        "training",
        "nvidia",
        "A100 80GB SXM4",
        8,
        "x86_64",
        "535.154.05",
        "92.00.01.00",
        "r01",
        "leaf-01",
        cuda="12.2",
    ),
    DemoNode(
        "a100-sxm-02",
        "training",
        "nvidia",
        "A100 80GB SXM4",
        8,
        "x86_64",
        "535.154.05",
        "92.00.01.00",
        "r01",
        "leaf-01",
        cuda="12.2",
    ),
    DemoNode(
        "a100-pcie-01",
        "vision-dedicated",
        "nvidia",
        "A100 80GB PCIe",
        4,
        "x86_64",
        "550.54.15",
        "92.00.9F.00.01",
        "r02",
        "leaf-02",
        cuda="12.4",
    ),
    DemoNode(
        "t4-infer-01",
        "inference",
        "nvidia",
        "T4",
        4,
        "x86_64",
        "535.154.05",
        "90.00.02.00",
        "r03",
        "leaf-02",
        cuda="12.2",
    ),
    DemoNode(
        "t4-infer-02",
        "inference",
        "nvidia",
        "T4",
        4,
        "x86_64",
        "535.154.05",
        "90.00.02.00",
        "r03",
        "leaf-02",
        cuda="12.2",
    ),
    DemoNode(
        "ascend-910b-01",
        "training",
        "huawei",
        "Ascend 910B3",
        8,
        "aarch64",
        "24.1.rc2",
        "7.3.0.1.231",
        "r04",
        "leaf-03",
        cann="8.0.RC3",
    ),
    DemoNode(
        "ascend-910b-02",
        "training",
        "huawei",
        "Ascend 910B4",
        8,
        "aarch64",
        "23.0.3",
        "7.1.0.5.220",
        "r04",
        "leaf-03",
        cann="7.0.0",
    ),
    DemoNode(
        "dcu-01",
        "inference",
        "hygon",
        "DCU Z100/Z100L",
        8,
        "x86_64",
        "rock-5.7.1-6.2.13-V1.0.1a",
        "",
        "r05",
        "leaf-03",
        dtk="24.04.1",
    ),
    # Seed 000 §3.2's mixed-training example asks for one A100 40GB GPU and two 910B NPUs, all with
    # RDMA; no node holds both, so it falls back to one switch: this node shares leaf-03 with the
    # 910B nodes. Its RDMA NICs arrive through its `nvidia-smi topo -m` report (``pcie_topo``); the
    # 910B's RoCE port is on the chip (catalog feature ``rdma``). CUDA 12.4 Update 1 ↔ 550.54.15
    # (runtime-compat.yaml); the VBIOS version is not recorded (no sourced value).
    DemoNode(
        "a100-40g-pcie-01",
        "training",
        "nvidia",
        "A100 40GB PCIe",
        4,
        "x86_64",
        "550.54.15",
        "",
        "r04",
        "leaf-03",
        cuda="12.4",
    ),
    # Issue 28: domestic cards beyond Ascend/DCU. Driver versions are the ones the published samples
    # printed (mx-smi 2.2.4 "Kernel Mode Driver Version: 2.15.9", BIOS 1.25.1.0; xpu-smi "Driver
    # Version: 5.0.21.21"; tests/inventory/fixtures/SOURCES.md). The 310P node runs the 910B nodes'
    # driver and CANN (a demo choice); its cards are advertised as huawei.com/Ascend310P.
    DemoNode(
        "metax-c550-01",
        "training",
        "metax",
        "C550",
        8,
        "x86_64",
        "2.15.9",
        "1.25.1.0",
        "r05",
        "leaf-03",
    ),
    DemoNode(
        "xpu-p800-01",
        "inference",
        "kunlunxin",
        "P800 OAM",
        8,
        "x86_64",
        "5.0.21.21",
        "",
        "r05",
        "leaf-03",
    ),
    DemoNode(
        "ascend-310p-01",
        "inference",
        "huawei",
        "Ascend 310P",
        4,
        "aarch64",
        "24.1.rc2",
        "7.3.0.1.231",
        "r04",
        "leaf-03",
        cann="8.0.RC3",
    ),
]
# PCIe GPU nodes whose `nvidia-smi topo -m` shows RDMA NICs (node name -> NICs, one per PCIe switch).
PCIE_RDMA_NICS = {"a100-40g-pcie-01": 2}
# The node the demo's agent token is bound to (its key is printed once by load_demo).
DEMO_AGENT_NODE = "t4-infer-01"
# A workstation node with a card the catalog does not know: recorded with its raw name and flagged.
UNKNOWN_NODE = ("dev-ws-01", "NVIDIA RTX PRO 6000 Blackwell Server Edition")
# Compute coefficients for models whose TFLOPS the catalog does not know. These are platform
# decisions for the demo (basis "policy"), not datasheet figures.
POLICY_COEFFICIENTS = {
    "Ascend 910B3": Decimal("0.8000"),
    "Ascend 910B4": Decimal("0.5000"),
    "DCU Z100/Z100L": Decimal("0.3000"),
    "Ascend 310P": Decimal("0.2000"),
    "C550": Decimal("0.6000"),
    "P800 OAM": Decimal("0.6000"),
}


def _device_uuid(node: str, index: int, vendor: str) -> str:
    value = uuid.uuid5(_NS, f"{node}/{index}")
    return f"GPU-{value}" if vendor == "nvidia" else str(value)


def _serial(node: DemoNode, index: int) -> str:
    digest = uuid.uuid5(_NS, f"serial/{node.name}/{index}").int
    prefix = {"nvidia": "1324023", "huawei": "033JNN", "hygon": "HYD", "metax": "MXC", "kunlunxin": "KLX"}[
        node.vendor
    ]
    return f"{prefix}{digest % 10**7:07d}"


def _bus(node: DemoNode, index: int) -> str:
    if node.count == 8 and node.vendor == "nvidia":
        return f"0000:{HGX_BUS[index]}:00.0"
    base = {"nvidia": 0x17, "huawei": 0xC1, "hygon": 0x1B, "metax": 0x0F, "kunlunxin": 0x03}[node.vendor]
    return f"0000:{(base + index * 0x10) % 0x100:02X}:00.0"  # a bus number is one byte


def fleet_csv() -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=IMPORT_COLUMNS)
    writer.writeheader()
    for node in NODES:
        for index in range(node.count):
            writer.writerow(
                {
                    "cluster": CLUSTER[0],
                    "pool": node.pool,
                    "node": node.name,
                    "node_status": "ready",
                    "cpu_arch": node.cpu_arch,
                    "driver_version": node.driver,
                    "cuda_version": node.cuda,
                    "cann_version": node.cann,
                    "rocm_version": "",
                    "dtk_version": node.dtk,
                    "rack": node.rack,
                    "switch": node.switch,
                    "vendor": node.vendor,
                    "device_index": index,
                    "device_model": node.model,
                    "uuid": _device_uuid(node.name, index, node.vendor),
                    "serial": _serial(node, index),
                    "pci_bus_id": _bus(node, index),
                    "numa_node": index * 2 // node.count,
                    "firmware_version": node.firmware,
                    "owner_project": "",
                    "topology_group": "",
                }
            )
    name, raw = UNKNOWN_NODE
    writer.writerow(
        {
            **dict.fromkeys(IMPORT_COLUMNS, ""),
            "cluster": CLUSTER[0],
            "node": name,
            "node_status": "ready",
            "cpu_arch": "x86_64",
            "driver_version": "580.65.06",
            "cuda_version": "13.0",
            "rack": "lab",
            "vendor": "nvidia",
            "device_index": 0,
            "device_model": raw,
            "uuid": _device_uuid(name, 0, "nvidia"),
            "serial": "1791025000001",
            "pci_bus_id": "0000:01:00.0",
            "numa_node": 0,
        }
    )
    return out.getvalue()


def nvswitch_topo(count: int, nics: int = 4) -> str:
    """`nvidia-smi topo -m` of an HGX A100 board: every GPU pair NV12, two GPUs per NIC switch."""
    gpus = [f"GPU{i}" for i in range(count)]
    nic_names = [f"NIC{i}" for i in range(nics)]
    header = "\t" + "\t".join(gpus + nic_names + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])
    lines = [header]
    for i in range(count):
        cells = ["X" if i == j else "NV12" for j in range(count)]
        for n in range(nics):
            cells.append("PXB" if i // 2 == n else ("NODE" if i // 4 == n // 2 else "SYS"))
        numa = i * 2 // count
        cpus = "0-63,128-191" if numa == 0 else "64-127,192-255"
        lines.append("\t".join([f"GPU{i}", *cells, cpus, str(numa), "", "N/A"]))
    for n in range(nics):
        cells = [("PXB" if i // 2 == n else ("NODE" if i // 4 == n // 2 else "SYS")) for i in range(count)]
        cells += ["X" if n == m else ("NODE" if n // 2 == m // 2 else "SYS") for m in range(nics)]
        lines.append("\t".join([f"NIC{n}", *cells, "", "", "", ""]))
    lines.append("")
    lines.append("Legend:")
    lines.append("")
    lines.append("  X    = Self")
    lines.append("  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes")
    lines.append("  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges")
    lines.append(
        "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)"
    )
    lines.append("  NV#  = Connection traversing a bonded set of # NVLinks")
    lines.append("")
    lines.append("NIC Legend:")
    lines.append("")
    for n in range(nics):
        lines.append(f"  NIC{n}: mlx5_{n}")
    return "\n".join(lines) + "\n"


def pcie_topo(count: int, nics: int) -> str:
    """`nvidia-smi topo -m` of a PCIe server: each NIC shares a PCIe switch with ``count // nics``
    GPUs (``PIX``), switches on the same CPU socket meet at its host bridge (``NODE``), otherwise
    ``SYS``. No NVLink bridges. The NICs are what make the node RDMA-capable in the ledger."""
    per = count // nics

    def switch(label: str) -> int:
        number = int(label[3:])
        return number // per if label.startswith("GPU") else number

    def numa(label: str) -> int:
        return switch(label) * 2 // nics

    def cell(a: str, b: str) -> str:
        if a == b:
            return "X"
        if switch(a) == switch(b):
            return "PIX"
        return "NODE" if numa(a) == numa(b) else "SYS"

    gpus = [f"GPU{i}" for i in range(count)]
    nic_names = [f"NIC{n}" for n in range(nics)]
    labels = gpus + nic_names
    lines = ["\t" + "\t".join(labels + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])]
    for gpu in gpus:
        cpus = "0-31,64-95" if numa(gpu) == 0 else "32-63,96-127"
        lines.append("\t".join([gpu, *(cell(gpu, b) for b in labels), cpus, str(numa(gpu)), "N/A"]))
    for nic in nic_names:
        lines.append("\t".join([nic, *(cell(nic, b) for b in labels), "", "", ""]))
    lines += [
        "",
        "Legend:",
        "",
        "  X    = Self",
        "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes",
        "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges",
        "  PIX  = Connection traversing at most a single PCIe bridge",
        "",
        "NIC Legend:",
        "",
        *(f"  NIC{n}: mlx5_{n}" for n in range(nics)),
    ]
    return "\n".join(lines) + "\n"


def t4_csv(node: DemoNode, present: list[int]) -> str:
    """`nvidia-smi --query-gpu=<agent fields> --format=csv,noheader,nounits` for the given cards."""
    rows = []
    for index in present:
        rows.append(
            ", ".join(
                [
                    str(index),
                    _device_uuid(node.name, index, node.vendor),
                    "Tesla T4",
                    _serial(node, index),
                    "0000" + _bus(node, index)[4:],
                    "15360",
                    node.driver,
                    node.firmware,
                    "0",
                    "0",
                    "31",
                    "27.43",
                ]
            )
        )
    return "\n".join(rows) + "\n"


def load(*, actor, stdout) -> dict:
    cluster = Cluster.objects.filter(slug=CLUSTER[0]).first()
    if cluster is None:
        cluster = Cluster.objects.create(
            slug=CLUSTER[0],
            name=CLUSTER[1],
            backend=Cluster.Backend.SIMULATED,
            device_plugin_modes={
                "nvidia": "plain",
                "huawei": "ascend-vnpu",
                "hygon": "plain",
                "metax": "plain",
                "kunlunxin": "plain",
            },
            description="The embedded demo: pods run in the simulated backend.",
        )
    for slug, name, owner, overcommit in POOLS:
        if not Pool.objects.filter(cluster=cluster, slug=slug).exists():
            Pool.objects.create(
                cluster=cluster,
                slug=slug,
                name=name,
                owner_project=Project.objects.filter(slug=owner).first() if owner else None,
                overcommit_factor=overcommit,
            )

    report = ledger.ledger_import_csv(data=fleet_csv(), actor=actor)

    # Topology (and the RDMA NICs next to the GPUs) through the real topo parser; one T4 missing from
    # its node's report: 掉卡.
    for node in NODES:
        if node.model == "A100 80GB SXM4":
            topo = nvswitch_topo(node.count)
        elif node.name in PCIE_RDMA_NICS:
            topo = pcie_topo(node.count, PCIE_RDMA_NICS[node.name])
        else:
            continue
        discovery.node_report_ingest(
            node_name=node.name, kind="nvidia-topo", text=topo, actor=actor, cluster=cluster
        )
    t4 = next(n for n in NODES if n.name == "t4-infer-02")
    discovery.node_report_ingest(
        node_name=t4.name, kind="nvidia-smi-csv", text=t4_csv(t4, [0, 1, 2]), actor=actor, cluster=cluster
    )

    # Two vision-owned cards on the shared A100 PCIe node and one quarantined card for the demo.
    vision = Project.objects.filter(slug="vision").first()
    for device in Device.objects.filter(
        node__name="a100-pcie-01", index__in=[0, 1], owner_project__isnull=True
    ):
        ledger.device_update(device=device, actor=actor, owner_project=vision)
    flaky = Device.objects.filter(node__name="a100-sxm-02", index=5).first()
    if (
        flaky is not None
        and flaky.pool_status == Device.PoolStatus.PRODUCTION
        and not flaky.events.filter(kind="quarantine").exists()
    ):
        ledger.device_pool_status_set(
            device=flaky,
            pool_status="quarantine",
            reason="XID 79 (fallen off the bus) twice this week",
            actor=actor,
        )

    for node in Node.objects.filter(cluster=cluster):
        if labels.node_labels_apply(node=node, actor=actor):
            node_patch_enqueue(node)

    for model_name, value in POLICY_COEFFICIENTS.items():
        model = DeviceModel.objects.filter(name=model_name).first()
        if model is not None and not ComputeCoefficient.objects.filter(device_model=model).exists():
            compute_coefficient_set(
                device_model=model,
                value=value,
                effective_from=date(2024, 1, 1),
                basis=ComputeCoefficient.Basis.POLICY,
                reason="demo: platform decision; the catalog has no TFLOPS figure for this model",
                actor=actor,
            )

    # The demo's agent token speaks for one node, as a real DaemonSet's token per node would: an
    # unbound one could report any node's cards lost (issue 27 §4).
    agent_key = None
    if not AgentToken.objects.filter(cluster=cluster).exclude(node_pattern="").exists():
        _, agent_key = tokens.agent_token_create(
            cluster=cluster,
            name=f"demo agent ({DEMO_AGENT_NODE})",
            node_pattern=DEMO_AGENT_NODE,
            actor=actor,
        )
    return {"import": report.as_dict(), "agent_key": agent_key, "agent_node": DEMO_AGENT_NODE}
