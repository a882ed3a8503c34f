"""The share-fit rule: how much of one card's compute its slices may hold (DESIGN's core invariant).

Compute is counted in milli of one card (:data:`WHOLE` = the whole card). On a card holding ``hard``
milli of hard-isolated slices and ``shared`` milli of shared slices, in a pool whose overcommit
factor is ``factor`` percent (100 … 150), the compute is not over-sold while::

    hard × factor + shared × 100 ≤ WHOLE × factor

so hard-isolated slices always fit in the real card (``hard ≤ WHOLE``: with ``factor ≥ 100`` the
rule implies it) and only shared slices can use the overcommit headroom. Memory is never overcommitted
and is not part of this rule.

This module is the rule's one home: the scheduler's snapshot (``model``), its tier-3 device choice
(``assign``), the fragmentation model (``frag``), the Allocation rows' re-check under row locks
(``apps.scheduling.allocations``) and the history sweep (``apps.scheduling.invariants``) all call these
functions (``tests/core/test_one_place.py`` keeps the formula here). Plain functions on ints, so the
engine's inner loops stay cheap.
"""

from __future__ import annotations

from decimal import Decimal

WHOLE = 1000  # compute milli of one whole card


def share_fits(hard: int, shared: int, factor: int) -> bool:
    """Whether a card holding ``hard`` + ``shared`` milli stays within ``factor`` % overcommit."""
    return hard * factor + shared * 100 <= WHOLE * factor


def free_shared(hard: int, shared: int, factor: int) -> int:
    """The most milli one more *shared* slice may take (negative when the card is already over).

    The largest ``c`` with ``share_fits(hard, shared + c, factor)``."""
    return ((WHOLE - hard) * factor) // 100 - shared


def free_hard(hard: int, shared: int, factor: int) -> int:
    """The most milli one more *hard-isolated* slice may take.

    The largest ``c`` with ``share_fits(hard + c, shared, factor)``."""
    return WHOLE - hard + (-shared * 100) // factor  # floor(-x) = -ceil(x)


def overcommit_pct(overcommit_factor) -> int:
    """A pool's overcommit factor (a decimal, 1.00 … 1.50; none or 0 read as 1) as the whole percent
    ``factor`` the functions above take."""
    return int(Decimal(overcommit_factor or 1) * 100)
