"""Event receivers: the platform's own records (job events, ledger events, bills, soak results) become
notifications. Each receiver only queues deliveries in the current transaction (``notify``)."""

from __future__ import annotations

from django.db.models.signals import post_save
from django.dispatch import receiver
from django.urls import reverse
from django.utils.translation import gettext_noop

from apps.billing.models import Bill
from apps.billing.signals import bills_finalized
from apps.inventory.models import DeviceEvent, Node
from apps.jobs.models import JobEvent, JobState
from apps.notify.models import Event
from apps.notify.services import notify
from apps.rollout.models import SoakResult

JOB_EVENTS = {
    JobState.FAILED: (
        Event.JOB_FAILED,
        gettext_noop("Job %(job)s of project %(project)s failed: %(reason)s"),
    ),
    JobState.PREEMPTED: (
        Event.JOB_PREEMPTED,
        gettext_noop("Job %(job)s of project %(project)s was preempted: %(reason)s"),
    ),
    JobState.SUCCEEDED: (Event.JOB_SUCCEEDED, gettext_noop("Job %(job)s of project %(project)s succeeded.")),
}


@receiver(post_save, sender=JobEvent, dispatch_uid="notify-job-event")
def job_event_saved(sender, instance: JobEvent, created: bool, **kwargs) -> None:
    if not created or instance.to_state not in JOB_EVENTS:
        return
    job = instance.job
    event, message = JOB_EVENTS[instance.to_state]
    notify(
        event,
        key=f"job:{job.pk}:{job.attempt}:{instance.to_state}",
        message=message,
        params={"job": job.name, "project": job.project.slug, "reason": instance.message[:300]},
        project=job.project,
        users=[job.submitted_by],
        link=reverse("jobs:detail", kwargs={"pk": job.pk}),
        data={"job": job.pk, "attempt": job.attempt, "state": instance.to_state},
    )


@receiver(post_save, sender=DeviceEvent, dispatch_uid="notify-device-event")
def device_event_saved(sender, instance: DeviceEvent, created: bool, **kwargs) -> None:
    if not created or instance.kind != DeviceEvent.Kind.QUARANTINE or instance.device_id is not None:
        return
    node = Node.objects.filter(pk=instance.node_id).first()
    if node is None or node.status != Node.Status.QUARANTINED:
        return  # a release from quarantine is not an alarm
    from apps.accounts.models import Project

    projects = Project.objects.filter(
        jobs__allocations__node=node, jobs__allocations__released_at__isnull=True
    ).distinct()
    params = {"node": node.name, "reason": instance.message[:300]}
    message = gettext_noop("Node %(node)s was quarantined: %(reason)s")
    link = reverse("inventory:node-detail", kwargs={"pk": node.pk})
    key = f"node:{node.pk}:quarantine:{instance.pk}"
    notify(Event.NODE_QUARANTINED, key=key, message=message, params=params, staff=True, link=link)
    for project in projects:  # the teams whose jobs ran there
        notify(Event.NODE_QUARANTINED, key=key, message=message, params=params, project=project, link=link)


@receiver(bills_finalized, dispatch_uid="notify-bills-finalized")
def bills_were_finalized(sender, bill_ids, **kwargs) -> None:
    for bill in Bill.objects.filter(pk__in=bill_ids).select_related("project"):
        notify(
            Event.BILL_FINALIZED,
            key=f"bill:{bill.pk}:finalized",
            message=gettext_noop(
                "The bill of project %(project)s for %(month)s is final: %(total)s %(currency)s."
            ),
            params={
                "project": bill.project.slug,
                "month": bill.month.strftime("%Y-%m"),
                "total": str(bill.total),
                "currency": bill.currency,
            },
            project=bill.project,
            link=reverse("billing:bill-detail", kwargs={"pk": bill.pk}),
        )


@receiver(post_save, sender=SoakResult, dispatch_uid="notify-soak")
def soak_saved(sender, instance: SoakResult, created: bool, **kwargs) -> None:
    if not created or instance.verdict != SoakResult.Verdict.FAIL:
        return
    batch = instance.batch
    notify(
        Event.GRAY_BATCH_FAILED,
        key=f"batch:{batch.pk}:failed",
        message=gettext_noop("Gray batch %(batch)s failed its soak (%(version)s)."),
        params={"batch": batch.name, "version": batch.target_version},
        staff=True,
        link=reverse("rollout:batch-detail", kwargs={"pk": batch.pk}),
    )


def quota_check(*, threshold_pct: int = 90) -> int:
    """Projects whose quota use reached ``threshold_pct`` % of what they may ever hold (guarantee +
    borrowing limit; the guarantee when borrowing is unlimited): one notification per quota per day."""
    from django.utils import timezone

    from apps.quotas.book import quota_context

    ctx = quota_context()
    made = 0
    today = timezone.localdate().isoformat()
    from apps.quotas.models import Quota

    for quota in Quota.objects.filter(project__isnull=False).select_related("project"):
        g, b = ctx.book.used(str(quota.pk))
        used = g + b
        ceiling = quota.guaranteed_cu + (quota.borrowing_limit_cu or 0)
        if not ceiling or used * 100 < ceiling * threshold_pct:
            continue
        made += notify(
            Event.QUOTA_NEARLY_EXHAUSTED,
            key=f"quota:{quota.pk}:{today}",
            message=gettext_noop("Project %(project)s uses %(used)s of %(ceiling)s CU its quota allows."),
            params={"project": quota.project.slug, "used": f"{used:.2f}", "ceiling": f"{ceiling:.2f}"},
            project=quota.project,
            link=reverse("quotas:overview"),
        )
    return made


__all__ = ["quota_check"]
