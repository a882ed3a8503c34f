"""Autoscaling policies and their evaluation: an inference service's replicas follow its utilization
(``apps.rollout.autoscale`` decides; this module writes the decision and scales)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.core.audit import actor_fields, change_record_create, snapshot
from apps.core.errors import ApplicationError, Conflict, ValidationFailed
from apps.core.validation import validate_and_save
from apps.jobs.models import Job, JobState
from apps.rollout import autoscale, selectors
from apps.rollout.models import (
    AutoscalePolicy,
    ScaleDecision,
)
from apps.rollout.services.stages import _save_changes, _set_fields
from apps.rollout.services.texts import AUTOSCALE, AUTOSCALE_DISABLED, AUTOSCALE_NO_ROOM, SERVICE_IS

POLICY_FIELDS = (
    "job",
    "enabled",
    "up_threshold_pct",
    "up_window_s",
    "down_threshold_pct",
    "down_window_s",
    "cooldown_s",
    "buffer_pct",
    "min_replicas",
    "max_replicas",
    "step",
)


@transaction.atomic
def autoscale_policy_create(*, actor, **fields: Any) -> AutoscalePolicy:
    policy = AutoscalePolicy()
    _set_fields(policy, fields, POLICY_FIELDS)
    if policy.job_id and AutoscalePolicy.objects.filter(job_id=policy.job_id).exists():
        raise Conflict(
            _("job %(job)s already has an autoscaling policy; change that one") % {"job": policy.job}
        )
    validate_and_save(policy, what="autoscaling policy")
    change_record_create(
        actor=actor, action="autoscalepolicy.create", obj=policy, after=snapshot(policy, list(POLICY_FIELDS))
    )
    return policy


@transaction.atomic
def autoscale_policy_update(*, policy: AutoscalePolicy, actor, **changes: Any) -> AutoscalePolicy:
    policy = AutoscalePolicy.objects.select_for_update().select_related("job").get(pk=policy.pk)
    if "job" in changes and changes["job"].pk != policy.job_id:
        raise ValidationFailed(
            _("a policy stays with its service"), details={"job": [_("This field cannot be changed.")]}
        )
    changes.pop("job", None)
    _save_changes(
        policy,
        changes,
        POLICY_FIELDS,
        what="autoscaling policy",
        action="autoscalepolicy.update",
        actor=actor,
    )
    return policy


@transaction.atomic
def autoscale_policy_delete(*, policy: AutoscalePolicy, actor) -> None:
    change_record_create(
        actor=actor, action="autoscalepolicy.delete", obj=policy, before=snapshot(policy, list(POLICY_FIELDS))
    )
    policy.delete()


def autoscale_evaluate(
    *, policy: AutoscalePolicy, actor="autoscaler", now: datetime | None = None
) -> ScaleDecision | None:
    """Decide for one service from its measured utilization; a change scales it through
    ``inference_scale`` (cards allocated or released, Deployment pushed) and is recorded as a
    ``ScaleDecision``. Returns None when it holds (the reason is kept on the policy)."""
    from apps.scheduling.scaling import inference_scale

    now = now or timezone.now()
    with transaction.atomic():
        locked = (
            AutoscalePolicy.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("job")
            .filter(pk=policy.pk)
            .first()
        )
        if locked is None:  # another evaluation holds it
            return None
        job = locked.job

        def hold(reason: str) -> None:
            AutoscalePolicy.objects.filter(pk=locked.pk).update(
                last_evaluated_at=now, last_reason=reason[:300]
            )

        if not locked.enabled:
            hold(AUTOSCALE_DISABLED)
            return None
        if job.state not in (JobState.SCHEDULED, JobState.RUNNING):
            hold(SERVICE_IS % {"state": job.state})
            return None
        rules = locked.as_policy()
        horizon = max(rules.up_window_s, rules.down_window_s) + rules.max_staleness_s
        samples = selectors.job_utilization_samples(
            job=job, since=now - timedelta(seconds=horizon), until=now
        )
        last = locked.last_scaled_at.timestamp() if locked.last_scaled_at else None
        decision = autoscale.evaluate(
            rules, samples, now=now.timestamp(), current=job.replicas, last_scaled_at=last
        )
        if not decision.changes:
            hold(decision.reason)
            return None
        error = ""
        try:
            reached = inference_scale(
                job=job, replicas=decision.target, actor=actor, reason=AUTOSCALE % {"reason": decision.reason}
            )
        except ApplicationError as exc:
            reached, error = decision.current, exc.message
        if reached == decision.current and not error:
            error = AUTOSCALE_NO_ROOM % {"asked": decision.target}
        row = ScaleDecision.objects.create(
            policy=locked,
            job=job,
            created_at=now,
            action=ScaleDecision.Action.UP if decision.action == autoscale.UP else ScaleDecision.Action.DOWN,
            from_replicas=decision.current,
            to_replicas=decision.target,
            reached_replicas=reached,
            reason=decision.reason[:500],
            up_window_pct=decision.up_window_pct,
            down_window_pct=decision.down_window_pct,
            projected_pct=decision.projected_pct,
            error=error[:500],
            actor_label=actor_fields(actor)["actor_label"][:150],
        )
        fields: dict[str, Any] = {"last_evaluated_at": now, "last_reason": (error or decision.reason)[:300]}
        if reached != decision.current:
            fields["last_scaled_at"] = now
        AutoscalePolicy.objects.filter(pk=locked.pk).update(**fields)
        change_record_create(
            actor=actor,
            action="autoscale.decision",
            obj=job,
            before={"replicas": decision.current},
            after={"replicas": reached, "asked": decision.target},
            message=decision.reason + (f" ({error})" if error else ""),
        )
        return row


def autoscale_run(*, actor="autoscaler", now: datetime | None = None) -> dict[str, int]:
    """Evaluate every enabled policy (beat). One service's error does not stop the others."""
    counts = {"evaluated": 0, "scaled": 0, "errors": 0}
    for pk in (
        AutoscalePolicy.objects.filter(enabled=True, job__kind=Job.Kind.INFERENCE)
        .order_by("pk")
        .values_list("pk", flat=True)
    ):
        try:
            row = autoscale_evaluate(policy=AutoscalePolicy(pk=pk), actor=actor, now=now)
        except ApplicationError:
            counts["errors"] += 1
            continue
        counts["evaluated"] += 1
        if row is not None and row.reached_replicas != row.from_replicas:
            counts["scaled"] += 1
    return counts
