"""Job writes: submission, state transitions (conditional updates), cancel."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.accounts.models import Membership, Project
from apps.accounts.selectors import user_role
from apps.core.audit import actor_fields, change_record_create
from apps.core.errors import InvalidTransition, PermissionDenied, ValidationFailed
from apps.core.tasks import enqueue_on_commit
from apps.jobs.models import PRIORITY_VALUES, SUBMIT_FIELDS, TRANSITIONS, Job, JobEvent, JobState
from apps.jobs.validation import pod_fields_validate

# Sent by name after a submit commits (worker/ sits above every app).
SCHEDULING_CYCLE_TASK = "worker.tasks.scheduling.scheduling_cycle_task"


def job_event(
    job: Job, *, kind: str, message: str, actor, from_state: str = "", to_state: str = "", data=None
):
    return JobEvent.objects.create(
        job=job,
        kind=kind,
        message=message[:1000],
        from_state=from_state,
        to_state=to_state,
        actor_label=actor_fields(actor)["actor_label"],
        data=data or {},
    )


def _check_can_submit(*, user, project: Project) -> None:
    role = user_role(user, project)
    if role is None:
        # Same answer as for a project that does not exist: no information leaks.
        raise PermissionDenied(f"You are not a member of project {project.slug!r}.")
    if role == Membership.Role.VIEWER:
        raise PermissionDenied(
            f"Viewers cannot submit jobs in project {project.slug!r}; ask a project admin."
        )


@transaction.atomic
def job_submit(*, project: Project, actor, **fields: Any) -> Job:
    """Validate a request against the catalog and the fleet, then queue it as PENDING.

    A request no device model in the fleet could ever satisfy is refused (400) with the reason; a
    request that cannot fit *now* is accepted and waits with its explanation.
    """
    from apps.scheduling import requests as scheduling_requests  # scheduling builds on jobs

    unknown = set(fields).difference(SUBMIT_FIELDS)
    if unknown:
        raise ValidationFailed(
            f"Unknown fields: {', '.join(sorted(unknown))}.", details={f: ["unknown"] for f in unknown}
        )
    _check_can_submit(user=actor, project=project)
    # What Kubernetes would refuse in the pod (and wrong-typed JSON), before anything is built from it.
    pod_fields_validate(fields)
    if fields.get("compute_units") is not None:
        try:
            fields["compute_units"] = Decimal(str(fields["compute_units"]))
        except InvalidOperation:
            raise ValidationFailed(
                "Compute units must be a number.", details={"compute_units": ["not a number"]}
            )
    job = Job(project=project, submitted_by=actor if getattr(actor, "pk", None) else None, **fields)
    job.priority = PRIORITY_VALUES[job.priority_class]
    scheduling_requests.request_validate(job)  # field errors → ValidationFailed
    job.full_clean()
    feasibility = scheduling_requests.request_feasible_anywhere(job)
    if not feasibility.ok:
        raise ValidationFailed(
            f"No device in the fleet could ever satisfy this request: {feasibility.reason}",
            details={"request": [feasibility.reason]},
        )
    job.requested_cu = feasibility.compute_units
    from apps.quotas.services import submission_check  # quotas build on jobs

    submission_check(job)  # 409 over the project's borrowing ceiling; otherwise it waits its turn
    job.state = JobState.PENDING
    job.state_changed_at = timezone.now()
    job.save()
    job_event(
        job,
        kind=JobEvent.Kind.SUBMITTED,
        message=f"submitted: {scheduling_requests.request_describe(job)}",
        actor=actor,
        to_state=JobState.PENDING,
        data={"requested_cu": str(job.requested_cu) if job.requested_cu is not None else None},
    )
    change_record_create(
        actor=actor,
        action="job.submit",
        obj=job,
        after={"request": scheduling_requests.request_describe(job)},
    )
    # A cycle soon; with the broker down the periodic cycle picks the job up (never fails the submit).
    enqueue_on_commit(SCHEDULING_CYCLE_TASK, queue="scheduler")
    return job


def job_transition(
    job: Job, *, to: str, actor, reason: str = "", expected: tuple[str, ...] | None = None, **extra_fields
) -> bool:
    """Move a job to ``to`` if it is still in one of ``expected`` (default: any state allowed to go there).

    A conditional UPDATE: two workers racing on the same job cannot both win. Returns whether this
    call made the change. Must run inside the caller's transaction when combined with other writes.
    """
    sources = expected or tuple(s for s, targets in TRANSITIONS.items() if to in targets)
    now = timezone.now()
    values = {
        "state": to,
        "state_reason": reason[:500],
        "state_changed_at": now,
        "updated_at": now,
        **extra_fields,
    }
    if to == JobState.RUNNING:
        values.setdefault("started_at", now)
    if to in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
        values.setdefault("finished_at", now)
    old = Job.objects.filter(pk=job.pk).values_list("state", flat=True).first()
    won = Job.objects.filter(pk=job.pk, state__in=sources).update(**values)
    if not won:
        return False
    job_event(
        job,
        kind=JobEvent.Kind.STATE,
        message=reason or f"{old} → {to}",
        actor=actor,
        from_state=old or "",
        to_state=to,
    )
    for key, value in values.items():
        setattr(job, key, value)
    return True


@transaction.atomic
def job_cancel(*, job: Job, actor, reason: str = "") -> Job:
    from apps.scheduling.services import allocations_release

    role = user_role(actor, job.project)
    if role not in (Membership.Role.MEMBER, Membership.Role.ADMIN):
        raise PermissionDenied("Only project members and admins can cancel jobs.")
    if job.state in (JobState.SUCCEEDED, JobState.CANCELLED):
        raise InvalidTransition(f"Job {job} is already {job.state}; it cannot be cancelled.")
    if not job_transition(job, to=JobState.CANCELLED, actor=actor, reason=reason or "cancelled by user"):
        job.refresh_from_db()
        raise InvalidTransition(f"Job {job} is {job.state}; it cannot be cancelled now.")
    allocations_release(job=job, reason="cancelled", actor=actor)
    from apps.clusters.outbox import workload_delete_enqueue

    workload_delete_enqueue(job=job)  # its Kubernetes objects are deleted after commit
    change_record_create(actor=actor, action="job.cancel", obj=job, after={"state": JobState.CANCELLED})
    return job


def cu_quantize(value: Decimal) -> Decimal:
    return value.quantize(Decimal("0.0001"))
