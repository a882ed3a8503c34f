"""Quota admission throughput: 10,000 jobs over 50 projects in 5 departments.

Prints admission decisions per second of ``apps.quotas.admission.Book`` (usage kept incrementally) and,
in the same run, of a naive baseline that rebuilds the usage from every running job for each decision
(what a stateless "sum the allocations, then decide" check does). Both must take the same decisions.

    .venv/bin/python benchmarks/quota_admission.py [--jobs 10000] [--seed 7]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from apps.quotas.admission import Book, DepartmentRow, Holding, Row  # noqa: E402  (pure module)

DEPARTMENTS = 5
PROJECTS_PER_DEPARTMENT = 10
AMOUNTS = [Decimal("0.25"), Decimal("0.5"), Decimal("0.8"), Decimal("1"), Decimal("1.6"), Decimal("2")]


def setup(rng: random.Random):
    rows, departments = [], []
    for d in range(DEPARTMENTS):
        dept = f"d{d}"
        total = Decimal(0)
        for p in range(PROJECTS_PER_DEPARTMENT):
            guaranteed = Decimal(rng.randint(2, 12))
            total += guaranteed
            rows.append(
                Row(
                    key=f"{d}-{p}",
                    project=f"p{d}-{p}",
                    department=dept,
                    resource_class="any",
                    guaranteed=guaranteed,
                    borrowing_limit=rng.choice([None, Decimal(2), Decimal(4), Decimal(8)]),
                    lending_limit=rng.choice([None, None, guaranteed / 2]),
                    lending_open=rng.random() < 0.2,
                )
            )
        departments.append(
            DepartmentRow(
                dept, "any", total + Decimal(rng.randint(0, 10)), borrowing_limit=Decimal(rng.randint(5, 30))
            )
        )
    guaranteed = sum((dr.guaranteed for dr in departments), Decimal(0))
    capacity = {"any": guaranteed * Decimal("1.25")}
    return rows, departments, capacity


def workload(rng: random.Random, rows: list[Row], jobs: int):
    """Arrivals: (job id, row key, amounts, priority, duration in arrivals)."""
    out = []
    for i in range(jobs):
        row = rng.choice(rows)
        amounts = [rng.choice(AMOUNTS) for _ in range(rng.choice([1, 1, 1, 2, 4]))]
        out.append((f"j{i}", row.key, amounts, rng.choice([100, 500, 500, 800]), rng.randint(50, 400)))
    return out


def run(rows, departments, capacity, arrivals, *, naive: bool):
    book = Book(rows, departments, capacity)
    running: dict[str, tuple[int, list[Holding]]] = {}
    decisions = []
    started = time.perf_counter()
    for t, (job, key, amounts, priority, duration) in enumerate(arrivals):
        for done in [j for j, (end, _h) in running.items() if end <= t]:
            running.pop(done)
            if not naive:
                book.release(done)
        if naive:  # rebuild the usage from every running job, then decide
            book = Book(rows, departments, capacity, [h for _e, hs in running.values() for h in hs])
        decision = book.admit(key, amounts, commit=True, job=job, priority=priority, started=float(t))
        decisions.append(decision.admitted)
        if decision.admitted:
            running[job] = (t + duration, list(book.holdings[job]))
    return time.perf_counter() - started, decisions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rows, departments, capacity = setup(rng)
    arrivals = workload(rng, rows, args.jobs)
    fast_s, fast = run(rows, departments, capacity, arrivals, naive=False)
    naive_s, naive = run(rows, departments, capacity, arrivals, naive=True)
    assert fast == naive, "the incremental book and the naive rebuild disagree"
    admitted = sum(fast)
    print(f"quota admission: {args.jobs} jobs, {len(rows)} projects, {DEPARTMENTS} departments")
    print(f"  admitted {admitted}, pending {args.jobs - admitted} (same decisions in both runs)")
    print(f"  incremental book : {args.jobs / fast_s:10.0f} decisions/s  ({fast_s:.2f} s)")
    print(f"  naive rebuild    : {args.jobs / naive_s:10.0f} decisions/s  ({naive_s:.2f} s)")
    print(f"  speed-up         : {naive_s / fast_s:10.1f} ×")


if __name__ == "__main__":
    main()
