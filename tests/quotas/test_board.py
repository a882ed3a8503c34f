"""The queue board (issue 29 §7) at /quotas/board/: per project and department what is queued,
running, borrowed and lent, fair share against use, the starved jobs grouped by the reason the
scheduler wrote, the preemptions of the last day, and "why is my share X?" in words.

The scene runs the real scheduling cycle on the small fleet of tests/fixtures/inventory.py (8 × A100 at
1.0 CU on gpu-01/gpu-02, 8 × Ascend 910B3 at 0.8 CU on npu-01): vision is guaranteed 4 NVIDIA CU
(borrowing limit 1) and 0.8 Huawei CU (borrowing limit 0), lidar-secret 4 NVIDIA CU. vision runs
4 + 1 borrowed A100 and 1 Ascend; its second Ascend job is refused by its borrowing limit; then
lidar-secret's jobs take their guarantee back: the borrower is preempted ("reclaimed by project
lidar-secret") and the rest wait for free cards.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import re
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.core.formatting import format_datetime
from apps.jobs.models import Job, JobEvent
from apps.scheduling import board as queue_board
from apps.scheduling import engine_texts, lifecycle
from apps.scheduling import services as cycle
from apps.scheduling.engine import filters
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.quotas import cards, quota

URL = "/quotas/board/"


def build_scene(*, staff, alice, carol, vision, lidar, a100, ascend) -> None:
    quota(
        staff, project=vision, resource_class="vendor", vendor="nvidia", guaranteed_cu=4, borrowing_limit_cu=1
    )
    quota(
        staff,
        project=vision,
        resource_class="vendor",
        vendor="huawei",
        guaranteed_cu=0.8,
        borrowing_limit_cu=0,
    )
    quota(staff, project=lidar, resource_class="vendor", vendor="nvidia", guaranteed_cu=4)
    cards(vision, alice, a100, 7, prefix="v")
    cards(vision, alice, ascend, 2, prefix="npu")
    scheduling_cycle_run()
    cards(lidar, carol, a100, 5, prefix="l")
    scheduling_cycle_run()


@pytest.fixture
def scene(fleet, a100, ascend, research, make_user, make_project, staff_user):
    alice, carol = make_user("alice"), make_user("carol")
    vision = make_project("vision", department=research, members=[alice])
    lidar = make_project("lidar-secret", department=research, members=[carol])
    build_scene(
        staff=staff_user, alice=alice, carol=carol, vision=vision, lidar=lidar, a100=a100, ascend=ascend
    )
    return {"staff": staff_user, "alice": alice, "carol": carol, "vision": vision, "lidar": lidar}


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _row(page: str, attribute: str, key: str) -> dict[str, str]:
    found = re.search(rf'<tr {attribute}="{re.escape(key)}">(.*?)</tr>', page, re.DOTALL)
    assert found, f"no row {key}"
    return {
        col: _text(cell)
        for col, cell in re.findall(r'data-col="([\w-]+)">(.*?)</td>', found.group(1), re.DOTALL)
    }


def _starved_chips(page: str, slug: str) -> dict[str, str]:
    found = re.search(rf'<tr data-board-row="{re.escape(slug)}">(.*?)</tr>', page, re.DOTALL)
    return dict(re.findall(r'data-starved="(\w+)">[^<]*? (\d+)</span>', found.group(1)))


def _get(client, user, **params):
    client.force_login(user)
    return client.get(URL, params)


# --------------------------------------------------------------------------------------------------
# figures


@pytest.mark.django_db
@pytest.mark.usefixtures("english")
def test_the_board_shows_queued_running_borrowed_lent_and_shares(client, scene):
    response = _get(client, scene["staff"])
    assert response.status_code == 200
    page = response.content.decode()
    vision = _row(page, "data-board-row", "vision")
    assert vision == {
        "queued": "4",  # v4 (requeued after preemption), v5, v6 (no free A100), npu1 (borrowing limit)
        "queued-cu": "3.8",
        "running-cu": "5.8",  # 4 A100 + 1 Ascend within the guarantee, 1 A100 borrowed (still releasing)
        "guarantee": "4.8",
        "borrowed": "1",
        "lent": "0",
        "share": "54.5 %",  # 4.8 of 8.8 CU guaranteed
        "use": "65.9 %",  # 5.8 of 8.8 CU running
        "factor": vision["factor"],
        "starved": vision["starved"],
        "preempted": "1",
    }
    lidar = _row(page, "data-board-row", "lidar-secret")
    assert (lidar["queued"], lidar["running-cu"], lidar["guarantee"], lidar["borrowed"], lidar["lent"]) == (
        "2",
        "3",
        "4",
        "0",
        "1",  # its idle A100 guarantee is what vision borrows
    )
    assert (lidar["share"], lidar["use"], lidar["preempted"]) == ("45.5 %", "34.1 %", "0")
    assert _starved_chips(page, "vision") == {"quota": "1", "device": "2", "other": "1"}
    assert _starved_chips(page, "lidar-secret") == {"device": "2"}
    research = _row(page, "data-board-department", "research")
    assert (research["queued"], research["running-cu"], research["guarantee"]) == ("6", "8.8", "8.8")
    assert (research["borrowed"], research["lent"], research["starved"], research["preempted"]) == (
        "1",
        "1",
        "6",
        "1",
    )
    # The chart: both projects, fair share next to use, drawn by static/js/charts.js (no inline script).
    figure = json.loads(re.search(r'data-plotly-figure="board-share-chart">(.*?)</script>', page).group(1))
    shares, uses = figure["figure"]["data"]
    assert dict(zip(shares["y"], shares["x"], strict=True)) == pytest.approx(
        {"lidar-secret": 45.5, "vision": 54.5}
    )
    assert dict(zip(uses["y"], uses["x"], strict=True)) == pytest.approx(
        {"lidar-secret": 34.1, "vision": 65.9}
    )
    assert "<script>" not in page


@pytest.mark.django_db
@pytest.mark.usefixtures("english")
def test_the_why_panel_explains_a_projects_share_from_the_figures(client, scene):
    page = _get(client, scene["staff"], project="vision").content.decode()
    assert 'data-why-project="vision"' in page
    why = _text(re.search(r"<ol class=\"board-why\" data-why>(.*?)</ol>", page, re.DOTALL).group(1))
    for sentence in (
        "vision is guaranteed 4.8 CU of the 8.8 CU guaranteed to all projects: its fair share is 54.5 %.",
        "It runs 5.8 CU now, 65.9 % of the 8.8 CU in use on the platform: 4.8 CU within its guarantee and "
        "1 CU borrowed.",
        "Its use is above its guarantee by 1 CU borrowed from idle capacity (1 CU from lidar-secret)",
        "4 of its jobs are waiting (3.8 CU requested).",
        "1 waits because of quota: the borrowing limit.",
        "2 wait because of devices: insufficient free cards.",
        "1 waits because of other reasons: requeued after preemption, waits for the next cycle.",
        "Among jobs of equal priority the queue serves the lowest factor first.",
        "1 of its jobs was preempted in the last 24 hours.",
    ):
        assert sentence in why, (sentence, why)
    assert re.search(r"Its first waiting job, v4, is at position \d+ of the queue\.", why)
    lidar = _text(_get(client, scene["staff"], project="lidar-secret").content.decode())
    assert "1 CU of that idle guarantee is lent now (1 CU to vision)" in lidar
    assert "Why is the share of lidar-secret 34.1 %?" in lidar


@pytest.mark.django_db
def test_waiting_times_are_in_the_platform_zone(client, scene):
    job = Job.objects.get(project=scene["vision"], name="v5")
    page = _get(client, scene["staff"]).content.decode()
    local = format_datetime(job.state_changed_at)  # Asia/Shanghai (settings.TIME_ZONE)
    utc = timezone.localtime(job.state_changed_at, dt.UTC).strftime("%Y-%m-%d %H:%M")
    assert str(timezone.get_current_timezone()) == "Asia/Shanghai"
    row = re.search(rf'<tr data-starved-job="{job.pk}">(.*?)</tr>', page, re.DOTALL).group(1)
    assert local in row and local != utc


# --------------------------------------------------------------------------------------------------
# members


@pytest.mark.django_db
@pytest.mark.usefixtures("english")
def test_a_member_sees_only_their_projects(client, scene):
    response = _get(client, scene["alice"])
    assert response.status_code == 200
    page = response.content.decode()
    assert "lidar-secret" not in page and "carol" not in page
    assert 'data-board-row="vision"' in page
    # The department row adds up vision alone.
    research = _row(page, "data-board-department", "research")
    assert (research["queued"], research["running-cu"], research["guarantee"], research["lent"]) == (
        "4",
        "5.8",
        "4.8",
        "0",
    )
    text = _text(page)
    # Who vision borrows from, and who reclaimed its job, without the other project's name.
    assert "1 CU from another project" in text
    assert "preempted (attempt 0): reclaimed: a lender needs its guarantee back" in text
    assert 'data-starved-category="device" data-count="2"' in page  # lidar-secret's two are not counted
    assert re.search(
        r"Its first waiting job, v4, is at position \d+ of the queue \(among the jobs you can see\)", text
    )
    assert "projects with waiting jobs" not in text  # the platform-wide factor ranking is staff-only
    carol_page = _get(client, scene["carol"]).content.decode()
    assert 'data-board-row="lidar-secret"' in carol_page
    assert "vision" not in carol_page


@pytest.mark.django_db
def test_an_outsider_gets_an_empty_board(client, scene, make_user):
    page = _get(client, make_user("dave")).content.decode()
    assert "data-board-row" not in page
    assert "vision" not in page and "lidar-secret" not in page


# --------------------------------------------------------------------------------------------------
# bad input


@pytest.mark.django_db
@pytest.mark.usefixtures("english")
@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("project=nope", "No project “nope” among the projects you can see."),
        ("project=lidar-secret", "No project “lidar-secret” among the projects you can see."),
        ("project=" + "x" * 300, "among the projects you can see"),
        ("project=a%00b", "among the projects you can see"),
        ("project=vision&project=vision", "Give project once."),
        ("department=nowhere", "No department “nowhere” among the departments of your projects."),
        ("category=bogus", "Unknown reason category “bogus”: choose one of quota, device, topology"),
        ("category=%3Cscript%3E", "Unknown reason category"),
    ],
)
def test_bad_query_parameters_are_a_400_with_the_reason(client, scene, query, message):
    client.force_login(scene["alice"])
    response = client.get(f"{URL}?{query}")
    assert response.status_code == 400
    page = response.content.decode()
    assert "data-board-error" in page and message in html.unescape(page)
    assert "<script>" not in page
    assert 'data-board-row="vision"' in page  # the board below, unfiltered


@pytest.mark.django_db
def test_staff_may_choose_any_project_and_department(client, scene):
    assert _get(client, scene["staff"], project="lidar-secret").status_code == 200
    response = _get(client, scene["staff"], department="research", category="quota")
    assert response.status_code == 200
    page = response.content.decode()
    assert 'data-starved-category="quota"' in page and 'data-starved-category="device"' not in page


# --------------------------------------------------------------------------------------------------
# preemptions


@pytest.mark.django_db
def test_preemptions_are_counted_for_the_last_24_hours(scene):
    event = JobEvent.objects.get(kind=JobEvent.Kind.PREEMPTED)
    board = queue_board.queue_board(user=scene["staff"])
    assert [(p.job_name, p.project, p.cause) for p in board.preemptions] == [("v4", "vision", "lender")]
    assert board.row("vision").preempted == 1
    JobEvent.objects.filter(pk=event.pk).update(created_at=timezone.now() - dt.timedelta(hours=25))
    board = queue_board.queue_board(user=scene["staff"])
    assert board.preemptions == [] and board.row("vision").preempted == 0


# --------------------------------------------------------------------------------------------------
# the starved grouping


def test_every_reason_of_the_engine_has_a_category():
    constants = {
        value
        for name, value in vars(filters).items()
        if name.isupper() and isinstance(value, str) and not name.startswith("_")
    } | set(filters.STATUS_REASONS.values())
    assert constants - set(queue_board.REASON_CATEGORY) == set()
    assert set(queue_board.REASON_CATEGORY.values()) <= set(queue_board.CATEGORIES)


def test_the_sentences_around_the_reasons_are_the_engines():
    for sentence in (queue_board.GANG, queue_board.GANG_SHORT, queue_board.FALLBACK, queue_board.NO_CLUSTER):
        assert sentence in engine_texts.EXPLANATIONS


QUOTA_REFUSAL = cycle.QUOTA_REASON % {
    "reason": "project vision needs 1 CU, has 0 of its 4 CU guarantee left, borrowing limit reached "
    "(1 of 1 CU borrowed)"
}
DEVICES_BUSY = filters.explain_counts(
    3, {filters.CARDS: 2, filters.TAINT.format("accelerator=huawei-npu"): 1}
)
NO_SUCH_CARD = filters.explain_counts(
    3, {filters.NO_DEVICE.format("gpu of model H100 80GB SXM5"): 2, filters.STATUS_REASONS["quarantined"]: 1}
)


@pytest.mark.parametrize(
    ("reason", "category", "detail"),
    [
        (QUOTA_REFUSAL, "quota", "the borrowing limit"),
        (
            cycle.QUOTA_REASON
            % {
                "reason": "project vision needs 2 CU, has 0 of its 4 CU guarantee left; only 0 of the 2 CU it "
                "must borrow is idle and lendable"
            },
            "quota",
            "nothing idle to borrow",
        ),
        (DEVICES_BUSY, "device", filters.CARDS),
        (NO_SUCH_CARD, "vendor", "no gpu of model H100 80GB SXM5"),
        (filters.explain_counts(2, {filters.STATUS_REASONS["quarantined"]: 2}), "other", "node quarantined"),
        (
            filters.explain_counts(8, {filters.MIG_PLACEMENT.format("3g.40gb"): 6, filters.CPU: 2}),
            "device",
            "no free MIG placement for 3g.40gb",
        ),
        (filters.explain_counts(4, {filters.PRECHECK.format("needs cann >= 8.0"): 4}), "vendor", None),
        (f"gang of 4 replicas: only 2 fit. {DEVICES_BUSY}", "topology", None),
        (f"gang of 4 replicas: only 0 fit. {DEVICES_BUSY}", "device", filters.CARDS),
        (f"{DEVICES_BUSY} Fallback switch: {filters.NO_SWITCH}.", "topology", filters.NO_SWITCH),
        (
            "no single cluster can hold the whole job (a job never spans clusters): "
            f"prod: {NO_SUCH_CARD}; lab: {DEVICES_BUSY}",
            "device",
            filters.CARDS,
        ),
        (lifecycle.REQUEUED_AFTER_PREEMPTION % {"reason": cycle.RECLAIMED_FOR_LENDER}, "other", None),
        (cycle.NO_MODEL, "other", None),
        ("something nobody registered", "other", "something nobody registered"),
        # Cut at 500 characters (Job.state_reason): the reasons read before the cut still count.
        ((DEVICES_BUSY[:-20]), "device", filters.CARDS),
    ],
)
def test_a_pending_reason_falls_in_one_category(reason, category, detail):
    result = queue_board.classify(reason)
    assert result.category == category
    if detail is not None:
        assert str(result.detail) == detail


def test_a_job_not_examined_yet_is_not_starved():
    assert queue_board.classify("") is None and queue_board.classify(None) is None


@pytest.mark.django_db
def test_the_page_groups_starved_jobs_by_category(client, scene):
    gang = f"gang of 2 replicas: only 1 fit. {DEVICES_BUSY}"
    Job.objects.filter(project=scene["lidar"], name="l3").update(state_reason=gang)
    Job.objects.filter(project=scene["lidar"], name="l4").update(state_reason=NO_SUCH_CARD)
    board = queue_board.queue_board(user=scene["staff"])
    counts = {g.category: g.count for g in board.starved}
    assert counts == {"quota": 1, "device": 2, "topology": 1, "vendor": 1, "other": 1}
    assert {j.name for j in next(g for g in board.starved if g.category == "device").jobs} == {"v5", "v6"}
    assert board.row("lidar-secret").starved == {"topology": 1, "vendor": 1}
    assert next(g for g in board.starved if g.category == "quota").cu == Decimal("0.8")
    page = _get(client, scene["staff"]).content.decode()
    for category, n in counts.items():
        assert f'data-starved-category="{category}" data-count="{n}"' in page


def test_preemption_causes_and_redaction():
    by_lender = lifecycle.PREEMPTED_ATTEMPT % {
        "attempt": 0,
        "reason": cycle.RECLAIMED_BY % {"project": "nlp"},
    }
    assert queue_board.preemption_cause(by_lender) == ("lender", "nlp")
    assert queue_board.preemption_cause(
        lifecycle.PREEMPTED_ATTEMPT % {"attempt": 1, "reason": cycle.PREEMPTED_FOR % {"job": "vision/urgent"}}
    ) == ("priority", None)
    assert queue_board.preemption_cause("preempted by hand") == ("other", None)
    assert queue_board.redact(by_lender, {"vision"}) == (
        lifecycle.PREEMPTED_ATTEMPT % {"attempt": 0, "reason": cycle.RECLAIMED_FOR_LENDER}
    )
    assert queue_board.redact(by_lender, {"nlp"}) == by_lender


@pytest.mark.django_db
def test_the_quotas_page_links_the_board(client, scene):
    client.force_login(scene["alice"])
    page = client.get(reverse("quotas:overview")).content.decode()
    assert f'href="{URL}"' in page and 'data-nav="queue-board"' in page
    assert reverse("queueboard:board") == URL
