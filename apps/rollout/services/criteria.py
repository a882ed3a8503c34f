"""Soak criteria: the limits a gray batch's soak is judged by (audited writes)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _

from apps.core.audit import change_record_create, snapshot
from apps.core.errors import Conflict
from apps.core.validation import validate_and_save
from apps.rollout.models import (
    SoakCriteria,
)
from apps.rollout.services.stages import Stage, _save_changes, _set_fields

CRITERIA_FIELDS = (
    "name",
    "min_days",
    "max_error_events",
    "max_temperature_c",
    "max_throughput_drop_pct",
    "max_lost_devices",
    "min_telemetry_coverage_pct",
)


@transaction.atomic
def soak_criteria_create(*, actor, **fields: Any) -> SoakCriteria:
    criteria = SoakCriteria()
    _set_fields(criteria, fields, CRITERIA_FIELDS)
    validate_and_save(criteria, what="soak criteria")
    change_record_create(
        actor=actor,
        action="soakcriteria.create",
        obj=criteria,
        after=snapshot(criteria, list(CRITERIA_FIELDS)),
    )
    return criteria


@transaction.atomic
def soak_criteria_update(*, criteria: SoakCriteria, actor, **changes: Any) -> SoakCriteria:
    criteria = SoakCriteria.objects.select_for_update().get(pk=criteria.pk)
    if changes and criteria.batches.filter(stage=Stage.SOAKING).exists():
        raise Conflict(
            _("criteria %(criteria)s are in use by a soaking batch; create new criteria instead")
            % {"criteria": criteria.name},
            details={
                "soaking_batches": list(
                    criteria.batches.filter(stage=Stage.SOAKING).values_list("name", flat=True)
                )
            },
        )
    _save_changes(
        criteria, changes, CRITERIA_FIELDS, what="soak criteria", action="soakcriteria.update", actor=actor
    )
    return criteria


@transaction.atomic
def soak_criteria_delete(*, criteria: SoakCriteria, actor) -> None:
    if criteria.batches.exists():
        raise Conflict(
            _("criteria %(criteria)s are used by %(count)d batch(es)")
            % {"criteria": criteria.name, "count": criteria.batches.count()}
        )
    change_record_create(
        actor=actor,
        action="soakcriteria.delete",
        obj=criteria,
        before=snapshot(criteria, list(CRITERIA_FIELDS)),
    )
    criteria.delete()
