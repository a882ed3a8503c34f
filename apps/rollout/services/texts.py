"""Texts rollout writes that people read later (events, stage reasons, scale decisions), stored in English
and shown in the reader's language (``apps.core.stored_text``)."""

from __future__ import annotations

from apps.core.stored_text import stored

# Texts people read later (events, stage reasons), in their own language (apps.core.stored_text).
JOINS = stored("node %(node)s joins gray batch %(batch)s")
LEAVES = stored("node %(node)s leaves gray batch %(batch)s")
GRAY_REASON = stored("gray batch %(batch)s: %(kind)s %(version)s")
SOAK_STARTED = stored("soak started on %(count)s node(s)")
SOAK_FAILED = stored("soak failed: %(violations)s")
SOAK_PASSED_AFTER = stored("soak passed after %(hours)s h")
SOAK_PASSED = stored("soak passed")
ADMITTED = stored("gray batch %(batch)s admitted")
AUTOSCALE = stored("autoscale: %(reason)s")
AUTOSCALE_DISABLED = stored("disabled")
SERVICE_IS = stored("the service is %(state)s")
AUTOSCALE_NO_ROOM = stored("no room for another replica (asked %(asked)s)")
BATCH_FAILED = stored("gray batch %(batch)s failed: %(reason)s")
BATCH_ROLLED_BACK = stored("gray batch %(batch)s rolled back: %(reason)s")
# Cards left out of a batch at the start of its soak (unhealthy before it began).
SOAK_STARTED_LEFT_OUT = stored(
    "soak started on %(count)s node(s); %(left)s card(s) left out, unhealthy before the soak: %(cards)s"
)
LEFT_OUT = stored("card %(card)s left out of gray batch %(batch)s: %(why)s")
WAS_LOST = stored("lost before the soak started")
WAS_DEGRADED = stored("degraded before the soak started")
WAS_FAULT_CORDONED = stored("cordoned for a hardware fault before the soak started (%(reason)s)")
# What a rollback did with the nodes the batch's failure quarantined.
ROLLBACK_RELEASED = stored("%(reason)s (quarantine released on %(released)s)")
ROLLBACK_KEPT = stored("%(reason)s (still quarantined: %(kept)s: %(why)s)")
ROLLBACK_RELEASED_KEPT = stored(
    "%(reason)s (quarantine released on %(released)s; still quarantined: %(kept)s: %(why)s)"
)
STAYS_QUARANTINED = stored(
    "node %(node)s stays quarantined after the rollback of gray batch %(batch)s: %(why)s"
)
HELD_OTHER_REASON = stored("it is quarantined for another reason (%(reason)s)")
HELD_NODE_FAULT = stored("%(count)s separate card faults on the node, a node-level fault")
RELEASED_FROM_BATCH = stored("released from the page of gray batch %(batch)s: %(reason)s")
