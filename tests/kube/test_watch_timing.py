"""Watch timing as a real API server has it, and a reconcile pass that copes with it.

The fake's bookmarks follow the watch cache (kubernetes staging/src/k8s.io/apiserver/pkg/storage/
cacher/cache_watcher.go ``nextBookmarkTime``: none after the replay, one 2 s before the deadline,
else once a minute; see ``tests/kube/fake_apiserver/store.py`` ``next_bookmark_time``), and its lists and
watches can be slow to answer (``header_delay_s``: API Priority and Fairness queueing, a lagging
watch cache). The backend reads each watched kind in a thread of its own and counts silence only
once the headers came (``apps.clusters.backends.watch._catch_up``).

Nothing here asserts on time beyond what must hold whatever the machine's speed: orders of events,
counts, and request intervals that overlap.
"""

from __future__ import annotations

import json
import threading

import pytest

from apps.clusters.backends.base import MANAGED_BY
from apps.clusters.backends.errors import TransientBackendError
from apps.clusters.backends.kubernetes import KubernetesBackend
from apps.clusters.backends.watch import WatchedView
from apps.jobs.models import JobState
from apps.scheduling.reconcile import reconcile_cluster
from tests.kube.fake_apiserver import BOOKMARK_FREQUENCY_S, kubeconfig_for, next_bookmark_time

NS = "team-a"
OURS = {"app.kubernetes.io/managed-by": "suanchi"}
POD = {"containers": [{"name": "main", "image": "busybox"}]}


@pytest.fixture(autouse=True)
def _fresh_views():
    WatchedView.forget()
    yield
    WatchedView.forget()


@pytest.fixture
def ns(fake_core):
    fake_core.create_namespace({"metadata": {"name": NS}})
    return fake_core


def make_pod(core, name, labels=None):
    return core.create_namespaced_pod(NS, {"metadata": {"name": name, "labels": labels or {}}, "spec": POD})


def open_watch(fake_api, query: str):
    return fake_api.rest_client.pool_manager.request(
        "GET",
        f"{fake_api.configuration.host}/api/v1/namespaces/{NS}/pods?watch=1&{query}",
        preload_content=False,
    )


def lines_of(response):
    """The stream's events one by one, as they come."""
    buffer = b""
    for data in response.stream(amt=None):
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line:
                yield json.loads(line)


# -- the watch cache's bookmark schedule -----------------------------------------------------------


def test_the_schedule_is_2_s_before_the_deadline_else_once_a_minute():
    assert BOOKMARK_FREQUENCY_S == 60.0  # cacher.go defaultBookmarkFrequency = time.Minute
    assert next_bookmark_time(100.0, 105.0) == 103.0  # 2 s before the deadline
    assert next_bookmark_time(100.0, 400.0) == 160.0  # a long watch: once a minute first
    assert next_bookmark_time(160.0, 400.0) == 220.0
    assert next_bookmark_time(340.0, 400.0) == 398.0  # the last one 2 s before its end
    assert next_bookmark_time(398.0, 400.0) is None  # then none
    assert next_bookmark_time(100.0, 102.0) is None  # a deadline 2 s or less away: none at all
    assert next_bookmark_time(100.0, 101.0) is None


def test_no_bookmark_after_the_replay_the_one_2_s_before_the_deadline_covers_later_changes(ns, fake_api):
    """The replay is not followed by a bookmark: a pod created once the replay arrived comes first,
    and the bookmark (2 s before the 4 s deadline) carries its version; nothing comes at the end."""
    rv = ns.list_namespaced_pod(NS).metadata.resource_version
    make_pod(ns, "replayed")
    response = open_watch(fake_api, f"resourceVersion={rv}&timeoutSeconds=4&allowWatchBookmarks=true")
    got, later = [], None
    for event in lines_of(response):
        got.append(event)
        if len(got) == 1:  # the replay: now a change the stream has not sent yet
            later = make_pod(ns, "later")
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in got] == [
        ("ADDED", "replayed"),
        ("ADDED", "later"),
        ("BOOKMARK", None),
    ]
    assert got[2]["object"]["metadata"]["resourceVersion"] == later.metadata.resource_version


def test_a_deadline_2_s_away_or_less_gets_no_bookmark(ns, fake_api):
    rv = ns.list_namespaced_pod(NS).metadata.resource_version
    make_pod(ns, "x")
    got = list(
        lines_of(open_watch(fake_api, f"resourceVersion={rv}&timeoutSeconds=2&allowWatchBookmarks=true"))
    )
    assert [e["type"] for e in got] == ["ADDED"]


def test_a_long_watch_gets_one_per_period_then_the_one_before_its_deadline(ns, fake_api, fake_server):
    """The minute shortened to 0.5 s: a 3 s watch gets one at 0.5 s and the one 2 s before its
    deadline (at 1 s), then none (its deadline is within 2 s)."""
    fake_server.bookmark_frequency_s = 0.5
    rv = ns.list_namespaced_pod(NS).metadata.resource_version
    got = list(
        lines_of(open_watch(fake_api, f"resourceVersion={rv}&timeoutSeconds=3&allowWatchBookmarks=true"))
    )
    assert [e["type"] for e in got] == ["BOOKMARK", "BOOKMARK"]


def test_header_delay_holds_back_lists_and_watches_only(ns, fake_server):
    fake_server.header_delay_s = 0.3
    assert fake_server._header_delay("GET", f"/api/v1/namespaces/{NS}/pods") == 0.3
    assert fake_server._header_delay("GET", "/api/v1/nodes") == 0.3
    assert fake_server._header_delay("GET", f"/api/v1/namespaces/{NS}/pods/a") == 0.0
    assert fake_server._header_delay("POST", f"/api/v1/namespaces/{NS}/pods") == 0.0
    mark = len(fake_server.request_log)
    ns.list_namespaced_pod(NS)
    (listed,) = fake_server.request_log[mark:]
    assert listed["answered"] - listed["started"] >= 0.3  # the fake's own sleep, not a timing claim


# -- the backend -----------------------------------------------------------------------------------


def test_a_watch_answered_after_3_s_still_catches_up(fake_server, fake_core, tmp_path):
    """Headers 3 s late (a watch cache blocks up to 3 s): the wait for them is not the idle limit."""
    fake_core.create_namespace({"metadata": {"name": NS}})
    make_pod(fake_core, "a", OURS)
    backend = KubernetesBackend(str(kubeconfig_for(fake_server, tmp_path)))
    backend.list_watched("Pod")
    make_pod(fake_core, "b", OURS)
    fake_server.header_delay_s = 3.0
    assert sorted(o["metadata"]["name"] for o in backend.list_watched("Pod")) == ["a", "b"]
    view = WatchedView.of(backend._view_id, "Pod", MANAGED_BY)
    assert view.watches == 1 and view.lists == 1 and view.events == 1


def test_headers_later_than_the_limit_are_the_clusters_error(fake_server, fake_core, tmp_path, monkeypatch):
    from apps.clusters.backends import watch as watch_module

    fake_core.create_namespace({"metadata": {"name": NS}})
    backend = KubernetesBackend(str(kubeconfig_for(fake_server, tmp_path)))
    backend.list_watched("Pod")
    monkeypatch.setattr(watch_module, "WATCH_HEADERS_S", 0.5)
    fake_server.header_delay_s = 2.0
    with pytest.raises(TransientBackendError, match="watch Pod"):
        backend.list_watched("Pod")


def test_a_stream_that_never_falls_silent_is_still_bounded(fake_server, fake_core, tmp_path, monkeypatch):
    """A pod changes every 0.1 s, longer than a catch-up may take, so the stream never falls silent:
    the read still ends (the watch's timeoutSeconds; our own cap, WATCH_TIMEOUT_S + WATCH_IDLE_S
    after the headers, stands behind it), with the view consistent at the last event it applied."""
    from apps.clusters.backends import watch as watch_module

    monkeypatch.setattr(watch_module, "WATCH_TIMEOUT_S", 1)
    fake_core.create_namespace({"metadata": {"name": NS}})
    make_pod(fake_core, "busy", OURS)
    backend = KubernetesBackend(str(kubeconfig_for(fake_server, tmp_path)))
    backend.list_watched("Pod")
    stop = threading.Event()

    def churn():
        i = 0
        while not stop.wait(0.1):
            i += 1
            fake_core.patch_namespaced_pod("busy", NS, {"metadata": {"labels": {"n": str(i)}}})

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    try:
        (busy,) = backend.list_watched("Pod")
    finally:
        stop.set()
        worker.join(5)
    view = WatchedView.of(backend._view_id, "Pod", MANAGED_BY)
    assert view.events >= 1 and view.resource_version == busy["metadata"]["resourceVersion"]


def test_the_kinds_are_read_at_the_same_time(fake_server, fake_core, tmp_path):
    fake_core.create_namespace({"metadata": {"name": NS}})
    backend = KubernetesBackend(str(kubeconfig_for(fake_server, tmp_path)))
    fake_server.header_delay_s = 1.0
    wanted = [("Job", MANAGED_BY), ("Deployment", MANAGED_BY), ("Pod", MANAGED_BY), ("Node", "")]
    mark = len(fake_server.request_log)
    assert backend.list_watched_kinds(wanted) == [[], [], [], []]
    reads = [r for r in fake_server.request_log[mark:] if r["method"] == "GET"]
    assert sorted(r["path"].rsplit("/", 1)[-1] for r in reads) == ["deployments", "jobs", "nodes", "pods"]
    # every kind's request came before any got its answer (one after the other, each would wait 1 s
    # for the one before it)
    assert max(r["started"] for r in reads) < min(r["answered"] for r in reads)


def test_a_failing_kind_fails_the_read_once_every_kind_ended(fake_server, fake_core, tmp_path):
    fake_core.create_namespace({"metadata": {"name": NS}})
    backend = KubernetesBackend(str(kubeconfig_for(fake_server, tmp_path)))
    fake_server.inject(r"/nodes$", status=500, times=1)
    with pytest.raises(TransientBackendError, match="Node"):
        backend.list_watched_kinds([("Pod", MANAGED_BY), ("Node", "")])
    assert WatchedView.of(backend._view_id, "Pod", MANAGED_BY).lists == 1  # the other kind was read


# -- a reconcile pass --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_reconcile_pass_succeeds_with_3_s_header_delays_and_reads_the_kinds_together(
    kube_cluster, server, member_project, a100
):
    from tests.kube.test_reconcile import pods_for, schedule_and_push, submit, workload

    user, project = member_project
    job = schedule_and_push(submit(project, user, a100, name="train"))
    (pod,) = pods_for(server, workload(job))
    server.set_pod_phase(pod["metadata"]["namespace"], pod["metadata"]["name"], "Running")
    server.header_delay_s = 3.0
    first = reconcile_cluster(cluster=kube_cluster)  # lists, each list 3 s late
    assert first.errors == [] and first.running == 1
    server.set_pod_phase(pod["metadata"]["namespace"], pod["metadata"]["name"], "Succeeded")
    mark = len(server.request_log)
    second = reconcile_cluster(cluster=kube_cluster)  # watches, each answered 3 s late
    assert second.errors == [] and second.list_error in (None, "") and second.succeeded == 1
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    watches = [r for r in server.request_log[mark:] if r["method"] == "GET" and "watch" in r["query"]]
    assert sorted(r["path"].rsplit("/", 1)[-1] for r in watches) == ["deployments", "jobs", "nodes", "pods"]
    assert all(r["query"].get("allowWatchBookmarks") == ["true"] for r in watches)
    assert max(r["started"] for r in watches) < min(r["answered"] for r in watches)
