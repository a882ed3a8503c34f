"""Issue 21: the job table — "my jobs", column sorting, a CSV export people can open, bulk cancel with a
reason, and the CU a job holds now (a scaled job shows what its cards cost, not its submission)."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest

from apps.accounts.models import Membership
from apps.jobs.models import Allocation, Job, JobEvent
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english")]


def _submit(project, user, a100, name, count=1):
    return submit_whole_cards(project, user, a100, count, name=name, image="x:1")


@pytest.fixture
def two_users(fleet, member_project, make_user, a100):
    alice, project = member_project
    bob = make_user("bob")
    Membership.objects.create(user=bob, project=project, role="member")
    jobs = [_submit(project, alice, a100, "a-first"), _submit(project, bob, a100, "b-second", count=2)]
    return alice, bob, project, jobs


def test_my_jobs_and_sorting(client, two_users):
    alice, _bob, _project, _jobs = two_users
    client.force_login(alice)
    mine = client.get("/jobs/", {"mine": "on"}).context["jobs"]
    assert [j.name for j in mine] == ["a-first"]
    by_name = [j.name for j in client.get("/jobs/", {"sort": "name"}).context["jobs"]]
    assert by_name == ["a-first", "b-second"]
    desc = [j.name for j in client.get("/jobs/", {"sort": "-name"}).context["jobs"]]
    assert desc == ["b-second", "a-first"]
    # An unknown sort key is ignored, not a 500.
    assert client.get("/jobs/", {"sort": "password"}).status_code == 200


def test_the_csv_export_keeps_the_filters_and_neutralises_formulas(client, two_users, a100):
    alice, _bob, project, _jobs = two_users
    _submit(project, alice, a100, "=HYPERLINK(1)")
    client.force_login(alice)
    response = client.get("/jobs/", {"mine": "on", "format": "csv"})
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0][:3] == ["id", "name", "project"]
    names = {r[1] for r in rows[1:]}
    assert names == {"a-first", "'=HYPERLINK(1)"}
    assert all(r[9].endswith("+08:00") for r in rows[1:])  # platform time zone, with its offset


def test_bulk_cancel_needs_a_reason_and_cancels_only_what_the_user_may(
    client, two_users, make_user, make_project, a100
):
    alice, bob, project, jobs = two_users
    other_user = make_user("carl")
    other = _submit(make_project("other", members=[other_user]), other_user, a100, "not-yours")
    client.force_login(alice)
    ids = [j.pk for j in jobs] + [other.pk]
    client.post("/jobs/cancel/", {"ids": ids})
    assert not Job.objects.filter(state="cancelled").exists()  # no reason given
    response = client.post("/jobs/cancel/", {"ids": ids, "reason": "wrong image"}, follow=True)
    assert set(Job.objects.filter(state="cancelled").values_list("name", flat=True)) == {
        "a-first",
        "b-second",
    }
    assert Job.objects.get(pk=other.pk).state != "cancelled"
    texts = [str(m) for m in response.context["messages"]]
    assert any("2 job(s) cancelled" in t for t in texts) and any("not visible" in t for t in texts)
    assert JobEvent.objects.filter(job=jobs[0], message__icontains="wrong image").exists()


def test_the_list_shows_the_cu_a_job_holds_now(client, two_users):
    alice, _bob, _project, jobs = two_users
    scheduling_cycle_run(actor="test")
    placed = [j for j in jobs if Allocation.objects.filter(job=j, released_at__isnull=True).exists()]
    assert placed
    job = placed[0]
    held = sum(a.compute_units for a in Allocation.objects.filter(job=job, released_at__isnull=True))
    Job.objects.filter(pk=job.pk).update(requested_cu=Decimal("99"))  # stale figure from submission
    client.force_login(alice)
    row = next(j for j in client.get("/jobs/").context["jobs"] if j.pk == job.pk)
    assert row.held_cu == held
    assert "held now by its cards" in client.get("/jobs/").content.decode()
