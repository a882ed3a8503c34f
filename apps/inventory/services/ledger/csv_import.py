"""The ledger CSV import: validate every row against the locked ledger, then write.

Ledger CSV (one row per device; a row without device columns describes a node only)
--------------------------------------------------------------------------------------
Columns, in export order (``IMPORT_COLUMNS``)::

    cluster          cluster slug (must exist)                                  required
    pool             pool slug inside that cluster (must exist)
    node             node name; created when it does not exist in the cluster   required
    node_status      ready | maintenance | quarantined | draining | retired
    cpu_arch, driver_version, cuda_version, cann_version, rocm_version, dtk_version, rack, switch
    vendor           catalog vendor: nvidia | amd | huawei | hygon | cambricon | intel
    device_index     integer >= 0 (the vendor tool's index on the node)
    device_model     catalog device model name, slug or a product name the tools print; an unknown
                     name is kept as the raw model name and the card is flagged "model unrecognized"
    uuid, serial, pci_bus_id
    numa_node        integer
    firmware_version
    owner_project    project slug (must exist)
    topology_group

Exports add read-only columns (``READ_ONLY_COLUMNS``): health, pool_status, model_unrecognized,
last_seen_at. The import ignores them, except that a row whose health is ``retired`` or ``lost`` is
matched against a retired / lost card of that slot (so an export re-imports unchanged); rows of
retired cards are never imported.

Rules:
- Column order is free; header names are case-insensitive; an unknown column is an error.
- An empty cell leaves the stored value as it is (the import never clears a field).
- A device row needs ``vendor`` and ``device_index``. A device is matched by ``uuid``, else by
  (node, vendor, device_index) among cards in service.
- Node columns may repeat on every row of a node, but must not disagree.
- A status change of an existing node follows the node state machine (``node_status_set``).
- Every row is validated first; when any row has an error nothing is written and
  ``ValidationFailed.details["rows"]`` lists every error as ``{"line", "column", "message"}``, where
  line 1 is the header.
- Files are UTF-8 (with or without BOM); GB18030 (Excel on a Chinese Windows) is accepted too. A
  cell the export prefixed with ``'`` to defuse a spreadsheet formula (``'=...``) is read back without
  the quote.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, models, transaction
from django.db.models import Q
from django.utils.translation import gettext as _

from apps.accounts.models import Project
from apps.catalog.models import DeviceModel, Vendor
from apps.core import runs, task_names
from apps.core.audit import change_record_create, snapshot
from apps.core.errors import ApplicationError, Conflict, InvalidTransition, ValidationFailed
from apps.core.models import BackgroundRun
from apps.inventory.models import Cluster, Device, DeviceEvent, Node, Pool
from apps.inventory.services.ledger.common import (
    _DEVICE_COLUMNS,
    _DEVICE_IMPORT_FIELDS,
    _DEVICE_TEXT_COLUMNS,
    _NODE_TEXT_COLUMNS,
    _OUT_OF_SERVICE,
    DEVICE_IMPORT_UPDATED,
    DEVICE_IMPORTED,
    IMPORT_STATUS_REASON,
    NODE_IMPORT_UPDATED,
    NODE_IMPORTED,
    VALIDATING,
    WRITING,
    S,
    _record,
    _save_fields,
    _taints_for,
)
from apps.inventory.services.ledger.csv_read import (
    _VENDORS,
    ImportReport,
    _decode,
    _DevicePlan,
    _max_length,
    _NodePlan,
    _norm,
    _read_csv,
    _Row,
)
from apps.inventory.services.ledger.nodes import (
    Registration,
    device_register,
    node_register,
    registration_write,
)
from apps.inventory.services.ledger.states import (
    _node_transition_error,
    _node_transition_locked,
)
from apps.inventory.vendors.adapter import normalise_pci_bus_id


class _Importer:
    def __init__(self, *, rows: list[_Row], actor, progress=None, on_node_moved=None) -> None:
        self.rows = rows
        self.actor = actor
        self.progress = progress or (lambda phase, done, total: None)
        self.on_node_moved = on_node_moved or (lambda **moved: None)
        self.errors: list[dict[str, Any]] = []
        self.report = ImportReport()
        self.node_plans: dict[tuple[int, str], _NodePlan] = {}
        self.device_plans: list[_DevicePlan] = []
        self.row_results: dict[int, dict[str, Any]] = {}

    # -- collecting --------------------------------------------------------------------------------

    def error(self, line: int, column: str, message: str) -> None:
        self.errors.append({"line": line, "column": column, "message": message})

    def warn(self, line: int, column: str, message: str) -> None:
        self.report.warnings.append({"line": line, "column": column, "message": message})

    def fail(self) -> ValidationFailed:
        errors = sorted(self.errors, key=lambda e: (e["line"], e["column"]))
        bad = len({e["line"] for e in errors})
        noun = "row has" if bad == 1 else "rows have"
        return ValidationFailed(f"{bad} {noun} errors", details={"rows": errors})

    # -- reference data and locks ------------------------------------------------------------------

    def load(self) -> None:
        def values(column: str) -> set[str]:
            return {r.cells[column] for r in self.rows if r.cells.get(column)}

        self.clusters = {c.slug: c for c in Cluster.objects.filter(slug__in=values("cluster"))}
        self.pools = {
            (p.cluster_id, p.slug): p
            for p in Pool.objects.filter(cluster__in=self.clusters.values(), slug__in=values("pool"))
        }
        self.projects = {p.slug: p for p in Project.objects.filter(slug__in=values("owner_project"))}
        self.models: dict[str, list[DeviceModel]] = {}
        if values("device_model"):
            for dm in DeviceModel.objects.order_by("vendor", "name"):
                names = [dm.name, dm.slug, *(p for p in dm.product_names or [] if isinstance(p, str))]
                for key in dict.fromkeys(_norm(n) for n in names):
                    self.models.setdefault(key, []).append(dm)
        # Lock what the file can touch: nodes first, then devices, each in primary-key order.
        nodes = (
            Node.objects.select_for_update()
            .filter(cluster__in=self.clusters.values(), name__in=values("node"))
            .order_by("pk")
        )
        self.nodes = {(n.cluster_id, n.name): n for n in nodes}
        devices = (
            Device.objects.select_for_update(of=("self",))
            .select_related("node")
            .filter(Q(uuid__in=values("uuid")) | Q(node__in=list(self.nodes.values())))
            .order_by("pk")
        )
        self.by_uuid: dict[str, Device] = {}
        self.in_service: dict[tuple[int, str, int], Device] = {}
        self.out_of_service: dict[tuple[int, str, int, str], Device] = {}
        for d in devices:
            if d.uuid:
                self.by_uuid[d.uuid] = d
            if d.health in _OUT_OF_SERVICE:
                self.out_of_service[(d.node_id, d.vendor, d.index, d.health)] = d  # newest wins
            else:
                self.in_service[(d.node_id, d.vendor, d.index)] = d

    # -- validation --------------------------------------------------------------------------------

    def _text(self, row: _Row, column: str, model: type[models.Model], field_name: str | None = None) -> str:
        value = row.cells.get(column, "")
        limit = _max_length(model, field_name or column)
        if len(value) > limit:
            self.error(row.line, column, f"longer than {limit} characters")
            return ""
        return value

    def _integer(self, row: _Row, column: str, *, minimum: int | None = None) -> int | None:
        value = row.cells.get(column, "")
        if not value:
            return None
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is None or (minimum is not None and number < minimum):
            floor = f" >= {minimum}" if minimum is not None else ""
            self.error(row.line, column, f"{value!r} is not a whole number{floor}")
            return None
        return number

    def validate(self) -> None:
        seen_uuid: dict[str, int] = {}
        seen_slot: dict[tuple[str, str, str, int], int] = {}
        matched: dict[int, int] = {}
        for i, row in enumerate(self.rows):
            if i % 100 == 0:
                self.progress(VALIDATING, i, len(self.rows))
            plan = self._validate_node(row)
            if not any(row.cells.get(c) for c in _DEVICE_COLUMNS):
                self.row_results[row.line] = self._row_result(row, "")
                continue
            self._validate_device(row, plan, seen_uuid, seen_slot, matched)

    def _row_result(self, row: _Row, device: str) -> dict[str, Any]:
        return {
            "line": row.line,
            "cluster": row.cells.get("cluster", ""),
            "node": row.cells.get("node", ""),
            "device": device,
            "node_action": "",
            "device_action": "",
            "node_changes": [],
            "device_changes": [],
        }

    def _validate_node(self, row: _Row) -> _NodePlan | None:
        c, line = row.cells, row.line
        cluster = None
        if not c.get("cluster"):
            self.error(line, "cluster", "required")
        else:
            cluster = self.clusters.get(c["cluster"])
            if cluster is None:
                self.error(line, "cluster", f"no cluster with slug {c['cluster']!r}")
        name = self._text(row, "node", Node, "name")
        if not c.get("node"):
            self.error(line, "node", "required")
        status = c.get("node_status", "").lower() or None
        if status and status not in S.values:
            self.error(
                line, "node_status", f"{c['node_status']!r} is not a node status ({', '.join(S.values)})"
            )
            status = None
        values: dict[str, Any] = {}
        for column in _NODE_TEXT_COLUMNS:
            if c.get(column):
                values[column] = self._text(row, column, Node)
        if c.get("pool") and cluster is not None:
            pool = self.pools.get((cluster.pk, c["pool"]))
            if pool is None:
                self.error(line, "pool", f"no pool {c['pool']!r} in cluster {cluster.slug}")
            else:
                values["pool"] = pool
        if cluster is None or not name:
            return None
        key = (cluster.pk, name)
        plan = self.node_plans.get(key)
        if plan is None:
            plan = self.node_plans[key] = _NodePlan(
                cluster=cluster, name=name, line=line, node=self.nodes.get(key)
            )
        for column, value in values.items():
            previous = plan.values.get(column)
            if column in plan.values and previous != value:
                self.error(
                    line,
                    column,
                    f"node {name}: {column} {str(value)!r} disagrees with {str(previous)!r} on line {plan.value_lines[column]}",
                )
            elif column not in plan.values:
                plan.values[column], plan.value_lines[column] = value, line
        if status:
            if plan.status and plan.status != status:
                self.error(
                    line,
                    "node_status",
                    f"node {name}: {status!r} disagrees with {plan.status!r} on line {plan.status_line}",
                )
            elif not plan.status:
                if plan.node is not None and (problem := _node_transition_error(plan.node, status)):
                    self.error(line, "node_status", problem)
                else:
                    plan.status, plan.status_line = status, line
        return plan

    def _device_model(self, row: _Row, vendor: str | None, values: dict[str, Any]) -> None:
        name = row.cells.get("device_model", "")
        if not name:
            return
        candidates = self.models.get(_norm(name), [])
        if vendor is None:
            return
        same_vendor = [m for m in candidates if m.vendor == vendor]
        if same_vendor:
            exact = [m for m in same_vendor if m.name == name]
            values["device_model"] = (exact or same_vendor)[0]
            values["model_unrecognized"] = False
        elif candidates:
            self.error(
                row.line,
                "device_model",
                f"{name!r} is a {candidates[0].vendor} model, but the row's vendor is {vendor}",
            )
        else:
            limit = _max_length(Device, "raw_model_name")
            if len(name) > limit:
                self.error(row.line, "device_model", f"longer than {limit} characters")
                return
            values.update(device_model=None, raw_model_name=name, model_unrecognized=True)
            self.warn(
                row.line,
                "device_model",
                f"device model {name!r} is not in the catalog; recorded as unrecognized",
            )

    def _validate_device(
        self,
        row: _Row,
        plan: _NodePlan | None,
        seen_uuid: dict[str, int],
        seen_slot: dict[tuple[str, str, str, int], int],
        matched: dict[int, int],
    ) -> None:
        c, line = row.cells, row.line
        errors_before = len(self.errors)
        vendor = None
        if not c.get("vendor"):
            self.error(line, "vendor", "required on a device row")
        else:
            vendor = _VENDORS.get(_norm(c["vendor"]))
            if vendor is None:
                self.error(
                    line, "vendor", f"{c['vendor']!r} is not a catalog vendor ({', '.join(Vendor.values)})"
                )
        index = self._integer(row, "device_index", minimum=0)
        if not c.get("device_index"):
            self.error(line, "device_index", "required on a device row")
        values: dict[str, Any] = {}
        numa = self._integer(row, "numa_node")
        if numa is not None:
            values["numa_node"] = numa
        for column in _DEVICE_TEXT_COLUMNS:
            if c.get(column):
                values[column] = self._text(row, column, Device)
        if values.get("pci_bus_id"):
            # The form the vendors' tools print and every report stores ("0000:1A:00.0"): a value
            # that is no PCI address would match nothing the cluster publishes (issue 29 §9).
            try:
                values["pci_bus_id"] = normalise_pci_bus_id(values["pci_bus_id"])
            except ValueError:
                self.error(
                    line,
                    "pci_bus_id",
                    f"{c['pci_bus_id']!r} is not a PCI address (domain:bus:device.function, e.g. 0000:1A:00.0)",
                )
                del values["pci_bus_id"]
        if c.get("owner_project"):
            project = self.projects.get(c["owner_project"])
            if project is None:
                self.error(line, "owner_project", f"no project with slug {c['owner_project']!r}")
            else:
                values["owner_project"] = project
        self._device_model(row, vendor, values)
        label = f"{c.get('vendor', '')}#{c.get('device_index', '')}"
        result = self._row_result(row, label)
        self.row_results[line] = result
        uuid = values.get("uuid", "")
        if uuid:
            if uuid in seen_uuid:
                self.error(line, "uuid", f"uuid {uuid} already appears on line {seen_uuid[uuid]}")
            else:
                seen_uuid[uuid] = line
        health = c.get("health", "").lower()
        if vendor and index is not None and health not in _OUT_OF_SERVICE:
            slot = (c.get("cluster", ""), c.get("node", ""), vendor, index)
            if slot in seen_slot:
                self.error(
                    line,
                    "device_index",
                    f"{vendor} index {index} on node {slot[1]} already appears on line {seen_slot[slot]}",
                )
            else:
                seen_slot[slot] = line
        if len(self.errors) > errors_before or plan is None or vendor is None or index is None:
            return
        device_plan = _DevicePlan(line=line, node_plan=plan, vendor=vendor, index=index, values=values)
        self._match(row, device_plan, health, matched)

    def _match(self, row: _Row, dp: _DevicePlan, health: str, matched: dict[int, int]) -> None:
        line, node, name = row.line, dp.node_plan.node, dp.node_plan.name
        uuid = dp.values.get("uuid", "")
        device = self.by_uuid.get(uuid) if uuid else None
        if device is not None:
            if node is None or device.node_id != node.pk:
                self.error(
                    line,
                    "uuid",
                    f"uuid {uuid} belongs to device {device} on another node ({device.node.name})",
                )
                return
            if device.vendor != dp.vendor:
                self.error(line, "vendor", f"uuid {uuid} is a {device.vendor} card, not {dp.vendor}")
                return
        elif node is not None:
            if health in _OUT_OF_SERVICE:
                device = self.out_of_service.get((node.pk, dp.vendor, dp.index, health))
            else:
                device = self.in_service.get((node.pk, dp.vendor, dp.index))
                if device is not None and uuid and device.uuid and device.uuid != uuid:
                    self.error(
                        line,
                        "uuid",
                        f"{dp.vendor} index {dp.index} on node {name} holds the card with uuid {device.uuid}; "
                        f"retire it before registering {uuid} in its slot",
                    )
                    return
        if device is not None:
            device.node = node
            if device.pk in matched:
                self.error(
                    line, "uuid" if uuid else "device_index", f"the same card as line {matched[device.pk]}"
                )
                return
            matched[device.pk] = line
        dp.device = device
        if health == Device.Health.RETIRED or (device is not None and device.health == Device.Health.RETIRED):
            if device is None or device.health != Device.Health.RETIRED or self._diff(device, dp.target()):
                self.warn(line, "health", "rows of retired cards are not imported; row skipped")
                dp.frozen = "skipped"
            else:
                dp.frozen = "unchanged"
            self.device_plans.append(dp)
            return
        if device is None and health == Device.Health.LOST:
            self.warn(line, "health", "no lost card in this slot; row skipped")
            dp.frozen = "skipped"
            self.device_plans.append(dp)
            return
        if device is not None and device.index != dp.index:
            holder = self.in_service.get((node.pk, dp.vendor, dp.index))
            if holder is not None and holder.pk != device.pk and device.health not in _OUT_OF_SERVICE:
                self.error(
                    line,
                    "device_index",
                    f"{dp.vendor} index {dp.index} on node {name} is held by another card (uuid {holder.uuid or 'none'})",
                )
                return
        if device is None and node is not None and node.status == S.RETIRED:
            self.error(line, "node", f"node {name} is retired; no card can be added to it")
            return
        self.device_plans.append(dp)

    @staticmethod
    def _diff(obj: models.Model, values: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
        """Fields whose stored value differs from ``values`` (foreign keys compared by id)."""
        changes = {}
        for name, new in values.items():
            if isinstance(obj._meta.get_field(name), models.ForeignKey):
                old, new = getattr(obj, f"{name}_id"), (new.pk if new is not None else None)
            else:
                old = getattr(obj, name)
            if old != new:
                changes[name] = (old, new)
        return changes

    # -- writing -----------------------------------------------------------------------------------

    def apply(self) -> None:
        for plan in sorted(self.node_plans.values(), key=lambda p: p.line):
            try:
                self._apply_node(plan)
            except ValidationFailed as exc:
                plan.failed = True
                self.error(plan.line, "node", exc.message)
        for i, dp in enumerate(self.device_plans):
            if i % 100 == 0:
                self.progress(WRITING, i, len(self.device_plans))
            if dp.node_plan.failed:
                continue
            try:
                self._apply_device(dp)
            except ValidationFailed as exc:
                self.error(dp.line, "", exc.message)
        for plan in sorted(self.node_plans.values(), key=lambda p: p.status_line):
            node = plan.node
            if plan.failed or not plan.status or node is None or node.status == plan.status:
                continue
            previous, reason = node.status, IMPORT_STATUS_REASON % {"line": plan.status_line}
            try:
                _node_transition_locked(node=node, status=plan.status, reason=reason, actor=self.actor)
            except (ValidationFailed, InvalidTransition) as exc:
                self.error(plan.status_line, "node_status", exc.message)
                continue
            self.on_node_moved(node=node, previous=previous, reason=reason, actor=self.actor)
            if plan.action != "created":
                plan.action = "updated"
                self.row_results[plan.line]["node_changes"].append("status")
        for plan in self.node_plans.values():
            self.row_results[plan.line]["node_action"] = plan.action
            if plan.action == "created":
                self.report.created_nodes += 1
            elif plan.action == "updated":
                self.report.updated_nodes += 1
            else:
                self.report.unchanged += 1
        self.report.rows = [self.row_results[line] for line in sorted(self.row_results)]

    def _apply_node(self, plan: _NodePlan) -> None:
        fields = list(plan.values)
        if plan.node is None:
            # A node imported as retired is created ready and retired after its cards are imported,
            # so the retirement reaches its cards (each with its own event) like any other.
            status = plan.status if plan.status and plan.status != S.RETIRED else S.READY
            node, _cards = node_register(
                cluster=plan.cluster,
                name=plan.name,
                actor=self.actor,
                values={"status": status, "taints": _taints_for([], status), **plan.values},
            )
            plan.node, plan.action = node, "created"
            registration_write(
                node,
                Registration(
                    kind=DeviceEvent.Kind.IMPORTED,
                    message=NODE_IMPORTED % {"node": node.name, "line": plan.line},
                    after=snapshot(node, ["cluster", "name", "status", "taints", *fields]),
                    audit_action="node.import",
                ),
                actor=self.actor,
            )
            return
        node = plan.node
        changes = self._diff(node, plan.values)
        if not changes:
            return
        before, after = _save_fields(node, {name: plan.values[name] for name in changes})
        _record(
            node,
            action="node.update",
            kind=DeviceEvent.Kind.UPDATED,
            message=NODE_IMPORT_UPDATED
            % {"node": node.name, "line": plan.line, "fields": ", ".join(changes)},
            before=before,
            after=after,
            actor=self.actor,
        )
        plan.action = "updated"
        self.row_results[plan.line]["node_changes"] = list(changes)

    def _apply_device(self, dp: _DevicePlan) -> None:
        result = self.row_results[dp.line]
        node = dp.node_plan.node
        if dp.frozen:
            result["device_action"] = dp.frozen
            if dp.frozen == "unchanged":
                self.report.unchanged += 1
            return
        if dp.device is None:
            device = device_register(
                node=node, actor=self.actor, vendor=dp.vendor, index=dp.index, **dp.values
            )
            registration_write(
                device,
                Registration(
                    kind=DeviceEvent.Kind.IMPORTED,
                    message=DEVICE_IMPORTED % {"device": device, "line": dp.line},
                    after=snapshot(device, ["vendor", *_DEVICE_IMPORT_FIELDS]),
                    audit_action="device.import",
                ),
                actor=self.actor,
            )
            self.report.created_devices += 1
            result["device_action"] = "created"
            return
        device = dp.device
        changes = self._diff(device, dp.target())
        if not changes:
            self.report.unchanged += 1
            result["device_action"] = "unchanged"
            return
        values = dp.target()
        before, after = _save_fields(device, {name: values[name] for name in changes})
        _record(
            device,
            action="device.update",
            kind=DeviceEvent.Kind.UPDATED,
            message=DEVICE_IMPORT_UPDATED % {"device": device, "line": dp.line, "fields": ", ".join(changes)},
            before=before,
            after=after,
            actor=self.actor,
        )
        self.report.updated_devices += 1
        result["device_action"] = "updated"
        result["device_changes"] = list(changes)


def ledger_import_csv(
    *, data: bytes | str, actor, dry_run: bool = False, progress=None, on_node_moved=None
) -> ImportReport:
    """Import nodes and devices from a ledger CSV (columns and rules: see the module docstring).

    ``on_node_moved(node=, previous=, reason=, actor=)`` is called, in the import's transaction, for
    each node whose status the file changed: the layer above the ledger passes what that means for
    the jobs there (``apps.scheduling.faults.node_moved``).

    All rows are validated against the locked ledger before anything is written; any error raises
    ``ValidationFailed`` with ``details["rows"]`` and writes nothing. With ``dry_run`` the whole
    import runs and is rolled back, so the report says exactly what a real import would do.
    """
    rows, errors = _read_csv(_decode(data))
    if errors:
        bad = len({e["line"] for e in errors})
        raise ValidationFailed(
            f"{bad} {'row has' if bad == 1 else 'rows have'} errors", details={"rows": errors}
        )
    try:
        with transaction.atomic():
            importer = _Importer(rows=rows, actor=actor, progress=progress, on_node_moved=on_node_moved)
            importer.load()
            importer.validate()
            if importer.errors:
                raise importer.fail()
            importer.apply()
            if importer.errors:
                raise importer.fail()
            report = importer.report
            report.dry_run = dry_run
            if dry_run:
                transaction.set_rollback(True)
    except IntegrityError as exc:
        raise Conflict(_("the ledger changed while the file was being imported; import it again")) from exc
    return report


# Files with more rows than this are imported by a worker, with a progress page.
BACKGROUND_IMPORT_ROWS = 500


# The BackgroundRun kind of a queued import, and the task that runs it.
IMPORT_RUN_KIND = "inventory.ledger_import"
IMPORT_TASK = task_names.LEDGER_IMPORT


def ledger_import_request(*, data: bytes | str, actor, dry_run: bool = False) -> BackgroundRun:
    """Queue a (large) ledger import for a worker; the same rules and report as ``ledger_import_csv``.

    The run keeps the file in ``params["text"]``; its ``result`` gets ``report`` (done) or ``errors``
    (the rows that failed)."""
    text = _decode(data)
    with transaction.atomic():
        run = runs.run_create(
            kind=IMPORT_RUN_KIND,
            actor=actor,
            params={"text": text, "dry_run": dry_run, "rows": max(0, text.count("\n") - 1)},
        )
        change_record_create(
            actor=actor, action="inventory.ledger_import_request", obj=run, after={"dry_run": dry_run}
        )
        runs.run_enqueue(run=run, task=IMPORT_TASK)
    return run


def ledger_import_run(*, run_id: int, actor=None, on_node_moved=None) -> BackgroundRun | None:
    """Run a queued import once (queued → running is a conditional update); record the outcome.
    ``on_node_moved``: see ``ledger_import_csv``."""
    run = runs.run_start(run_id=run_id, kind=IMPORT_RUN_KIND)
    if run is None:
        return None

    def progress(phase: str, done: int, total: int) -> None:
        runs.run_progress(run=run, done=done, total=total, message=phase)

    params = run.params
    try:
        report = ledger_import_csv(
            data=params.get("text", ""),
            actor=actor or run.actor or run.actor_label or "worker",
            dry_run=bool(params.get("dry_run")),
            progress=progress,
            on_node_moved=on_node_moved,
        )
    except ApplicationError as exc:
        details = exc.details if isinstance(exc.details, dict) else {}
        runs.run_fail(
            run=run,
            error=exc.message,
            result={"errors": details.get("rows") or [{"line": "", "column": "", "message": exc.message}]},
        )
    except Exception:
        # A bug, not the file: the run must not poll forever; the worker log has the traceback.
        runs.run_fail(run=run, error="the import stopped on an unexpected error; see the worker log")
        raise
    else:
        runs.run_finish(run=run, result={"report": report.as_dict()})
    run.refresh_from_db()
    return run
