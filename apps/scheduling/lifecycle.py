"""The job lifecycle: every job state change above the bare transition has its one owner here.

``apps.jobs`` keeps the model, the state machine (``TRANSITIONS`` and ``job_transition``, the bare
conditional update) and the event log (``job_event``). What a state change *means* for the rest of
the platform — the quota check at submit, the cards a job holds, the Kubernetes objects of its
attempt, the next scheduling cycle — is decided here, one layer up, where scheduling, quotas and the
push outbox are all below:

* ``job_submit``: validate against the catalog and the fleet, check the project's borrowing ceiling,
  queue as pending, ask for a cycle after commit;
* ``job_cancel``: cancelled, the attempt's objects deleted after commit, its cards *releasing*;
* ``job_finish``: a scheduled or running job succeeded or failed, cards released;
* ``job_preempt``: preempted → pending (requeued, next attempt resumes from the checkpoint);
* ``job_retry_or_fail``: an attempt failed; retry per the job's policy, or fail;
* ``job_push_failed``: the pusher gave up on the attempt's workload (its ``on_failed``, given by
  ``apps.scheduling.push``): back to pending on a new attempt, cards released;
* ``job_to_running``: reconcile saw the pods running.

No card is released while an object using it may still run: where a job lets go of cards whose
Kubernetes objects were pushed (cancel, retry, preemption, failure), the deletes go to the outbox and
the allocations become *releasing* (``hold_until_gone``): still active for the engine and quotas,
with a ``releasing`` job event, until reconcile sees the objects and their pods gone
(``apps.scheduling.releasing``). A Background delete removes a Job at once but its pods end
gracefully (``terminationGracePeriodSeconds``, default 30 s, then SIGKILL — Kubernetes docs "Pod
Lifecycle", "Termination of Pods"), and they keep the cards until then.

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
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from apps.accounts.models import Membership, Project
from apps.accounts.selectors import user_role
from apps.clusters.outbox import workload_delete_enqueue
from apps.core import task_names
from apps.core.audit import actor_fields, change_record_create
from apps.core.errors import InvalidTransition, PermissionDenied, ValidationFailed
from apps.core.stored_text import stored
from apps.core.tasks import enqueue_on_commit
from apps.core.validation import validate
from apps.jobs.events import record_job_events
from apps.jobs.models import (
    ACTIVE_STATES,
    PRIORITY_VALUES,
    SUBMIT_FIELDS,
    Allocation,
    Job,
    JobEvent,
    JobState,
)
from apps.jobs.services import job_event, job_transition
from apps.jobs.validation import pod_fields_validate
from apps.quotas.services import submission_check
from apps.scheduling import resource_requests
from apps.scheduling.allocations import allocations_release

# Sent by name after a submit commits (worker/ sits above every app).
SCHEDULING_CYCLE_TASK = task_names.SCHEDULING_CYCLE

# Texts stored in job events, state and release reasons, shown in the reader's language
# (apps.core.stored_text): the row keeps the English sentence.
SUBMITTED = stored("submitted: %(request)s")
# The request in words inside SUBMITTED: the msgids of ``resource_requests.request_describe`` (written in English,
# see ``_request_in_english``), registered so the description is translated too — each also with the
# " × N replicas" suffix request_describe appends (a sentence of its own: without it, the suffix stayed
# English inside the last parameter), and a profile request with and without its latency bound.
REQUEST_WORDS = (
    stored("%(count)s whole card(s) of %(what)s"),
    stored("%(count)s whole card(s) of %(what)s × %(n)s replicas"),
    stored("%(count)s × template %(template)s (%(model)s)"),
    stored("%(count)s × template %(template)s (%(model)s) × %(n)s replicas"),
    stored("%(cu)s CU%(memory)s on %(vendors)s"),
    stored("%(cu)s CU%(memory)s on %(vendors)s × %(n)s replicas"),
    stored("%(target)s %(unit)s of %(profile)s on %(vendors)s"),
    stored("%(target)s %(unit)s of %(profile)s on %(vendors)s × %(n)s replicas"),
    stored("%(target)s %(unit)s of %(profile)s on %(vendors)s, p99 ≤ %(ms)s ms"),
    stored("%(target)s %(unit)s of %(profile)s on %(vendors)s, p99 ≤ %(ms)s ms × %(n)s replicas"),
    stored("request template %(name)s"),
    stored("request template %(name)s × %(n)s replicas"),
    stored("any vendor"),
)
CANCELLED_BY_USER = stored("cancelled by user")
# The reason is the person's own words: never looked up as a stored text (apps.core.stored_text).
CANCELLED_BECAUSE = stored("cancelled by user: %(user_reason)s")
PODS_RUNNING = stored("pods running")
RELEASING = stored(
    "%(count)s allocation(s) releasing: %(reason)s; the cards stay held until Kubernetes "
    "confirms %(objects)s and its pods gone"
)
PREEMPTED_BECAUSE = stored("preempted: %(reason)s")
REQUEUED_AFTER_PREEMPTION = stored("requeued after preemption: %(reason)s")
PREEMPTED_ATTEMPT = stored("preempted (attempt %(attempt)s): %(reason)s")
FAILED_BECAUSE = stored("failed: %(reason)s")
RETRYING_BECAUSE = stored("retrying: %(reason)s")
RETRY_BECAUSE = stored("retry: %(reason)s")
# The retry event: the first part, then ", avoiding …" and ", resuming from …" when they apply
# (``data["message_parts"]`` keeps the parts); each whole sentence is registered to be shown translated.
ATTEMPT_ENDED = stored("attempt %(attempt)s ended: %(reason)s; attempt %(next)s after %(backoff)s s")
AVOIDING = stored(", avoiding %(nodes)s")
RESUMING = stored(", resuming from %(resume)s")
ATTEMPT_ENDED_AVOIDING = stored(
    "attempt %(attempt)s ended: %(reason)s; attempt %(next)s after %(backoff)s s, avoiding %(nodes)s"
)
ATTEMPT_ENDED_RESUMING = stored(
    "attempt %(attempt)s ended: %(reason)s; attempt %(next)s after %(backoff)s s, resuming from %(resume)s"
)
ATTEMPT_ENDED_AVOIDING_RESUMING = stored(
    "attempt %(attempt)s ended: %(reason)s; attempt %(next)s after %(backoff)s s, avoiding %(nodes)s, "
    "resuming from %(resume)s"
)


# --------------------------------------------------------------------------------------------------
# submit and cancel (a user's request)


def _request_in_english(job: Job) -> str:
    """The request in words for a stored text: always written in English (whoever submits), and
    shown translated by ``|localized`` — ``request_describe`` speaks the active language."""
    with translation.override("en"):
        return resource_requests.request_describe(job)


def _check_can_submit(*, user, project: Project) -> None:
    role = user_role(user, project)
    if role is None:
        # Same answer as for a project that does not exist: no information leaks.
        raise PermissionDenied(_("You are not a member of project %(project)r.") % {"project": project.slug})
    if role == Membership.Role.VIEWER:
        raise PermissionDenied(
            _("Viewers cannot submit jobs in project %(project)r; ask a project admin.")
            % {"project": project.slug}
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
            _("Unknown fields: %(fields)s.") % {"fields": ", ".join(sorted(unknown))},
            details={f: ["unknown"] for f in unknown},
        )
    _check_can_submit(user=actor, project=project)
    # What Kubernetes would refuse in the pod (and wrong-typed JSON), before anything is built from it.
    pod_fields_validate(fields)
    if fields.get("compute_units") is not None:
        try:
            fields["compute_units"] = Decimal(str(fields["compute_units"]))
        except InvalidOperation:
            raise ValidationFailed(
                _("Compute units must be a number."), details={"compute_units": [_("not a number")]}
            )
    job = Job(project=project, submitted_by=actor if getattr(actor, "pk", None) else None, **fields)
    job.priority = PRIORITY_VALUES[job.priority_class]
    resource_requests.request_validate(job)  # field errors → ValidationFailed
    validate(job, what="job")
    feasibility = resource_requests.request_feasible_anywhere(job)
    if not feasibility.ok:
        raise ValidationFailed(
            _("No device in the fleet could ever satisfy this request: %(reason)s")
            % {"reason": feasibility.reason},
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
        message=SUBMITTED % {"request": _request_in_english(job)},
        actor=actor,
        to_state=JobState.PENDING,
        data={"requested_cu": str(job.requested_cu) if job.requested_cu is not None else None},
    )
    change_record_create(
        actor=actor,
        action="job.submit",
        obj=job,
        after={"request": resource_requests.request_describe(job)},
    )
    # A cycle soon; with the broker down the periodic cycle picks the job up (never fails the submit).
    enqueue_on_commit(SCHEDULING_CYCLE_TASK, queue="scheduler")
    return job


@transaction.atomic
def job_cancel(*, job: Job, actor, reason: str = "") -> Job:
    role = user_role(actor, job.project)
    if role not in (Membership.Role.MEMBER, Membership.Role.ADMIN):
        raise PermissionDenied(_("Only project members and admins can cancel jobs."))
    if job.state in (JobState.SUCCEEDED, JobState.CANCELLED):
        raise InvalidTransition(
            _("Job %(job)s is already %(state)s; it cannot be cancelled.")
            % {"job": job, "state": job.get_state_display()}
        )
    reason = (reason or "").strip()
    why = CANCELLED_BECAUSE % {"user_reason": reason} if reason else CANCELLED_BY_USER
    if not job_transition(job, to=JobState.CANCELLED, actor=actor, reason=why):
        job.refresh_from_db()
        raise InvalidTransition(
            _("Job %(job)s is %(state)s; it cannot be cancelled now.")
            % {"job": job, "state": job.get_state_display()}
        )
    # Its Kubernetes objects are deleted after commit; the cards are released once they are gone.
    deletes = workload_delete_enqueue(job=job)
    hold_until_gone(job=job, deletes=deletes, reason="cancelled", actor=actor)
    change_record_create(actor=actor, action="job.cancel", obj=job, after={"state": JobState.CANCELLED})
    return job


# --------------------------------------------------------------------------------------------------
# letting go of cards: released at once, or held until the objects are confirmed gone


def _held(job: Job):
    """The job's active allocations not yet releasing."""
    return Allocation.objects.filter(job=job, released_at__isnull=True, releasing_since__isnull=True)


def hold_until_gone(*, job: Job, deletes: list, reason: str, actor: Any) -> int:
    """The job lets go of its cards. When deletes of pushed objects were queued (``deletes``: the
    outbox's ``PushAction`` rows), its active allocations become *releasing* — still active, so the
    engine hands nothing out on them — and reconcile releases them once the objects and their pods
    are gone (``apps.scheduling.releasing``). Nothing was ever pushed: released now. Returns the
    number of allocations held (0 when released now)."""
    if not deletes:
        _release_now(job=job, reason=reason, actor=actor)
        return 0
    now = timezone.now()
    count = _held(job).update(releasing_since=now, release_reason=reason[:200])
    if count:
        msgid = RELEASING
        params = {
            "count": count,
            "reason": reason,
            "objects": ", ".join(f"{d.kind} {d.namespace}/{d.name}" for d in deletes),
        }
        record_job_events(
            [
                JobEvent(
                    job=job,
                    kind=JobEvent.Kind.RELEASING,
                    message=msgid % params,
                    actor_label=actor_fields(actor)["actor_label"],
                    data={
                        "msgid": msgid,
                        "params": params,
                        "attempt": deletes[0].attempt,
                        "deletes": [f"{d.kind}/{d.namespace}/{d.name}" for d in deletes],
                    },
                )
            ]
        )
    return count


def _release_now(*, job: Job, reason: str, actor: Any) -> int:
    """Release the job's active allocations that are not waiting for a confirmation (an earlier
    attempt's releasing rows stay until their objects are gone). Idempotent."""
    return allocations_release(job=job, reason=reason, actor=actor, rows=_held(job))


# --------------------------------------------------------------------------------------------------
# what the cluster reports (reconcile, the pusher)


def job_to_running(*, job: Job, actor: Any) -> bool:
    """The job's pods run: scheduled → running. Returns whether this call moved it."""
    with transaction.atomic():
        return job_transition(
            job, to=JobState.RUNNING, actor=actor, reason=PODS_RUNNING, expected=(JobState.SCHEDULED,)
        )


@transaction.atomic
def job_finish(*, job: Job, succeeded: bool, reason: str = "", actor) -> bool:
    """A scheduled or running job ends; its cards are released. Returns whether this call ended it."""
    target = JobState.SUCCEEDED if succeeded else JobState.FAILED
    if not job_transition(
        job, to=target, actor=actor, reason=reason, expected=(JobState.SCHEDULED, JobState.RUNNING)
    ):
        return False
    _release_now(job=job, reason=target, actor=actor)
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
    _release_now(job=job, reason=reason, actor=actor)
    return True


# --------------------------------------------------------------------------------------------------
# preemption and retries
#
# Both paths end the same way: deletes of the running attempt's Kubernetes objects are written to the
# push outbox (applied after commit), its allocations are releasing until those objects and their
# pods are confirmed gone (``hold_until_gone``), and the job returns to
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
    deletes = workload_delete_enqueue(job=job, attempt=attempt)
    hold_until_gone(job=job, deletes=deletes, reason=PREEMPTED_BECAUSE % {"reason": reason}, actor=actor)
    resume = job.checkpoint_dir or job.resume_from
    job_transition(
        job,
        to=JobState.PENDING,
        actor=actor,
        reason=REQUEUED_AFTER_PREEMPTION % {"reason": reason},
        expected=(JobState.PREEMPTED,),
        attempt=F("attempt") + 1,
        resume_from=resume,
    )
    job.refresh_from_db(fields=["attempt", "resume_from"])
    job_event(
        job,
        kind=JobEvent.Kind.PREEMPTED,
        message=PREEMPTED_ATTEMPT % {"attempt": attempt, "reason": reason},
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
    ended_on: list[str] | None = None,
) -> str:
    """An attempt failed (pod failed, object deleted, node lost). Retry per the job's policy or fail.

    Retries while ``attempt < max_retries`` (``count_attempt=False`` — an infrastructure fault such as
    a lost node — retries without using up the policy): the next attempt waits ``retry_backoff_s``
    doubled per attempt (capped at one hour), avoids the nodes where this one failed
    (``failed_nodes``) and resumes from the checkpoint. ``ended_on``: nodes where the attempt ended
    through no failure of the job (the node was quarantined, the pod evicted) — recorded in the
    event (a release of the node wakes the job: ``service_nodes.node_released``), never
    avoided. Returns "retried", "failed", or "" when the job was no longer active.
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
        deletes = workload_delete_enqueue(job=job, attempt=attempt)
        hold_until_gone(job=job, deletes=deletes, reason=FAILED_BECAUSE % {"reason": reason}, actor=actor)
        return "failed"
    backoff = min(3600, job.retry_backoff_s * (2 ** min(retries_used, 10))) if count_attempt else 0
    excluded = sorted(set(job.excluded_nodes or []) | set(failed_nodes or []))
    resume = job.checkpoint_dir or job.resume_from
    if not job_transition(
        job,
        to=JobState.PENDING,
        actor=actor,
        reason=RETRYING_BECAUSE % {"reason": reason},
        expected=ACTIVE_STATES,
        attempt=F("attempt") + 1,
        excluded_nodes=excluded,
        retry_not_before=now + dt.timedelta(seconds=backoff),
        resume_from=resume,
        failure_class=failure_class,
    ):
        return ""
    deletes = workload_delete_enqueue(job=job, attempt=attempt)
    hold_until_gone(job=job, deletes=deletes, reason=RETRY_BECAUSE % {"reason": reason}, actor=actor)
    job.refresh_from_db(fields=["attempt"])
    # Stored in English with its message ids and parameters (translated at display).
    parts = [
        (
            ATTEMPT_ENDED,
            {"attempt": attempt, "reason": reason, "next": job.attempt, "backoff": backoff},
        )
    ]
    if excluded:
        parts.append((AVOIDING, {"nodes": ", ".join(excluded)}))
    if resume:
        parts.append((RESUMING, {"resume": resume}))
    job_event(
        job,
        kind=JobEvent.Kind.RETRY,
        message="".join(msgid % params for msgid, params in parts),
        actor=actor,
        data={
            "attempt": attempt,
            "backoff_s": backoff,
            "excluded_nodes": excluded,
            "resume_from": resume,
            "counted": count_attempt,
            "failure_class": failure_class,
            "ended_on": sorted(set(ended_on or [])),
            "message_parts": [{"msgid": m, "params": p} for m, p in parts],
        },
    )
    return "retried"
