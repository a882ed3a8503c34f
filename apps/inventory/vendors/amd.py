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
from typing import Any

from apps.core.jsondepth import MAX_JSON_DEPTH, too_deep

from .adapter import (
    VendorAdapter,
    ensure_text,
    fail,
    fail_element,
    fail_line,
    hex_id,
    metric,
    na,
    normalise_pci_bus_id,
    parse_number,
    single_int,
)
from .base import ParsedDevice, ParsedLink, ParsedReport

VENDOR = "amd"
KIND = "rocm-smi-json"

_CARD = re.compile(r"card(\d+)")
_TOPOLOGY = re.compile(
    r"\(Topology\) (Link type|Weight|Hops) between DRM devices (\d+) and (\d+)", re.IGNORECASE
)
_MIB = 1024 * 1024


def parse_rocm_smi_json(text: str) -> ParsedReport:
    text = ensure_text(text, kind=KIND)
    if not text.strip():
        fail("empty input", kind=KIND)
    if too_deep(text):  # json.loads recurses per level (issue 15, finding 5a)
        fail(f"JSON nested deeper than {MAX_JSON_DEPTH} levels", kind=KIND)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        fail_line(exc.lineno, f"invalid JSON at column {exc.colno}: {exc.msg}", kind=KIND, column=exc.colno)
    if not isinstance(data, dict):
        fail_element(
            "<root>",
            f"expected a JSON object keyed card0..N and system, got {type(data).__name__}",
            kind=KIND,
        )

    report = ParsedReport(vendor=VENDOR, kind=KIND)
    cards: list[tuple[int, str, dict[str, Any]]] = []
    for key, value in data.items():
        match = _CARD.fullmatch(key)
        if match is None:
            if key != "system":
                report.warnings.append(f"ignored top-level key {key!r}")
            continue
        if not isinstance(value, dict):
            fail_element(key, f"expected an object, got {type(value).__name__}", kind=KIND)
        cards.append((int(match.group(1)), key, value))
    if not cards:
        fail_element("<root>", "no card0..N entries", kind=KIND)

    system = data.get("system", {})
    if not isinstance(system, dict):
        fail_element("system", f"expected an object, got {type(system).__name__}", kind=KIND)
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
            fail_element(f"{key}/{names[0]}", f"{raw!r} is not a number", kind=KIND)

    def mib(name: str) -> int | None:
        value = number(name)
        return None if value is None else int(value) // _MIB

    bus_raw = field("PCI Bus")
    try:
        pci_bus_id = normalise_pci_bus_id(bus_raw)
    except ValueError:
        fail_element(f"{key}/PCI Bus", f"{bus_raw!r} is not a PCI bus id", kind=KIND)
    device_raw = field("Device ID")
    try:
        pci_device_id = hex_id(device_raw)
    except ValueError:
        fail_element(f"{key}/Device ID", f"{device_raw!r} is not a hex id", kind=KIND)

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
    exporter = {
        "name": "device-metrics-exporter",
        "utilization": metric("gpu_gfx_activity", unit="%"),
        "memory_used": metric("gpu_used_vram", unit="MB"),
        "memory_total": metric("gpu_total_vram", unit="MB"),
        # MI3xx report junction, MI2xx edge.
        "temperature": metric("gpu_junction_temperature", "gpu_edge_temperature", unit="C"),
        "power": metric("gpu_package_power", "gpu_average_package_power", unit="W"),
        "device_id_labels": ["serial_number", "gpu_id", "gpu_uuid"],
        "pod_labels": {"pod": "pod", "namespace": "namespace", "container": "container"},
        "pod_labels_metric": None,
        "default_port": 5000,
        "path": "/metrics",
        "metric_prefix": "",  # CommonConfig.MetricsFieldPrefix, e.g. "amd_" in the example config
    }
    parsers = {KIND: parse_rocm_smi_json}
