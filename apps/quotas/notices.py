"""Quota notices: the daily check that tells a project its quota is nearly used up (``notify``)."""

from __future__ import annotations

from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_noop

from apps.notify.models import Event
from apps.notify.services import notify
from apps.quotas.book import quota_context
from apps.quotas.models import Quota


def quota_check(*, threshold_pct: int = 90) -> int:
    """Projects whose quota use reached ``threshold_pct`` % of what they may ever hold (guarantee +
    borrowing limit; the guarantee when borrowing is unlimited): one notification per quota per day."""
    ctx = quota_context()
    made = 0
    today = timezone.localdate().isoformat()
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
