"""Admin console for the ledger (staff only, as Django's admin is).

Status, health and pool status are read-only in change forms: they change only through the actions
below, which call the ledger services (so every change has its DeviceEvent and ChangeRecord). Errors
raised by services become admin error messages, never a 500.

The rooms: ``common`` (forms, action helpers, inlines), ``ledger`` (clusters, pools, nodes,
devices), ``history`` (events, node reports, agent tokens). Importing this package registers them.
"""

from apps.inventory.admin import history, ledger
from apps.inventory.admin.ledger import ClusterAdmin, DeviceAdmin, NodeAdmin, PoolAdmin

__all__ = ["ClusterAdmin", "DeviceAdmin", "NodeAdmin", "PoolAdmin", "history", "ledger"]
