"""Server-rendered job pages, mounted at /jobs/ under the URL namespace "jobs" (``apps.jobs.urls``).

They sit with the job models but show what scheduling knows (allocations, decision traces, "why
pending?", the live placement preview): as web modules they import the layers above the jobs app
directly — the lifecycle, telemetry's curves, billing's cost per hour.

* ``listing`` — the list, its CSV export and bulk cancel;
* ``submit`` — the submit form and its live placement preview;
* ``detail`` — the job page, its live sections, the pod panel, cancel and the fault runbook;
* ``live`` — the JSON the live pages poll (states and re-rendered sections);
* ``common`` — badge tones, who may act, card labels and scores.

Every read goes through ``apps.jobs.selectors.job_list`` (scoped by membership); another project's
job is a 404, never a 403. Writes go through the lifecycle (``apps.scheduling.lifecycle``: submit,
cancel); their ApplicationErrors become form errors or messages, never a 500.
"""

from apps.jobs.views.common import STATE_TONES, score_text
from apps.jobs.views.detail import JOB_SECTIONS, job_cancel, job_detail, job_pod, job_sections, runbook
from apps.jobs.views.listing import job_bulk_cancel, job_list, job_rows
from apps.jobs.views.submit import job_submit, job_submit_preview

__all__ = [
    "JOB_SECTIONS",
    "STATE_TONES",
    "job_bulk_cancel",
    "job_cancel",
    "job_detail",
    "job_list",
    "job_pod",
    "job_rows",
    "job_sections",
    "job_submit",
    "job_submit_preview",
    "runbook",
    "score_text",
]
