"""Node labels and taints the ledger wants Kubernetes to carry (seed 004: accelerator / brand / model).

Vendor labels come from the vendor adapter of the node's cards; Suanchi's own labels name the pool
and cluster. Taints keep the ledger's state taints (maintenance, quarantine: ``suanchi.io/*``) and
replace the vendor taint. This keeps the ledger true; pushing them to Kubernetes is the clusters app's
job: a caller that changed them (``node_labels_apply`` says so) queues the Node patch
(``apps.clusters.outbox.node_patch_enqueue``), as ``apps.scheduling.faults.node_moved`` does for
a status taint.
"""

from __future__ import annotations

from collections import Counter

from django.db import transaction

from apps.core.audit import actor_fields, change_record_create
from apps.core.stored_text import stored
from apps.inventory.models import Device, DeviceEvent, Node
from apps.inventory.services.ledger.events import device_event_create
from apps.inventory.vendors import ADAPTERS

LABELS_UPDATED = stored("node labels and taints updated")  # apps.core.stored_text

SUANCHI_PREFIX = "suanchi.io/"
# Suanchi labels other services own (rollout's gray-release batch): the ledger keeps them as they are.
KEPT_LABELS = frozenset({"suanchi.io/gray"})


def node_labels_desired(node: Node) -> tuple[dict[str, str], list[dict[str, str]]]:
    cards = list(
        node.devices.exclude(health=Device.Health.RETIRED)
        .select_related("device_model")
        .only("vendor", "raw_model_name", "device_model__name")
    )
    labels = {k: v for k, v in node.labels.items() if not k.startswith(SUANCHI_PREFIX) or k in KEPT_LABELS}
    taints = [t for t in node.taints if t.get("key", "").startswith(SUANCHI_PREFIX)]
    vendors = Counter(card.vendor for card in cards)
    # Drop vendor labels/taints of vendors no longer on the node before adding the current ones.
    vendor_keys = {key for adapter in ADAPTERS.values() for key in adapter.node_labels("x")}
    labels = {k: v for k, v in labels.items() if k not in vendor_keys}
    if vendors:
        vendor = vendors.most_common(1)[0][0]
        adapter = ADAPTERS.get(vendor)
        if adapter is not None:
            models = Counter(card.model_label for card in cards if card.vendor == vendor)
            labels.update(adapter.node_labels(models.most_common(1)[0][0]))
            taints = adapter.taints() + taints
    labels[f"{SUANCHI_PREFIX}cluster"] = node.cluster.slug
    if node.pool_id:
        labels[f"{SUANCHI_PREFIX}pool"] = node.pool.slug
    return labels, taints


@transaction.atomic
def node_labels_apply(*, node: Node, actor) -> bool:
    """Bring the node's ledger labels and taints in line; an event only when something changed.
    True when they changed (``node`` then carries them too): the caller queues the Node patch
    (``apps.clusters.outbox.node_patch_enqueue(node)``)."""
    given = node
    node = Node.objects.select_for_update(of=("self",)).select_related("cluster", "pool").get(pk=node.pk)
    labels, taints = node_labels_desired(node)
    if labels == node.labels and taints == node.taints:
        return False
    before = {"labels": node.labels, "taints": node.taints}
    node.labels, node.taints = labels, taints
    node.save(update_fields=["labels", "taints", "updated_at"])
    device_event_create(
        node=node,
        kind=DeviceEvent.Kind.UPDATED,
        message=LABELS_UPDATED,
        before=before,
        after={"labels": labels, "taints": taints},
        actor_label=actor_fields(actor)["actor_label"],
    )
    change_record_create(
        actor=actor, action="node.labels", obj=node, before=before, after={"labels": labels, "taints": taints}
    )
    given.labels, given.taints = labels, taints
    return True
