"""Cluster sync task: Kubernetes Nodes and ResourceSlices → the ledger (beat, and "Sync now")."""

from celery import shared_task

from apps.clusters.backend import PermanentBackendError, TransientBackendError
from apps.clusters.sync import cluster_sync
from apps.inventory.models import Cluster


@shared_task(
    name="worker.tasks.clusters.cluster_sync_task",
    autoretry_for=(TransientBackendError,),
    retry_backoff=True,
    retry_jitter=True,
    max_retries=3,
    acks_late=True,  # idempotent: a second sync records nothing new
    ignore_result=True,
)
def cluster_sync_task(cluster_id: int | None = None) -> list[dict]:
    """One cluster (on demand) or every Kubernetes cluster (beat). A gone cluster is skipped."""
    clusters = Cluster.objects.filter(backend=Cluster.Backend.KUBERNETES).order_by("pk")
    if cluster_id is not None:
        clusters = clusters.filter(pk=cluster_id)
    out = []
    for cluster in clusters:
        try:
            out.append(
                {"cluster": cluster.slug, **cluster_sync(cluster=cluster, actor="cluster-sync").summary()}
            )
        except PermanentBackendError as e:  # recorded on the row (last_sync.error); the others go on
            out.append({"cluster": cluster.slug, "error": e.message})
    return out
