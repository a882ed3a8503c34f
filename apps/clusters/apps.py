from django.apps import AppConfig


class ClustersConfig(AppConfig):
    name = "apps.clusters"
    label = "clusters"
    verbose_name = "Clusters"

    def ready(self) -> None:
        from apps.clusters.outbox import node_labels_changed_receive
        from apps.inventory.signals import node_labels_changed

        # The ledger (a layer below) says a Node's labels or taints changed; the outbox is ours.
        node_labels_changed.connect(
            node_labels_changed_receive, sender=None, dispatch_uid="clusters.node_labels_changed"
        )
