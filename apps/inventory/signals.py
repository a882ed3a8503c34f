"""Signals the ledger sends to the layers above it (which subscribe in their AppConfig.ready())."""

from django.dispatch import Signal

# The ledger changed the labels or taints a Kubernetes Node should carry. Sent inside the caller's
# transaction with ``node``; the clusters app answers by writing the Node patch to its push outbox in
# that same transaction, so the patch commits (or rolls back) with the ledger change.
node_labels_changed = Signal()
