"""Quota admission, borrowing, reclaim and fair share: pure Python (no Django import).

Vocabulary (after Kueue's ClusterQueue / cohort and Run:ai's departments ⊃ projects, in compute units):

* A **project row** guarantees ``guaranteed`` CU of one resource class (``any``, ``vendor:<v>``,
  ``model:<slug>``, ``pool:<id>``). Usage up to the guarantee is *guaranteed use*; usage beyond it is
  *borrowed use*, bounded by ``borrowing_limit`` (None: unbounded) and always preemptible.
* Idle guarantee is **lendable**: all of it while a lending window is open, else at most
  ``lending_limit`` (None: all of it).
* A **department row** (same class) bounds its projects' guarantees; the part of it not handed to a
  project (*unassigned*) is lendable to the department's own projects first. The department's
  ``borrowing_limit`` bounds what its projects borrow from outside the department, its
  ``lending_limit`` what the department lends out.
* Capacity no one is guaranteed (the fleet's CU in the class minus all guarantees) is the
  **elastic pool**, lendable to everyone (unknown capacity: unbounded, the engine bounds it).

A borrower is served from its own department first, then platform-wide, then from the elastic pool.
When a pool shrinks (a lender uses its guarantee again, a window closes), borrowed use that no pool
covers any more is a *shortfall*: reclaim removes borrowing jobs, lowest priority first, newest
first, until there is none.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from apps.core.stored_text import stored

ZERO = Decimal(0)
INF = Decimal("Infinity")
ELASTIC = "elastic pool"

# Why a job waits (its state reason), in the reader's language (apps.core.stored_text).
UNLIMITED = stored("unlimited")
NEEDS = stored("project %(project)s needs %(total)s CU, has %(free)s of its %(guaranteed)s CU guarantee left")
NEEDS_MEMORY = stored(
    "project %(project)s needs %(need)s MiB of device memory, has %(free)s MiB of its %(limit)s MiB limit left"
)
LIMIT_REACHED = stored("borrowing limit reached")
OVER_LIMIT = stored("over its borrowing limit")
BORROW_REFUSED = stored("%(who)s, %(reached)s (%(used)s of %(limit)s CU borrowed)")
DEPARTMENT_LIMIT = stored("%(who)s; department %(department)s reached its borrowing limit of %(limit)s CU")
NOT_LENDABLE = stored("%(who)s; only %(idle)s of the %(borrowed)s CU it must borrow is idle and lendable")
RECLAIMS_ITSELF = stored(
    "%(who)s; taking back its lent guarantee leaves the %(borrowed)s CU it must borrow uncovered"
)


def fmt(value: Decimal | None) -> str:
    """1.5000 → "1.5", None / ∞ → "unlimited"."""
    if value is None or value == INF:
        return UNLIMITED
    text = f"{value.normalize():f}"
    return text if "." not in text else text.rstrip("0").rstrip(".")


# --------------------------------------------------------------------------------------------------
# lending windows (minutes since local midnight)


def window_minutes(text: str) -> int:
    """ "22:00" → 1320; raises ValueError on anything else."""
    hours, _, minutes = text.partition(":")
    if not (hours.isdigit() and minutes.isdigit() and len(minutes) == 2 and len(hours) in (1, 2)):
        raise ValueError(f"{text!r} is not a time of day HH:MM")
    h, m = int(hours), int(minutes)
    if h == 24 and m == 0:
        return 1440
    if not (0 <= h < 24 and 0 <= m < 60):
        raise ValueError(f"{text!r} is not a time of day HH:MM")
    return h * 60 + m


def _segments(start: int, end: int) -> list[tuple[int, int]]:
    """A window as half-open segments of one day; one that ends before it starts wraps midnight."""
    if start == end:
        raise ValueError("a window must not be empty")
    if start < end:
        return [(start, end)]
    return [(start, 1440), (0, end)] if end else [(start, 1440)]


def windows_overlap(windows: Sequence[tuple[int, int]]) -> tuple[int, int] | None:
    """The indexes of the first two windows that overlap, or None."""
    segs = []
    for i, (start, end) in enumerate(windows):
        segs.extend((a, b, i) for a, b in _segments(start, end))
    segs.sort()
    for (_a1, b1, i1), (a2, _b2, i2) in zip(segs, segs[1:], strict=False):
        if a2 < b1 and i1 != i2:
            return (min(i1, i2), max(i1, i2))
    return None


def window_open(windows: Iterable[tuple[int, int]], minute: int) -> bool:
    return any(a <= minute < b for start, end in windows for a, b in _segments(start, end))


# --------------------------------------------------------------------------------------------------
# quota rows and holdings


@dataclass
class Row:
    """A project's quota for one resource class."""

    key: str
    project: str
    department: str
    resource_class: str
    guaranteed: Decimal
    borrowing_limit: Decimal | None = None
    lending_limit: Decimal | None = None
    lending_open: bool = False
    weight: Decimal = Decimal(1)
    memory_limit_mib: int | None = None

    def lendable(self, used: Decimal) -> Decimal:
        idle = max(self.guaranteed - used, ZERO)
        if self.lending_open or self.lending_limit is None:
            return idle
        return min(idle, self.lending_limit)


@dataclass
class DepartmentRow:
    department: str
    resource_class: str
    guaranteed: Decimal
    borrowing_limit: Decimal | None = None
    lending_limit: Decimal | None = None
    lending_open: bool = False


@dataclass
class Holding:
    """One admitted job's use of one project row."""

    job: str
    row: str
    guaranteed: Decimal
    borrowed: Decimal
    priority: int = 0
    started: float = 0.0  # a timestamp: newer jobs are reclaimed first
    memory_mib: int = 0


@dataclass
class Admission:
    admitted: bool
    borrowed: list[bool] = field(default_factory=list)  # per amount: granted beyond the guarantee
    reason: str = ""
    guaranteed_cu: Decimal = ZERO
    borrowed_cu: Decimal = ZERO
    limit: str = ""  # which limit refused: guarantee / borrowing / department / lendable / memory


@dataclass
class Flow:
    borrower: str  # project
    lender: str  # project, "<department> (unassigned)" or ELASTIC
    amount: Decimal


@dataclass
class Pools:
    flows: list[Flow]
    unmet: dict[str, Decimal]  # row key → borrowed use no pool covers


def split_guarantee(amounts: Sequence[Decimal], free: Decimal) -> list[bool]:
    """First fit into the remaining guarantee; True marks an amount that must be borrowed."""
    out = []
    for amount in amounts:
        if amount <= free:
            free -= amount
            out.append(False)
        else:
            out.append(True)
    return out


class Book:
    """The quota state of the platform: rows, department rows, class capacities and holdings.

    ``capacity`` maps a resource class to the CU the fleet has in it (absent or None: unknown, the
    elastic pool is then unbounded).
    """

    def __init__(
        self,
        rows: Iterable[Row] = (),
        departments: Iterable[DepartmentRow] = (),
        capacity: dict[str, Decimal | None] | None = None,
        holdings: Iterable[Holding] = (),
    ) -> None:
        self.rows: dict[str, Row] = {r.key: r for r in rows}
        self.departments: dict[tuple[str, str], DepartmentRow] = {
            (d.department, d.resource_class): d for d in departments
        }
        self.capacity = dict(capacity or {})
        self.g: dict[str, Decimal] = defaultdict(lambda: ZERO)
        self.b: dict[str, Decimal] = defaultdict(lambda: ZERO)
        self.mem: dict[str, int] = defaultdict(int)
        self.holdings: dict[str, list[Holding]] = defaultdict(list)  # job → holdings
        self.by_class: dict[str, list[Row]] = defaultdict(list)
        self._unmet: dict[str, Decimal] = {}  # class → uncovered borrowed use (cleared on any change)
        for row in self.rows.values():
            self.by_class[row.resource_class].append(row)
        for rows in self.by_class.values():
            rows.sort(key=lambda r: (r.department, r.project, r.key))
        for holding in holdings:
            self.hold(holding)

    # ---- bookkeeping ----------------------------------------------------------------------------

    def hold(self, holding: Holding) -> None:
        self._unmet.clear()
        self.holdings[holding.job].append(holding)
        self.g[holding.row] += holding.guaranteed
        self.b[holding.row] += holding.borrowed
        self.mem[holding.row] += holding.memory_mib

    def release(self, job: str) -> list[Holding]:
        gone = self.holdings.pop(job, [])
        if gone:
            self._unmet.clear()
        for h in gone:
            self.g[h.row] -= h.guaranteed
            self.b[h.row] -= h.borrowed
            self.mem[h.row] -= h.memory_mib
        return gone

    def used(self, key: str) -> tuple[Decimal, Decimal]:
        return self.g[key], self.b[key]

    # ---- pools ----------------------------------------------------------------------------------

    def pools(self, resource_class: str, extra: tuple[str, Decimal] | None = None) -> Pools:
        """Serve every borrower of a class from its department, then the platform, then the elastic
        pool; ``extra`` (row key, CU) is a hypothetical new borrow served last."""
        rows = self.by_class.get(resource_class, [])
        lenders: dict[str, list[list]] = defaultdict(list)  # department → [[name, row key, left]]
        guaranteed_by_dept: dict[str, Decimal] = defaultdict(lambda: ZERO)
        for row in rows:
            guaranteed_by_dept[row.department] += row.guaranteed
            left = row.lendable(self.g[row.key])
            if left > 0:
                lenders[row.department].append([row.project, row.key, left])
        total_guaranteed = ZERO
        out_cap: dict[str, Decimal] = {}
        for dept in {r.department for r in rows} | {d for d, c in self.departments if c == resource_class}:
            drow = self.departments.get((dept, resource_class))
            if drow is None:
                total_guaranteed += guaranteed_by_dept[dept]
                out_cap[dept] = INF
                continue
            total_guaranteed += max(drow.guaranteed, guaranteed_by_dept[dept])
            unassigned = max(drow.guaranteed - guaranteed_by_dept[dept], ZERO)
            if unassigned > 0:
                lenders[dept].append([f"{dept} (unassigned)", "", unassigned])
            out_cap[dept] = INF if drow.lending_open or drow.lending_limit is None else drow.lending_limit
        capacity = self.capacity.get(resource_class)
        elastic = INF if capacity is None else max(capacity - total_guaranteed, ZERO)

        borrowers = [(r, self.b[r.key]) for r in rows if self.b[r.key] > 0]
        if extra is not None:
            borrowers.append((self.rows[extra[0]], extra[1]))
        need = [[row, amount] for row, amount in borrowers]
        flows: list[Flow] = []
        # 1. inside the department (``start``: the first lender of each department not yet exhausted)
        start: dict[str, int] = defaultdict(int)
        for item in need:
            row = item[0]
            pool = lenders.get(row.department)
            if not pool:
                continue
            i = start[row.department]
            while i < len(pool) and item[1] > 0:
                lender = pool[i]
                if lender[2] > 0 and lender[1] != row.key:
                    take = min(item[1], lender[2])
                    lender[2] -= take
                    item[1] -= take
                    flows.append(Flow(row.project, lender[0], take))
                if lender[2] <= 0 and i == start[row.department]:
                    start[row.department] += 1
                i += 1
        # 2. platform-wide (bounded by each department's lending and borrowing limits), then elastic
        lent_out: dict[str, Decimal] = defaultdict(lambda: ZERO)
        borrowed_in: dict[str, Decimal] = defaultdict(lambda: ZERO)
        elastic_left = elastic
        unmet: dict[str, Decimal] = defaultdict(lambda: ZERO)
        order = sorted(lenders)
        for item in need:
            row = item[0]
            drow = self.departments.get((row.department, resource_class))
            dept_cap = INF if drow is None or drow.borrowing_limit is None else drow.borrowing_limit
            for dept in order:
                if item[1] <= 0 or dept_cap - borrowed_in[row.department] <= 0:
                    break
                if dept == row.department or out_cap[dept] - lent_out[dept] <= 0:
                    continue
                pool = lenders[dept]
                i = start[dept]
                while i < len(pool) and item[1] > 0:
                    room = min(dept_cap - borrowed_in[row.department], out_cap[dept] - lent_out[dept])
                    if room <= 0:
                        break
                    lender = pool[i]
                    if lender[2] > 0:
                        take = min(item[1], lender[2], room)
                        lender[2] -= take
                        item[1] -= take
                        lent_out[dept] += take
                        borrowed_in[row.department] += take
                        flows.append(Flow(row.project, lender[0], take))
                    if lender[2] <= 0 and i == start[dept]:
                        start[dept] += 1
                    i += 1
            room = min(elastic_left, dept_cap - borrowed_in[row.department])
            if item[1] > 0 and room > 0:
                take = min(item[1], room)
                item[1] -= take
                elastic_left -= take
                borrowed_in[row.department] += take
                flows.append(Flow(row.project, ELASTIC, take))
            if item[1] > 0:
                unmet[row.key] += item[1]
        return Pools(flows=flows, unmet=dict(unmet))

    def shortfall(self, resource_class: str) -> Decimal:
        """Borrowed use of the class that no pool covers (0 unless a pool shrank since)."""
        if resource_class not in self._unmet:
            self._unmet[resource_class] = sum(self.pools(resource_class).unmet.values(), ZERO)
        return self._unmet[resource_class]

    # ---- admission ------------------------------------------------------------------------------

    def admit(
        self, key: str, amounts: Sequence[Decimal], *, memory_mib: int = 0, commit: bool = False, **hold
    ) -> Admission:
        """May the project of row ``key`` take ``amounts`` (CU, one per allocation) now?

        Amounts fill the remaining guarantee first (not borrowed); the rest must be borrowed within
        the project's and its department's borrowing limits from idle lendable capacity.
        """
        row = self.rows[key]
        total = sum(amounts, ZERO)
        g_used, b_used = self.g[key], self.b[key]
        free = max(row.guaranteed - g_used, ZERO)
        flags = split_guarantee(amounts, free)
        borrowed = sum((a for a, f in zip(amounts, flags, strict=True) if f), ZERO)
        guaranteed = total - borrowed
        who = NEEDS % {
            "project": row.project,
            "total": fmt(total),
            "free": fmt(free),
            "guaranteed": fmt(row.guaranteed),
        }
        if row.memory_limit_mib is not None and self.mem[key] + memory_mib > row.memory_limit_mib:
            return Admission(
                False,
                flags,
                NEEDS_MEMORY
                % {
                    "project": row.project,
                    "need": memory_mib,
                    "free": max(row.memory_limit_mib - self.mem[key], 0),
                    "limit": row.memory_limit_mib,
                },
                guaranteed,
                borrowed,
                "memory",
            )
        if borrowed > 0:
            if row.borrowing_limit is not None and b_used + borrowed > row.borrowing_limit:
                reached = LIMIT_REACHED if b_used >= row.borrowing_limit else OVER_LIMIT
                return Admission(
                    False,
                    flags,
                    BORROW_REFUSED
                    % {
                        "who": who,
                        "reached": reached,
                        "used": fmt(b_used),
                        "limit": fmt(row.borrowing_limit),
                    },
                    guaranteed,
                    borrowed,
                    "borrowing",
                )
            # Served as if committed: the borrow must not leave any borrowed use uncovered.
            before = self.shortfall(row.resource_class)
            self.b[key] += borrowed
            try:
                pools = self.pools(row.resource_class)
            finally:
                self.b[key] -= borrowed
            missing = min(sum(pools.unmet.values(), ZERO) - before, borrowed)
            if missing > 0:
                drow = self.departments.get((row.department, row.resource_class))
                if drow is not None and drow.borrowing_limit is not None and self._dept_limited(pools, row):
                    msg = DEPARTMENT_LIMIT % {
                        "who": who,
                        "department": row.department,
                        "limit": fmt(drow.borrowing_limit),
                    }
                    limit = "department"
                else:
                    msg = NOT_LENDABLE % {
                        "who": who,
                        "idle": fmt(borrowed - missing),
                        "borrowed": fmt(borrowed),
                    }
                    limit = "lendable"
                return Admission(False, flags, msg, guaranteed, borrowed, limit)
            if guaranteed > 0 and self._reclaims_itself(key, guaranteed, borrowed, memory_mib, hold):
                # Its guaranteed part takes lent capacity back from borrowers, and the reclaim that
                # follows would pick this very job (the newest borrower) — never admit a borrow
                # that is taken away at once.
                return Admission(
                    False,
                    flags,
                    RECLAIMS_ITSELF % {"who": who, "borrowed": fmt(borrowed)},
                    guaranteed,
                    borrowed,
                    "lendable",
                )
        admission = Admission(True, flags, "", guaranteed, borrowed)
        if commit:
            self.hold(
                Holding(
                    job=hold.get("job", ""),
                    row=key,
                    guaranteed=guaranteed,
                    borrowed=borrowed,
                    priority=hold.get("priority", 0),
                    started=hold.get("started", 0.0),
                    memory_mib=memory_mib,
                )
            )
        return admission

    def _reclaims_itself(
        self, key: str, guaranteed: Decimal, borrowed: Decimal, memory_mib: int, hold: dict
    ) -> bool:
        trial = "\0trial"
        self.hold(
            Holding(
                job=trial,
                row=key,
                guaranteed=guaranteed,
                borrowed=borrowed,
                priority=hold.get("priority", 0),
                started=hold.get("started", float("inf")),
                memory_mib=memory_mib,
            )
        )
        try:
            return trial in self.reclaim_victims(self.rows[key].resource_class)
        finally:
            self.release(trial)

    def _dept_limited(self, pools: Pools, row: Row) -> bool:
        drow = self.departments[(row.department, row.resource_class)]
        dept_projects = {r.project for r in self.rows.values() if r.department == row.department}
        inside = {f"{row.department} (unassigned)"} | dept_projects
        outside = sum(
            (f.amount for f in pools.flows if f.borrower in dept_projects and f.lender not in inside), ZERO
        )
        return outside >= drow.borrowing_limit

    def ceiling(self, key: str) -> Decimal:
        """The most the row's project could ever hold: guarantee + borrowing limit (∞ if unbounded)."""
        row = self.rows[key]
        if row.borrowing_limit is None:
            return INF
        return row.guaranteed + row.borrowing_limit

    # ---- reclaim --------------------------------------------------------------------------------

    def reclaim_victims(self, resource_class: str, *, protect: Iterable[str] = ()) -> list[str]:
        """Borrowing jobs to remove (lowest priority, then newest) until no borrowed use is uncovered."""
        protected = set(protect)
        victims: list[str] = []
        class_rows = {r.key for r in self.by_class.get(resource_class, [])}
        removed: dict[str, list[Holding]] = {}
        while self.shortfall(resource_class) > 0:
            candidates = [
                hs
                for job, hs in self.holdings.items()
                if job not in protected and any(h.borrowed > 0 and h.row in class_rows for h in hs)
            ]
            if not candidates:
                break
            victim = min(candidates, key=lambda hs: reclaim_order(hs[0].priority, hs[0].started))[0].job
            removed[victim] = self.release(victim)
            victims.append(victim)
        for holdings in removed.values():  # leave the book as it was: the caller preempts
            for h in holdings:
                self.hold(h)
        return victims


def reclaim_order(priority: int, started: float) -> tuple[int, float]:
    """Sort key of preemption candidates: lowest priority first, then newest first."""
    return (priority, -started)


# --------------------------------------------------------------------------------------------------
# fair share


def fair_share(usage: float, guarantee: float, weight: float = 1.0) -> float:
    """Decayed usage relative to the guarantee (1 CU when there is none), divided by the weight."""
    return usage / max(guarantee, 1.0) / max(weight, 1e-9)


def queue_key(priority: int, share: float, created: float, pk: int) -> tuple:
    """Queue order: priority (high first), then fair share (low first), then age, then id."""
    return (-priority, share, created, pk)
