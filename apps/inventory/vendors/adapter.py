"""The vendor adapter base class and the small parsing toolkit every SMI parser shares.

Pure Python: no Django, no database. A vendor module (``nvidia.py``, ``huawei.py``, ...) subclasses
``VendorAdapter`` with its facts (resource name, labels, taints, mounts) and lists its parsers in
``parsers``; the registry in ``__init__`` picks both up.

Parsers raise ``ParseFailed`` through ``fail_line`` / ``fail_element`` so every message starts with
the 1-based line number (``"line 7: ..."``) or the XML element path (``"element gpu[1]/uuid: ..."``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, NoReturn

from django.utils.translation import gettext as _

from apps.core.errors import ParseFailed

from .base import ParsedReport

Parser = Callable[[str], ParsedReport]

# ---------------------------------------------------------------------------------------------------
# Kubernetes label helpers
# ---------------------------------------------------------------------------------------------------

_LABEL_INVALID = re.compile(r"[^A-Za-z0-9._-]+")
_VENDOR_PREFIX = re.compile(
    r"^(nvidia|amd|huawei|ascend|hygon|cambricon|metax|iluvatar|kunlunxin|enflame|moore threads)[\s_-]+",
    re.IGNORECASE,
)


def label_value(text: str, *, lowercase: bool = False) -> str:
    """A valid Kubernetes label value (<= 63 chars of [A-Za-z0-9._-], alphanumeric at both ends).

    A leading vendor word is dropped ("NVIDIA A100-SXM4-80GB" -> "A100-SXM4-80GB"), runs of other
    characters become one "-". Returns "" when nothing usable is left.
    """
    value = _VENDOR_PREFIX.sub("", text.strip())
    value = _LABEL_INVALID.sub("-", value)
    if lowercase:
        value = value.lower()
    value = value[:63]
    return value.strip("-._")


# ---------------------------------------------------------------------------------------------------
# The adapter base class
# ---------------------------------------------------------------------------------------------------


class VendorAdapter:
    """What Suanchi needs to know about one accelerator vendor.

    Subclasses set the class attributes; instances are stateless (the registry keeps one each).
    """

    vendor: ClassVar[str]  # catalog Vendor value: "nvidia", "huawei", ...
    display_name: ClassVar[str]
    device_kind: ClassVar[str]  # catalog DeviceKind value: "gpu" | "npu" | "dcu" | "mlu"
    resource_name: ClassVar[str]  # whole-device Kubernetes extended resource
    visible_devices_env: ClassVar[str]  # env var a container runtime / framework reads

    # Node labels and taint (seed 004): accelerator=<accelerator_label>, gpu-brand=<brand_label>,
    # <model_label_key>=<model>.
    accelerator_label: ClassVar[str]
    brand_label: ClassVar[str]
    model_label_key: ClassVar[str]
    model_label_lowercase: ClassVar[bool] = False
    # Seed 004 calls the NVIDIA taint "optional"; every vendor taints by default.
    taint_optional: ClassVar[bool] = False
    taint_effect: ClassVar[str] = "NoSchedule"

    # hostPath volumes a workload container needs: [{"name", "hostPath", "mountPath", "readOnly"}].
    driver_mounts: ClassVar[tuple[Mapping[str, Any], ...]] = ()

    # The vendors' exporter metrics are not here: apps/telemetry/metric_maps.py maps them.

    # report kind -> parser. ``report_kinds`` is derived from it.
    parsers: ClassVar[Mapping[str, Parser]] = {}

    @property
    def report_kinds(self) -> tuple[str, ...]:
        return tuple(self.parsers)

    def node_labels(self, model_name: str | None = None) -> dict[str, str]:
        labels = {"accelerator": self.accelerator_label, "gpu-brand": self.brand_label}
        if model_name:
            value = label_value(model_name, lowercase=self.model_label_lowercase)
            if value:
                labels[self.model_label_key] = value
        return labels

    def taints(self) -> list[dict[str, str]]:
        return [{"key": "accelerator", "value": self.accelerator_label, "effect": self.taint_effect}]

    def mounts(self) -> list[dict[str, Any]]:
        """``driver_mounts`` as fresh dicts (safe to modify)."""
        return [dict(m) for m in self.driver_mounts]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.vendor}>"


# ---------------------------------------------------------------------------------------------------
# Parsing toolkit
# ---------------------------------------------------------------------------------------------------

# Values the tools print when they have nothing to say; compared case-insensitively after strip().
NA_VALUES = frozenset(
    {
        "",
        "n/a",
        "[n/a]",
        "na",
        "not supported",
        "[not supported]",
        "[not available]",
        "not available",
        "[unknown error]",
        "unknown error",
        "requested functionality has been deprecated",
    }
)


def na(value: str | None) -> str | None:
    """The stripped value, or None for N/A / [N/A] / Not Supported / empty."""
    if value is None:
        return None
    value = value.strip()
    return None if value.lower() in NA_VALUES else value


def fail_line(lineno: int, message: str, *, kind: str, text: str | None = None, **details: Any) -> NoReturn:
    info: dict[str, Any] = {"kind": kind, "line": lineno}
    if text is not None:
        info["text"] = text[:300]
    info.update(details)
    raise ParseFailed(_("line %(line)d: %(message)s") % {"line": lineno, "message": message}, details=info)


def diagonal_check(
    *, is_x: bool, label: str, column: str, cell: str, lineno: int, kind: str, text: str
) -> None:
    """A topology matrix has X on its diagonal (row ``label`` = ``column``) and nowhere else."""
    if is_x == (column == label):
        return
    fail_line(
        lineno,
        (
            _("row %(label)s, column %(column)s: %(cell)r where the diagonal X is expected")
            % {"label": label, "column": column, "cell": cell}
            if column == label
            else _("row %(label)s, column %(column)s: 'X' off the diagonal")
            % {"label": label, "column": column}
        ),
        kind=kind,
        text=text,
    )


def fail_element(path: str, message: str, *, kind: str, **details: Any) -> NoReturn:
    raise ParseFailed(
        _("element %(element)s: %(message)s") % {"element": path, "message": message},
        details={"kind": kind, "element": path, **details},
    )


def fail(message: str, *, kind: str, **details: Any) -> NoReturn:
    raise ParseFailed(message, details={"kind": kind, **details})


_NUMBER = r"[-+]?\d+(?:\.\d+)?"


def parse_number(raw: str | None, unit: str | None = None) -> float | None:
    """Parse "612.48 W" / "612.48" / "97 %" / "43.0C"; None for N/A values.

    ``unit`` is optional in the text (nounits output) and matched case-insensitively.
    Raises ValueError when the text is not a number (with that unit).
    """
    value = na(raw)
    if value is None:
        return None
    pattern = rf"({_NUMBER})" + (rf"\s*(?:{re.escape(unit)})?" if unit else "")
    match = re.fullmatch(pattern, value, flags=re.IGNORECASE)
    if not match:
        raise ValueError(value)
    return float(match.group(1))


def parse_int(raw: str | None, unit: str | None = None) -> int | None:
    number = parse_number(raw, unit)
    if number is None:
        return None
    if number != int(number):
        raise ValueError(raw)
    return int(number)


_PCI_BUS_ID = re.compile(
    r"(?:(?P<domain>[0-9A-Fa-f]{1,8}):)?(?P<bus>[0-9A-Fa-f]{1,2}):(?P<dev>[0-9A-Fa-f]{1,2})\.(?P<fn>[0-7])"
)


def normalise_pci_bus_id(raw: str | None) -> str | None:
    """Normalise a PCI bus id: "00000000:1A:00.0" / "1a:00.0" -> "0000:1A:00.0". ValueError if malformed."""
    value = na(raw)
    if value is None:
        return None
    match = _PCI_BUS_ID.fullmatch(value)
    if not match:
        raise ValueError(value)
    domain = int(match.group("domain") or "0", 16)
    return f"{domain:04X}:{int(match.group('bus'), 16):02X}:{int(match.group('dev'), 16):02X}.{match.group('fn')}"


def looks_like_pci_bus_id(raw: str) -> bool:
    return _PCI_BUS_ID.fullmatch(raw.strip()) is not None


def hex_id(raw: str | None, digits: int = 4) -> str | None:
    """Normalise a hex id: "0x740f" / "740F" -> "0x740F". ValueError if not hex."""
    value = na(raw)
    if value is None:
        return None
    body = value[2:] if value.lower().startswith("0x") else value
    if not re.fullmatch(r"[0-9A-Fa-f]+", body):
        raise ValueError(value)
    return "0x" + body.upper().zfill(digits)


def single_int(raw: str | None) -> int | None:
    """An int when the text is exactly one (possibly negative) integer, else None ("0-1", "N/A")."""
    value = na(raw)
    if value is None or not re.fullmatch(r"-?\d+", value):
        return None
    return int(value)


def text_lines(text: str | bytes, *, kind: str) -> list[str]:
    """The text as lines (BOM, CRLF and ANSI SGR colour codes removed). Empty input fails."""
    text = ensure_text(text, kind=kind)
    text = strip_ansi(text)
    if not text.strip():
        fail(_("empty input"), kind=kind)
    return text.splitlines()


def ensure_text(text: str | bytes, *, kind: str) -> str:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            fail(_("input is not UTF-8 (byte %(byte)d)") % {"byte": exc.start}, kind=kind)
    if not isinstance(text, str):
        fail(_("expected text, got %(type)s") % {"type": type(text).__name__}, kind=kind)
    return text.lstrip("\ufeff")


_ANSI_SGR = re.compile(r"\x1b\[[0-9;]*m")


def strip_ansi(text: str) -> str:
    return _ANSI_SGR.sub("", text)


# ---------------------------------------------------------------------------------------------------
# PCIe switch ids from topology matrices
# ---------------------------------------------------------------------------------------------------


def pix_switch_ids(devices: Iterable[str], cells: Mapping[tuple[str, str], str]) -> dict[str, str]:
    """A PCIe switch id per device label, derived from ``PIX`` cells of a topology matrix.

    The rule (documented in README "Discovery"): ``PIX`` means the path crosses at most one PCIe
    bridge, i.e. both ends hang off the same PCIe switch (NVIDIA ``nvidia-smi topo -m`` legend;
    Huawei ``npu-smi info -t topo`` legend "Path traversing a single PCIe switch"). Devices joined by
    a ``PIX`` cell, directly or through a shared endpoint (a NIC both see as ``PIX``), are behind one
    switch: connected components of the PIX relation. The id is ``"pix-<first label>"`` of the
    component in matrix order; a device with no PIX cell at all gets "" (behind no switch we can see).
    ``PXB`` / ``PHB`` / ``NODE`` / ``SYS`` say the switches differ (or are unknown), so they join nothing.
    PCIe bus ids alone are not used: a switch's downstream ports get distinct bus numbers, so the
    endpoint's bus id does not reveal which switch it sits behind.

    ``cells`` maps (row label, column label) to the raw cell; labels absent from ``devices`` (NICs)
    still join components.
    """
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    touched: set[str] = set()
    for (a, b), cell in cells.items():
        if a == b or cell.strip().upper() != "PIX":
            continue
        touched.update((a, b))
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[rb] = ra
    result: dict[str, str] = {}
    first_of: dict[str, str] = {}
    for label in devices:
        if label not in touched:
            result[label] = ""
            continue
        root = find(label)
        first_of.setdefault(root, label)
        result[label] = f"pix-{first_of[root]}"
    return result
