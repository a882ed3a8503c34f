"""Issue 27 §8: a cancel reason that copies a system sentence was shown (and translated) as a system
message. A person's own words are never looked up as stored texts: a Chinese reader sees the typed
English sentence as typed, while a real system reason on the same page kind is translated."""

from __future__ import annotations

import html

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils import translation

from apps.core.stored_text import localize
from apps.inventory.models import Node
from apps.jobs.models import JobEvent, JobState
from apps.scheduling.faults import NODE_QUARANTINED, node_status_change
from apps.scheduling.lifecycle import job_cancel
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards

pytestmark = pytest.mark.django_db

# Word for word the sentence Suanchi itself stores when a node is quarantined.
SYSTEM_SENTENCE = NODE_QUARANTINED % {"node": "gpu-01", "cause": "PSU alarm"}


def _page(client, job) -> str:
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    response = client.get(reverse("jobs:detail", args=[job.pk]), HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert response.status_code == 200
    return html.unescape(response.content.decode())


def test_a_cancel_reason_that_copies_a_system_sentence_is_shown_as_typed(client, fleet, member_project, a100):
    user, project = member_project
    with translation.override("zh-hans"):
        translated = localize(SYSTEM_SENTENCE)
    assert translated != SYSTEM_SENTENCE  # the system sentence itself is shown in Chinese

    cancelled = submit_whole_cards(project, user, a100, name="typed")
    client.force_login(user)
    response = client.post(reverse("jobs:cancel", args=[cancelled.pk]), {"reason": SYSTEM_SENTENCE})
    assert response.status_code == 302
    cancelled.refresh_from_db()
    assert cancelled.state == JobState.CANCELLED and SYSTEM_SENTENCE in cancelled.state_reason
    body = _page(client, cancelled)
    assert SYSTEM_SENTENCE in body  # verbatim, in the reason and in the history
    assert translated not in body

    # A real system reason with the same sentence, on another job's page, is translated.
    moved = submit_whole_cards(project, user, a100, name="moved")
    assert moved.pk in scheduling_cycle_run().placed_job_ids
    node = Node.objects.get(allocations__job=moved)
    node_status_change(node=node, status=Node.Status.QUARANTINED, reason="PSU alarm", actor="ops")
    moved.refresh_from_db()
    system = NODE_QUARANTINED % {"node": node.name, "cause": "PSU alarm"}
    assert moved.state == JobState.PENDING and system in moved.state_reason
    with translation.override("zh-hans"):
        shown = localize(system)
    body = _page(client, moved)
    assert shown in body and system not in body


def test_typed_words_are_kept_in_every_language_and_nested_in_no_other_sentence(fleet, member_project, a100):
    user, project = member_project
    job = submit_whole_cards(project, user, a100, name="api")
    typed = "3 cards failed on this node; latest: cancelled by user"  # two system sentences in one
    job_cancel(job=job, actor=user, reason=typed)
    job.refresh_from_db()
    event = job.events.filter(kind=JobEvent.Kind.STATE, to_state=JobState.CANCELLED).get()
    for language in ("en", "zh-hans"):
        with translation.override(language):
            assert typed in localize(job.state_reason)
            assert typed in localize(event.message)
    # No reason typed: the system's own sentence, translated.
    other = submit_whole_cards(project, user, a100, name="bare")
    job_cancel(job=other, actor=user, reason="   ")
    other.refresh_from_db()
    with translation.override("zh-hans"):
        assert localize(other.state_reason) != other.state_reason == "cancelled by user"
