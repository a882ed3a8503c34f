"""The job lifecycle: every job state change above the bare transition has its one owner here.

``apps.jobs`` keeps the model, the state machine (``TRANSITIONS`` and ``job_transition``, the bare
conditional update) and the event log (``job_event``). What a state change *means* for the rest of
the platform — the quota check at submit, the cards a job holds, the Kubernetes objects of its
attempt, the next scheduling cycle — is decided here, one layer up, where scheduling, quotas and the
push outbox are all below:

* ``job_submit``: validate against the catalog and the fleet, check the project's borrowing ceiling,
  queue as pending, ask for a cycle after commit;
* ``job_cancel``: cancelled, cards released, the attempt's objects deleted after commit;
* ``job_finish``: a scheduled or running job succeeded or failed, cards released;
* ``job_preempt``: preempted → pending (requeued, next attempt resumes from the checkpoint);
* ``job_retry_or_fail``: an attempt failed; retry per the job's policy, or fail;
* ``job_push_failed``: the pusher gave up on the attempt's workload (``apps.clusters.signals``,
  received in ``apps.scheduling.handlers``): back to pending on a new attempt, cards released;
* ``job_to_running``: reconcile saw the pods running.

Every change is a conditional update (``job_transition``): two workers racing on one job change it
once. Deletes of Kubernetes objects are written to the push outbox inside the same transaction and
sent after commit (no network call inside a transaction; DESIGN "Data flow" 4).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.accounts.models import Membership, Project
from apps.accounts.selectors import user_role
from apps.clusters.outbox import workload_delete_enqueue
from apps.core.audit import change_record_create
from apps.core.errors import InvalidTransition, PermissionDenied, ValidationFailed
from apps.core.tasks import enqueue_on_commit
from apps.jobs.models import ACTIVE_STATES, PRIORITY_VALUES, SUBMIT_FIELDS, Job, JobEvent, JobState
from apps.jobs.services import job_event, job_transition
from apps.jobs.validation import pod_fields_validate
from apps.quotas.services import submission_check
from apps.scheduling import requests as scheduling_requests
from apps.scheduling.allocations import allocations_release

# Sent by name after a submit commits (worker/ sits above every app).
SCHEDULING_CYCLE_TASK = "worker.tasks.scheduling.scheduling_cycle_task"


# --------------------------------------------------------------------------------------------------
# submit and cancel (a user's request)


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


@transaction.atomic
def job_cancel(*, job: Job, actor, reason: str = "") -> Job:
    role = user_role(actor, job.project)
    if role not in (Membership.Role.MEMBER, Membership.Role.ADMIN):
        raise PermissionDenied("Only project members and admins can cancel jobs.")
    if job.state in (JobState.SUCCEEDED, JobState.CANCELLED):
        raise InvalidTransition(f"Job {job} is already {job.state}; it cannot be cancelled.")
    if not job_transition(job, to=JobState.CANCELLED, actor=actor, reason=reason or "cancelled by user"):
        job.refresh_from_db()
        raise InvalidTransition(f"Job {job} is {job.state}; it cannot be cancelled now.")
    allocations_release(job=job, reason="cancelled", actor=actor)
    workload_delete_enqueue(job=job)  # its Kubernetes objects are deleted after commit
    change_record_create(actor=actor, action="job.cancel", obj=job, after={"state": JobState.CANCELLED})
    return job


# --------------------------------------------------------------------------------------------------
# what the cluster reports (reconcile, the pusher)


def job_to_running(*, job: Job, actor: Any) -> bool:
    """The job's pods run: scheduled → running. Returns whether this call moved it."""
    with transaction.atomic():
        return job_transition(
            job, to=JobState.RUNNING, actor=actor, reason="pods running", expected=(JobState.SCHEDULED,)
        )


@transaction.atomic
def job_finish(*, job: Job, succeeded: bool, reason: str = "", actor) -> bool:
    """A scheduled or running job ends; its cards are released. Returns whether this call ended it."""
    target = JobState.SUCCEEDED if succeeded else JobState.FAILED
    if not job_transition(
        job, to=target, actor=actor, reason=reason, expected=(JobState.SCHEDULED, JobState.RUNNING)
    ):
        return False
    allocations_release(job=job, reason=target, actor=actor)
    return True


def job_push_failed(*, job: Job, attempt: int, reason: str, actor: Any) -> bool:
    """The pusher gave up on the workload of ``attempt`` (called inside the pusher's transaction):
    the job returns to pending on a new attempt with the reason, and its cards are released — if it
    is still on that attempt and scheduled. Returns whether this call moved it."""
    if job.attempt != attempt or not job_transition(
        job,
        to=JobState.PENDING,
        actor=actor,
        reason=reason,
        expected=(JobState.SCHEDULED,),
        # A new attempt: its allocations and objects must not collide with this one's.
        attempt=F("attempt") + 1,
    ):
        return False
    allocations_release(job=job, reason=reason, actor=actor)
    return True


# --------------------------------------------------------------------------------------------------
# preemption and retries
#
# Both paths end the same way: the running attempt's allocations are released, deletes of its
# Kubernetes objects are written to the push outbox (applied after commit), and the job returns to
# ``pending`` with ``attempt + 1`` so the next placement gets fresh object names. When the job has a
# checkpoint directory, the next attempt resumes from it (``SUANCHI_RESUME_FROM``).


@transaction.atomic
def job_preempt(*, job: Job, reason: str, actor: Any) -> bool:
    """Preempt a scheduled or running job: preempted → pending (requeued, resumes from checkpoint).

    Returns whether this call preempted it (False when the job is no longer scheduled / running,
    e.g. it finished or another worker preempted it first).
    """
    attempt = job.attempt
    if not job_transition(job, to=JobState.PREEMPTED, actor=actor, reason=reason, expected=ACTIVE_STATES):
        return False
    allocations_release(job=job, reason=f"preempted: {reason}", actor=actor)
    deletes = workload_delete_enqueue(job=job, attempt=attempt)
    resume = job.checkpoint_dir or job.resume_from
    job_transition(
        job,
        to=JobState.PENDING,
        actor=actor,
        reason=f"requeued after preemption: {reason}",
        expected=(JobState.PREEMPTED,),
        attempt=F("attempt") + 1,
        resume_from=resume,
    )
    job.refresh_from_db(fields=["attempt", "resume_from"])
    job_event(
        job,
        kind=JobEvent.Kind.PREEMPTED,
        message=f"preempted (attempt {attempt}): {reason}",
        actor=actor,
        data={"attempt": attempt, "deletes": [f"{d.kind}/{d.name}" for d in deletes], "resume_from": resume},
    )
    return True


@transaction.atomic
def job_retry_or_fail(
    *,
    job: Job,
    reason: str,
    actor: Any,
    failed_nodes: list[str] | None = None,
    count_attempt: bool = True,
    failure_class: str = "",
    now: dt.datetime | None = None,
) -> str:
    """An attempt failed (pod failed, object deleted, node lost). Retry per the job's policy or fail.

    Retries while ``attempt < max_retries`` (``count_attempt=False`` — an infrastructure fault such as
    a lost node — retries without using up the policy): the next attempt waits ``retry_backoff_s``
    doubled per attempt (capped at one hour), avoids the nodes where this one failed and resumes
    from the checkpoint. Returns "retried", "failed", or "" when the job was no longer active.
    """
    now = now or timezone.now()
    attempt = job.attempt
    state = Job.objects.filter(pk=job.pk).values_list("state", flat=True).first()
    if state not in ACTIVE_STATES:
        return ""
    job.refresh_from_db()
    # Retries that counted against the policy (infrastructure faults and preemptions do not).
    retries_used = job.events.filter(kind=JobEvent.Kind.RETRY, data__counted=True).count()
    if count_attempt and retries_used >= job.max_retries:
        if not job_transition(
            job,
            to=JobState.FAILED,
            actor=actor,
            reason=reason,
            expected=ACTIVE_STATES,
            failure_class=failure_class,
        ):
            return ""
        allocations_release(job=job, reason=f"failed: {reason}", actor=actor)
        workload_delete_enqueue(job=job, attempt=attempt)
        return "failed"
    backoff = min(3600, job.retry_backoff_s * (2 ** min(retries_used, 10))) if count_attempt else 0
    excluded = sorted(set(job.excluded_nodes or []) | set(failed_nodes or []))
    resume = job.checkpoint_dir or job.resume_from
    if not job_transition(
        job,
        to=JobState.PENDING,
        actor=actor,
        reason=f"retrying: {reason}",
        expected=ACTIVE_STATES,
        attempt=F("attempt") + 1,
        excluded_nodes=excluded,
        retry_not_before=now + dt.timedelta(seconds=backoff),
        resume_from=resume,
        failure_class=failure_class,
    ):
        return ""
    allocations_release(job=job, reason=f"retry: {reason}", actor=actor)
    workload_delete_enqueue(job=job, attempt=attempt)
    job.refresh_from_db(fields=["attempt"])
    job_event(
        job,
        kind=JobEvent.Kind.RETRY,
        message=(
            f"attempt {attempt} ended: {reason}; attempt {job.attempt} after {backoff} s"
            + (f", avoiding {', '.join(excluded)}" if excluded else "")
            + (f", resuming from {resume}" if resume else "")
        ),
        actor=actor,
        data={
            "attempt": attempt,
            "backoff_s": backoff,
            "excluded_nodes": excluded,
            "resume_from": resume,
            "counted": count_attempt,
            "failure_class": failure_class,
        },
    )
    return "retried"
