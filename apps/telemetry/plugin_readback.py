"""Read back the chips a device plugin wrote on the pods it served, from a reconcile pass's pod list.

Some device plugins name the devices they gave a pod in an annotation instead of (or besides) an
exporter's pod labels: Huawei's Ascend device plugin writes ``huawei.com/AscendReal`` (the physical
chips, ``Ascend910-3,Ascend910-5``; ``apps.clusters.pod_report.ascend_placements`` parses it). The
worker's reconcile task hands ``plugin_readback`` to each pass (``apps.scheduling.reconcile``'s
``readback`` argument), which calls it with the pods it listed; it turns the annotations into the
read-back's input and lets ``apps.telemetry.readback.readback`` move the
allocation or raise the conflict, exactly as for exporter labels (one rule for both).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from apps.telemetry.readback import Readback, readback

logger = logging.getLogger(__name__)


def plugin_readback(*, cluster: Any, pods: list[dict], now, actor: Any = "reconciler") -> Readback | None:
    """Move or flag the allocations whose pods the device plugin placed on other chips; None when no
    pod of the pass carries such an annotation."""
    from apps.clusters.pod_report import ascend_placements

    pods_by_device, seen_at, problems = ascend_placements(pods, cluster, seen=now.timestamp())
    for problem in problems:
        logger.warning("cluster %s: %s", cluster.slug, problem)
    if not pods_by_device:
        return None
    label = getattr(actor, "username", None) or str(actor)
    with transaction.atomic():
        result: Readback = readback(pods_by_device=pods_by_device, seen_at=seen_at, actor_label=label)
    return result
