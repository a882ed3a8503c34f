"""Health events from telemetry: a window's new findings (XID, fault codes, unhealthy, fault counters,
temperature) as device events."""

from __future__ import annotations

from apps.core.stored_text import stored
from apps.inventory.models import DeviceEvent
from apps.telemetry.windows import _dt

# Health events from telemetry, stored in English and shown in the reader's language
# (apps.core.stored_text): the frame, with or without the partition (a MIG instance), and each finding.
HEALTH_EVENT = stored("telemetry: %(finding)s in the window from %(when)s [%(source)s]")
HEALTH_EVENT_PARTITION = stored(
    "telemetry (%(partition)s): %(finding)s in the window from %(when)s [%(source)s]"
)
FINDING_XID = stored("XID %(codes)s")
FINDING_FAULT_CODE = stored("fault code %(codes)s")
FINDING_UNHEALTHY = stored("exporter reports the device unhealthy")
FINDING_COUNTERS = stored("uncorrectable error counters rose (%(counters)s)")
FINDING_TEMPERATURE = stored("temperature reached the %(limit)s °C limit")


def _health_events(
    dev: int, node_id: int, partition: str, window: float, health: dict, before: dict, source: str, label: str
) -> list[DeviceEvent]:
    if not health:
        return []  # nothing to report (and nothing to format) in a quiet window
    frame = HEALTH_EVENT_PARTITION if partition else HEALTH_EVENT
    when = _dt(window).strftime("%Y-%m-%d %H:%M UTC")
    out = []

    def add(severity: str, message: str, after: dict) -> None:
        out.append(
            DeviceEvent(
                node_id=node_id,
                device_id=dev,
                kind=DeviceEvent.Kind.HEALTH_CHANGED,
                severity=severity,
                message=(
                    frame % {"partition": partition, "finding": message, "when": when, "source": source}
                )[:500],
                after={"telemetry": after},
                actor_label=label,
            )
        )

    new_xid = [x for x in health.get("xid", []) if x not in before.get("xid", [])]
    if new_xid:
        add(
            DeviceEvent.Severity.CRITICAL,
            FINDING_XID % {"codes": ", ".join(map(str, new_xid))},
            {"xid": new_xid},
        )
    new_codes = [c for c in health.get("error_code", []) if c not in before.get("error_code", [])]
    if new_codes:
        add(
            DeviceEvent.Severity.CRITICAL,
            FINDING_FAULT_CODE % {"codes": ", ".join(new_codes)},
            {"error_code": new_codes},
        )
    if health.get("health") == "unhealthy" and before.get("health") != "unhealthy":
        add(DeviceEvent.Severity.CRITICAL, FINDING_UNHEALTHY, {"health": "unhealthy"})
    faults = health.get("faults", {})
    old_faults = before.get("faults", {})
    grown = {k: v for k, v in faults.items() if v > old_faults.get(k, 0)}
    if grown:
        text = ", ".join(f"{k} +{v:g}" for k, v in sorted(grown.items()))
        add(DeviceEvent.Severity.CRITICAL, FINDING_COUNTERS % {"counters": text}, {"faults": grown})
    if "temp_over" in health and "temp_over" not in before:
        add(
            DeviceEvent.Severity.WARNING,
            FINDING_TEMPERATURE % {"limit": f"{health['temp_over']:g}"},
            {"temp_over": health["temp_over"]},
        )
    return out
