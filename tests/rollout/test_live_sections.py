"""A gray batch's page follows its batch without a reload (issue 29 §2): its facts, quarantined
nodes, audit trail and evaluations come again from ``rollout:batch-live`` as versioned sections,
for platform staff only."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from apps.rollout import services
from apps.rollout.views import BATCH_SECTIONS

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english")]

SECTION = re.compile(r'data-live-section="([a-z0-9-]+)" data-live-version="([0-9a-f]{16})"')


@pytest.fixture
def batch(fleet, criteria):
    return services.batch_create(
        actor="ops",
        name="fw canary",
        slug="fw-canary",
        kind="firmware",
        target_version="9",
        criteria=criteria,
        nodes=[fleet["gpu-02"]],
    )


def _names(batch):
    return ",".join(f"batch-{batch.pk}-{part}" for part in BATCH_SECTIONS)


def test_the_batch_page_sections_follow_a_soak_start(client, batch, staff_user, now):
    client.force_login(staff_user)
    page = client.get(reverse("rollout:batch-detail", args=[batch.pk])).content.decode()
    on_page = dict(SECTION.findall(page))
    assert {f"batch-{batch.pk}-{part}" for part in BATCH_SECTIONS} <= set(on_page)
    url = reverse("rollout:batch-live", args=[batch.pk])
    before = client.get(url, {"sections": _names(batch) + ",batch-999999-history"}).json()["sections"]
    assert set(before) == {f"batch-{batch.pk}-{part}" for part in BATCH_SECTIONS}  # another batch's: no
    assert all(before[name]["version"] == on_page[name] for name in before)
    history = f"batch-{batch.pk}-history"
    services.batch_soak_start(batch=batch, actor=staff_user, now=now, reason="firmware 9 on one node")
    after = client.get(url, {"sections": _names(batch)}).json()["sections"]
    assert after[history]["version"] != before[history]["version"]
    assert "firmware 9 on one node" in after[history]["html"]
    facts = f"batch-{batch.pk}-facts"
    assert after[facts]["version"] != before[facts]["version"]
    assert client.get(url, {"sections": "a b"}).status_code == 400
    assert "sections" not in client.get(url).json()  # the badge-only poll is unchanged


def test_members_get_no_batch_section(client, batch, member_project):
    client.force_login(member_project[0])
    response = client.get(reverse("rollout:batch-live", args=[batch.pk]), {"sections": _names(batch)})
    assert response.status_code == 403 and b"fw canary" not in response.content


def test_the_batch_list_rows_follow_their_stage(client, batch, staff_user, member_project, now):
    client.force_login(staff_user)
    listing = client.get(reverse("rollout:batch-list")).content.decode()
    row = f"batch-{batch.pk}-row"
    on_page = dict(SECTION.findall(listing))
    assert row in on_page and 'data-live-url="/rollout/batches/live/"' in listing
    url = reverse("rollout:batch-list-live")
    first = client.get(url, {"sections": f"{row},batch-999999-row,batch-{batch.pk}-facts"}).json()
    assert set(first["sections"]) == {row} and first["sections"][row]["version"] == on_page[row]
    services.batch_soak_start(batch=batch, actor=staff_user, now=now, reason="go")
    after = client.get(url, {"sections": row}).json()["sections"][row]
    assert after["version"] != on_page[row] and 'data-value="soaking"' in after["html"]
    assert client.get(url, {"sections": "<x>"}).status_code == 400
    client.force_login(member_project[0])
    assert client.get(url, {"sections": row}).status_code == 403


def test_a_refused_stage_change_keeps_its_error_out_of_the_live_sections(client, batch, staff_user):
    client.force_login(staff_user)
    response = client.post(reverse("rollout:batch-action", args=[batch.pk, "start-soak"]), {"reason": ""})
    assert response.status_code == 400
    body = response.content.decode()
    assert f'data-live-section="batch-{batch.pk}-actions"' not in body  # the error would be replaced
    assert f'data-live-section="batch-{batch.pk}-history"' in body
    assert 'id="reason-start_soak"' in body
