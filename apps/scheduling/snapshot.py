"""The ledger as an engine Snapshot: nodes, devices, pools and the active allocations."""

from __future__ import annotations

from collections import defaultdict

from apps.inventory.models import Device, Node, Pool
from apps.jobs.models import Allocation
from apps.scheduling.engine.model import WHOLE, Placement, Snapshot

# Vendor device kinds, for cards whose model the catalog does not know.
_KIND_BY_VENDOR = {
    "nvidia": "gpu",
    "amd": "gpu",
    "huawei": "npu",
    "hygon": "dcu",
    "cambricon": "mlu",
    "intel": "hpu",
}
_LINK_FEATURES = {"nvidia": "nvlink", "huawei": "hccs", "amd": "xgmi", "cambricon": "mlulink"}


def _device_record(device: Device, *, gray_opt_in: bool, empty: bool, rdma_nodes: set[int]) -> dict:
    model = device.device_model
    features = set(model.features or []) if model else set()
    if device.node_id in rdma_nodes:
        features.add("rdma")
    if device.topology_group and device.vendor in _LINK_FEATURES:
        features.add(_LINK_FEATURES[device.vendor])
    # Quarantined and cordoned cards take nothing new (running work on them continues); gray cards
    # (gray-release soak) only serve jobs that opted in — the engine checks the request's flag.
    schedulable = device.pool_status != Device.PoolStatus.QUARANTINE and not device.cordoned
    gray = device.pool_status == Device.PoolStatus.GRAY and not gray_opt_in
    healthy = device.health == Device.Health.HEALTHY
    if empty:  # "could this ever fit": ignore transient state, keep what is permanent
        schedulable, healthy, gray = True, True, False
    return {
        "id": str(device.pk),
        "index": device.index,
        "kind": model.kind if model else _KIND_BY_VENDOR.get(device.vendor, "gpu"),
        "vendor": device.vendor,
        "model": model.name if model else device.raw_model_name,
        "memory_mib": (model.memory_mib if model and model.memory_mib else device.memory_mib) or 0,
        "features": sorted(features),
        "topology_group": device.topology_group,
        "pcie_switch": device.pcie_switch,
        "numa_node": device.numa_node,
        "owner_project": device.owner_project.slug if device.owner_project_id else None,
        "healthy": healthy,
        "schedulable": schedulable,
        "gray": gray,
    }


def fleet_snapshot(*, empty: bool = False, gray_opt_in: bool = False, cluster=None) -> Snapshot:
    """Every non-retired node with its cards. ``empty``: no allocations, every node ready (feasibility)."""
    # A node pending approval (registered by an agent, not yet admitted) takes no job at all.
    nodes = (
        Node.objects.exclude(status=Node.Status.RETIRED)
        .exclude(pending_approval=True)
        .select_related("pool", "pool__owner_project")
    )
    if cluster is not None:
        nodes = nodes.filter(cluster=cluster)
    nodes = list(nodes)
    node_ids = [n.pk for n in nodes]
    devices = (
        Device.objects.filter(node_id__in=node_ids)
        .exclude(health=Device.Health.RETIRED)
        .select_related("device_model", "owner_project")
        .order_by("node_id", "vendor", "index")
    )
    if empty:
        devices = devices.exclude(health=Device.Health.LOST)
    by_node: dict[int, list[Device]] = defaultdict(list)
    for device in devices:
        by_node[device.node_id].append(device)
    rdma_nodes = {n.pk for n in nodes if n.rdma_nics}
    pools = [
        {
            "name": pool.slug,
            "overcommit_pct": int(pool.overcommit_factor * 100),
            "owner_project": pool.owner_project.slug if pool.owner_project_id else None,
        }
        for pool in Pool.objects.select_related("owner_project")
    ]
    node_records = []
    for node in nodes:
        node_records.append(
            {
                "name": node.name,
                "cpu_milli": (node.cpu_cores or 0) * 1000,
                "memory_mib": node.memory_mib or 0,
                "pool": node.pool.slug if node.pool_id else "",
                "status": "ready" if empty else node.status,
                "status_reason": node.status_reason,
                "labels": node.labels or {},
                # Maintenance / quarantine taints are transient: a feasibility check ignores them.
                "taints": [
                    {
                        "key": t.get("key", ""),
                        "value": t.get("value", ""),
                        "effect": t.get("effect", "NoSchedule"),
                    }
                    for t in node.taints or []
                    if not (empty and t.get("key", "").startswith("suanchi.io/"))
                ],
                "switch": node.switch,
                "zone": node.zone,
                "owner_project": None,
                "devices": [
                    _device_record(d, gray_opt_in=gray_opt_in, empty=empty, rdma_nodes=rdma_nodes)
                    for d in by_node.get(node.pk, [])
                ],
            }
        )
    snapshot = Snapshot.from_records(node_records, pools)
    if not empty:
        for placement in active_placements(node_names={n.pk: n.name for n in nodes}):
            snapshot.apply(placement)
    return snapshot


def active_placements(*, node_names: dict[int, str]) -> list[Placement]:
    """Active allocations grouped into one placement per job attempt (the engine's unit)."""
    rows = (
        Allocation.objects.filter(released_at__isnull=True)
        .values_list(
            "job_id",
            "replica",
            "node_id",
            "device_id",
            "device__index",
            "whole_card",
            "memory_mib",
            "compute_milli",
            "isolation",
        )
        .order_by("job_id", "replica", "device_id")
    )
    grouped: dict[str, dict] = {}
    for job_id, replica, node_id, device_id, index, whole, memory, compute, isolation in rows:
        if node_id not in node_names:
            continue
        key = str(job_id)
        placement = grouped.setdefault(key, {"request_id": key, "parts": {}})
        part = placement["parts"].setdefault(
            (replica, node_id), {"node": node_names[node_id], "replica": replica, "devices": []}
        )
        part["devices"].append(
            {
                "device_id": str(device_id),
                "index": index,
                "whole": whole,
                "memory_mib": memory,
                "compute": WHOLE if whole else compute,
                "isolation": isolation,
            }
        )
    return [
        Placement.from_dict({"request_id": p["request_id"], "parts": list(p["parts"].values())})
        for p in grouped.values()
    ]
