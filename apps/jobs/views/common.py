"""What the job pages share: the badge tones per state, who may act on a job, card labels and scores."""

from __future__ import annotations

from apps.accounts.models import Membership
from apps.core.formatting import plain_decimal
from apps.core.templatetags.suanchi import DEVICE_KIND_BY_VENDOR
from apps.jobs.models import (
    JobState,
)

CANCEL_ROLES = (Membership.Role.MEMBER, Membership.Role.ADMIN)
# Badge tones (classes in suanchi.css) per job state.
STATE_TONES = {
    JobState.PENDING: "info",
    JobState.ADMITTED: "info",
    JobState.SCHEDULED: "accent",
    JobState.RUNNING: "ok",
    JobState.SUCCEEDED: "ok",
    JobState.FAILED: "bad",
    JobState.PREEMPTED: "warn",
    JobState.CANCELLED: "muted",
}


def _device_label(vendor: str, index: int) -> str:
    return f"{DEVICE_KIND_BY_VENDOR.get(vendor, 'GPU')}{index}"


def score_text(score) -> str:
    """A policy's score key as people read it, the same on the job page and in the submit preview:
    each part rounded to two places, "135.56 · -7000 · 0" (higher ranks first, part by part)."""
    return " · ".join(plain_decimal(part, 2) for part in score)
