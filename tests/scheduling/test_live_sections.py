"""Live sections (issue 29 §2): the job page's why pending / ETA / allocations / timeline, the job
list's rows and the fleet's sections come again from ``jobs:live`` / ``inventory:fleet-live``, each
with a version, for exactly the jobs the reader may see."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from apps.clusters.connections import backend_for
from apps.clusters.pusher import push_job_run
from apps.core.live import section_version
from apps.inventory.models import Cluster, Device
from apps.jobs.models import Allocation, JobState
from apps.jobs.views import JOB_SECTIONS
from apps.scheduling import lifecycle
from apps.scheduling.reconcile import reconcile_cluster
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english")]

SECTION = re.compile(r'data-live-section="([a-z0-9-]+)" data-live-version="([0-9a-f]{16})"')


def _submit(project, user, a100, name, count=1, **fields):
    return submit_whole_cards(project, user, a100, count, name=name, image="pytorch:2.3", **fields)


def _run(job):
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED, job.state_reason
    assert push_job_run(job_id=job.pk)["failed"] == 0  # its Job is on the simulated cluster
    assert lifecycle.job_to_running(job=job, actor="reconciler")
    job.refresh_from_db()
    return job


@pytest.fixture
def blocked(fleet, member_project, a100):
    """All 8 A100 busy with alice's two jobs (the blocker ends in 14 min, the other in 60 min);
    ``waiting`` asks for 4 cards and is pending behind the blocker."""
    alice, vision = member_project
    blocker = _submit(vision, alice, a100, "blocker", count=4, expected_duration_s=14 * 60)
    other = _submit(vision, alice, a100, "other", count=4, expected_duration_s=60 * 60)
    scheduling_cycle_run()
    blocker, other = _run(blocker), _run(other)
    waiting = _submit(vision, alice, a100, "waiting", count=4)
    scheduling_cycle_run()
    waiting.refresh_from_db()
    assert waiting.state == JobState.PENDING
    return {"alice": alice, "vision": vision, "blocker": blocker, "other": other, "waiting": waiting}


def release(job):
    """What follows a cancel on the cluster: the deletes are sent, the pods' grace period runs out
    (30 s), a reconcile pass confirms that they are gone and releases the cards."""
    assert push_job_run(job_id=job.pk)["failed"] == 0
    cluster = Cluster.objects.get(slug="prod")
    backend_for(cluster).advance(45)
    reconcile_cluster(cluster=cluster)
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()


def _live(client, job, parts=tuple(JOB_SECTIONS)):
    names = ",".join(f"job-{job.pk}-{part}" for part in parts)
    response = client.get(reverse("jobs:live"), {"ids": str(job.pk), "sections": names})
    assert response.status_code == 200, response.content
    return {name.rsplit("-", 1)[1]: s for name, s in response.json()["sections"].items()}


def test_the_page_carries_each_section_at_the_version_the_endpoint_answers(client, blocked):
    waiting = blocked["waiting"]
    client.force_login(blocked["alice"])
    page = client.get(reverse("jobs:detail", args=[waiting.pk])).content.decode()
    on_page = dict(SECTION.findall(page))
    expected = {f"job-{waiting.pk}-{part}" for part in JOB_SECTIONS}
    assert expected <= set(on_page)
    answered = _live(client, waiting)
    assert set(answered) == set(JOB_SECTIONS)
    for part, section in answered.items():
        # Same partial, same data: same version (the CSRF token of the cancel form does not count).
        assert on_page[f"job-{waiting.pk}-{part}"] == section["version"], part
        assert section["version"] == section_version(section["html"])
    assert "csrfmiddlewaretoken" in answered["actions"]["html"]
    assert "Why pending?" in answered["why"]["html"] and "blocker" in answered["why"]["html"]


def test_a_blockers_cancel_reaches_the_waiting_jobs_sections(client, blocked):
    waiting, blocker = blocked["waiting"], blocked["blocker"]
    client.force_login(blocked["alice"])
    before = _live(client, waiting)
    eta_link = f'href="/jobs/{blocker.pk}/"'
    assert eta_link in before["why"]["html"]  # "after job blocker finishes … See that job"

    lifecycle.job_cancel(job=blocker, actor=blocked["alice"], reason="make room")
    after_cancel = _live(client, waiting)
    # The ETA no longer names the cancelled job: the cards it held are free now.
    assert after_cancel["why"]["version"] != before["why"]["version"]
    assert eta_link not in after_cancel["why"]["html"] and "blocker" not in after_cancel["why"]["html"]
    assert after_cancel["allocations"]["version"] == before["allocations"]["version"]

    release(blocker)
    scheduling_cycle_run()  # one cycle places the waiting job on the freed cards
    placed = _live(client, waiting)
    assert "Why this card?" in placed["why"]["html"] and "Why pending?" not in placed["why"]["html"]
    assert placed["allocations"]["version"] != before["allocations"]["version"]
    assert placed["allocations"]["html"].count('<span class="badge badge--ok">active</span>') == 4
    assert "4 active" in placed["allocations"]["html"]
    assert placed["timeline"]["version"] != before["timeline"]["version"]
    assert 'data-value="scheduled"' in placed["timeline"]["html"]
    assert placed["facts"]["html"].count("CU") >= 1


def test_a_member_gets_no_section_of_another_projects_job(client, blocked, a100, make_user, make_project):
    bob = make_user("bob")
    theirs = _submit(make_project("nlp", members=[bob]), bob, a100, "theirs")
    client.force_login(blocked["alice"])
    mine = blocked["waiting"]
    names = [
        f"job-{theirs.pk}-why",
        f"job-{theirs.pk}-row",
        f"job-{theirs.pk}-timeline",
        f"job-{mine.pk}-why",
    ]
    data = client.get(
        reverse("jobs:live"), {"ids": f"{theirs.pk},{mine.pk}", "sections": ",".join(names)}
    ).json()
    assert set(data["sections"]) == {f"job-{mine.pk}-why"}
    assert set(data["fields"]) == {f"job-{mine.pk}-state"}
    assert client.get(reverse("jobs:detail", args=[theirs.pk])).status_code == 404
    # bob, of course, reads his own.
    client.force_login(bob)
    data = client.get(reverse("jobs:live"), {"sections": f"job-{theirs.pk}-why,job-{mine.pk}-why"}).json()
    assert set(data["sections"]) == {f"job-{theirs.pk}-why"}


def test_bad_section_names_are_a_400_and_unknown_parts_are_left_out(client, blocked):
    client.force_login(blocked["alice"])
    url = reverse("jobs:live")
    pk = blocked["waiting"].pk
    for bad in ("<script>", "job-1-why,../x", "JOB-1-WHY", ",".join(f"s{i}" for i in range(201))):
        response = client.get(url, {"sections": bad})
        assert response.status_code == 400, bad
        assert "sections must be section names" in response.json()["message"]
    data = client.get(url, {"sections": f"job-{pk}-nosuchpart,job-{pk}-why"}).json()
    assert set(data["sections"]) == {f"job-{pk}-why"}
    assert "sections" not in client.get(url, {"ids": str(pk)}).json()  # the badge-only poll is unchanged


def test_job_list_rows_follow_the_queue_and_escape_names(client, blocked, a100):
    alice, vision, waiting = blocked["alice"], blocked["vision"], blocked["waiting"]
    odd = _submit(vision, alice, a100, "<b>odd</b>")
    client.force_login(alice)
    listing = client.get(reverse("jobs:list")).content.decode()
    on_page = dict(SECTION.findall(listing))
    row = f"job-{waiting.pk}-row"
    assert row in on_page and f"job-{odd.pk}-row" in on_page
    url = reverse("jobs:live")
    data = client.get(url, {"ids": f"{waiting.pk},{odd.pk}", "sections": f"{row},job-{odd.pk}-row"}).json()
    assert data["sections"][row]["version"] == on_page[row]
    assert "#1" in data["sections"][row]["html"] and 'name="ids"' in data["sections"][row]["html"]
    odd_html = data["sections"][f"job-{odd.pk}-row"]["html"]
    assert "&lt;b&gt;odd&lt;/b&gt;" in odd_html and "<b>odd</b>" not in odd_html
    lifecycle.job_cancel(job=waiting, actor=alice)
    after = client.get(url, {"sections": row}).json()["sections"][row]
    assert after["version"] != on_page[row]
    assert 'name="ids"' not in after["html"] and "#1" not in after["html"]  # nothing left to cancel


def test_fleet_sections_follow_the_ledger_within_the_readers_scope(client, fleet, staff_user, make_user):
    client.force_login(staff_user)
    page = client.get(reverse("inventory:fleet")).content.decode()
    on_page = dict(SECTION.findall(page))
    assert {"fleet-vendors", "fleet-models", "fleet-events"} <= set(on_page)
    url = reverse("inventory:fleet-live")
    names = "fleet-vendors,fleet-models,fleet-events,fleet-nosuch"
    before = client.get(url, {"sections": names}).json()["sections"]
    assert set(before) == {"fleet-vendors", "fleet-models", "fleet-events"}
    assert all(before[name]["version"] == on_page[name] for name in before)
    card = Device.objects.filter(node__name="gpu-01").order_by("index").first()
    Device.objects.filter(pk=card.pk).update(health=Device.Health.DEGRADED)
    after = client.get(url, {"sections": names}).json()["sections"]
    assert after["fleet-models"]["version"] != before["fleet-models"]["version"]
    assert 'class="num text-warn">1</td>' in after["fleet-models"]["html"]
    assert after["fleet-vendors"] == before["fleet-vendors"]
    assert client.get(url, {"sections": "Fleet Models"}).status_code == 400
    # Someone without projects sees no card of the fleet in its sections either.
    client.force_login(make_user("nobody"))
    alone = client.get(url, {"sections": names}).json()["sections"]
    assert "text-warn" not in alone["fleet-models"]["html"] and "gpu-01" not in alone["fleet-events"]["html"]
