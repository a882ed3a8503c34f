"""Upgrade plans and their waves: one gray batch per layer, started in the layers' order."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils.translation import gettext as _

from apps.core.audit import change_record_create
from apps.core.errors import Conflict, ValidationFailed
from apps.core.validation import validate_and_save
from apps.rollout.models import (
    LAYER_OF_KIND,
    GrayBatch,
    UpgradePlan,
    UpgradeWave,
)
from apps.rollout.services.batches import batch_soak_start


@transaction.atomic
def upgrade_plan_create(*, actor, name: str, description: str = "", reason: str = "") -> UpgradePlan:
    plan = UpgradePlan(name=name, description=description)
    validate_and_save(plan, what="upgrade plan")
    change_record_create(
        actor=actor,
        action="upgradeplan.create",
        obj=plan,
        after={"name": name},
        message=(reason or "").strip(),
    )
    return plan


@transaction.atomic
def upgrade_wave_create(*, actor, plan: UpgradePlan, batch: GrayBatch, reason: str = "") -> UpgradeWave:
    """Add a batch to a plan as the wave of its layer (derived from the batch's kind)."""
    layer = LAYER_OF_KIND.get(batch.kind)
    if layer is None:
        raise ValidationFailed(
            _(
                "a %(kind)s batch is not an upgrade layer (collector, device plugin, scheduler, driver or "
                "firmware)"
            )
            % {"kind": batch.get_kind_display()},
            details={"batch": [batch.kind]},
        )
    if UpgradeWave.objects.filter(batch=batch).exists():
        raise Conflict(
            _("batch %(batch)s already is a wave") % {"batch": batch.name}, details={"batch": [batch.name]}
        )
    wave = UpgradeWave(plan=plan, batch=batch, layer=layer)
    validate_and_save(wave, what="upgrade wave")
    change_record_create(
        actor=actor,
        action="upgradewave.create",
        obj=wave,
        after={"plan": plan.pk, "batch": batch.pk, "layer": layer},
        message=(reason or "").strip(),
    )
    return wave


def upgrade_wave_start(
    *, wave: UpgradeWave, actor, now: datetime | None = None, reason: str = ""
) -> UpgradeWave:
    """Start the wave's soak; refused (409, with the blocking waves) before earlier layers passed."""
    batch_soak_start(batch=wave.batch, actor=actor, now=now, reason=reason)
    return UpgradeWave.objects.select_related("plan", "batch").get(pk=wave.pk)
