"""What a node report's ingestion shares: the fields it may set, its event texts, its result, parsing,
and the recorder that collects its ledger events."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from apps.core.conf import suanchi_setting
from apps.core.errors import ValidationFailed
from apps.core.stored_text import stored
from apps.inventory.models import (
    Device,
    DeviceEvent,
    Node,
    NodeReport,
)
from apps.inventory.services.ledger.events import device_events_create
from apps.inventory.vendors import parse_report
from apps.inventory.vendors.base import ParsedReport

# Node fields a report may set, by ParsedReport.node key.
NODE_VERSION_FIELDS = ("driver_version", "cuda_version", "cann_version", "rocm_version", "dtk_version")
# Device fields a report may set (only when the tool says something, i.e. the parsed value is not None).
DEVICE_REPORT_FIELDS = ("uuid", "serial", "pci_bus_id", "numa_node", "memory_mib", "firmware_version")
_TEMP_INDEX_OFFSET = 1_000_000

# Event texts people read later, in their own language (apps.core.stored_text).
UNKNOWN = stored("(unknown)")
VERSION_CHANGED = stored("%(field)s %(old)s → %(new)s")
VERSION_FIELD_WORDS = [
    stored("driver version"),
    stored("cuda version"),
    stored("cann version"),
    stored("rocm version"),
    stored("dtk version"),
]  # NODE_VERSION_FIELDS as the events name them
FIRMWARE_CHANGED = stored("firmware %(old)s → %(new)s")
ON_OTHER_CLUSTER = stored("it is registered on node %(source)s in cluster %(cluster)s")
NOT_COVERED = stored("it is registered on node %(source)s, which this agent token does not cover")
NODE_PENDING = stored("it is registered on node %(source)s and node %(node)s is pending approval")
CARD_CONFLICT = stored(
    "node %(node)s (cluster %(cluster)s) reported card %(card)s, but %(why)s; "
    "the card was not moved. Check which node really holds it."
)
NODE_REGISTERED_PENDING = stored(
    "node %(node)s registered by a %(kind)s report from an agent token; pending approval "
    "(takes no work until staff approve it or a cluster sync confirms it)"
)
NODE_REGISTERED = stored("node %(node)s registered by a %(kind)s report")
REPORTS_RESUMED = stored("reports resumed (overdue since %(since)s)")
MISSING_FROM_REPORT = stored("missing from %(kind)s report")
NO_UUID = stored("no uuid")
CARD_LOST = stored("%(vendor)s card #%(index)s (%(id)s) is missing from the %(kind)s report (掉卡)")
MODEL_NOT_REPORTED = stored("model not reported")
CARD_REGISTERED = stored("%(vendor)s card #%(index)s registered (%(model)s)")
MODEL_UNKNOWN_NEW = stored(
    "unknown device model %(model)s: recorded with the raw name, please add it to the catalog"
)
MODEL_UNKNOWN = stored("unknown device model %(model)s: recorded with the raw name")
CARD_MOVED = stored("card %(card)s moved from %(source)s to %(node)s")
CARD_FOUND = stored("%(vendor)s card #%(index)s is back in the %(kind)s report")
HEALTH_CHANGED = stored("health %(old)s → %(new)s")
HEALTH_CHANGED_BECAUSE = stored("health %(old)s → %(new)s: %(reason)s")
FIELDS_CHANGED = stored("changed: %(fields)s")
TOPOLOGY_WRITTEN = stored("topology: %(written)s links written, %(removed)s removed")
NODE_APPROVED = stored("node %(node)s approved (%(via)s, %(actor)s): it takes work now")
REPORT_INGESTED = stored("%(kind)s report for %(node)s")  # the change record of an ingested report
APPROVED_VIA = stored("approved via %(via)s")
VIA_STAFF = stored("staff")  # who confirmed a node (the ``via`` of NODE_APPROVED)
VIA_CLUSTER_SYNC = stored("confirmed by cluster sync")
# A repeated conflict (the same card reported by the same node) writes one event per this window.
CONFLICT_EVENT_WINDOW = timedelta(hours=24)


@dataclass
class IngestResult:
    parsed: ParsedReport
    node: Node | None = None
    report: NodeReport | None = None
    dry_run: bool = False
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    lost: int = 0
    found: int = 0
    moved: int = 0
    conflicts: int = 0
    links_written: int = 0
    links_removed: int = 0
    node_changed: bool = False
    events: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(
            self.created
            or self.updated
            or self.lost
            or self.found
            or self.moved
            or self.links_written
            or self.links_removed
            or self.node_changed
        )

    def summary(self) -> dict[str, Any]:
        return {
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "lost": self.lost,
            "found": self.found,
            "moved": self.moved,
            "conflicts": self.conflicts,
            "links_written": self.links_written,
            "links_removed": self.links_removed,
            "node_changed": self.node_changed,
            "events": self.events,
            "changed": self.changed,
        }

    def as_dict(self) -> dict[str, Any]:
        body = self.parsed.as_dict()
        body["warnings"] = list(self.parsed.warnings) + self.warnings
        if not self.dry_run:
            body["result"] = self.summary()
            body["node_id"] = self.node.pk if self.node else None
            body["node_pending_approval"] = self.node.pending_approval if self.node else None
            body["report_id"] = self.report.pk if self.report else None
        return body


def _check_size(text: str) -> None:
    limit = suanchi_setting("NODE_REPORT_MAX_BYTES")
    size = len(text.encode())
    if size == 0 or not text.strip():
        raise ValidationFailed("The report is empty.", details={"text": ["empty"]})
    if size > limit:
        raise ValidationFailed(
            f"The report is {size} bytes; the limit is {limit} bytes.", details={"text": ["too large"]}
        )


def node_report_parse(*, kind: str, text: str) -> ParsedReport:
    _check_size(text)
    return parse_report(kind, text)


class _Recorder:
    """Collects events for one report and writes them in bulk."""

    def __init__(self, *, node: Node, actor_label: str) -> None:
        self.node = node
        self.actor_label = actor_label
        self.events: list[DeviceEvent] = []

    def add(
        self,
        kind: str,
        message: str,
        *,
        device: Device | None = None,
        severity: str = "info",
        before=None,
        after=None,
    ):
        self.events.append(
            DeviceEvent(
                node=self.node,
                device=device,
                kind=kind,
                severity=severity,
                message=message[:500],
                before=before,
                after=after,
                actor_label=self.actor_label,
            )
        )

    def flush(self, report: NodeReport | None) -> int:
        for event in self.events:
            event.report = report
        device_events_create(self.events)
        return len(self.events)
