"""The queue board (issue 29 §7): per project and department, what is queued, running, borrowed and
lent, the fair share against use, who is starved and why, and the preemptions of the last day; and
for one project, "why is my share X?" answered in words from those same figures.

Read-only. It lives in scheduling, not in quotas, because it reads what the scheduling layer writes:
the engine's pending reasons (the constants of ``engine/filters.py``), the quota refusals of the cycle
(``persist.QUOTA_REASON``) and the preemption texts (``reclaim`` / ``lifecycle``), which sit above
quotas in the floor plan (tests/core/test_layers.py).

* ``classify`` — the categories of a pending reason, the cause of a preemption, ``redact``;
* ``figures`` — the board itself (``queue_board``) and its rows;
* ``explain`` — "why is my share X?" (``explain_share``).

Members see the rows of their own projects only; department rows sum only those (never another
project's figures); a reclaim "by project X" the reader cannot see reads as the same cause without
the name (``redact``), a lender or borrower they cannot see as "another project"; the platform-wide
ranking of fair-share factors is for staff only. Shares are of platform-wide totals (sums, no name).
"""

from __future__ import annotations

from apps.scheduling.board.classify import (
    CATEGORIES,
    CATEGORY_HELP,
    CATEGORY_LABELS,
    DEVICE,
    FALLBACK,
    GANG,
    GANG_SHORT,
    LENDER,
    NO_CLUSTER,
    OTHER,
    PRECEDENCE,
    PREEMPTION_CAUSES,
    PRIORITY,
    QUOTA,
    REASON_CATEGORY,
    TOPOLOGY,
    VENDOR,
    Classified,
    classify,
    counted_reason,
    preemption_cause,
    redact,
)
from apps.scheduling.board.explain import explain_share
from apps.scheduling.board.figures import (
    Board,
    DepartmentRow,
    Figures,
    Flow,
    Preemption,
    ProjectRow,
    StarvedGroup,
    StarvedJob,
    factor_text,
    queue_board,
)

__all__ = [
    "CATEGORIES",
    "CATEGORY_HELP",
    "CATEGORY_LABELS",
    "DEVICE",
    "FALLBACK",
    "GANG",
    "GANG_SHORT",
    "LENDER",
    "NO_CLUSTER",
    "OTHER",
    "PRECEDENCE",
    "PREEMPTION_CAUSES",
    "PRIORITY",
    "QUOTA",
    "REASON_CATEGORY",
    "TOPOLOGY",
    "VENDOR",
    "Board",
    "Classified",
    "DepartmentRow",
    "Figures",
    "Flow",
    "Preemption",
    "ProjectRow",
    "StarvedGroup",
    "StarvedJob",
    "classify",
    "counted_reason",
    "explain_share",
    "factor_text",
    "preemption_cause",
    "queue_board",
    "redact",
]
