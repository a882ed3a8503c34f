"""Vendor adapters and SMI output parsers (pure Python: no Django models, no database).

* ``ADAPTERS``: vendor slug -> ``VendorAdapter`` (resource name, labels, taints, exporter metrics).
* ``PARSERS``: report kind (``NodeReport.Kind`` value) -> ``parse(text) -> ParsedReport``.
* ``parse_report(kind, text)``: dispatch; raises ``ParseFailed`` for unknown kinds and bad output.

Adding a vendor = one module with its adapter (and parsers) + one line in ``_ADAPTER_CLASSES``.
"""

from __future__ import annotations

from apps.core.errors import ParseFailed, ValidationFailed

from .adapter import Parser, VendorAdapter
from .amd import AmdAdapter
from .base import ParsedDevice, ParsedLink, ParsedReport
from .cambricon import CambriconAdapter
from .huawei import HuaweiAdapter
from .hygon import HygonAdapter
from .nvidia import AGENT_QUERY_FIELDS, NvidiaAdapter

_ADAPTER_CLASSES: tuple[type[VendorAdapter], ...] = (
    NvidiaAdapter,
    HuaweiAdapter,
    AmdAdapter,
    HygonAdapter,
    CambriconAdapter,
)

ADAPTERS: dict[str, VendorAdapter] = {cls.vendor: cls() for cls in _ADAPTER_CLASSES}

PARSERS: dict[str, Parser] = {
    kind: parser for adapter in ADAPTERS.values() for kind, parser in adapter.parsers.items()
}


def get_adapter(vendor: str) -> VendorAdapter:
    """The adapter for a vendor slug; ``ValidationFailed`` naming the known slugs otherwise."""
    try:
        return ADAPTERS[vendor]
    except (KeyError, TypeError):
        known = ", ".join(sorted(ADAPTERS))
        raise ValidationFailed(
            f"unknown vendor {vendor!r}; known vendors: {known}",
            details={"vendor": vendor, "known": sorted(ADAPTERS)},
        ) from None


def adapter_for_kind(kind: str) -> VendorAdapter:
    """The adapter whose parsers handle a report kind."""
    for adapter in ADAPTERS.values():
        if kind in adapter.parsers:
            return adapter
    raise _unknown_kind(kind)


def parse_report(kind: str, text: str | bytes) -> ParsedReport:
    """Parse one tool output. Raises ``ParseFailed`` (message names the line / element) on bad input."""
    parser = PARSERS.get(kind) if isinstance(kind, str) else None
    if parser is None:
        raise _unknown_kind(kind)
    return parser(text)


def _unknown_kind(kind: object) -> ParseFailed:
    valid = sorted(PARSERS)
    return ParseFailed(
        f"unknown report kind {kind!r}; valid kinds: {', '.join(valid)}",
        details={"kind": kind if isinstance(kind, str) else repr(kind), "valid_kinds": valid},
    )


__all__ = [
    "ADAPTERS",
    "AGENT_QUERY_FIELDS",
    "PARSERS",
    "ParsedDevice",
    "ParsedLink",
    "ParsedReport",
    "Parser",
    "VendorAdapter",
    "adapter_for_kind",
    "get_adapter",
    "parse_report",
]
