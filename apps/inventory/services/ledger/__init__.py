"""Ledger (台账) writes: node status, device pool status / retirement / edits, CSV import and export.

Every state change here locks its rows (``select_for_update``), re-reads the state inside the lock,
validates through ``apps.core.validation`` and writes both a ``DeviceEvent`` (the ledger history operators read)
and a ``core.ChangeRecord`` (the audit trail). Asking for the state a row is already in is a no-op
and writes no event.

The rooms:

* ``common``: status taints, CSV columns, the event texts, ``_record`` (event + audit record);
* ``events``: ``device_events_create``, the one writer of ``DeviceEvent`` rows (and the
  NODE_QUARANTINED notification a node's quarantine event raises);
* ``states``: node status (``node_status_set``), device cordon / pool status / retirement / edits;
* ``nodes``: ``node_register``, the one way a node and its cards enter the ledger;
* ``csv_read`` / ``csv_import``: the ledger CSV (its format is described in ``csv_import``);
* ``export``: the ledger as CSV or XLSX.
"""

from apps.inventory.services.ledger.common import (
    _STATUS_TAINTS,
    DEVICE_EDITABLE_FIELDS,
    EXPORT_COLUMNS,
    IMPORT_COLUMNS,
    MAINTENANCE_TAINT,
    NODE_TRANSITIONS,
    QUARANTINE_TAINT,
    READ_ONLY_COLUMNS,
)
from apps.inventory.services.ledger.csv_import import (
    BACKGROUND_IMPORT_ROWS,
    IMPORT_RUN_KIND,
    IMPORT_TASK,
    ledger_import_csv,
    ledger_import_request,
    ledger_import_run,
)
from apps.inventory.services.ledger.csv_read import ImportReport
from apps.inventory.services.ledger.export import CSV_CONTENT_TYPE, XLSX_CONTENT_TYPE, ledger_export
from apps.inventory.services.ledger.states import (
    device_cordon,
    device_pool_status_set,
    device_retire,
    device_update,
    node_status_move,
    node_status_set,
)

__all__ = [
    "BACKGROUND_IMPORT_ROWS",
    "CSV_CONTENT_TYPE",
    "DEVICE_EDITABLE_FIELDS",
    "EXPORT_COLUMNS",
    "IMPORT_COLUMNS",
    "IMPORT_RUN_KIND",
    "IMPORT_TASK",
    "MAINTENANCE_TAINT",
    "NODE_TRANSITIONS",
    "QUARANTINE_TAINT",
    "READ_ONLY_COLUMNS",
    "XLSX_CONTENT_TYPE",
    "_STATUS_TAINTS",
    "ImportReport",
    "device_cordon",
    "device_pool_status_set",
    "device_retire",
    "device_update",
    "ledger_export",
    "ledger_import_csv",
    "ledger_import_request",
    "ledger_import_run",
    "node_status_move",
    "node_status_set",
]
