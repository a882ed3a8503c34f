from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "apps.scheduling"
    label = "scheduling"
    verbose_name = "Scheduling"

    def ready(self) -> None:
        from apps.clusters.signals import workload_push_failed
        from apps.scheduling import engine_texts  # noqa: F401  (the explanation, shown translated)
        from apps.scheduling.handlers import workload_push_failed_receive

        # The pusher (clusters, a layer below) reports failed workload applies; scheduling owns the
        # job's lifecycle, so it decides what happens to the job.
        workload_push_failed.connect(
            workload_push_failed_receive, sender=None, dispatch_uid="scheduling.workload_push_failed"
        )
        from apps.inventory.signals import node_quarantined
        from apps.scheduling.faults import node_quarantined_receive

        # A quarantined node's NoExecute taint evicts every pod there: its jobs are retried elsewhere.
        node_quarantined.connect(
            node_quarantined_receive, sender=None, dispatch_uid="scheduling.node_quarantined"
        )
        from apps.inventory.signals import node_released
        from apps.scheduling.handlers import node_released_receive

        # Released from quarantine: the jobs whose attempt ended there are re-examined at once.
        node_released.connect(node_released_receive, sender=None, dispatch_uid="scheduling.node_released")
