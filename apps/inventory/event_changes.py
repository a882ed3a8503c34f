"""A ledger event's before / after as lines a person reads (issue 29 §5): "Health: healthy → lost".

``DeviceEvent.before`` / ``after`` hold snapshots of the fields a change touched (``apps.core.audit
.snapshot``: foreign keys by id, times as ISO strings) or a few structured findings (telemetry's
``{"telemetry": {"xid": [79]}}``, the cluster sync's ``{"drift": …}``, node labels and taints). Each
key becomes a line with a translated field name; a value of a field with choices prints as its label,
a yes/no field as yes / no, a foreign key as the name of what it points to (a project the reader is
not a member of as "another project"), a stored text in the reader's language, a dict key by key (only
the keys that changed when both sides have it), taints as ``key=value:effect``. Unchanged fields
are left out.
"""

from __future__ import annotations

import json
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from apps.catalog.models import Vendor
from apps.core.formatting import as_local, format_datetime
from apps.core.stored_text import localize
from apps.inventory.models import Device, DeviceEvent, DeviceLink, Node

MAX_LINES = 24
MAX_VALUE = 300

FIELD_LABELS = {
    "health": gettext_lazy("Health"),
    "health_reason": gettext_lazy("Health reason"),
    "pool_status": gettext_lazy("Pool status"),
    "status": gettext_lazy("Status"),
    "status_reason": gettext_lazy("Reason"),
    "firmware_version": gettext_lazy("Firmware"),
    "owner_project": gettext_lazy("Owner"),
    "device_model": gettext_lazy("Model"),
    "raw_model_name": gettext_lazy("Reported name"),
    "model_unrecognized": gettext_lazy("Model unrecognized"),
    "cordoned": gettext_lazy("Cordoned"),
    "cordon_reason": gettext_lazy("Cordon reason"),
    "uuid": "UUID",
    "serial": gettext_lazy("Serial"),
    "pci_bus_id": gettext_lazy("PCIe bus"),
    "numa_node": "NUMA",
    "memory_mib": gettext_lazy("Memory"),
    "index": gettext_lazy("Index"),
    "vendor": gettext_lazy("Vendor"),
    "topology_group": gettext_lazy("Topology group"),
    "pcie_switch": gettext_lazy("PCIe switch"),
    "mig_enabled": "MIG",
    "partitions": gettext_lazy("Partitions"),
    "mig_profiles": gettext_lazy("MIG profiles"),
    "node": gettext_lazy("Node"),
    "pool": gettext_lazy("Pool"),
    "cluster": gettext_lazy("Cluster"),
    "name": gettext_lazy("Name"),
    "labels": gettext_lazy("Kubernetes labels"),
    "taints": gettext_lazy("Taints"),
    "rdma_nics": gettext_lazy("RDMA NICs"),
    "driver_version": gettext_lazy("Driver"),
    "cuda_version": "CUDA",
    "cann_version": "CANN",
    "rocm_version": "ROCm",
    "dtk_version": "DTK",
    "cpu_model": gettext_lazy("CPU"),
    "cpu_arch": gettext_lazy("CPU architecture"),
    "cpu_cores": gettext_lazy("CPU cores"),
    "os_image": gettext_lazy("OS image"),
    "kernel_version": gettext_lazy("Kernel"),
    "container_runtime": gettext_lazy("Container runtime"),
    "zone": gettext_lazy("Zone"),
    "rack": gettext_lazy("Rack"),
    "switch": gettext_lazy("Network switch"),
    "pending_approval": gettext_lazy("Waiting for approval"),
    "telemetry": gettext_lazy("Telemetry"),
    "xid": "XID",
    "error_code": gettext_lazy("Fault code"),
    "faults": gettext_lazy("Uncorrectable error counters"),
    "temp_over": gettext_lazy("Temperature limit (°C)"),
    "drift": gettext_lazy("Drift"),
    "cards": gettext_lazy("Cards"),
    "reported_by_node": gettext_lazy("Reported by node"),
    "agent_token": gettext_lazy("Agent token"),
    "readback": gettext_lazy("Read back from the cluster"),
    "allocation": gettext_lazy("Allocation"),
    "device": gettext_lazy("Device"),
    "kind": gettext_lazy("Kind"),
    "last_seen_at": gettext_lazy("Last seen"),
}
CHOICES = {
    "health": Device.Health,
    "pool_status": Device.PoolStatus,
    "status": Node.Status,
    "vendor": Vendor,
    "kind": DeviceLink.Kind,
}


def field_label(key: str) -> str:
    return str(FIELD_LABELS[key]) if key in FIELD_LABELS else key.replace("_", " ")


def _clip(text: str) -> str:
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"


class _Names:
    """Names of the objects foreign keys point to, looked up once per event list."""

    def __init__(self, user) -> None:
        self.user = user
        self.cache: dict[tuple[str, Any], str] = {}

    def name(self, key: str, pk: Any) -> str | None:
        if not isinstance(pk, int) or isinstance(pk, bool):
            return None
        if (key, pk) in self.cache:
            return self.cache[(key, pk)]
        from apps.accounts.models import Project
        from apps.accounts.selectors import is_platform_staff, user_project_ids
        from apps.catalog.models import DeviceModel
        from apps.inventory.models import Cluster, Pool

        found: str | None = None
        if key == "owner_project":
            if is_platform_staff(self.user) or pk in user_project_ids(self.user):
                found = Project.objects.filter(pk=pk).values_list("name", flat=True).first()
            else:
                found = _("another project")
        elif key == "device_model":
            found = DeviceModel.objects.filter(pk=pk).values_list("name", flat=True).first()
        elif key == "pool":
            found = Pool.objects.filter(pk=pk).values_list("name", flat=True).first()
        elif key == "cluster":
            found = Cluster.objects.filter(pk=pk).values_list("name", flat=True).first()
        self.cache[(key, pk)] = found
        return found


def _text(key: str, value: Any, names: _Names) -> str:
    if value is None or value == "" or value == [] or value == {}:
        return "—"
    if isinstance(value, bool):
        return _("yes") if value else _("no")
    if key in CHOICES and isinstance(value, str) and value in CHOICES[key].values:
        return str(CHOICES[key](value).label)
    if key in ("owner_project", "device_model", "pool", "cluster"):
        name = names.name(key, value)
        if name:
            return name
    if isinstance(value, list):
        if key == "taints" or all(isinstance(v, dict) and "key" in v and "effect" in v for v in value):
            return (
                ", ".join(
                    f"{t.get('key', '')}{'=' + str(t['value']) if t.get('value') else ''}:{t.get('effect', '')}"
                    for t in value
                    if isinstance(t, dict)
                )
                or "—"
            )
        if all(not isinstance(v, dict | list) for v in value):
            return _clip(", ".join(_text(key, v, names) for v in value))
        return _clip(json.dumps(value, ensure_ascii=False, sort_keys=True, default=str))
    if isinstance(value, dict):
        return _clip("; ".join(f"{field_label(k)}: {_text(k, v, names)}" for k, v in sorted(value.items())))
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str):
        local = as_local(value)
        if local is not value and hasattr(local, "tzinfo"):
            return format_datetime(local)
        return _clip(localize(value))
    return _clip(str(value))


def _walk(
    before: Any,
    after: Any,
    prefix: str,
    depth: int,
    names: _Names,
    out: list[dict],
    key: str,
    only_after: bool,
) -> None:
    if before == after:
        return
    nested = (isinstance(before, dict) or before is None) and (isinstance(after, dict) or after is None)
    # Labels and structured findings split into their keys; a plain value is one line.
    if nested and depth < 2 and (before or after):
        b, a = before or {}, after or {}
        for sub in sorted(set(b) | set(a), key=str):
            label = f"{prefix} · {field_label(str(sub))}" if prefix else field_label(str(sub))
            if key == "labels":
                label = f"{prefix} · {sub}" if prefix else str(sub)
            sub_key = str(sub) if key != "labels" else ""
            _walk(b.get(sub), a.get(sub), label, depth + 1, names, out, sub_key, only_after)
        return
    out.append(
        {
            "field": prefix,
            "old": None if only_after else _text(key, before, names),
            "new": _text(key, after, names),
            "only_new": only_after,
        }
    )


def event_changes(event, *, user=None, names: _Names | None = None) -> list[dict]:
    """``[{"field", "old", "new", "only_new"}]`` for one event; [] when it records no change."""
    names = names or _Names(user)
    before = (
        event.before
        if isinstance(event.before, dict)
        else ({} if event.before is None else {"": event.before})
    )
    after = (
        event.after if isinstance(event.after, dict) else ({} if event.after is None else {"": event.after})
    )
    out: list[dict] = []
    # A snapshot written with only "after" (registration, an import) lists values, not changes.
    only_after = not before
    for key in sorted(set(before) | set(after), key=str):
        b, a = before.get(key), after.get(key)
        if b == a and not only_after:
            continue
        if key == "drift":
            continue  # the drift's name is the event's message; its state follows
        label = field_label(key)
        if isinstance(b, dict | type(None)) and isinstance(a, dict | type(None)) and (a or b):
            _walk(b, a, label, 1, names, out, key, only_after)
        else:
            out.append(
                {
                    "field": label,
                    "old": None if b is None and only_after else _text(key, b, names),
                    "new": _text(key, a, names),
                    "only_new": b is None and only_after,
                }
            )
    if len(out) > MAX_LINES:
        rest = len(out) - MAX_LINES
        out = out[:MAX_LINES]
        out.append(
            {
                "field": "",
                "old": None,
                "new": _("and %(n)d more") % {"n": rest},
                "only_new": True,
                "more": True,
            }
        )
    return out


def event_runs(events) -> list[dict]:
    """Consecutive events (newest first) on one node of one kind, as groups: the fleet's latest events
    read "node-01 · registered · 8 events" instead of eight lines."""
    runs: list[dict] = []
    for event in events:
        last = runs[-1] if runs else None
        if last and last["node_id"] == event.node_id and last["kind"] == event.kind:
            last["events"].append(event)
            if _SEVERITY_RANK.get(event.severity, 0) > _SEVERITY_RANK.get(last["severity"], 0):
                last["severity"] = event.severity
            last["first"] = event.created_at
            continue
        runs.append(
            {
                "node_id": event.node_id,
                "node": event.node,
                "kind": event.kind,
                "kind_label": event.get_kind_display(),
                "severity": event.severity,
                "events": [event],
                "first": event.created_at,
                "last": event.created_at,
            }
        )
    for run in runs:
        run["severity_label"] = str(DeviceEvent.Severity(run["severity"]).label)
    return runs


_SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}
