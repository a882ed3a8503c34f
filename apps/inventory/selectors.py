"""Reads for the ledger, scoped by membership.

Visibility rule (pages and API alike):
- staff see everything;
- a user with no membership sees nothing of the ledger;
- a member sees nodes in shared pools (no owner) or in pools owned by one of their projects, and on
  those nodes the devices that are shared (no owner) or owned by one of their projects.
"""

from __future__ import annotations

from collections import defaultdict

from django.db.models import Count, Prefetch, Q, QuerySet

from apps.accounts.selectors import is_platform_staff, user_project_ids
from apps.inventory.models import Cluster, Device, DeviceEvent, DeviceLink, Node, NodeReport, Pool


def _node_visibility(project_ids: set[int], prefix: str = "") -> Q:
    return (
        Q(**{f"{prefix}pool__isnull": True})
        | Q(**{f"{prefix}pool__owner_project__isnull": True})
        | Q(**{f"{prefix}pool__owner_project__in": project_ids})
    )


def _device_visibility(project_ids: set[int], prefix: str = "") -> Q:
    return _node_visibility(project_ids, prefix=f"{prefix}node__") & (
        Q(**{f"{prefix}owner_project__isnull": True}) | Q(**{f"{prefix}owner_project__in": project_ids})
    )


def devices_usable_by(project_ids) -> QuerySet[Device]:
    """The cards the projects ``project_ids`` may use: on nodes without a pool, in shared pools or pools
    of these projects, and shared or owned by these projects (a pool reserved for another project, or
    a card another project owns, is not theirs to use). Retired cards are left out."""
    return Device.objects.exclude(health=Device.Health.RETIRED).filter(_device_visibility(set(project_ids)))


def cluster_list(*, user) -> QuerySet[Cluster]:
    qs = Cluster.objects.all()
    if is_platform_staff(user):
        return qs
    if not user_project_ids(user):
        return qs.none()
    return qs


def pool_list(*, user) -> QuerySet[Pool]:
    qs = Pool.objects.select_related("cluster", "owner_project")
    if is_platform_staff(user):
        return qs
    project_ids = user_project_ids(user)
    if not project_ids:
        return qs.none()
    return qs.filter(Q(owner_project__isnull=True) | Q(owner_project__in=project_ids))


def node_list(*, user) -> QuerySet[Node]:
    qs = Node.objects.select_related("cluster", "pool")
    if is_platform_staff(user):
        return qs
    project_ids = user_project_ids(user)
    if not project_ids:
        return qs.none()
    return qs.filter(_node_visibility(project_ids))


def device_list(*, user) -> QuerySet[Device]:
    qs = Device.objects.select_related("node", "node__cluster", "node__pool", "device_model", "owner_project")
    if is_platform_staff(user):
        return qs
    project_ids = user_project_ids(user)
    if not project_ids:
        return qs.none()
    return qs.filter(_device_visibility(project_ids))


def device_event_list(*, user) -> QuerySet[DeviceEvent]:
    qs = DeviceEvent.objects.select_related("node", "device")
    if is_platform_staff(user):
        return qs
    project_ids = user_project_ids(user)
    if not project_ids:
        return qs.none()
    # Node-level events (no device) follow node visibility; device events follow device visibility.
    return qs.filter(
        (Q(device__isnull=True) & _node_visibility(project_ids, prefix="node__"))
        | (Q(device__isnull=False) & _device_visibility(project_ids, prefix="device__"))
    )


def device_link_list(*, user, node: Node) -> QuerySet[DeviceLink]:
    visible = device_list(user=user).filter(node=node).values("pk")
    return DeviceLink.objects.filter(node=node, device_a__in=visible, device_b__in=visible).select_related(
        "device_a", "device_b"
    )


def node_report_list(*, user) -> QuerySet[NodeReport]:
    qs = NodeReport.objects.select_related("node").defer("raw_text")
    if is_platform_staff(user):
        return qs
    return qs.none()


def node_detail_queryset(*, user) -> QuerySet[Node]:
    return node_list(user=user).prefetch_related(
        Prefetch("devices", queryset=device_list(user=user).order_by("vendor", "index"))
    )


def fleet_summary(*, user) -> dict:
    """Counts of visible cards by vendor / model / health for the fleet overview."""
    devices = device_list(user=user).exclude(health=Device.Health.RETIRED)
    by_model = list(
        devices.values("vendor", "device_model__name", "raw_model_name", "health")
        .annotate(count=Count("id"))
        .order_by("vendor", "device_model__name", "health")
    )
    # By vendor and by health from the same grouped rows: one pass over the cards, not three (issue 20).
    vendors: dict[str, int] = defaultdict(int)
    healths: dict[str, int] = defaultdict(int)
    for row in by_model:
        vendors[row["vendor"]] += row["count"]
        healths[row["health"]] += row["count"]
    by_vendor = [{"vendor": v, "count": vendors[v]} for v in sorted(vendors)]
    by_health = [{"health": h, "count": healths[h]} for h in sorted(healths)]
    nodes = node_list(user=user).exclude(status=Node.Status.RETIRED)
    by_node_status = list(nodes.values("status").annotate(count=Count("id")).order_by("status"))
    return {
        "by_model": by_model,
        "by_vendor": by_vendor,
        "by_health": by_health,
        "by_node_status": by_node_status,
        "device_total": sum(row["count"] for row in by_vendor),
        "node_total": sum(row["count"] for row in by_node_status),
        "unrecognized": devices.filter(model_unrecognized=True).count(),
    }
