"""Cluster sync task: Kubernetes Nodes and ResourceSlices → the ledger (beat, and "Sync now")."""

from celery import shared_task

from apps.clusters.backends.errors import PermanentBackendError, TransientBackendError
from apps.clusters.sync import cluster_sync
from apps.core import task_names
from apps.inventory.models import Cluster
from worker import time_limits

# The beat period of "cluster-sync" (worker/celery.py).
SYNC_PERIOD_S = 300.0


@shared_task(
    name=task_names.CLUSTER_SYNC,
    **time_limits.MEDIUM,
    acks_late=True,  # idempotent: a second sync records nothing new
    ignore_result=True,
)
def cluster_sync_task(cluster_id: int | None = None) -> list[dict] | dict:
    """One cluster (on demand, or sent by beat's run), or — with no id (beat) — one task per Kubernetes
    cluster, so a cluster that does not answer (and its retries) never delays another's sync."""
    clusters = Cluster.objects.filter(backend=Cluster.Backend.KUBERNETES).order_by("pk")
    if cluster_id is None:
        sent = list(clusters.values_list("pk", flat=True))
        for pk in sent:
            cluster_sync_task.apply_async(args=[pk], expires=SYNC_PERIOD_S)
        return {"sent": sent}
    out = []
    for cluster in clusters.filter(pk=cluster_id):  # a gone cluster is skipped
        try:
            out.append(
                {"cluster": cluster.slug, **cluster_sync(cluster=cluster, actor="cluster-sync").summary()}
            )
        except (PermanentBackendError, TransientBackendError) as e:
            # Recorded on the row (last_sync.error) and said in one log line when it starts failing
            # (apps.clusters.health.sync_outcome_log); beat tries again next period, no traceback.
            out.append({"cluster": cluster.slug, "error": e.message})
    return out
