"""NVIDIA: adapter facts and parsers for ``nvidia-smi -q -x``, ``--query-gpu --format=csv`` and ``topo -m``.

Formats (hardware-telemetry.md §2):

* ``-q -x``: root ``nvidia_smi_log`` (DTD v12 on driver 535, v13 on newer); one ``<gpu id="<bus id>">``
  per device. Power moved from ``power_readings/power_draw`` (old DTDs) to
  ``gpu_power_readings/power_draw`` (v12) and ``gpu_power_readings/average_power_draw`` (v13); volatile
  uncorrectable ECC is ``{sram,dram}_uncorrectable`` (v12), ``sram_uncorrectable_{parity,secded}`` (v13)
  or ``double_bit/total`` (old DTDs).
* csv: optional header with unit suffixes (``memory.total [MiB]``); values ``97 %``, ``72000 MiB``,
  ``612.48 W``, ``[N/A]``; ``noheader,nounits`` drops both.
* ``topo -m``: tab-separated matrix, header row starting with a tab, trailing ``CPU Affinity``,
  ``NUMA Affinity`` and (newer drivers) ``GPU NUMA ID``, which data rows precede with an empty cell.
"""

from __future__ import annotations

import re
from typing import Any

import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException
from django.utils.translation import gettext as _

from .adapter import (
    VendorAdapter,
    ensure_text,
    fail,
    fail_element,
    fail_line,
    hex_id,
    na,
    normalise_pci_bus_id,
    parse_int,
    parse_number,
    pix_switch_ids,
    single_int,
    text_lines,
)
from .base import ParsedDevice, ParsedLink, ParsedReport

VENDOR = "nvidia"
KIND_XML = "nvidia-smi-xml"
KIND_CSV = "nvidia-smi-csv"
KIND_TOPO = "nvidia-topo"
KIND_MIG_LGIP = "nvidia-smi-mig-lgip"
KIND_MIG_LGIPP = "nvidia-smi-mig-lgipp"

# The agent runs: nvidia-smi --query-gpu=<AGENT_QUERY_FIELDS joined by ","> --format=csv,noheader,nounits
# A csv report without a header is read in this column order.
AGENT_QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "name",
    "serial",
    "pci.bus_id",
    "memory.total",
    "driver_version",
    "vbios_version",
    "utilization.gpu",
    "memory.used",
    "temperature.gpu",
    "power.draw",
)


# ===================================================================================================
# nvidia-smi -q -x
# ===================================================================================================


def parse_nvidia_smi_xml(text: str) -> ParsedReport:
    kind = KIND_XML
    text = ensure_text(text, kind=kind)
    if not text.strip():
        fail(_("empty input"), kind=kind)
    try:
        root = SafeET.fromstring(text)
    except SafeET.ParseError as exc:
        line, column = exc.position
        reason = str(exc).split(": line ")[0]
        fail_line(
            line,
            _("XML is not well-formed at column %(column)s: %(reason)s")
            % {"column": column, "reason": reason},
            kind=kind,
            column=column,
        )
    except DefusedXmlException as exc:
        fail(_("forbidden XML construct: %(type)s") % {"type": type(exc).__name__}, kind=kind)

    if root.tag != "nvidia_smi_log":
        fail_element(
            root.tag, _("root element is <%(tag)s>, expected <nvidia_smi_log>") % {"tag": root.tag}, kind=kind
        )

    report = ParsedReport(vendor=VENDOR, kind=kind)
    report.node["driver_version"] = na(_child_text(root, "driver_version"))
    report.node["cuda_version"] = na(_child_text(root, "cuda_version"))

    gpus = root.findall("gpu")
    by_index: dict[int, str] = {}
    for position, gpu in enumerate(gpus):
        where = f"gpu[{position + 1}]"
        device = _xml_gpu(gpu, where, position)
        if device.index in by_index:
            fail_element(
                f"{where}/minor_number",
                _("index %(index)s already used by %(other)s")
                % {"index": device.index, "other": by_index[device.index]},
                kind=kind,
            )
        by_index[device.index] = where
        report.devices.append(device)

    attached = single_int(_child_text(root, "attached_gpus"))
    if attached is not None and attached != len(gpus):
        report.warnings.append(f"attached_gpus says {attached} but the log lists {len(gpus)} <gpu> elements")
    report.devices.sort(key=lambda d: d.index)
    return report


def _child_text(element: Any, path: str) -> str | None:
    node = element.find(path)
    if node is None:
        return None
    return "".join(node.itertext()).strip() if len(node) else (node.text or "").strip()


def _xml_quantity(element: Any, path: str, unit: str, where: str, *, integer: bool = False) -> Any:
    raw = _child_text(element, path)
    try:
        return parse_int(raw, unit) if integer else parse_number(raw, unit)
    except ValueError:
        fail_element(
            f"{where}/{path}", _("%(raw)r is not '<n> %(unit)s'") % {"raw": raw, "unit": unit}, kind=KIND_XML
        )


def _xml_count(element: Any, path: str, where: str) -> int | None:
    raw = _child_text(element, path)
    try:
        return parse_int(raw)
    except ValueError:
        fail_element(f"{where}/{path}", _("%(raw)r is not an integer") % {"raw": raw}, kind=KIND_XML)


def _xml_gpu(gpu: Any, where: str, position: int) -> ParsedDevice:
    kind = KIND_XML
    uuid = na(_child_text(gpu, "uuid"))
    if uuid is None:
        fail_element(f"{where}/uuid", _("missing (every <gpu> must carry its UUID)"), kind=kind)

    minor = _xml_count(gpu, "minor_number", where)
    index = minor if minor is not None else position

    bus_raw = na(_child_text(gpu, "pci/pci_bus_id")) or na(gpu.get("id"))
    try:
        pci_bus_id = normalise_pci_bus_id(bus_raw)
    except ValueError:
        fail_element(
            f"{where}/pci/pci_bus_id", _("%(bus_raw)r is not a PCI bus id") % {"bus_raw": bus_raw}, kind=kind
        )

    pci_device_id = _pci_device_id(_child_text(gpu, "pci/pci_device_id"), f"{where}/pci/pci_device_id", kind)

    mig_raw = na(_child_text(gpu, "mig_mode/current_mig"))
    mig_enabled = {"enabled": True, "disabled": False}.get(mig_raw.lower()) if mig_raw else None
    if mig_raw and mig_enabled is None:
        fail_element(
            f"{where}/mig_mode/current_mig",
            _("%(mig_raw)r is not Enabled/Disabled/N/A") % {"mig_raw": mig_raw},
            kind=kind,
        )

    partitions = [
        _xml_mig_device(mig, f"{where}/mig_devices/mig_device[{i}]")
        for i, mig in enumerate(gpu.findall("mig_devices/mig_device"), start=1)
    ]

    power = None
    for path in (
        "gpu_power_readings/power_draw",
        "gpu_power_readings/average_power_draw",
        "gpu_power_readings/instant_power_draw",
        "power_readings/power_draw",
    ):
        power = _xml_quantity(gpu, path, "W", where)
        if power is not None:
            break

    power_limit = None
    for path in (
        "gpu_power_readings/current_power_limit",
        "power_readings/power_limit",
        "power_readings/enforced_power_limit",
    ):
        power_limit = _xml_quantity(gpu, path, "W", where)
        if power_limit is not None:
            break

    problems = _xml_health_problems(gpu, where)

    extra: dict[str, Any] = {
        "bus_id_attr": gpu.get("id"),
        "minor_number": minor,
        "product_brand": na(_child_text(gpu, "product_brand")),
        "product_architecture": na(_child_text(gpu, "product_architecture")),
        "memory_reserved_mib": _xml_quantity(gpu, "fb_memory_usage/reserved", "MiB", where, integer=True),
        "ecc_mode": na(_child_text(gpu, "ecc_mode/current_ecc")),
        "power_limit_w": power_limit,
        "persistence_mode": na(_child_text(gpu, "persistence_mode")),
        "compute_mode": na(_child_text(gpu, "compute_mode")),
    }
    return ParsedDevice(
        index=index,
        uuid=uuid,
        serial=na(_child_text(gpu, "serial")),
        model_name=na(_child_text(gpu, "product_name")),
        memory_mib=_xml_quantity(gpu, "fb_memory_usage/total", "MiB", where, integer=True),
        pci_bus_id=pci_bus_id,
        numa_node=single_int(_child_text(gpu, "numa_node")),
        firmware_version=na(_child_text(gpu, "vbios_version")),
        health="degraded" if problems else "healthy",
        health_detail="; ".join(problems) if problems else None,
        pci_device_id=pci_device_id,
        mig_enabled=mig_enabled,
        partitions=partitions,
        utilization_pct=_xml_quantity(gpu, "utilization/gpu_util", "%", where),
        memory_used_mib=_xml_quantity(gpu, "fb_memory_usage/used", "MiB", where, integer=True),
        temperature_c=_xml_quantity(gpu, "temperature/gpu_temp", "C", where),
        power_w=power,
        extra=extra,
    )


def _pci_device_id(raw: str | None, where: str, kind: str) -> str | None:
    """The device id of "20B210DE" (device id + vendor id) as "0x20B2"; a bare 4-digit id is kept."""
    value = na(raw)
    if value is None:
        return None
    body = value[2:] if value.lower().startswith("0x") else value
    if not re.fullmatch(r"[0-9A-Fa-f]{8}|[0-9A-Fa-f]{4}", body):
        fail_element(
            where,
            _("%(value)r is not an 8-digit device+vendor id like '20B210DE'") % {"value": value},
            kind=kind,
        )
    return hex_id(body[:4])


_PROFILE_TAGS = ("profile", "profile_name", "mig_profile", "gpu_instance_profile")


def _xml_mig_device(mig: Any, where: str) -> dict[str, Any]:
    gi = _xml_count(mig, "gpu_instance_id", where)
    if gi is None:
        fail_element(f"{where}/gpu_instance_id", _("missing"), kind=KIND_XML)
    profile = None
    for tag in _PROFILE_TAGS:
        profile = na(_child_text(mig, tag))
        if profile:
            break
    return {
        "index": _xml_count(mig, "index", where),
        "profile": profile,
        "gi_id": gi,
        "ci_id": _xml_count(mig, "compute_instance_id", where),
        "memory_mib": _xml_quantity(mig, "fb_memory_usage/total", "MiB", where, integer=True),
        "memory_used_mib": _xml_quantity(mig, "fb_memory_usage/used", "MiB", where, integer=True),
        "sm_count": _xml_count(mig, "device_attributes/shared/multiprocessor_count", where),
    }


def _xml_health_problems(gpu: Any, where: str) -> list[str]:
    problems: list[str] = []
    volatile = gpu.find("ecc_errors/volatile")
    if volatile is not None:
        counters = [child for child in volatile if "uncorrectable" in child.tag]
        paths = [f"ecc_errors/volatile/{child.tag}" for child in counters]
        if not counters and volatile.find("double_bit/total") is not None:
            paths = ["ecc_errors/volatile/double_bit/total"]
        dbe = None
        for path in paths:
            count = _xml_count(gpu, path, where)
            if count is not None:
                dbe = (dbe or 0) + count
        if dbe:
            problems.append(f"ECC volatile uncorrectable (DBE) errors: {dbe}")
    if (na(_child_text(gpu, "remapped_rows/remapped_row_failure")) or "").lower() == "yes":
        problems.append("row remapping failure")
    return problems


# ===================================================================================================
# nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]
# ===================================================================================================

_CSV_ALIASES = {
    "gpu_name": "name",
    "gpu_bus_id": "pci.bus_id",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
    "vbios": "vbios_version",
}
_UNIT_SUFFIX = re.compile(r"\s*\[[^\]]*\]\s*$")


def parse_nvidia_smi_csv(text: str) -> ParsedReport:
    kind = KIND_CSV
    lines = text_lines(text, kind=kind)
    rows = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    if not rows:
        fail(_("empty input"), kind=kind)

    first_no, first_line = rows[0]
    if "no devices were found" in first_line.lower():
        fail_line(first_no, _("nvidia-smi reported 'No devices were found'"), kind=kind, text=first_line)
    first_cells = [c.strip() for c in first_line.split(",")]
    has_header = single_int(first_cells[0]) is None
    if has_header:
        fields = []
        for cell in first_cells:
            name = _UNIT_SUFFIX.sub("", cell).strip().lower()
            fields.append(_CSV_ALIASES.get(name, name))
        if "index" not in fields:
            fail_line(first_no, _("the header has no 'index' field"), kind=kind, text=first_line)
        if len(set(fields)) != len(fields):
            fail_line(first_no, _("the header repeats a field"), kind=kind, text=first_line)
        data = rows[1:]
    else:
        fields = list(AGENT_QUERY_FIELDS)
        data = rows

    report = ParsedReport(vendor=VENDOR, kind=kind)
    if has_header and "uuid" not in fields:
        report.warnings.append("the csv has no uuid column; devices are matched by index only")
    seen: dict[int, int] = {}
    for lineno, line in data:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(fields):
            fail_line(
                lineno,
                _("expected %(count)s comma-separated fields, got %(count2)s")
                % {"count": len(fields), "count2": len(cells)},
                kind=kind,
                text=line,
            )
        device = _csv_device(dict(zip(fields, cells, strict=True)), lineno, line, report)
        if device.index in seen:
            fail_line(
                lineno,
                _("index %(index)s already used on line %(line)s")
                % {"index": device.index, "line": seen[device.index]},
                kind=kind,
                text=line,
            )
        seen[device.index] = lineno
        report.devices.append(device)
    report.devices.sort(key=lambda d: d.index)
    return report


def _csv_device(values: dict[str, str], lineno: int, line: str, report: ParsedReport) -> ParsedDevice:
    kind = KIND_CSV

    def number(field: str, unit: str | None, *, integer: bool = False) -> Any:
        raw = values.get(field)
        try:
            return parse_int(raw, unit) if integer else parse_number(raw, unit)
        except ValueError:
            expected = f"'<n> {unit}'" if unit else "a number"
            fail_line(
                lineno,
                _("field '%(field)s': %(raw)r is not %(expected)s")
                % {"field": field, "raw": raw, "expected": expected},
                kind=kind,
                text=line,
            )

    index = number("index", None, integer=True)
    if index is None:
        fail_line(lineno, _("field 'index' is empty"), kind=kind, text=line)

    try:
        pci_bus_id = normalise_pci_bus_id(values.get("pci.bus_id"))
    except ValueError:
        fail_line(
            lineno,
            _("field 'pci.bus_id': %(pci_bus_id)r is not a PCI bus id")
            % {"pci_bus_id": values["pci.bus_id"]},
            kind=kind,
            text=line,
        )

    pci_device_id = None
    if "pci.device_id" in values:
        raw = na(values["pci.device_id"])
        body = raw[2:] if raw and raw.lower().startswith("0x") else raw
        if body is not None:
            if not re.fullmatch(r"[0-9A-Fa-f]{8}|[0-9A-Fa-f]{4}", body):
                fail_line(
                    lineno,
                    _("field 'pci.device_id': %(raw)r is not a device id") % {"raw": raw},
                    kind=kind,
                    text=line,
                )
            pci_device_id = hex_id(body[:4])

    mig_enabled = None
    if "mig.mode.current" in values:
        raw = na(values["mig.mode.current"])
        if raw is not None:
            mig_enabled = {"enabled": True, "disabled": False}.get(raw.lower())
            if mig_enabled is None:
                fail_line(
                    lineno,
                    _("field 'mig.mode.current': %(raw)r is not Enabled/Disabled") % {"raw": raw},
                    kind=kind,
                    text=line,
                )

    power = None
    for field in ("power.draw", "power.draw.average", "power.draw.instant"):
        power = number(field, "W")
        if power is not None:
            break

    health = health_detail = None
    if "ecc.errors.uncorrected.volatile.total" in values:
        dbe = number("ecc.errors.uncorrected.volatile.total", None, integer=True)
        if dbe is not None:
            health = "degraded" if dbe > 0 else "healthy"
            health_detail = f"ECC volatile uncorrectable (DBE) errors: {dbe}" if dbe > 0 else None

    driver = na(values.get("driver_version"))
    if driver:
        if report.node["driver_version"] and report.node["driver_version"] != driver:
            report.warnings.append(f"line {lineno}: driver_version {driver!r} differs from earlier rows")
        report.node["driver_version"] = report.node["driver_version"] or driver

    known = {
        "index",
        "uuid",
        "name",
        "serial",
        "pci.bus_id",
        "pci.device_id",
        "memory.total",
        "memory.used",
        "driver_version",
        "vbios_version",
        "utilization.gpu",
        "temperature.gpu",
        "power.draw",
        "power.draw.average",
        "power.draw.instant",
        "mig.mode.current",
        "ecc.errors.uncorrected.volatile.total",
    }
    extra = {field: na(value) for field, value in values.items() if field not in known}
    return ParsedDevice(
        index=index,
        uuid=na(values.get("uuid")),
        serial=na(values.get("serial")),
        model_name=na(values.get("name")),
        memory_mib=number("memory.total", "MiB", integer=True),
        pci_bus_id=pci_bus_id,
        firmware_version=na(values.get("vbios_version")),
        health=health,
        health_detail=health_detail,
        pci_device_id=pci_device_id,
        mig_enabled=mig_enabled,
        utilization_pct=number("utilization.gpu", "%"),
        memory_used_mib=number("memory.used", "MiB", integer=True),
        temperature_c=number("temperature.gpu", "C"),
        power_w=power,
        extra=extra,
    )


# ===================================================================================================
# nvidia-smi topo -m
# ===================================================================================================

_TRAILING_HEADERS = (("CPU", "Affinity"), ("NUMA", "Affinity"), ("GPU", "NUMA", "ID"))
_KNOWN_LINKS = re.compile(r"X|SYS|NODE|PHB|PXB|PIX|SOC|PSB|NV\d+")
_ANY_LINK = re.compile(r"[A-Z][A-Z0-9#]*")
_GPU_LABEL = re.compile(r"GPU(\d+)")
_NIC_LEGEND_ENTRY = re.compile(r"\s*(\S+):\s*(\S+)\s*")


def parse_nvidia_topo(text: str) -> ParsedReport:
    kind = KIND_TOPO
    lines = text_lines(text, kind=kind)

    header_at = None
    for i, line in enumerate(lines):
        tokens = line.split()
        if len(tokens) >= 1 and tokens[0] == "GPU0" and (line[:1].isspace() or tokens[1:2] != ["X"]):
            header_at = i
            break
    if header_at is None:
        first = next((n for n, line in enumerate(lines, start=1) if line.strip()), 1)
        fail_line(
            first, _("no matrix header found (a row starting with whitespace, then GPU0 ...)"), kind=kind
        )

    header_no = header_at + 1
    columns, trailing = _topo_header(lines[header_at], header_no)
    width = len(columns)

    matrix: dict[str, list[str]] = {}
    tails: dict[str, list[str]] = {}
    row_line: dict[str, int] = {}
    end = len(lines)
    for i in range(header_at + 1, len(lines)):
        line, lineno = lines[i], i + 1
        if not line.strip() or line.strip().startswith("Legend"):
            end = i
            break
        if "\t" in line:
            cells = [c.strip() for c in line.split("\t")]
            tab_mode = True
        else:
            cells = line.split()
            tab_mode = False
        label, rest = cells[0], cells[1:]
        if label not in columns:
            fail_line(
                lineno,
                _("row label %(label)r is not a column of the header (line %(header_no)s)")
                % {"label": label, "header_no": header_no},
                kind=kind,
                text=line,
            )
        if label in matrix:
            fail_line(
                lineno,
                _("row %(label)s appears twice (first on line %(line)s)")
                % {"label": label, "line": row_line[label]},
                kind=kind,
                text=line,
            )
        if len(rest) < width:
            fail_line(
                lineno,
                _("expected %(width)s matrix cells (%(columns)s..%(columns2)s), got %(count)s")
                % {"width": width, "columns": columns[0], "columns2": columns[-1], "count": len(rest)},
                kind=kind,
                text=line,
            )
        cells_m, tail = rest[:width], rest[width:]
        for column, cell in zip(columns, cells_m, strict=True):
            if not _ANY_LINK.fullmatch(cell):
                fail_line(
                    lineno,
                    _(
                        "row %(label)s, column %(column)s: %(cell)r is not a topology cell (expected %(count)s cells as in the header)"
                    )
                    % {"label": label, "column": column, "cell": cell, "count": 1 + width + len(trailing)},
                    kind=kind,
                    text=line,
                )
            if (cell == "X") != (column == label):
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
                    text=line,
                )
        tail = _topo_tail(tail, trailing, tab_mode, lineno, line, label, width)
        matrix[label], tails[label], row_line[label] = cells_m, tail, lineno

    missing = [c for c in columns if c not in matrix]
    if missing:
        fail_line(
            end + 1,
            _("matrix ends before the row for %(missing)s (truncated output?)") % {"missing": missing[0]},
            kind=kind,
        )

    legend = _topo_nic_legend(lines, end)
    report = ParsedReport(vendor=VENDOR, kind=kind, full_inventory=False)
    gpu_labels = [c for c in columns if _GPU_LABEL.fullmatch(c)]
    nic_labels = [c for c in columns if not _GPU_LABEL.fullmatch(c)]
    aliased = [c for c in nic_labels if re.fullmatch(r"NIC\d+", c)]
    if aliased and legend is None:
        fail_line(
            end + 1, _("the matrix has NIC columns but no 'NIC Legend:' block (truncated output?)"), kind=kind
        )
    for label in aliased:
        if label not in (legend or {}):
            fail_line(
                len(lines),
                _("'NIC Legend:' has no entry for %(label)s (truncated output?)") % {"label": label},
                kind=kind,
            )

    position = {c: k for k, c in enumerate(columns)}
    gpu_index = {label: int(_GPU_LABEL.fullmatch(label).group(1)) for label in gpu_labels}
    unknown: set[str] = set()
    for row in columns:
        for cell in matrix[row]:
            if not _KNOWN_LINKS.fullmatch(cell):
                unknown.add(cell)
    if unknown:
        report.warnings.append(f"unknown topology cells: {', '.join(sorted(unknown))}")

    switches = pix_switch_ids(
        gpu_labels, {(row, col): matrix[row][position[col]] for row in columns for col in columns}
    )
    gpus_topology: dict[int, dict[str, Any]] = {}
    for label in gpu_labels:
        affinity = dict(zip(trailing, tails[label], strict=True))
        numa_affinity = na(affinity.get("NUMA Affinity"))
        gpus_topology[gpu_index[label]] = {
            "cpu_affinity": na(affinity.get("CPU Affinity")),
            "numa_affinity": numa_affinity,
            "gpu_numa_id": single_int(affinity.get("GPU NUMA ID")),
        }
        report.devices.append(
            ParsedDevice(
                index=gpu_index[label], numa_node=single_int(numa_affinity), pcie_switch=switches[label]
            )
        )

    for a_label in gpu_labels:
        for b_label in gpu_labels:
            a, b = gpu_index[a_label], gpu_index[b_label]
            if a >= b:
                continue
            cell = matrix[a_label][position[b_label]]
            back = matrix[b_label][position[a_label]]
            if back != cell:
                report.warnings.append(f"GPU{a}-GPU{b} is {cell} one way and {back} the other")
            report.links.append(ParsedLink(a=a, b=b, link=cell))

    nics: dict[str, dict[str, Any]] = {}
    for label in nic_labels:
        nics[label] = {
            "name": (legend or {}).get(label, label),
            "gpu_links": {gpu_index[g]: matrix[g][position[label]] for g in gpu_labels},
        }
    report.topology = {"columns": columns, "gpus": gpus_topology, "nics": nics}
    report.devices.sort(key=lambda d: d.index)
    report.links.sort(key=lambda link: (link.a, link.b))
    return report


def _topo_header(line: str, lineno: int) -> tuple[list[str], list[str]]:
    kind = KIND_TOPO
    tokens = line.split()
    columns: list[str] = []
    trailing: list[str] = []
    i = 0
    while i < len(tokens):
        for words in _TRAILING_HEADERS:
            if tuple(tokens[i : i + len(words)]) == words:
                trailing.append(" ".join(words))
                i += len(words)
                break
        else:
            if trailing:
                fail_line(
                    lineno,
                    _("unexpected header cell %(tokens)r after %(trailing)r")
                    % {"tokens": tokens[i], "trailing": trailing[-1]},
                    kind=kind,
                    text=line,
                )
            columns.append(tokens[i])
            i += 1
    if len(set(columns)) != len(columns):
        fail_line(lineno, _("the header repeats a column"), kind=kind, text=line)
    gpus = [c for c in columns if _GPU_LABEL.fullmatch(c)]
    if gpus != [f"GPU{k}" for k in range(len(gpus))] or columns[: len(gpus)] != gpus:
        fail_line(lineno, _("GPU columns must come first, numbered GPU0, GPU1, ..."), kind=kind, text=line)
    return columns, trailing


def _topo_tail(
    tail: list[str], trailing: list[str], tab_mode: bool, lineno: int, line: str, label: str, width: int
) -> list[str]:
    """The CPU Affinity / NUMA Affinity / GPU NUMA ID cells of a row, one per trailing header."""
    n = len(trailing)
    tail = list(tail)
    if tab_mode:
        # Newer drivers print an empty cell before GPU NUMA ID on data rows (not in the header).
        if "GPU NUMA ID" in trailing and len(tail) == n + 1 and tail[n - 1] == "":
            del tail[n - 1]
        while len(tail) > n and tail[-1] == "":
            tail.pop()
    if len(tail) > n:
        fail_line(
            lineno,
            _("row %(label)s has %(count)s cells after the label, the header has %(count2)s")
            % {"label": label, "count": width + len(tail), "count2": width + n},
            kind=KIND_TOPO,
            text=line,
        )
    padding = [""] * (n - len(tail))
    # Whitespace-separated copies lose empty cells; an empty CPU Affinity is the one that happens,
    # so missing cells are taken from the left.
    return tail + padding if tab_mode else padding + tail


def _topo_nic_legend(lines: list[str], start: int) -> dict[str, str] | None:
    legend: dict[str, str] | None = None
    for line in lines[start:]:
        if line.strip() == "NIC Legend:":
            legend = {}
            continue
        if legend is None:
            continue
        if not line.strip():
            if legend:
                break
            continue
        match = _NIC_LEGEND_ENTRY.fullmatch(line)
        if not match:
            break
        legend[match.group(1)] = match.group(2)
    return legend


# ===================================================================================================
# nvidia-smi mig -lgip / -lgipp
# ===================================================================================================
#
# Formats from the NVIDIA MIG User Guide, "Getting Started with MIG" (docs.nvidia.com/datacenter/
# tesla/mig-user-guide/, sections "List GPU Instance Profiles" and "Creating GPU Instances"):
#
# -lgip: a boxed table, two lines per profile:
#   |   0  MIG 1g.5gb        19     7/7        4.75       No     14     0     0   |
#   |                                                             1     0     0   |
#   columns GPU, Name, ID, Instances Free/Total, Memory (GiB, two decimals), P2P, SM, DEC, ENC, then
#   CE, JPEG, OFA on the second line.
# -lgipp: one line per profile, "GPU  0 Profile ID  9 Placements: {0,4}:4" ("Placement :" when there
#   is one); the syntax is {<start slot>,...}:<slice count>.

_LGIP_ROW = re.compile(
    r"\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+(?P<free>\d+)/(?P<total>\d+)\s+"
    r"(?P<mem>\d+(?:\.\d+)?)\s+(?P<p2p>\S+)\s+(?P<sm>\d+)\s+(?P<dec>\d+)\s+(?P<enc>\d+)\s*\|"
)
_LGIP_ROW2 = re.compile(r"\|\s+(?P<ce>\d+)\s+(?P<jpeg>\d+)\s+(?P<ofa>\d+)\s*\|")
_LGIP_HEADER = re.compile(
    r"\|\s*(GPU instance profiles:\s*|GPU\s+Name\s+ID\b.*|Free/Total\b.*)\|", re.IGNORECASE
)
_LGIPP_ROW = re.compile(
    r"GPU\s+(?P<gpu>\d+)\s+Profile ID\s+(?P<id>\d+)\s+Placements?\s*:\s*"
    r"\{(?P<starts>\d+(?:\s*,\s*\d+)*)\}\s*:\s*(?P<size>\d+)"
)
_GIB = 1024


def parse_nvidia_mig_lgip(text: str) -> ParsedReport:
    """``nvidia-smi mig -lgip``: the GPU-instance profiles each card offers (partial report)."""
    kind = KIND_MIG_LGIP
    lines = text_lines(text, kind=kind)
    if not any("GPU instance profiles:" in line for line in lines):
        first = next((n for n, line in enumerate(lines, start=1) if line.strip()), 1)
        fail_line(
            first,
            _("no '| GPU instance profiles:' table; is this nvidia-smi mig -lgip output?"),
            kind=kind,
            text=lines[first - 1],
        )
    profiles: dict[int, list[dict[str, Any]]] = {}
    seen: dict[tuple[int, int], int] = {}
    pending: tuple[int, dict[str, Any]] | None = None  # first line of a profile, waiting for its second
    last_no = 0
    for n, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped:
            continue
        last_no = n
        if pending is not None:
            match = _LGIP_ROW2.fullmatch(stripped)
            if match is None:
                fail_line(
                    n,
                    _("expected the second line (CE JPEG OFA) of profile %(name)s from line %(pending)s")
                    % {"name": pending[1]["name"], "pending": pending[0]},
                    kind=kind,
                    text=line,
                )
            pending[1].update({k: int(v) for k, v in match.groupdict().items()})
            pending = None
            continue
        if stripped.startswith("+") or re.fullmatch(r"\|=+\|", stripped) or _LGIP_HEADER.fullmatch(stripped):
            continue
        match = _LGIP_ROW.fullmatch(stripped)
        if match is None:
            fail_line(
                n,
                _(
                    "expected a profile line '| <gpu>  MIG <name>  <id>  <free>/<total>  <GiB>  <P2P>  <SM>  <DEC>  <ENC> |'"
                ),
                kind=kind,
                text=line,
            )
        gpu, profile_id = int(match["gpu"]), int(match["id"])
        if (gpu, profile_id) in seen:
            fail_line(
                n,
                _("GPU %(gpu)s lists profile ID %(profile_id)s twice (first on line %(line)s)")
                % {"gpu": gpu, "profile_id": profile_id, "line": seen[(gpu, profile_id)]},
                kind=kind,
                text=line,
            )
        seen[(gpu, profile_id)] = n
        entry: dict[str, Any] = {
            "id": profile_id,
            "name": match["name"],  # as printed, without the "MIG " prefix
            # nvidia-smi prints GiB with two decimals, so this is the printed value in MiB (+-5 MiB).
            "memory_mib": round(float(match["mem"]) * _GIB),
            "max_instances": int(match["total"]),
            "free_instances": int(match["free"]),
            "p2p": match["p2p"],
            "sm": int(match["sm"]),
            "dec": int(match["dec"]),
            "enc": int(match["enc"]),
            "placements": None,  # -lgip does not print them; -lgipp does
        }
        if entry["free_instances"] > entry["max_instances"]:
            fail_line(
                n,
                _("Instances %(free)s/%(total)s: more free than total")
                % {"free": match["free"], "total": match["total"]},
                kind=kind,
                text=line,
            )
        profiles.setdefault(gpu, []).append(entry)
        pending = (n, entry)
    if pending is not None:
        fail_line(
            pending[0] + 1,
            _("profile %(name)s (line %(pending)s) has no second line: the output is truncated")
            % {"name": pending[1]["name"], "pending": pending[0]},
            kind=kind,
        )
    if not profiles:
        fail_line(
            last_no or 1, _("the table lists no profile (MIG not supported or truncated output?)"), kind=kind
        )
    if not lines[last_no - 1].strip().startswith("+"):
        fail_line(last_no, _("the table is not closed by a '+---+' rule: the output is truncated"), kind=kind)
    return _mig_report(kind, profiles)


def parse_nvidia_mig_lgipp(text: str) -> ParsedReport:
    """``nvidia-smi mig -lgipp``: where each GPU-instance profile may be placed (partial report)."""
    kind = KIND_MIG_LGIPP
    lines = text_lines(text, kind=kind)
    profiles: dict[int, list[dict[str, Any]]] = {}
    seen: dict[tuple[int, int], int] = {}
    for n, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped:
            continue
        match = _LGIPP_ROW.fullmatch(stripped)
        if match is None:
            fail_line(
                n,
                _(
                    "expected 'GPU <n> Profile ID <id> Placements: {<start>,...}:<size>' (is this nvidia-smi mig -lgipp output?)"
                ),
                kind=kind,
                text=line,
            )
        gpu, profile_id, size = int(match["gpu"]), int(match["id"]), int(match["size"])
        if (gpu, profile_id) in seen:
            fail_line(
                n,
                _("GPU %(gpu)s lists profile ID %(profile_id)s twice (first on line %(line)s)")
                % {"gpu": gpu, "profile_id": profile_id, "line": seen[(gpu, profile_id)]},
                kind=kind,
                text=line,
            )
        seen[(gpu, profile_id)] = n
        if size < 1:
            fail_line(
                n, _("placement size %(size)s is not a slice count") % {"size": size}, kind=kind, text=line
            )
        starts = [int(start) for start in match["starts"].split(",")]
        if len(set(starts)) != len(starts):
            fail_line(n, _("a start slot appears twice"), kind=kind, text=line)
        profiles.setdefault(gpu, []).append(
            {
                "id": profile_id,
                # -lgipp prints neither name, memory nor instance counts: they stay unknown here.
                "name": None,
                "memory_mib": None,
                "max_instances": None,
                "free_instances": None,
                "placements": [{"start": start, "size": size} for start in starts],
            }
        )
    return _mig_report(kind, profiles)


def _mig_report(kind: str, profiles: dict[int, list[dict[str, Any]]]) -> ParsedReport:
    report = ParsedReport(vendor=VENDOR, kind=kind, full_inventory=False)
    for gpu in sorted(profiles):
        report.devices.append(ParsedDevice(index=gpu, mig_profiles=profiles[gpu]))
    return report


# ===================================================================================================
# Adapter
# ===================================================================================================


class NvidiaAdapter(VendorAdapter):
    vendor = "nvidia"
    display_name = "NVIDIA"
    device_kind = "gpu"
    resource_name = "nvidia.com/gpu"
    visible_devices_env = "NVIDIA_VISIBLE_DEVICES"
    accelerator_label = "nvidia-gpu"
    brand_label = "nvidia"
    model_label_key = "gpu-model"
    taint_optional = True  # seed 004: "NVIDIA 节点也打污点（可选）"; we taint by default
    parsers = {
        KIND_XML: parse_nvidia_smi_xml,
        KIND_CSV: parse_nvidia_smi_csv,
        KIND_TOPO: parse_nvidia_topo,
        KIND_MIG_LGIP: parse_nvidia_mig_lgip,
        KIND_MIG_LGIPP: parse_nvidia_mig_lgipp,
    }
