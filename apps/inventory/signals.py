"""Signals the ledger sends to the layers above it (which subscribe in their AppConfig.ready())."""

from django.dispatch import Signal

# The ledger changed the labels or taints a Kubernetes Node should carry. Sent inside the caller's
# transaction with ``node``; the clusters app answers by writing the Node patch to its push outbox in
# that same transaction, so the patch commits (or rolls back) with the ledger change.
node_labels_changed = Signal()

# A node was quarantined (its NoExecute taint will evict every pod that does not tolerate it). Sent
# inside the ledger's transaction with ``node``, ``reason`` and ``actor``; the scheduling app retries
# the jobs running there (``apps.scheduling.faults.node_quarantined_receive``) in that transaction.
node_quarantined = Signal()

# A node came back from quarantine to ready. Sent inside the ledger's transaction with ``node`` and
# ``actor``; the scheduling app wakes the jobs whose attempt ended there and gives the inference
# services that lost replicas there their replicas back (``apps.scheduling.service_nodes``).
node_released = Signal()
