"""NVIDIA: adapter facts and parsers for ``nvidia-smi -q -x``, ``--query-gpu --format=csv`` and ``topo -m``.

Formats (hardware-telemetry.md §2):

* ``-q -x``: root ``nvidia_smi_log`` (DTD v12 on driver 535, v13 on newer); one ``<gpu id="<bus id>">``
  per device. Power moved from ``power_readings/power_draw`` (old DTDs) to
  ``gpu_power_readings/power_draw`` (v12) and ``gpu_power_readings/average_power_draw`` (v13); volatile
  uncorrectable ECC is ``{sram,dram}_uncorrectable`` (v12), ``sram_uncorrectable_{parity,secded}`` (v13)
  or ``double_bit/total`` (old DTDs).
* csv: optional header with unit suffixes (``memory.total [MiB]``); values ``97 %``, ``72000 MiB``,
  ``612.48 W``, ``[N/A]``; ``noheader,nounits`` drops both.
* ``topo -m``: ``apps.inventory.vendors.nvidia_topo``; ``mig -lgip`` / ``-lgipp``:
  ``apps.inventory.vendors.nvidia_mig``.
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
    single_int,
    text_lines,
)
from .base import ParsedDevice, ParsedReport
from .nvidia_mig import KIND_MIG_LGIP, KIND_MIG_LGIPP, parse_nvidia_mig_lgip, parse_nvidia_mig_lgipp
from .nvidia_topo import KIND_TOPO, parse_nvidia_topo

VENDOR = "nvidia"
KIND_XML = "nvidia-smi-xml"
KIND_CSV = "nvidia-smi-csv"

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
