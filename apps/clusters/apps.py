from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _first_start(sender, **kwargs) -> None:
    from apps.clusters.connect import default_cluster_ensure

    default_cluster_ensure()


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
        # First start: SUANCHI_CLUSTER_BACKEND (+ KUBECONFIG or in-cluster) creates the default cluster.
        post_migrate.connect(_first_start, sender=self, dispatch_uid="clusters.first_start")
