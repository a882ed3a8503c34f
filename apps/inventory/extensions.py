"""Extension points of the ledger pages: what layers above inventory add to them.

The device and node pages live in inventory, but their metric history comes from telemetry, which
inventory may not import. Telemetry registers a provider here in its ``AppConfig.ready()`` and the
pages ask the slot; with no provider the pages show no history.
"""

from __future__ import annotations

from apps.core.slots import Slot

# provider(request, device) -> {"html": panel HTML, "status": 200 | 400}, or None.
DEVICE_HISTORY = Slot("device_history")
# provider(request, node) -> {"html": panel HTML, "status": 200 | 400}, or None.
NODE_HISTORY = Slot("node_history")
