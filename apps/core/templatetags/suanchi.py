"""Template helpers shared by Suanchi's pages: status badges, navigation state, units."""

from __future__ import annotations

import json
from decimal import Decimal

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _

register = template.Library()

# One palette for every state shown as a badge; the tone names match classes in suanchi.css.
BADGE_TONES: dict[str, str] = {
    # node status
    "ready": "ok",
    "maintenance": "warn",
    "draining": "info",
    "quarantined": "bad",
    "retired": "muted",
    # device health
    "healthy": "ok",
    "degraded": "warn",
    "lost": "bad",
    # device pool status
    "production": "ok",
    "gray": "accent",
    "quarantine": "bad",
    # event severity
    "info": "info",
    "warning": "warn",
    "critical": "bad",
}

# Topology closeness, closest first: a direct fabric link, then PCIe paths of growing length.
LINK_TONES: dict[str, str] = {
    "NV": "link-1",
    "HCCS": "link-1",
    "XGMI": "link-1",
    "MLULINK": "link-1",
    "PIX": "link-2",
    "PXB": "link-3",
    "PHB": "link-4",
    "NODE": "link-5",
    "SYS": "link-6",
}


@register.simple_tag
def badge(value: str | None, label: str | None = None) -> SafeString:
    """``{% badge node.status node.get_status_display %}`` → a coloured pill."""
    value = value or ""
    tone = BADGE_TONES.get(value, "muted")
    return format_html('<span class="badge badge--{}" data-value="{}">{}</span>', tone, value, label or value)


@register.filter
def link_tone(kind: str | None) -> str:
    """CSS class for a topology link kind (DeviceLink.Kind value)."""
    return LINK_TONES.get(kind or "", "link-unknown")


@register.simple_tag(takes_context=True)
def nav_current(context, *view_names: str) -> SafeString:
    """`` aria-current="page"`` when the current view is one of ``view_names``."""
    request = context.get("request")
    match = getattr(request, "resolver_match", None)
    if match is not None and match.view_name in view_names:
        return mark_safe(' aria-current="page"')  # noqa: S308 - constant markup
    return mark_safe("")  # noqa: S308 - constant markup


@register.filter
def mib(value) -> str:
    """MiB as a short human size: 81559 → "79.6 GiB", 512 → "512 MiB"."""
    if value in (None, ""):
        return ""
    amount = Decimal(value)
    if amount >= 1024:
        gib = (amount / 1024).quantize(Decimal("0.1"))
        text = f"{gib:f}".removesuffix(".0")
        return _("%(size)s GiB") % {"size": text}
    return _("%(size)s MiB") % {"size": f"{amount:f}"}


@register.simple_tag
def node_versions(node) -> list[tuple[str, str]]:
    """The driver / runtime versions a node reported, as (label, value) pairs, empty ones left out."""
    pairs = [
        (_("Driver"), node.driver_version),
        ("CUDA", node.cuda_version),
        ("CANN", node.cann_version),
        ("ROCm", node.rocm_version),
        ("DTK", node.dtk_version),
    ]
    return [(label, value) for label, value in pairs if value]


@register.filter
def get_item(mapping, key):
    """``{{ mapping|get_item:key }}`` for dicts keyed by something a template cannot spell."""
    try:
        return mapping.get(key)
    except AttributeError:
        return None


@register.filter
def compact_json(value) -> str:
    """A JSON value on one line (for event before / after), non-ASCII kept readable."""
    if value in (None, ""):
        return ""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


# What the vendor tools call a card on a node.
DEVICE_KIND_BY_VENDOR: dict[str, str] = {"huawei": "NPU", "hygon": "DCU", "cambricon": "MLU", "intel": "HPU"}


@register.filter
def device_short(device) -> str:
    """A short name for a card on its node, as the vendor tools print it: GPU0, NPU3, DCU1, MLU2.

    Derived from the vendor alone, so it never costs a query for the device model.
    """
    return f"{DEVICE_KIND_BY_VENDOR.get(device.vendor, 'GPU')}{device.index}"


@register.simple_tag
def plotly_scripts() -> SafeString:
    """The chart scripts of a page: the plotly.js bundle settings.SUANCHI_PLOTLY_JS names (the "basic"
    one: scatter and bar) and ``js/charts.js``, which draws the page's figures."""
    from django.conf import settings
    from django.templatetags.static import static

    bundle = settings.SUANCHI_PLOTLY_JS
    return format_html(
        '<script src="{}"></script><script src="{}" defer></script>', static(bundle), static("js/charts.js")
    )


@register.filter
def num(value, places=None) -> str:
    """``{{ coefficient|num }}``: a decimal without exponent or trailing zeros, localized
    (0.580100000000000 → "0.5801", 1E+1 → "10"); ``|num:2`` rounds to two places first."""
    from apps.core.formatting import format_number

    return format_number(value, int(places) if places not in (None, "") else None)


@register.filter
def when(value, style: str = "short") -> str:
    """``{{ job.created_at|when }}``: a time in the current zone as every page prints it ("2026-12-01
    16:38", settings FORMAT_MODULE_PATH); ``|when:"long"`` uses DATETIME_FORMAT."""
    from apps.core.formatting import format_datetime

    return format_datetime(value, short=style != "long")
