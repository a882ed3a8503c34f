"""Normalized samples: one device (or partition instance) at one instant. Pure Python, no Django.

``series_to_samples`` folds exporter series (from a scrape or a Prometheus range query) into
``Sample`` rows and says which series it could not use and why.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from apps.telemetry import metric_maps as mm


@dataclass(slots=True)
class Sample:
    """One reading. Identify the device by ``device_id`` (ledger pk) or by ``uuid`` / ``serial`` /
    (``node``, ``pci_bus_id``) / (``node``, ``vendor``, ``index``). ``at`` is a datetime or epoch
    seconds. Memory is MiB, temperature °C, power W; counters are raw (monotonic) values."""

    at: datetime | float
    device_id: int | None = None
    uuid: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    index: int | None = None
    node: str | None = None
    vendor: str | None = None
    partition: str = ""
    mig_profile: str | None = None
    utilization_pct: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    counters: dict[str, float] | None = None
    # {"xid": [codes], "health": "ok"|"unhealthy"|"unknown", "error_code": [codes]}
    health: dict[str, Any] | None = None
    namespace: str | None = None
    pod: str | None = None
    # Every (namespace, pod) the exporter tied to this device when there is more than one.
    pods: list[tuple[str | None, str | None]] | None = None

    def as_dry_run(self) -> dict[str, Any]:
        """The ``ingest_metrics --dry-run --json`` shape of one sample."""
        return {
            "device": {
                "uuid": self.uuid,
                "serial": self.serial,
                "pci_bus_id": self.pci_bus_id,
                "index": self.index,
                "node": self.node,
            },
            "vendor": self.vendor,
            "mig_profile": self.mig_profile,
            "utilization_pct": _round(self.utilization_pct),
            "memory_used_mib": _round(self.memory_used_mib),
            "memory_total_mib": _round(self.memory_total_mib),
            "temperature_c": _round(self.temperature_c),
            "power_w": _round(self.power_w),
            "pod": self.pod,
            "namespace": self.namespace,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


@dataclass
class Conversion:
    samples: list[Sample] = field(default_factory=list)
    vendors: list[str] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    series_used: int = 0

    def skip(self, reason: str, example: str, count: int = 1) -> None:
        self.skipped[reason] += count
        if len(self.examples[reason]) < 5 and example not in self.examples[reason]:
            self.examples[reason].append(example)


@dataclass(slots=True)
class _Acc:
    vendor: str
    identity: dict
    partition: str
    mig_profile: str | None
    at: float
    gauges: dict[str, tuple[int, float]] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    health: dict[str, Any] = field(default_factory=dict)
    pods: list[tuple[str | None, str | None]] = field(default_factory=list)


def series_to_samples(
    series: Iterable[tuple[str, dict[str, str], float, float | None]], *, default_at: float
) -> Conversion:
    """Fold ``(name, labels, value, timestamp_seconds_or_None)`` tuples into samples.

    Skips (with a reason): families no exporter map knows (``unknown_family``), families of a known
    exporter that Suanchi does not use (``unused_family``), series of a used family with another
    label value than the one read (``unused_series``, MetaX memory ``type="xtt"``), NaN / ±Inf values
    (``not_a_number``), the exporter's "not supported" value (``not_supported``, Enflame's -1),
    series without any device identity label (``no_device_identity``).
    """
    out = Conversion()
    accs: dict[tuple, _Acc] = {}
    vendors: set[str] = set()
    for name, labels, value, ts in series:
        if name in mm.UNIFIED_GAUGES:
            vmap = mm.VENDOR_MAPS.get(mm.BRAND_TO_VENDOR.get(labels.get("gpu_brand", ""), ""))
            if vmap is None:
                out.skip("unknown_vendor_brand", f"{name}{{gpu_brand={labels.get('gpu_brand')!r}}}")
                continue
            role, canonical, gauge = "gauge", name, mm.UNIFIED_GAUGES[name]
        else:
            hit = mm.lookup(name)
            if hit is None:
                vendor = mm.family_vendor(name)
                out.skip("unused_family" if vendor else "unknown_family", name)
                continue
            vmap, role, canonical = hit
            gauge = vmap.gauges.get(canonical) if role == "gauge" else None
        if math.isnan(value) or math.isinf(value):
            out.skip("not_a_number", name)
            continue
        if gauge is not None and gauge.when is not None and labels.get(gauge.when[0]) != gauge.when[1]:
            # e.g. MetaX mx_memory_used{type="xtt"}: system memory, not the card's.
            out.skip("unused_series", f"{name}{{{gauge.when[0]}={labels.get(gauge.when[0])!r}}}")
            continue
        if gauge is not None and gauge.unsupported is not None and value == gauge.unsupported:
            out.skip("not_supported", name)
            continue
        identity = vmap.identity(labels)
        if not any(identity.get(k) is not None for k in ("uuid", "serial", "pci_bus_id", "index")):
            out.skip("no_device_identity", name)
            continue
        partition, profile = vmap.partition(labels)
        at = ts if ts is not None else default_at
        key = (
            vmap.vendor,
            identity["uuid"],
            identity["serial"],
            identity["pci_bus_id"],
            identity["index"],
            identity["node"],
            partition,
            at,
        )
        acc = accs.get(key)
        if acc is None:
            acc = accs[key] = _Acc(vmap.vendor, identity, partition, profile, at)
        vendors.add(vmap.vendor)
        out.series_used += 1
        namespace, pod = vmap.pod(labels)
        if pod and (namespace, pod) not in acc.pods:
            acc.pods.append((namespace, pod))
        if role == "gauge":
            held = acc.gauges.get(gauge.field)
            if held is None or gauge.priority < held[0]:
                acc.gauges[gauge.field] = (gauge.priority, value * gauge.scale)
        elif role == "counter":
            acc.counters[vmap.counters[canonical]] = value
        elif role == "health":
            _health_reading(acc.health, vmap.health[canonical], value, labels)
        # pod_info series carry nothing but the pod labels, already taken above.
    out.samples.extend(_sample_of(acc) for acc in accs.values())
    out.vendors = sorted(vendors)
    out.samples.sort(
        key=lambda s: (
            s.at,
            s.node or "",
            s.vendor or "",
            s.index if s.index is not None else -1,
            s.partition,
        )
    )
    return out


# ---------------------------------------------------------------------------------------------------
# Physical bounds: a reading no card can produce is dropped (and counted), never rolled up
# ---------------------------------------------------------------------------------------------------

UTILIZATION_RANGE = (0.0, 100.0)  # percent busy
TEMPERATURE_RANGE = (-40.0, 150.0)  # °C: below any data-centre inlet, above any junction shutdown
# When the ledger knows no card memory / TDP: more than any accelerator made (1 TiB HBM, 2 kW).
MEMORY_CAP_UNKNOWN_MIB = 1024 * 1024
POWER_CAP_UNKNOWN_W = 2000.0
MEMORY_TOLERANCE = 1.10  # tools report in MiB what the catalog rounds to GB
POWER_TOLERANCE = 1.5  # boost and transients above the rated TDP
COUNTER_MAX = float(2**63)  # an int64 counter


def _health_reading(health: dict[str, Any], kind: str, value: float, labels: dict[str, str]) -> None:
    """Fold one health series' value into a sample's health findings (XID codes, state, fault codes)."""
    if kind == "xid" and value:
        health.setdefault("xid", []).append(int(value))
    elif kind == "xid_count" and value > 0:
        code = labels.get("xid")
        health.setdefault("xid", []).append(int(code) if code and code.isdigit() else code)
    elif kind == "health":
        health["health"] = "ok" if value == 1 else ("unhealthy" if value == 0 else "unknown")
    elif kind == "health_210":
        health["health"] = "ok" if value == 2 else ("unhealthy" if value == 1 else "unknown")
    elif kind == "error_code" and value:
        health.setdefault("error_code", []).append(f"{int(value):#x}")


def _sample_of(acc: _Acc) -> Sample:
    """One device (or partition instance) at one instant, from what its series gave."""
    g = {k: v for k, (_, v) in acc.gauges.items()}
    total = g.get(mm.MEM_TOTAL)
    if total is None and mm.MEM_FREE in g and mm.MEM_USED in g:
        total = g[mm.MEM_FREE] + g[mm.MEM_USED] + g.get(mm.MEM_RESERVED, 0.0)
    namespace, pod = acc.pods[0] if acc.pods else (None, None)
    ident = acc.identity
    return Sample(
        at=acc.at,
        uuid=ident["uuid"],
        serial=ident["serial"],
        pci_bus_id=ident["pci_bus_id"],
        index=ident["index"],
        node=ident["node"],
        vendor=acc.vendor,
        partition=acc.partition,
        mig_profile=acc.mig_profile,
        utilization_pct=g.get(mm.UTIL),
        memory_used_mib=g.get(mm.MEM_USED),
        memory_total_mib=total,
        temperature_c=g.get(mm.TEMP),
        power_w=g.get(mm.POWER),
        counters=acc.counters or None,
        health=acc.health or None,
        namespace=namespace,
        pod=pod,
        pods=list(acc.pods) if len(acc.pods) > 1 else None,
    )


def memory_cap_mib(*card_memory_mib: int | None) -> float:
    known = [m for m in card_memory_mib if m]
    return max(known) * MEMORY_TOLERANCE if known else float(MEMORY_CAP_UNKNOWN_MIB)


def power_cap_w(tdp_w: int | None) -> float:
    return tdp_w * POWER_TOLERANCE if tdp_w else POWER_CAP_UNKNOWN_W


def _finite_within(value: float, low: float, high: float) -> bool:
    return math.isfinite(value) and low <= value <= high


def plausible(sample: Sample, *, memory_cap: float, power_cap: float) -> tuple[Sample, list[tuple[str, str]]]:
    """``sample`` without the values no card can produce: utilization outside 0-100 %, memory below 0
    or above the card's (``memory_cap`` MiB), temperature outside -40..150 °C, power below 0 or above
    ``power_cap`` W, NaN / ±Inf anywhere, counters that are negative or beyond int64. Returns the
    (possibly copied) sample and one ``(reason, text)`` per dropped value; the input is not changed."""
    bounds = {
        "utilization_pct": (UTILIZATION_RANGE, "implausible_utilization", "%"),
        "memory_used_mib": ((0.0, memory_cap), "implausible_memory", "MiB"),
        "memory_total_mib": ((0.0, memory_cap), "implausible_memory", "MiB"),
        "temperature_c": (TEMPERATURE_RANGE, "implausible_temperature", "°C"),
        "power_w": ((0.0, power_cap), "implausible_power", "W"),
    }
    dropped: list[tuple[str, str]] = []
    changes: dict[str, Any] = {}
    for name, ((low, high), reason, unit) in bounds.items():
        value = getattr(sample, name)
        if value is None or _finite_within(value, low, high):
            continue
        changes[name] = None
        dropped.append((reason, f"{name}={value:g} outside {low:g}..{high:g} {unit}"))
    if sample.counters:
        kept = {}
        for name, value in sample.counters.items():
            if _finite_within(value, 0.0, COUNTER_MAX):
                kept[name] = value
            else:
                dropped.append(("implausible_counter", f"{name}={value:g} outside 0..2^63"))
        if len(kept) != len(sample.counters):
            changes["counters"] = kept or None
    if not changes:
        return sample, dropped
    return replace(sample, **changes), dropped
