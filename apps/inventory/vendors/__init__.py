"""Vendor adapters and SMI output parsers (pure Python: no Django models, no database).

* ``ADAPTERS``: vendor slug -> ``VendorAdapter`` (resource name, labels, taints, mounts; exporter
  metrics are apps/telemetry/metric_maps.py's).
* ``PARSERS``: report kind (``NodeReport.Kind`` value) -> ``parse(text) -> ParsedReport``.
* ``parse_report(kind, text)``: dispatch; raises ``ParseFailed`` for unknown kinds and bad output.
  ``kind="auto"`` recognises the tool by its content (``detect_kind``) and says which kind it took
  (``ParsedReport.kind``; ``requested_kind`` stays "auto").

Adding a vendor = one module with its adapter (and parsers) + one line in ``_ADAPTER_CLASSES``.
"""

from __future__ import annotations

import json
import re

from django.utils.translation import gettext as _

from apps.core.errors import ParseFailed, ValidationFailed

from .adapter import Parser, VendorAdapter, ensure_text, strip_ansi
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
            _("unknown vendor %(vendor)r; known vendors: %(known)s") % {"vendor": vendor, "known": known},
            details={"vendor": vendor, "known": sorted(ADAPTERS)},
        ) from None


def adapter_for_kind(kind: str) -> VendorAdapter:
    """The adapter whose parsers handle a report kind."""
    for adapter in ADAPTERS.values():
        if kind in adapter.parsers:
            return adapter
    raise _unknown_kind(kind)


AUTO = "auto"


def parse_report(kind: str, text: str | bytes) -> ParsedReport:
    """Parse one tool output. Raises ``ParseFailed`` (message names the line / element) on bad input.

    ``kind="auto"``: the kind is recognised from the content first (``detect_kind``).
    """
    if kind == AUTO:
        detected = detect_kind(text)
        report = PARSERS[detected](text)
        report.requested_kind = AUTO
        return report
    parser = PARSERS.get(kind) if isinstance(kind, str) else None
    if parser is None:
        raise _unknown_kind(kind)
    return parser(text)


# Content signatures, tried in order; each names the kind whose documented output carries it
# (the formats are described in each vendor module). Order matters where one output contains
# another's marker: rocm-smi text and hy-smi text both print "System Management Interface".
_LGIPP_LINE = re.compile(r"GPU\s+\d+\s+Profile ID\s+\d+\s+Placements?\s*:")
_CNMON_INFO_CARD = re.compile(r"^Card\s+\d+\s*$", re.MULTILINE)
_TOPO_HEADER = re.compile(r"^[ \t]+(?:\x1b\[[0-9;]*m)?GPU0\b", re.MULTILINE)
_NPU_TOPO_HEADER = re.compile(r"^[ \t]+(?:NPU|Phy-ID)\d+\b", re.MULTILINE)
_CSV_FIRST = re.compile(r"(?:index\s*,|\d+\s*,\s*\S)")


def detect_kind(text: str | bytes) -> str:
    """The report kind whose documented format this output has; ``ParseFailed`` (naming line 1) otherwise."""
    text = strip_ansi(ensure_text(text, kind=AUTO))
    stripped = text.strip()
    if not stripped:
        raise ParseFailed(_("empty input"), details={"kind": AUTO})
    first_line = stripped.splitlines()[0].strip()
    if stripped.startswith("<") and "<nvidia_smi_log" in stripped[:4096]:
        return "nvidia-smi-xml"
    if stripped.startswith("{"):
        return _detect_json(stripped)
    if "GPU instance profiles:" in stripped:
        return "nvidia-smi-mig-lgip"
    if _LGIPP_LINE.match(first_line):
        return "nvidia-smi-mig-lgipp"
    if re.search(r"\|\s*CNMON\s+v", stripped):
        return "cnmon"
    if _CNMON_INFO_CARD.search(stripped) and "Product Name" in stripped:
        return "cnmon-info"
    if re.search(r"npu-smi\s+\S+\s+Version:", stripped):
        return "npu-smi"
    if _NPU_TOPO_HEADER.search(text):
        return "npu-smi-topo"
    if "ROCm System Management Interface" in stripped:
        return "rocm-smi-topo"
    if "System Management Interface" in stripped:
        return "hy-smi-topo" if re.search(r"between two \w+s|Numa Nodes", stripped) else "hy-smi"
    if _TOPO_HEADER.search(text):
        return "nvidia-topo"
    if _CSV_FIRST.match(first_line) and "," in first_line:
        return "nvidia-smi-csv"
    supported = sorted(PARSERS)
    raise ParseFailed(
        _(
            "line 1: cannot tell which tool printed this output (%(text)r); name the kind instead of 'auto'; "
            "supported kinds: %(kinds)s"
        )
        % {"text": first_line[:80], "kinds": ", ".join(supported)},
        details={"kind": AUTO, "line": 1, "text": first_line[:300], "valid_kinds": supported},
    )


def _detect_json(text: str) -> str:
    """rocm-smi --json: --showallinfo prints many card keys, --showtopo only "(Topology) ..." ones."""
    try:
        data = json.loads(text) if len(text) < 4_000_000 else None
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        card_keys = [
            key
            for name, card in data.items()
            if re.fullmatch(r"card\d+", name) and isinstance(card, dict)
            for key in card
        ]
        if card_keys and any(not key.startswith("(Topology)") for key in card_keys):
            return "rocm-smi-json"
        return "rocm-smi-topo"
    return "rocm-smi-json"  # its parser names the line and column of the JSON error


def _unknown_kind(kind: object) -> ParseFailed:
    valid = sorted(PARSERS)
    return ParseFailed(
        _("unknown report kind %(kind)r; valid kinds: %(kinds)s") % {"kind": kind, "kinds": ", ".join(valid)},
        details={"kind": kind if isinstance(kind, str) else repr(kind), "valid_kinds": valid},
    )


__all__ = [
    "ADAPTERS",
    "AUTO",
    "AGENT_QUERY_FIELDS",
    "PARSERS",
    "ParsedDevice",
    "ParsedLink",
    "ParsedReport",
    "Parser",
    "VendorAdapter",
    "adapter_for_kind",
    "detect_kind",
    "get_adapter",
    "parse_report",
]
