"""AMD Instinct: adapter facts and the ``rocm-smi --showallinfo --json`` parser.

The JSON is one object keyed ``card0`` .. ``cardN`` plus ``system``; every value is a string. Key
spellings drift between ROCm releases ("Card series" / "Card Series", "Card model" / "Card Model"), so
card keys are looked up case-insensitively. ``system`` carries ``Driver version`` and the pairwise
topology: ``(Topology) Link type between DRM devices i and j`` ("XGMI" / "PCIE"), ``... Weight ...``
and ``... Hops ...``. DRM device numbers are taken to be the card numbers.

Only XGMI pairs become ``links`` (a PCIe pair says nothing the ledger's link kinds can use); every
pair, with its weight and hops, is kept in ``topology["pairs"]``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import gettext as _

from apps.core.jsondepth import MAX_JSON_DEPTH, too_deep

from .adapter import (
    VendorAdapter,
    ensure_text,
    fail,
    fail_element,
    fail_line,
    hex_id,
    na,
    normalise_pci_bus_id,
    parse_number,
    single_int,
    text_lines,
)
from .base import ParsedDevice, ParsedLink, ParsedReport

VENDOR = "amd"
KIND = "rocm-smi-json"

_CARD = re.compile(r"card(\d+)")
_TOPOLOGY = re.compile(
    r"\(Topology\) (Link type|Weight|Hops) between DRM devices (\d+) and (\d+)", re.IGNORECASE
)
_MIB = 1024 * 1024


def _load_json_object(text: str, *, kind: str) -> dict:
    """rocm-smi's --json output as a dict, or a ParseFailed naming the line (or the nesting depth:
    json.loads recurses once per level, issue 15 finding 5a)."""
    if too_deep(text):
        fail(
            _("JSON nested deeper than %(MAX_JSON_DEPTH)s levels") % {"MAX_JSON_DEPTH": MAX_JSON_DEPTH},
            kind=kind,
        )
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        fail_line(
            exc.lineno,
            _("invalid JSON at column %(colno)s: %(msg)s") % {"colno": exc.colno, "msg": exc.msg},
            kind=kind,
            column=exc.colno,
        )
    if not isinstance(data, dict):
        fail_element(
            "<root>",
            _("expected a JSON object keyed card0..N and system, got %(type)s")
            % {"type": type(data).__name__},
            kind=kind,
        )
    return data


def parse_rocm_smi_json(text: str) -> ParsedReport:
    text = ensure_text(text, kind=KIND)
    if not text.strip():
        fail(_("empty input"), kind=KIND)
    data = _load_json_object(text, kind=KIND)

    report = ParsedReport(vendor=VENDOR, kind=KIND)
    cards: list[tuple[int, str, dict[str, Any]]] = []
    for key, value in data.items():
        match = _CARD.fullmatch(key)
        if match is None:
            if key != "system":
                report.warnings.append(f"ignored top-level key {key!r}")
            continue
        if not isinstance(value, dict):
            fail_element(
                key, _("expected an object, got %(type)s") % {"type": type(value).__name__}, kind=KIND
            )
        cards.append((int(match.group(1)), key, value))
    if not cards:
        fail_element("<root>", _("no card0..N entries"), kind=KIND)

    system = data.get("system", {})
    if not isinstance(system, dict):
        fail_element(
            "system", _("expected an object, got %(type)s") % {"type": type(system).__name__}, kind=KIND
        )
    report.node["driver_version"] = na(_str(_get(system, "Driver version")))
    report.node["rocm_version"] = na(_str(_get(system, "ROCm version")))

    for index, key, card in sorted(cards):
        report.devices.append(_card(index, key, card))

    known = {d.index for d in report.devices}
    pairs: dict[tuple[int, int], dict[str, Any]] = {}
    for name, raw in system.items():
        match = _TOPOLOGY.fullmatch(name)
        if match is None:
            continue
        what, a, b = match.group(1).lower(), int(match.group(2)), int(match.group(3))
        if a == b:
            continue
        a, b = min(a, b), max(a, b)
        entry = pairs.setdefault((a, b), {"a": a, "b": b, "link_type": None, "weight": None, "hops": None})
        value = na(_str(raw))
        if what == "link type":
            entry["link_type"] = value.upper() if value else None
        else:
            entry[what] = single_int(value)
    for (a, b), entry in sorted(pairs.items()):
        if entry["link_type"] == "XGMI":
            if a not in known or b not in known:
                report.warnings.append(f"XGMI link {a}-{b} names a card that is not in the report")
                continue
            report.links.append(ParsedLink(a=a, b=b, link="XGMI"))
    report.topology = {"pairs": [pairs[k] for k in sorted(pairs)]}
    return report


def _str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (dict, list)):
        return None
    return str(value)


def _get(obj: dict[str, Any], *names: str) -> Any:
    """The first of ``names`` present in ``obj``, compared case-insensitively."""
    lowered = {k.lower(): v for k, v in obj.items()}
    for name in names:
        if name.lower() in lowered:
            return lowered[name.lower()]
    return None


def _card(index: int, key: str, card: dict[str, Any]) -> ParsedDevice:
    def field(*names: str) -> str | None:
        return na(_str(_get(card, *names)))

    def number(*names: str) -> float | None:
        raw = field(*names)
        try:
            return parse_number(raw)
        except ValueError:
            fail_element(f"{key}/{names[0]}", _("%(raw)r is not a number") % {"raw": raw}, kind=KIND)

    def mib(name: str) -> int | None:
        value = number(name)
        return None if value is None else int(value) // _MIB

    bus_raw = field("PCI Bus")
    try:
        pci_bus_id = normalise_pci_bus_id(bus_raw)
    except ValueError:
        fail_element(f"{key}/PCI Bus", _("%(bus_raw)r is not a PCI bus id") % {"bus_raw": bus_raw}, kind=KIND)
    device_raw = field("Device ID")
    try:
        pci_device_id = hex_id(device_raw)
    except ValueError:
        fail_element(
            f"{key}/Device ID", _("%(device_raw)r is not a hex id") % {"device_raw": device_raw}, kind=KIND
        )

    temperature = number("Temperature (Sensor junction) (C)")
    if temperature is None:
        temperature = number("Temperature (Sensor edge) (C)")
    power = number("Average Graphics Package Power (W)")
    if power is None:
        power = number("Current Socket Graphics Package Power (W)")

    extra = {
        "card_model": field("Card model"),
        "card_sku": field("Card SKU"),
        "card_vendor": field("Card vendor"),
        "gfx_version": field("GFX Version"),
        "max_power_w": number("Max Graphics Package Power (W)"),
        "temperature_edge_c": number("Temperature (Sensor edge) (C)"),
        "temperature_memory_c": number("Temperature (Sensor memory) (C)"),
    }
    return ParsedDevice(
        index=index,
        uuid=field("Unique ID"),
        serial=field("Serial Number"),
        model_name=field("Card series", "Market Name", "Card model"),
        memory_mib=mib("VRAM Total Memory (B)"),
        pci_bus_id=pci_bus_id,
        numa_node=single_int(field("(Topology) Numa Node")),
        firmware_version=field("VBIOS version"),
        pci_device_id=pci_device_id,
        utilization_pct=number("GPU use (%)"),
        memory_used_mib=mib("VRAM Total Used Memory (B)"),
        temperature_c=temperature,
        power_w=power,
        extra=extra,
    )


# ===================================================================================================
# rocm-smi --showtopo (text and --json); hy-smi --showtopo reuses the text reader
# ===================================================================================================
#
# Text layout (rocm_smi.py showWeightTopology / showHopsTopology / showTypeTopology / showNumaTopology,
# ROCm/rocm_smi_lib python_smi_tools), one matrix per section between ``=`` rules:
#
#   ============================ ROCm System Management Interface ============================
#   ================================ Weight between two GPUs =================================
#          GPU0         GPU1
#   GPU0   0            15
#   GPU1   15           0
#   ================================= Hops between two GPUs ==================================
#   ...
#   =============================== Link Type between two GPUs ===============================
#          GPU0         GPU1
#   GPU0   0            XGMI
#   ...
#   ======================================= Numa Nodes =======================================
#   GPU[0]		: (Topology) Numa Node: 0
#   GPU[0]		: (Topology) Numa Affinity: 0
#   ================================== End of ROCm SMI Log ===================================
#
# Older releases print "GPU 0          : (Topology) Numa Node: 0". With --json the same facts are
# ``card<N>: {"(Topology) Numa Node": "0", ...}`` and ``system: {"(Topology) Link type between DRM
# devices 0 and 1": "XGMI", ... Weight ..., ... Hops ...}`` (upper triangle only; formatMatrixToJSON).
# As for rocm-smi-json, only XGMI pairs become links; every pair is kept in topology["pairs"].

KIND_TOPO = "rocm-smi-topo"
_RULE_TITLE = re.compile(r"=+\s*(?P<title>.*?)\s*=+")
_MATRIX_TITLE = re.compile(
    r"(?P<what>Weight|Hops|Link Type|Access) between two (?P<word>\w+?)s", re.IGNORECASE
)
_NUMA_LINE = re.compile(
    r"(?P<word>[A-Z]+)\s*\[?\s*(?P<index>\d+)\s*\]?\s*:\s*\(Topology\) Numa (?P<what>Node|Affinity)\s*:?\s*(?P<value>\S+)",
    re.IGNORECASE,
)


def parse_rocm_smi_topo(text: str) -> ParsedReport:
    stripped = ensure_text(text, kind=KIND_TOPO).strip()
    if stripped.startswith("{"):
        return _topo_json(text)
    return parse_smi_topology_text(
        text, kind=KIND_TOPO, vendor=VENDOR, banner="ROCm System Management Interface", words=("GPU",)
    )


def parse_smi_topology_text(
    text: str,
    *,
    kind: str,
    vendor: str,
    banner: str,
    words: tuple[str, ...],
    refuse_banner: str | None = None,
) -> ParsedReport:
    """The rocm-smi style ``--showtopo`` text (also DTK's hy-smi, whose labels may read HCU/DCU)."""
    lines = text_lines(text, kind=kind)
    banner_no = next((n for n, line in enumerate(lines, start=1) if banner in line), None)
    if banner_no is None or (refuse_banner and refuse_banner in lines[banner_no - 1]):
        first = next((n for n, line in enumerate(lines, start=1) if line.strip()), 1)
        fail_line(
            first,
            _("no '=== %(banner)s ===' rule; is this %(kind)s --showtopo output?")
            % {"banner": banner, "kind": kind.replace("-topo", "")},
            kind=kind,
            text=lines[first - 1],
        )
    topo = _SmiTopology(kind=kind, words=words, label_re=re.compile(rf"(?:{'|'.join(words)})(\d+)"))
    end_no = None
    for n in range(banner_no + 1, len(lines) + 1):
        line = lines[n - 1]
        stripped = line.strip()
        if not stripped:
            continue
        rule = _RULE_TITLE.fullmatch(stripped)
        if rule is not None or re.fullmatch(r"=+", stripped):
            topo.close_matrix(n)
            title = rule["title"] if rule is not None else ""
            if title.startswith("End of"):
                end_no = n
                break
            topo.section, topo.header, topo.rows_seen = title or topo.section, None, {}
            continue
        if topo.section is None:
            fail_line(
                n,
                _(
                    "expected a topology section ('=== Link Type between two %(words)ss ===', 'Numa Nodes', ...); is this %(kind)s --showtopo output?"
                )
                % {"words": words[0], "kind": kind.replace("-topo", "")},
                kind=kind,
                text=line,
            )
        if _MATRIX_TITLE.fullmatch(topo.section):
            topo.matrix_line(n, line)
        elif topo.section.lower().startswith("numa"):
            topo.numa_line(n, line)
        # Other sections (access matrices in another layout, future additions) are skipped.
    if end_no is None:
        topo.close_matrix(len(lines))
        fail_line(len(lines), _("no '=== End of ... SMI Log ===' rule: the output is truncated"), kind=kind)
    if not topo.seen_devices:
        fail_line(end_no, _("no topology section lists a device"), kind=kind)

    report = ParsedReport(vendor=vendor, kind=kind, full_inventory=False)
    for index in sorted(topo.seen_devices):
        report.devices.append(ParsedDevice(index=index, numa_node=topo.numa.get(index, {}).get("node")))
    pairs = _pairs_from(
        link_types=topo.matrices.get("link type", {}),
        weights=topo.matrices.get("weight", {}),
        hops=topo.matrices.get("hops", {}),
    )
    _xgmi_links(report, pairs)
    report.topology = {
        "pairs": [pairs[k] for k in sorted(pairs)],
        "numa_affinity": {i: v.get("affinity") for i, v in sorted(topo.numa.items())},
    }
    return report


@dataclass
class _SmiTopology:
    """What ``parse_smi_topology_text`` has read so far: the section it is in, the matrix header and
    rows of that section, the matrices and NUMA facts of the sections before."""

    kind: str
    words: tuple[str, ...]
    label_re: re.Pattern
    matrices: dict[str, dict[tuple[int, int], str]] = field(default_factory=dict)
    numa: dict[int, dict[str, int | None]] = field(default_factory=dict)
    seen_devices: set[int] = field(default_factory=set)
    section: str | None = None
    header: list[int] | None = None
    header_no: int = 0
    rows_seen: dict[int, int] = field(default_factory=dict)

    def close_matrix(self, at: int) -> None:
        if self.section and self.header is not None:
            missing = [i for i in self.header if i not in self.rows_seen]
            if missing:
                fail_line(
                    at,
                    _("section %(section)r ends before the row for device %(missing)s (truncated?)")
                    % {"section": self.section, "missing": missing[0]},
                    kind=self.kind,
                )

    def matrix_line(self, n: int, line: str) -> None:
        """A line of a matrix section: its header (the device labels), then one row per device."""
        kind, section, words = self.kind, self.section, self.words
        tokens = line.strip().split()
        if self.header is None:
            matches = [self.label_re.fullmatch(t) for t in tokens]
            if not all(matches):
                fail_line(
                    n,
                    _("expected the %(section)r header (%(words)s0 %(words)s1 ...)")
                    % {"section": section, "words": words[0]},
                    kind=kind,
                    text=line,
                )
            self.header = [int(m.group(1)) for m in matches]
            self.header_no = n
            self.seen_devices.update(self.header)
            return
        header = self.header
        row = self.label_re.fullmatch(tokens[0])
        if row is None or int(row.group(1)) not in header:
            fail_line(
                n,
                _("row label %(tokens)r is not a column of the header (line %(header_no)s)")
                % {"tokens": tokens[0], "header_no": self.header_no},
                kind=kind,
                text=line,
            )
        a = int(row.group(1))
        if a in self.rows_seen:
            fail_line(
                n,
                _("row %(tokens)s appears twice in %(section)r (first on line %(line)s)")
                % {"tokens": tokens[0], "section": section, "line": self.rows_seen[a]},
                kind=kind,
                text=line,
            )
        if len(tokens) - 1 != len(header):
            fail_line(
                n,
                _("expected %(count)s cells, got %(count2)s")
                % {"count": len(header), "count2": len(tokens) - 1},
                kind=kind,
                text=line,
            )
        self.rows_seen[a] = n
        what = _MATRIX_TITLE.fullmatch(section)["what"].lower()
        for b, cell in zip(header, tokens[1:], strict=True):
            if a != b:
                self.matrices.setdefault(what, {})[(a, b)] = cell

    def numa_line(self, n: int, line: str) -> None:
        """A line of the NUMA section: ``GPU[<n>] : (Topology) Numa Node: <n>`` (or Affinity)."""
        match = _NUMA_LINE.fullmatch(line.strip())
        if match is None or match["word"].upper() not in self.words:
            fail_line(
                n,
                _("expected '%(words)s[<n>] : (Topology) Numa Node: <n>'") % {"words": self.words[0]},
                kind=self.kind,
                text=line,
            )
        index = int(match["index"])
        self.seen_devices.add(index)
        self.numa.setdefault(index, {})[match["what"].lower()] = single_int(match["value"])


def _pairs_from(*, link_types, weights, hops) -> dict[tuple[int, int], dict[str, Any]]:
    pairs: dict[tuple[int, int], dict[str, Any]] = {}
    for source, key in ((link_types, "link_type"), (weights, "weight"), (hops, "hops")):
        for (a, b), raw in source.items():
            lo, hi = min(a, b), max(a, b)
            entry = pairs.setdefault(
                (lo, hi), {"a": lo, "b": hi, "link_type": None, "weight": None, "hops": None}
            )
            value = na(raw)
            if key == "link_type":
                entry[key] = entry[key] or (value.upper() if value else None)
            elif entry[key] is None:
                entry[key] = single_int(value)
    return pairs


def _xgmi_links(report: ParsedReport, pairs: dict[tuple[int, int], dict[str, Any]]) -> None:
    known = {d.index for d in report.devices}
    for (a, b), entry in sorted(pairs.items()):
        if entry["link_type"] == "XGMI":
            if a not in known or b not in known:
                report.warnings.append(f"XGMI link {a}-{b} names a card that is not in the report")
                continue
            report.links.append(ParsedLink(a=a, b=b, link="XGMI"))


def _topo_json(text: str) -> ParsedReport:
    kind = KIND_TOPO
    data = _load_json_object(text, kind=kind)
    report = ParsedReport(vendor=VENDOR, kind=kind, full_inventory=False)
    numa_affinity: dict[int, int | None] = {}
    for key, value in data.items():
        match = _CARD.fullmatch(key)
        if match is None:
            continue
        if not isinstance(value, dict):
            fail_element(
                key, _("expected an object, got %(type)s") % {"type": type(value).__name__}, kind=kind
            )
        index = int(match.group(1))
        report.devices.append(
            ParsedDevice(index=index, numa_node=single_int(_str(_get(value, "(Topology) Numa Node"))))
        )
        numa_affinity[index] = single_int(_str(_get(value, "(Topology) Numa Affinity")))
    system = data.get("system", {})
    if not isinstance(system, dict):
        fail_element(
            "system", _("expected an object, got %(type)s") % {"type": type(system).__name__}, kind=kind
        )
    sources: dict[str, dict[tuple[int, int], str]] = {"link type": {}, "weight": {}, "hops": {}}
    for name, raw in system.items():
        match = _TOPOLOGY.fullmatch(name)
        if match is None:
            continue
        a, b = int(match.group(2)), int(match.group(3))
        if a != b:
            sources[match.group(1).lower()][(a, b)] = _str(raw) or ""
    if not report.devices and not any(sources.values()):
        fail_element("<root>", _("no card0..N entries and no (Topology) pairs in system"), kind=kind)
    known = {d.index for d in report.devices}
    for pair_source in sources.values():
        for a, b in pair_source:
            for index in (a, b):
                if index not in known:
                    known.add(index)
                    report.devices.append(ParsedDevice(index=index))
    report.devices.sort(key=lambda d: d.index)
    pairs = _pairs_from(link_types=sources["link type"], weights=sources["weight"], hops=sources["hops"])
    _xgmi_links(report, pairs)
    report.topology = {"pairs": [pairs[k] for k in sorted(pairs)], "numa_affinity": numa_affinity}
    return report


# ===================================================================================================
# Adapter
# ===================================================================================================


class AmdAdapter(VendorAdapter):
    vendor = "amd"
    display_name = "AMD Instinct"
    device_kind = "gpu"
    resource_name = "amd.com/gpu"
    # HIP_VISIBLE_DEVICES, not ROCR_VISIBLE_DEVICES: HIP applications (PyTorch, vLLM) honour it, it
    # renumbers like CUDA_VISIBLE_DEVICES, and Hygon's DTK uses the same variable.
    visible_devices_env = "HIP_VISIBLE_DEVICES"
    # Not in seed 004; invented in the same style as nvidia-gpu / hygon-dcu.
    accelerator_label = "amd-gpu"
    brand_label = "amd"
    model_label_key = "gpu-model"
    parsers = {KIND: parse_rocm_smi_json, KIND_TOPO: parse_rocm_smi_topo}
