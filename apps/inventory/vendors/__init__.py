"""Vendor adapters and SMI output parsers (pure Python: no Django models, no database).

* ``ADAPTERS``: vendor slug -> ``VendorAdapter`` (resource name, labels, taints, mounts; exporter
  metrics are apps/telemetry/metric_maps.py's).
* ``PARSERS``: report kind (``NodeReport.Kind`` value) -> ``parse(text) -> ParsedReport``.
* ``parse_report(kind, text)``: dispatch; raises ``ParseFailed`` for unknown kinds and bad output.
  ``kind="auto"`` recognises the tool by its content (``detect_kind``) and says which kind it took
  (``ParsedReport.kind``; ``requested_kind`` stays "auto").

Adding a vendor = one module with its adapter (and parsers) + one line in ``_ADAPTER_CLASSES``.
MetaX, Iluvatar, Kunlunxin, Enflame and Moore Threads modules also carry ``SIGNATURE`` / ``HEADER`` / ``TOOL`` for
``--kind auto`` (``_SIGNATURE_MODULES``): their tools print a banner only they print.
"""

from __future__ import annotations

import json
import re
from typing import NoReturn

from django.utils.translation import gettext as _

from apps.core.errors import ParseFailed, ValidationFailed

from . import enflame, iluvatar, kunlunxin, metax, mthreads
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
    metax.MetaxAdapter,
    iluvatar.IluvatarAdapter,
    kunlunxin.KunlunxinAdapter,
    enflame.EnflameAdapter,
    mthreads.MthreadsAdapter,
)

ADAPTERS: dict[str, VendorAdapter] = {cls.vendor: cls() for cls in _ADAPTER_CLASSES}

# Vendors recognised by their tool's banner: module with VENDOR, KIND, SIGNATURE, HEADER and TOOL.
_SIGNATURE_MODULES = (metax, iluvatar, kunlunxin, enflame, mthreads)

# report kind -> vendor slug, for every kind.
KIND_VENDORS: dict[str, str] = {
    kind: adapter.vendor for adapter in ADAPTERS.values() for kind in adapter.parsers
}

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


def adapter_for_kind(kind: str) -> VendorAdapter | None:
    """The adapter whose parsers handle a report kind."""
    if kind not in KIND_VENDORS:
        raise _unknown_kind(kind)
    return ADAPTERS.get(KIND_VENDORS[kind])


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
# (the formats are described in each vendor module). Every signature is specific to its tool: a
# banner or header only that tool prints, never a phrase several tools share ("System Management
# Interface" is printed by hy-smi, rocm-smi, mx-smi, efsmi and Intel's xpu-smi alike).
_LGIPP_LINE = re.compile(r"GPU\s+\d+\s+Profile ID\s+\d+\s+Placements?\s*:")
_CNMON_INFO_CARD = re.compile(r"^Card\s+\d+\s*$", re.MULTILINE)
_TOPO_HEADER = re.compile(r"^[ \t]+(?:\x1b\[[0-9;]*m)?GPU0\b", re.MULTILINE)
_NPU_TOPO_HEADER = re.compile(r"^[ \t]+(?:NPU|Phy-ID)\d+\b", re.MULTILINE)
_CSV_FIRST = re.compile(r"(?:index\s*,|\d+\s*,\s*\S)")
# hy-smi's own rule: the phrase alone between '=' runs (mx-smi prints "MetaX ... Log", rocm-smi "ROCm ...").
_HY_SMI_RULE = re.compile(r"^=+[ \t]+System Management Interface[ \t]+=+[ \t]*$", re.MULTILINE)

# Outputs of tools (or views of a tool) this version does not parse: refused naming what they are.
_UNSUPPORTED: tuple[tuple[re.Pattern[str], str], ...] = (
    # "| NVIDIA-SMI 410.48  Driver Version: ..." heads nvidia-smi's default table (use -q -x or --query-gpu).
    (re.compile(r"^\|\s*NVIDIA-SMI\s+\d", re.MULTILINE), "NVIDIA nvidia-smi's default table"),
    # intel/xpumanager doc/smi_user_guide.md: "Intel(R) XPU System Management Interface -- v1.0" (older
    # releases), "Intel XPU System Management Interface -- v1.0" (newer); not Kunlunxin's xpu-smi.
    (re.compile(r"Intel(?:\(R\))? XPU System Management Interface"), "Intel xpu-smi"),
    # Kunlunxin's R200/R300 listing (PaddlePaddle/docs docs/hardware_support/xpu/install_cn.md):
    # "| DevID |   PCI Addr   | Model |   SN   |    INODE   | ...", not the P800 card table.
    (
        re.compile(r"^\|\s*DevID\s*\|\s*PCI Addr\s*\|\s*Model\s*\|", re.MULTILINE),
        "Kunlunxin xpu-smi's R200/R300 listing",
    ),
)


def _signature_module_kind(text: str) -> str | None:
    """The kind of a banner-recognised vendor's output; ParseFailed for that tool's other views."""
    for module in _SIGNATURE_MODULES:
        if not module.SIGNATURE.search(text):
            continue
        if module.HEADER.search(text):
            return module.KIND
        _refuse(
            text,
            _(
                "line 1: this looks like %(tool)s output, but not its card table (%(header)s), "
                "which is the only view this version parses"
            )
            % {"tool": module.TOOL, "header": module.HEADER_TEXT},
            looks_like=module.TOOL,
        )
    return None


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
    kind = _signature_module_kind(text)
    if kind is not None:
        return kind
    for signature, tool in _UNSUPPORTED:
        if signature.search(text):
            _refuse(
                text,
                _("line 1: this looks like %(tool)s output, which this version does not parse")
                % {"tool": tool},
                looks_like=tool,
            )
    if "ROCm System Management Interface" in stripped:
        return "rocm-smi-topo"
    if _HY_SMI_RULE.search(stripped):
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


def _refuse(text: str, message: str, *, looks_like: str | None = None) -> NoReturn:
    first_line = text.strip().splitlines()[0].strip()
    supported = sorted(PARSERS)
    details = {"kind": AUTO, "line": 1, "text": first_line[:300], "valid_kinds": supported}
    if looks_like:
        details["looks_like"] = looks_like
    raise ParseFailed(
        _("%(message)s; supported kinds: %(kinds)s") % {"message": message, "kinds": ", ".join(supported)},
        details=details,
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
