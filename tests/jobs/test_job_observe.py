"""The job page shows what a user needs to follow a running job (issue 21): per-card curves over the
job's life (utilization, memory, temperature, power; "not reported by <exporter>" instead of a zero),
and — fetched lazily from /jobs/<id>/pod/ — the pods' events and a log tail, from the simulated
cluster or from Kubernetes through the official client (the fake API server), with a clear message
when the cluster does not answer."""

from __future__ import annotations

import datetime as dt
import json
import re
import time

import pytest
from django.utils import timezone

from apps.clusters.connections import backend_for
from apps.clusters.pod_report import job_pod_report
from apps.clusters.pusher import push_job_run
from apps.inventory.models import Cluster
from apps.jobs.models import Allocation, JobState
from apps.scheduling.services import scheduling_cycle_run
from apps.telemetry.models import DeviceRollup
from tests.fixtures.accounts import set_role
from tests.fixtures.jobs import submit_whole_cards
from tests.kube.helpers import fake_server_fixture, kube_cluster_at

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english")]


@pytest.fixture
def member(client, member_project):
    user, project = member_project
    client.force_login(user)
    return user, project


def run_job(project, user, a100, **extra):
    fields = {"name": "train", "image": "pytorch:2.3", "expected_duration_s": 3600, **extra}
    job = submit_whole_cards(project, user, a100, **fields)
    result = scheduling_cycle_run()
    assert job.pk in result.placed_job_ids, result.as_dict()
    summary = push_job_run(job_id=job.pk)
    assert summary["failed"] == 0, summary
    job.refresh_from_db()
    return job


def workload_pod(server, namespace):
    (pod,) = server.objects("Pod", namespace)
    return pod["metadata"]["name"]


# -- the page: lazy panel, curves ------------------------------------------------------------------


def rollup(device, at, *, source="prometheus:prod/main", **values):
    return DeviceRollup.objects.create(
        device=device,
        window_start=at,
        source=source,
        first_sample_at=at,
        last_sample_at=at + dt.timedelta(seconds=290),
        sample_count=30,
        **values,
    )


def figure(body: str, metric: str) -> dict:
    match = re.search(rf'data-plotly-figure="job-card-{metric}-chart">(.*?)</script>', body, re.S)
    assert match, f"no {metric} chart"
    return json.loads(match.group(1))["figure"]


def test_the_page_draws_each_card_and_names_what_its_exporter_does_not_report(client, fleet, member, a100):
    user, project = member
    job = run_job(project, user, a100, count=2)
    Allocation.objects.filter(job=job).update(started_at=timezone.now() - dt.timedelta(minutes=30))
    allocations = list(
        Allocation.objects.filter(job=job).select_related("device", "node").order_by("device__index")
    )
    start = allocations[0].started_at
    at = dt.datetime.fromtimestamp(int(start.timestamp()) // 300 * 300, tz=dt.UTC)
    first, second = allocations[0].device, allocations[1].device
    # dcgm-exporter gives power; suppose this cluster's exporter was scraped without it.
    rollup(first, at, util_avg=71.5, mem_used_avg_mib=30000, temp_max_c=61, power_avg_w=None)
    rollup(first, at + dt.timedelta(minutes=5), util_avg=80.0, mem_used_avg_mib=31000, temp_max_c=63)
    rollup(second, at, util_avg=12.0, mem_used_avg_mib=1000, temp_max_c=40, power_avg_w=210.0)
    # Another job's window on the same card before this job held it is not drawn.
    rollup(first, at - dt.timedelta(hours=2), util_avg=99.0)

    body = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Cards over the job&#x27;s life" in body or "Cards over the job's life" in body
    util = figure(body, "utilization")
    names = sorted(trace["name"] for trace in util["data"])
    assert names == sorted(f"{a.node.name} · GPU{a.device.index}" for a in allocations)
    (first_trace,) = [t for t in util["data"] if t["name"].endswith(f"GPU{first.index}")]
    assert first_trace["y"] == [71.5, 80.0]  # the window from before the job is left out
    assert util["layout"]["yaxis"]["range"] == [0, 100]
    # Times are in the platform zone, as the other charts.
    local = timezone.localtime(at).replace(tzinfo=None).isoformat(sep=" ", timespec="seconds")
    assert first_trace["x"][0] == local
    power = figure(body, "power")
    assert [t["name"] for t in power["data"]] == [f"{allocations[1].node.name} · GPU{second.index}"]
    # A single point gets a sane time axis (an hour around it), not a millisecond.
    assert len(power["layout"]["xaxis"]["range"]) == 2
    assert f"{allocations[0].node.name} · GPU{first.index}: not reported by dcgm-exporter" in body
    assert f'data-pod-url="/jobs/{job.pk}/pod/"' in body  # events and log come lazily
    assert "js/job-pod.js" in body


def test_a_long_job_is_drawn_hourly_over_its_last_two_weeks(client, fleet, member, a100):
    from apps.telemetry.selectors import job_card_curves

    user, project = member
    job = run_job(project, user, a100)
    now = timezone.now()
    Allocation.objects.filter(job=job).update(started_at=now - dt.timedelta(days=20))
    device = Allocation.objects.get(job=job).device
    hour = dt.datetime.fromtimestamp(int(now.timestamp()) // 3600 * 3600, tz=dt.UTC)
    rollup(device, hour - dt.timedelta(days=19), resolution=3600, util_avg=10.0)  # before the last 14 days
    rollup(device, hour - dt.timedelta(days=1), resolution=3600, util_avg=30.0)
    rollup(device, hour - dt.timedelta(days=1), util_avg=99.0)  # a 5-minute row: not this resolution
    report = job_card_curves(user=user, pk=job.pk, now=now)
    assert report["resolution"] == 3600 and report["clipped"]
    assert [p["utilization"] for p in report["cards"][0]["points"]] == [30.0]
    body = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "One point per 60-minute window" in body and "Only the last 14 days are drawn." in body


def test_simulated_cards_say_which_metric_the_simulation_does_not_give(client, fleet, member, a100):
    user, project = member
    job = run_job(project, user, a100)
    allocation = Allocation.objects.get(job=job)
    at = dt.datetime.fromtimestamp(int(allocation.started_at.timestamp()) // 300 * 300, tz=dt.UTC)
    rollup(allocation.device, at, source="simulated:prod", quality="estimated", util_avg=50.0, temp_max_c=50)
    body = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "not reported by the simulated cluster&#x27;s telemetry" in body
    assert figure(body, "utilization")["data"][0]["marker"]["symbol"] == ["circle-open"]  # estimated


def test_a_job_without_cards_has_no_curves_and_says_it_has_no_pods_yet(client, fleet, member, a100):
    user, project = member
    job = submit_whole_cards(project, user, a100, name="q", image="x:1")
    body = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "job-card-utilization-chart" not in body
    fragment = client.get(f"/jobs/{job.pk}/pod/").content.decode()
    assert "has not reached a cluster yet" in fragment


# -- pods, events and log: simulated ---------------------------------------------------------------


def test_the_simulated_cluster_gives_labelled_events_and_log_lines(client, fleet, member, a100):
    user, project = member
    job = run_job(project, user, a100)
    backend = backend_for(Cluster.objects.get(slug="prod"))
    backend.advance(65)  # the pod started (1-5 s) and has run about a minute
    response = client.get(f"/jobs/{job.pk}/pod/")
    assert response.status_code == 200 and response["Cache-Control"].startswith("max-age=0")
    body = response.content.decode()
    assert 'id="job-pod-simulated"' in body and "simulated cluster" in body
    for reason in ("Scheduled", "Pulled", "Created", "Started"):
        assert f'<td class="mono">{reason}</td>' in body
    log = re.search(r'<pre class="job-pod__log" id="job-pod-log"[^>]*>(.*?)</pre>', body, re.S).group(1)
    lines = log.strip().splitlines()
    assert 4 <= len(lines) <= 7 and all("[simulated]" in line for line in lines)
    assert 'data-pod-refresh="10"' in body  # the job is active: the page fetches it again


# -- pods, events and log: Kubernetes through the official client ---------------------------------


server = fake_server_fixture(timeout_delay=1.5)


@pytest.fixture
def kube_cluster(fleet, server, tmp_path):
    return kube_cluster_at(server, tmp_path, nodes=fleet)


def test_a_member_reads_the_kubernetes_events_and_log_tail(client, kube_cluster, server, member, a100):
    user, project = member
    job = run_job(project, user, a100)
    pod = workload_pod(server, project.namespace)
    server.set_pod_phase(project.namespace, pod, "Running")
    server.set_pod_log(project.namespace, pod, "".join(f"epoch 1 step {i}\n" for i in range(500)))
    body = client.get(f"/jobs/{job.pk}/pod/").content.decode()
    assert 'id="job-pod-simulated"' not in body and "job-pod-error" not in body
    assert f'<td class="mono">{pod}</td>' in body
    for reason in ("Scheduled", "Started"):
        assert f'<td class="mono">{reason}</td>' in body
    log = re.search(r'id="job-pod-log"[^>]*>(.*?)</pre>', body, re.S).group(1).splitlines()
    assert log[-1] == "epoch 1 step 499" and len(log) == 200  # the tail, not the whole log
    # Read through the documented endpoints, with tailLines and limitBytes.
    assert ("GET", f"/api/v1/namespaces/{project.namespace}/pods/{pod}/log") in server.requests
    assert ("GET", f"/api/v1/namespaces/{project.namespace}/events") in server.requests


def test_a_viewer_reads_it_too_and_another_project_gets_404(
    client, kube_cluster, server, member, a100, make_user, make_project
):
    user, project = member
    job = run_job(project, user, a100)
    set_role(user, project, "viewer")
    assert client.get(f"/jobs/{job.pk}/pod/").status_code == 200
    assert client.get(f"/jobs/{job.pk}/").status_code == 200
    outsider = make_user("mallory")
    make_project("other", members=[outsider])
    client.force_login(outsider)
    requests_before = len(server.requests)
    assert client.get(f"/jobs/{job.pk}/pod/").status_code == 404
    assert client.get(f"/jobs/{job.pk}/").status_code == 404
    assert len(server.requests) == requests_before  # the cluster was not even asked
    assert client.post(f"/jobs/{job.pk}/pod/").status_code == 405


def test_an_unreachable_cluster_is_a_message_within_a_bounded_time(
    client, kube_cluster, server, member, a100
):
    user, project = member
    job = run_job(project, user, a100)
    server.inject(r"/pods$", "timeout", times=5, method="GET")  # answers after 1.5 s
    import apps.clusters.pod_report as pod_report

    started = time.monotonic()
    report = job_pod_report(job, timeout=0.5)
    assert time.monotonic() - started < 3
    assert "could not be asked" in report.error and "timed out" in report.error

    server.stop()  # now nothing listens at all
    response = client.get(f"/jobs/{job.pk}/pod/")
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="job-pod-error"' in body and "Events and log are not available right now." in body
    assert pod_report.TIMEOUT_S <= 5
    # The page itself never waits for the cluster.
    assert client.get(f"/jobs/{job.pk}/").status_code == 200


def test_a_pod_whose_container_waits_shows_why_there_is_no_log(client, kube_cluster, server, member, a100):
    user, project = member
    job = run_job(project, user, a100)
    body = client.get(f"/jobs/{job.pk}/pod/").content.decode()
    assert 'id="job-pod-log-note"' in body and "is waiting to start: ContainerCreating" in body
    assert job.state in (JobState.SCHEDULED, JobState.RUNNING)
