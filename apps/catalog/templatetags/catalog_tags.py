"""Template helpers that know the device catalog (kept here: core's helpers import nothing above core)."""

from __future__ import annotations

from django import template

from apps.catalog.models import Vendor

register = template.Library()


@register.filter
def vendor_label(value: str | None) -> str:
    """ "nvidia" → "NVIDIA", "huawei" → "Huawei Ascend"; unknown values are shown as they are."""
    if value in Vendor.values:
        return str(Vendor(value).label)
    return value or ""
