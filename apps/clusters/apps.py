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
        # First start: SUANCHI_CLUSTER_BACKEND (+ KUBECONFIG or in-cluster) creates the default cluster.
        post_migrate.connect(_first_start, sender=self, dispatch_uid="clusters.first_start")
