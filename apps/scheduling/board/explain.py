"""The queue board's "why is my share X?": one project's figures as sentences, in the reader's language."""

from __future__ import annotations

from collections import Counter

from django.utils.translation import gettext, ngettext

from apps.core.formatting import format_number
from apps.core.stored_text import localize
from apps.quotas import admission
from apps.scheduling.board.classify import CATEGORIES, CATEGORY_HELP, CATEGORY_LABELS
from apps.scheduling.board.figures import Board, ProjectRow, factor_text


def _cu(value) -> str:
    return format_number(value, 2)


def _pct_text(value) -> str:
    return format_number(value, 1) if value is not None else "—"


def explain_share(board: Board, row: ProjectRow, *, position: int | None = None) -> list[str]:
    """The figures of ``row`` as sentences, in the reader's language: what it is entitled to, what
    it runs, why the two differ, what its waiting jobs wait for and where the queue puts them.
    ``position``: its first waiting job's place in the queue (as the reader may count it)."""
    name = row.project.slug
    out: list[str] = []
    _entitlement(out, board, row, name)
    _use(out, board, row)
    _why_use_differs(out, board, row, name)
    _waiting(out, row)
    _queue_order(out, board, row, position)
    _preempted(out, row)
    return out


def _entitlement(out: list[str], board: Board, row: ProjectRow, name: str) -> None:
    """1. What the project is entitled to."""
    if not board.quotas_on:
        out.append(
            gettext(
                "No quota is configured on the platform: no share is guaranteed to any project, and the "
                "queue is ordered by priority, then age."
            )
        )
    elif not row.has_quota:
        out.append(
            gettext(
                "%(project)s has no quota: nothing is guaranteed to it and nothing limits it; its fair "
                "share is 0 %% of the %(total)s CU guaranteed to projects."
            )
            % {"project": name, "total": _cu(board.total_guarantee)}
        )
    else:
        out.append(
            gettext(
                "%(project)s is guaranteed %(guarantee)s CU of the %(total)s CU guaranteed to all projects: "
                "its fair share is %(share)s %%."
            )
            % {
                "project": name,
                "guarantee": _cu(row.guarantee),
                "total": _cu(board.total_guarantee),
                "share": _pct_text(row.fair_share_pct),
            }
        )


def _use(out: list[str], board: Board, row: ProjectRow) -> None:
    """2. What it runs now."""
    if row.running_cu:
        out.append(
            gettext(
                "It runs %(running)s CU now, %(use)s %% of the %(total)s CU in use on the platform: "
                "%(within)s CU within its guarantee and %(borrowed)s CU borrowed."
            )
            % {
                "running": _cu(row.running_cu),
                "use": _pct_text(row.use_pct),
                "total": _cu(board.total_running),
                "within": _cu(row.within_cu),
                "borrowed": _cu(row.borrowed_cu),
            }
        )
    else:
        out.append(gettext("It runs nothing now: its share of use is 0 %."))


def _why_use_differs(out: list[str], board: Board, row: ProjectRow, name: str) -> None:
    """3. Why its use and its share differ: borrowed, idle, lent."""
    if row.borrowed_cu:
        lenders = ", ".join(
            gettext("%(cu)s CU from %(lender)s") % {"cu": _cu(f.amount), "lender": _flow_name(f.other)}
            for f in row.borrowed_from
        )
        out.append(
            gettext(
                "Its use is above its guarantee by %(borrowed)s CU borrowed from idle capacity "
                "(%(lenders)s); borrowed capacity is preemptible: it is reclaimed first when a lender "
                "needs its guarantee back."
            )
            % {"borrowed": _cu(row.borrowed_cu), "lenders": lenders or "—"}
        )
    if board.quotas_on and row.has_quota and row.idle_guarantee:
        out.append(
            gettext("%(idle)s CU of its guarantee is idle, so its use is below what it is guaranteed.")
            % {"idle": _cu(row.idle_guarantee)}
        )
    if row.lent_cu:
        borrowers = ", ".join(
            gettext("%(cu)s CU to %(borrower)s") % {"cu": _cu(f.amount), "borrower": _flow_name(f.other)}
            for f in row.lent_to
        )
        out.append(
            gettext(
                "%(lent)s CU of that idle guarantee is lent now (%(borrowers)s); it comes back when "
                "%(project)s needs it: the borrowers are reclaimed."
            )
            % {"lent": _cu(row.lent_cu), "borrowers": borrowers, "project": name}
        )


def _waiting(out: list[str], row: ProjectRow) -> None:
    """4. What its waiting jobs wait for."""
    if not row.queued_jobs:
        out.append(gettext("None of its jobs is waiting."))
    else:
        out.append(
            ngettext(
                "%(count)s of its jobs is waiting (%(cu)s CU requested).",
                "%(count)s of its jobs are waiting (%(cu)s CU requested).",
                row.queued_jobs,
            )
            % {"count": row.queued_jobs, "cu": _cu(row.queued_cu)}
        )
        for category in CATEGORIES:
            n = row.starved.get(category, 0)
            if not n:
                continue
            out.append(
                ngettext(
                    "%(count)s waits because of %(category)s: %(detail)s.",
                    "%(count)s wait because of %(category)s: %(detail)s.",
                    n,
                )
                % {
                    "count": n,
                    "category": CATEGORY_LABELS[category],
                    "detail": _detail_text(row.details.get(category)) or CATEGORY_HELP[category],
                }
            )
        if row.unexamined:
            out.append(
                ngettext(
                    "%(count)s has not been examined by the scheduler yet.",
                    "%(count)s have not been examined by the scheduler yet.",
                    row.unexamined,
                )
                % {"count": row.unexamined}
            )


def _queue_order(out: list[str], board: Board, row: ProjectRow, position: int | None) -> None:
    """5. Where the queue puts it: its fair-share factor, its first waiting job."""
    if board.quotas_on and row.factor is not None:
        out.append(
            gettext(
                "Its fair-share factor is %(factor)s: %(usage)s CU-hours of recent use (half-life "
                "%(hours)s h) ÷ its guarantee (at least 1 CU) ÷ its weight %(weight)s. Among jobs of "
                "equal priority the queue serves the lowest factor first."
            )
            % {
                "factor": factor_text(row.factor),
                "usage": format_number(row.decayed_usage, 2),
                "hours": format_number(board.half_life_hours, 0),
                "weight": format_number(row.weight),
            }
        )
        if board.staff and row.queued_jobs:
            # Staff only: members' queue figures count the jobs they can see (as their queue positions).
            lower, waiting = board.lower_factor_count(row)
            out.append(
                ngettext(
                    "%(lower)s of the %(waiting)s project with waiting jobs has a lower factor.",
                    "%(lower)s of the %(waiting)s projects with waiting jobs have a lower factor.",
                    waiting,
                )
                % {"lower": lower, "waiting": waiting}
            )
    if row.first_queued is not None and position is not None:
        text = (
            gettext("Its first waiting job, %(job)s, is at position %(position)s of the queue.")
            if board.staff
            else gettext(
                "Its first waiting job, %(job)s, is at position %(position)s of the queue (among the "
                "jobs you can see)."
            )
        )
        out.append(text % {"job": row.first_queued.name, "position": position})


def _preempted(out: list[str], row: ProjectRow) -> None:
    """6. Its preemptions of the last day."""
    if row.preempted:
        out.append(
            ngettext(
                "%(count)s of its jobs was preempted in the last 24 hours.",
                "%(count)s of its jobs were preempted in the last 24 hours.",
                row.preempted,
            )
            % {"count": row.preempted}
        )


def _flow_name(name: str) -> str:
    if name == admission.ELASTIC:
        return gettext("the elastic pool")
    return localize(name)


def _detail_text(causes: Counter | None) -> str:
    """The most common cause of a category, in the reader's language."""
    if not causes:
        return ""
    detail = causes.most_common(1)[0][0]
    return localize(detail) if isinstance(detail, str) else str(detail)
