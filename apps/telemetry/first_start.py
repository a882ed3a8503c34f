"""First start: ``PROMETHEUS_URL`` becomes the metric source of the default cluster.

The clusters app creates the default cluster on ``post_migrate`` (``SUANCHI_CLUSTER_BACKEND``); this
runs after it (telemetry comes later in INSTALLED_APPS) and gives that cluster a Prometheus source
when it has none. Nothing happens when the variable is empty or the cluster already has a source.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from apps.core.audit import change_record_create
from apps.core.conf import suanchi_setting
from apps.core.validation import validate
from apps.inventory.models import Cluster
from apps.telemetry.models import MetricSource


def default_metric_source_ensure(*, actor: Any = "first-start") -> MetricSource | None:
    url = (suanchi_setting("PROMETHEUS_URL", None) or "").strip()
    if not url:
        return None
    cluster = Cluster.objects.filter(slug="default").first()
    if cluster is None and Cluster.objects.count() == 1:
        cluster = Cluster.objects.get()
    if cluster is None or cluster.metric_sources.exists():
        return None
    source = MetricSource(cluster=cluster, name="prometheus", kind=MetricSource.Kind.PROMETHEUS, url=url)
    validate(source, what=f"PROMETHEUS_URL={url!r}")
    with transaction.atomic():
        source.save()
        change_record_create(actor=actor, action="metric_source.create", obj=source, after={"url": url})
    return source


def first_start_receive(sender, **kwargs) -> None:
    default_metric_source_ensure()
