"""``{% unreachable_clusters %}``: a notice naming every cluster whose reconcile or push failed its
last run, with the time since its last success (the fleet page shows it to platform staff)."""

from __future__ import annotations

from django import template

from apps.clusters.health import cluster_health
from apps.clusters.models import ClusterLoop
from apps.inventory.models import Cluster

register = template.Library()


@register.inclusion_tag("clusters/includes/unreachable_notice.html")
def unreachable_clusters() -> dict:
    ids = set(ClusterLoop.objects.filter(consecutive_failures__gt=0).values_list("cluster_id", flat=True))
    if not ids:
        return {"rows": []}
    health = cluster_health(ids)
    clusters = Cluster.objects.filter(pk__in=ids).order_by("name")
    return {"rows": [(cluster, health[cluster.pk]) for cluster in clusters if cluster.pk in health]}
