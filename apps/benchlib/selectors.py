"""Reads of the benchmark library. Measurements are fleet data (any signed-in user reads them), but the
job behind a measurement is shown only to those who may see that job."""

from __future__ import annotations

from django.db.models import QuerySet

from apps.accounts.selectors import is_platform_staff, user_project_ids
from apps.benchlib.models import CoefficientProposal, Measurement


def measurement_list() -> QuerySet[Measurement]:
    return Measurement.objects.select_related("profile", "device_model", "template", "node", "job")


def visible_project_ids(user) -> set[int] | None:
    """None = every measuring job may be shown (staff); else the projects whose jobs the user may see."""
    return None if is_platform_staff(user) else user_project_ids(user)


def coefficient_proposal_list() -> QuerySet[CoefficientProposal]:
    return CoefficientProposal.objects.select_related("device_model", "reference_model")
