"""A proposal the snapshot refuses keeps one job pending; the cycle places the rest (issue 27 §5).

``Engine.place`` applies its own proposal to the snapshot, and ``Snapshot.apply`` re-checks every card
(``CapacityError`` when one no longer fits). A refusal means the engine's view of the fleet disagreed
with the snapshot's cards: an engine bug (a stale index) or a snapshot changed behind the engine's back.
Either way nothing was over-allocated, and it must not end the batch: the job stays pending with the
reason (a stored text), the snapshot's caches are dropped so the next decision reads the cards as they
are, and the caller rebuilds its cached snapshot from the database for the next cycle.
"""

from __future__ import annotations

import logging
import uuid

from apps.core.stored_text import stored
from apps.scheduling.engine.engine import Engine
from apps.scheduling.engine.model import CapacityError, Decision, Request, Snapshot

REFUSED = stored(
    "the scheduler proposed capacity that is no longer free (%(error)s); kept pending, retried next cycle"
)
logger = logging.getLogger(__name__)


def place_or_refuse(
    engine: Engine, snapshot: Snapshot, request: Request, *, commit: bool = True
) -> tuple[Decision, bool]:
    """``(decision, refused)``: the engine's decision, or a pending one with the reason when the
    snapshot refused the proposal (then ``refused`` is true and the snapshot is as it was)."""
    try:
        return engine.place(snapshot, request, commit=commit), False
    except CapacityError as exc:
        logger.error("request %s: the snapshot refused the engine's proposal: %s", request.id, exc)
        snapshot.static_changed()  # drop every cache built on the snapshot (indexes, filters)
        decision = Decision(uuid.uuid4().hex, request.id, engine.policy.name)
        decision.explanation = REFUSED % {"error": str(exc)}
        decision.step("result", decision.explanation)
        return decision, True
