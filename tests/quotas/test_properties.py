"""Property tests of the pure admission book (no database): at every step guaranteed use ≤ guarantee,
borrowed use ≤ borrowing limit (project and department), no admitted borrow is left uncovered, and
reclaim always gives a lender its guarantee back."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from apps.quotas.admission import ZERO, Book, DepartmentRow, Row, reclaim_order, split_guarantee

amounts = st.sampled_from([Decimal("0.5"), Decimal("0.8"), Decimal("1"), Decimal("1.6"), Decimal("2")])
maybe_limit = st.one_of(st.none(), st.integers(0, 6).map(Decimal))


@st.composite
def books(draw):
    rows = []
    for i in range(draw(st.integers(2, 5))):
        guaranteed = Decimal(draw(st.integers(0, 6)))
        lending = draw(maybe_limit)
        rows.append(
            Row(
                key=str(i),
                project=f"p{i}",
                department=draw(st.sampled_from(["d1", "d2"])),
                resource_class="any",
                guaranteed=guaranteed,
                borrowing_limit=draw(maybe_limit),
                lending_limit=None if lending is None else min(lending, guaranteed),
                lending_open=draw(st.booleans()),
            )
        )
    departments = []
    for dept in ("d1", "d2"):
        if draw(st.booleans()):
            total = sum((r.guaranteed for r in rows if r.department == dept), ZERO)
            departments.append(
                DepartmentRow(
                    dept,
                    "any",
                    total + Decimal(draw(st.integers(0, 3))),
                    borrowing_limit=draw(maybe_limit),
                    lending_limit=draw(maybe_limit),
                )
            )
    capacity = draw(st.one_of(st.none(), st.integers(0, 40).map(Decimal)))
    return Book(rows, departments, {"any": capacity})


def check_limits(book: Book) -> None:
    for key, row in book.rows.items():
        g, b = book.used(key)
        assert ZERO <= g <= row.guaranteed
        if row.borrowing_limit is not None:
            assert b <= row.borrowing_limit
    pools = book.pools("any")
    for (dept, _cls), drow in book.departments.items():
        if drow.borrowing_limit is None:
            continue
        inside = {r.project for r in book.rows.values() if r.department == dept} | {f"{dept} (unassigned)"}
        outside = sum(
            (f.amount for f in pools.flows if f.borrower in inside and f.lender not in inside), ZERO
        )
        assert outside <= drow.borrowing_limit


operation = st.one_of(
    st.tuples(
        st.just("submit"), st.integers(0, 4), st.lists(amounts, min_size=1, max_size=3), st.integers(0, 3)
    ),
    st.tuples(st.just("finish"), st.integers(0, 200), st.just([]), st.just(0)),
    st.tuples(st.just("lender"), st.integers(0, 4), st.just([]), st.just(0)),
)


@settings(max_examples=300, deadline=None)
@given(book=books(), ops=st.lists(operation, max_size=40))
def test_limits_hold_at_every_step_and_reclaim_returns_the_guarantee(book, ops):
    clock = 0.0
    for n, (kind, index, values, priority) in enumerate(ops):
        clock += 1
        keys = sorted(book.rows)
        key = keys[index % len(keys)]
        row = book.rows[key]
        if kind == "submit":
            before = book.shortfall("any")
            decision = book.admit(key, values, commit=True, job=f"j{n}", priority=priority, started=clock)
            if decision.admitted:
                # Guarantee first: nothing is borrowed while an amount still fits the guarantee.
                assert decision.borrowed == split_guarantee(
                    values, row.guaranteed - (book.g[key] - decision.guaranteed_cu)
                )
                if decision.borrowed_cu > 0 and decision.guaranteed_cu == 0:
                    # A borrow is only admitted when idle lendable capacity covers all of it.
                    assert book.shortfall("any") <= before
                else:
                    # Use within the guarantee may shrink what others borrow from (also when the rest
                    # of the job borrows): reclaim the borrowers (never this job), and then every
                    # borrowed CU — this job's included — is covered again.
                    victims = book.reclaim_victims("any")
                    assert f"j{n}" not in victims
                    for victim in victims:
                        book.release(victim)
                    assert book.shortfall("any") == 0
        elif kind == "finish" and book.holdings:
            jobs = sorted(book.holdings)
            book.release(jobs[index % len(jobs)])
        elif kind == "lender":
            free = row.guaranteed - book.g[key]
            if free <= 0:
                continue
            # The lender wants all of its idle guarantee back: it is admitted, within the guarantee.
            decision = book.admit(key, [free], commit=True, job=f"lender{n}", priority=0, started=clock)
            assert decision.admitted and decision.borrowed_cu == 0
            victims = book.reclaim_victims("any")
            assert f"lender{n}" not in victims
            # Victims are borrowers, in reclaim order (lowest priority, then newest).
            keys_of = [
                reclaim_order(book.holdings[v][0].priority, book.holdings[v][0].started) for v in victims
            ]
            assert all(any(h.borrowed > 0 for h in book.holdings[v]) for v in victims)
            assert keys_of == sorted(keys_of)
            for victim in victims:
                book.release(victim)
            assert book.shortfall("any") == 0
            # The lender holds its whole idle guarantee again (a reclaimed job of its own project that
            # was borrowing on top of its guarantee may have gone with the borrowers).
            [held] = book.holdings[f"lender{n}"]
            assert held.guaranteed == free and held.borrowed == 0
        check_limits(book)
