"""Discovery: a node report (raw SMI output) becomes ledger truth.

Parsing happens first and outside any transaction; a report that does not parse writes nothing.
The upsert is idempotent: the same report twice leaves every ledger row as it was and writes no
event. A device missing from a full-inventory report becomes LOST (掉卡) with an event, and is
FOUND again (with an event) when it returns.

The rooms: ``common`` (fields, event texts, the result), ``access`` (who may report what),
``devices`` (matching and the fields a report sets), ``ingest`` (the locked upsert, in steps) and
``admission`` (approving the nodes an agent registered).

Who may report what:

* Staff and the ``ingest_node_report`` command may report for any node and register new ones;
  a node they register is approved at once (staff acting is the approval).
* A node agent (an ``AgentToken``) reports only for its own cluster and, when the token has a
  ``node_pattern``, only for the nodes it covers (403 otherwise, nothing written). A node it
  registers arrives **pending approval**: it takes no work until staff approve it
  (``node_approve``) or a cluster sync confirms Kubernetes has it (``node_confirm_in_cluster``).
* An agent's report never moves a card away from a node it could not report for itself (another
  cluster, a node outside its pattern) nor onto a node pending approval: such a card is a
  CONFLICT event for staff and stays where the ledger has it.
* An unbound agent token (no node pattern) may not mark cards lost on a node it did not register
  (403, nothing written: apps.inventory.services.agent_losses).
* A report whose vendor is not the node's, or that would register a card with no identity at all
  (no UUID, serial, PCIe bus id, model or memory), is refused with a 400; nothing is written.
"""

from apps.inventory.services.discovery.access import _check_agent_scope, _check_node_name
from apps.inventory.services.discovery.admission import node_approve, node_confirm_in_cluster
from apps.inventory.services.discovery.common import (
    CONFLICT_EVENT_WINDOW,
    DEVICE_REPORT_FIELDS,
    NODE_VERSION_FIELDS,
    VIA_CLUSTER_SYNC,
    VIA_STAFF,
    IngestResult,
    node_report_parse,
)
from apps.inventory.services.discovery.devices import _link_kind
from apps.inventory.services.discovery.ingest import node_report_ingest

__all__ = [
    "CONFLICT_EVENT_WINDOW",
    "DEVICE_REPORT_FIELDS",
    "NODE_VERSION_FIELDS",
    "VIA_CLUSTER_SYNC",
    "VIA_STAFF",
    "IngestResult",
    "_check_agent_scope",
    "_check_node_name",
    "_link_kind",
    "node_approve",
    "node_confirm_in_cluster",
    "node_report_ingest",
    "node_report_parse",
]
