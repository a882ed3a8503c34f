"""Watch: the fake API server's ``?watch=true`` (Kubernetes API concepts, "Efficient detection of
changes") through the official client, and the reconcile pass reading a watched view of the cluster
(first pass lists, later passes apply only the changes since that list's resourceVersion)."""

from __future__ import annotations

import json

import pytest
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from apps.clusters.backends.base import MANAGED_BY
from apps.clusters.backends.kubernetes import KubernetesBackend
from apps.clusters.backends.watch import WatchedView
from apps.jobs.models import Allocation, JobState
from apps.scheduling.reconcile import reconcile_cluster
from tests.kube.fake_apiserver import kubeconfig_for

NS = "team-a"
POD = {"containers": [{"name": "main", "image": "busybox"}]}


@pytest.fixture(autouse=True)
def _fresh_views():
    WatchedView.forget()
    yield
    WatchedView.forget()


def make_pod(core, name, labels=None):
    return core.create_namespaced_pod(NS, {"metadata": {"name": name, "labels": labels or {}}, "spec": POD})


def events(core, **kwargs):
    """(type, name, resourceVersion) of every event of a pod watch in NS, in order."""
    kwargs.setdefault("timeout_seconds", 1)
    out = []
    for e in watch.Watch(return_type=object).stream(core.list_namespaced_pod, NS, **kwargs):
        meta = e["raw_object"]["metadata"]
        out.append((e["type"], meta.get("name"), meta["resourceVersion"]))
    return out


def raw_watch(fake_api, query: str) -> tuple[dict, list[dict]]:
    """(headers, events) of ``GET /api/v1/namespaces/NS/pods?<query>`` read as it comes."""
    response = fake_api.rest_client.pool_manager.request(
        "GET", f"{fake_api.configuration.host}/api/v1/namespaces/{NS}/pods?{query}", preload_content=False
    )
    lines = b"".join(response.stream(amt=None)).decode().splitlines()
    return dict(response.headers), [json.loads(line) for line in lines if line]


@pytest.fixture
def ns(fake_core):
    fake_core.create_namespace({"metadata": {"name": NS}})
    return fake_core


# -- the fake's watch ------------------------------------------------------------------------------


def test_watch_from_a_version_sends_the_changes_after_it_in_order(ns, fake_server):
    make_pod(ns, "before")
    rv = ns.list_namespaced_pod(NS).metadata.resource_version
    make_pod(ns, "a")
    ns.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"v": "2"}}})
    ns.delete_namespaced_pod("before", NS)  # unbound: removed at once
    got = events(ns, resource_version=rv)
    assert [(t, n) for t, n, _ in got] == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "before")]
    versions = [int(v) for _, _, v in got]
    assert versions == sorted(versions) and versions[0] > int(rv)
    # the DELETED object has a version of its own, newer than any write before it
    assert versions[2] > versions[1]
    # from the newest of them: nothing
    assert events(ns, resource_version=got[-1][2]) == []


def test_watch_without_a_version_or_from_0_starts_with_synthetic_added_events(ns):
    make_pod(ns, "one")
    make_pod(ns, "two")
    for kwargs in ({}, {"resource_version": "0"}):
        assert [(t, n) for t, n, _ in events(ns, **kwargs)] == [("ADDED", "one"), ("ADDED", "two")]


def test_the_stream_is_chunked_json_lines_and_ends_after_timeout_seconds(ns, fake_api):
    rv = ns.list_namespaced_pod(NS).metadata.resource_version
    make_pod(ns, "x")
    headers, got = raw_watch(fake_api, f"watch=true&resourceVersion={rv}&timeoutSeconds=1")
    assert headers.get("Transfer-Encoding") == "chunked"
    assert [e["type"] for e in got] == ["ADDED"]  # and the stream ended (timeoutSeconds)
    assert got[0]["object"]["metadata"]["name"] == "x" and got[0]["object"]["kind"] == "Pod"


def test_bookmarks_only_when_allowed_and_they_carry_only_the_version(ns, fake_api, fake_server):
    rv = ns.list_namespaced_pod(NS).metadata.resource_version
    make_pod(ns, "x")
    _, plain = raw_watch(fake_api, f"watch=1&resourceVersion={rv}&timeoutSeconds=3")
    assert [e["type"] for e in plain] == ["ADDED"]
    _, got = raw_watch(fake_api, f"watch=1&resourceVersion={rv}&timeoutSeconds=3&allowWatchBookmarks=true")
    # none after the replay, none at the end: the one 2 s before the deadline (1 s into the stream)
    assert [e["type"] for e in got] == ["ADDED", "BOOKMARK"]
    bookmark = got[1]["object"]
    assert bookmark == {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": got[0]["object"]["metadata"]["resourceVersion"]},
    }
    # the client keeps the bookmark's version as where to resume
    w = watch.Watch(return_type=object)
    list(
        w.stream(
            ns.list_namespaced_pod, NS, resource_version=rv, timeout_seconds=3, allow_watch_bookmarks=True
        )
    )
    assert w.resource_version == bookmark["metadata"]["resourceVersion"]


def test_a_version_older_than_the_history_is_410_expired(ns, fake_api, fake_server):
    rv = ns.list_namespaced_pod(NS).metadata.resource_version
    make_pod(ns, "x")
    fake_server.compact()
    with pytest.raises(ApiException) as info:
        events(ns, resource_version=rv)
    assert info.value.status == 410
    _, got = raw_watch(fake_api, f"watch=true&resourceVersion={rv}")
    (error,) = got
    assert error["type"] == "ERROR"
    status = error["object"]
    assert status["kind"] == "Status" and status["code"] == 410 and status["reason"] == "Expired"
    now = ns.list_namespaced_pod(NS).metadata.resource_version
    assert status["message"] == f"too old resource version: {rv} ({now})"
    assert events(ns, resource_version=now) == []  # from after the compaction: fine


def test_the_history_is_bounded(ns, fake_server):
    fake_server.watch_history_size = 5
    rv = ns.list_namespaced_pod(NS).metadata.resource_version
    for i in range(12):
        make_pod(ns, f"p{i}")
    with pytest.raises(ApiException) as info:
        events(ns, resource_version=rv)
    assert info.value.status == 410
    recent = ns.read_namespaced_pod("p10", NS).metadata.resource_version
    assert [n for _, n, _ in events(ns, resource_version=recent)] == ["p11"]


def test_selectors_apply_and_leaving_them_is_deleted(ns):
    make_pod(ns, "a", {"app": "x"})
    rv = ns.list_namespaced_pod(NS).metadata.resource_version
    make_pod(ns, "b", {"app": "y"})  # never matches
    ns.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"app": "y"}}})  # leaves the selector
    ns.patch_namespaced_pod("b", NS, {"metadata": {"labels": {"app": "x"}}})  # enters it
    got = events(ns, resource_version=rv, label_selector="app=x")
    assert [(t, n) for t, n, _ in got] == [("DELETED", "a"), ("ADDED", "b")]
    # the DELETED object is its last matching state, at the version of the change
    w = watch.Watch(return_type=object)
    first = next(
        iter(
            w.stream(
                ns.list_namespaced_pod, NS, resource_version=rv, label_selector="app=x", timeout_seconds=1
            )
        )
    )
    w.stop()
    assert first["raw_object"]["metadata"]["labels"] == {"app": "x"}
    assert (
        first["raw_object"]["metadata"]["resourceVersion"]
        == ns.read_namespaced_pod("a", NS).metadata.resource_version
    )
    assert [n for _, n, _ in events(ns, resource_version=rv, field_selector="metadata.name=b")] == ["b", "b"]


def test_watch_jobs_nodes_and_events_too(fake_api, fake_server):
    batch, core = k8s.BatchV1Api(fake_api), k8s.CoreV1Api(fake_api)
    core.create_namespace({"metadata": {"name": NS}})
    rv = batch.list_job_for_all_namespaces().metadata.resource_version
    batch.create_namespaced_job(
        NS, {"metadata": {"name": "j"}, "spec": {"template": {"spec": {**POD, "restartPolicy": "Never"}}}}
    )
    fake_server.add_node("n1")
    kinds = {}
    for name, func in (
        ("jobs", batch.list_job_for_all_namespaces),
        ("nodes", core.list_node),
        ("pods", core.list_pod_for_all_namespaces),
    ):
        kinds[name] = [
            (e["type"], e["raw_object"]["metadata"]["name"])
            for e in watch.Watch(return_type=object).stream(func, resource_version=rv, timeout_seconds=1)
        ]
    assert kinds["jobs"][0] == ("ADDED", "j")
    assert kinds["nodes"][0] == ("ADDED", "n1")
    assert [t for t, n in kinds["pods"]][:1] == ["ADDED"] and kinds["pods"][0][1].startswith("j-")


def test_bad_watch_parameters_are_400(ns):
    with pytest.raises(ApiException) as info:
        events(ns, resource_version="abc")
    assert info.value.status == 400
    with pytest.raises(ApiException) as info:
        list(
            watch.Watch(return_type=object).stream(
                ns.list_namespaced_pod, NS, timeout_seconds=1, send_initial_events=True
            )
        )
    assert info.value.status == 400


def test_the_request_log_counts_what_each_answer_carried(ns, fake_server):
    make_pod(ns, "a")
    make_pod(ns, "b")
    rv = ns.list_namespaced_pod(NS).metadata.resource_version
    listed = fake_server.request_log[-1]
    make_pod(ns, "c")
    events(ns, resource_version=rv)
    watched = fake_server.request_log[-1]
    assert listed["objects"] == 2 and "watch" not in listed["query"]
    assert watched["objects"] == 1 and watched["query"]["watch"] == ["true"]


# -- the backend's watched view ----------------------------------------------------------------------


def pod_watches(server, since: int) -> list[dict]:
    return [
        r
        for r in server.request_log[since:]
        if r["method"] == "GET" and r["path"].endswith("/pods") and "watch" in r["query"]
    ]


def pod_lists(server, since: int) -> list[dict]:
    return [
        r
        for r in server.request_log[since:]
        if r["method"] == "GET" and r["path"].endswith("/pods") and "watch" not in r["query"]
    ]


def snapshot(items: list[dict]) -> dict:
    return {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o["metadata"]["resourceVersion"] for o in items
    }


def test_the_view_lists_then_watches_and_equals_a_full_list(fake_server, fake_core, tmp_path):
    fake_core.create_namespace({"metadata": {"name": NS}})
    labels = {"app.kubernetes.io/managed-by": "suanchi"}
    for i in range(30):
        make_pod(fake_core, f"p{i:02d}", labels)
    make_pod(fake_core, "foreign")  # not ours: never in the view
    backend = KubernetesBackend(str(kubeconfig_for(fake_server, tmp_path)))
    mark = len(fake_server.request_log)
    first = backend.list_watched("Pod")
    assert len(first) == 30 and len(pod_lists(fake_server, mark)) == 1 and not pod_watches(fake_server, mark)

    fake_core.patch_namespaced_pod("p03", NS, {"metadata": {"labels": {"x": "1"}}})
    fake_core.delete_namespaced_pod("p04", NS)
    fake_core.patch_namespaced_pod(
        "p05", NS, {"metadata": {"labels": {"app.kubernetes.io/managed-by": None}}}
    )
    make_pod(fake_core, "p99", labels)
    mark = len(fake_server.request_log)
    second = KubernetesBackend(str(kubeconfig_for(fake_server, tmp_path))).list_watched("Pod")
    assert pod_lists(fake_server, mark) == []
    (watched,) = pod_watches(fake_server, mark)
    assert watched["objects"] == 4  # the four changes (then silence: caught up), not the 30 pods
    assert watched["query"]["labelSelector"] == [MANAGED_BY]
    assert snapshot(second) == snapshot(backend.list_owned("Pod"))
    assert ("team-a", "p04") not in snapshot(second) and ("team-a", "p05") not in snapshot(second)
    assert ("team-a", "p99") in snapshot(second)


def test_the_view_relists_after_410_and_at_the_resync_interval(fake_server, fake_core, tmp_path, monkeypatch):
    from apps.clusters.backends import watch as watch_module

    fake_core.create_namespace({"metadata": {"name": NS}})
    make_pod(fake_core, "a", {"app.kubernetes.io/managed-by": "suanchi"})
    backend = KubernetesBackend(str(kubeconfig_for(fake_server, tmp_path)))
    backend.list_watched("Pod")
    fake_core.delete_namespaced_pod("a", NS)
    make_pod(fake_core, "b", {"app.kubernetes.io/managed-by": "suanchi"})
    fake_server.compact()
    mark = len(fake_server.request_log)
    assert [o["metadata"]["name"] for o in backend.list_watched("Pod")] == ["b"]
    (expired,) = pod_watches(fake_server, mark)
    assert expired["objects"] == 1  # the ERROR event
    assert len(pod_lists(fake_server, mark)) == 1  # then the relist

    monkeypatch.setattr(watch_module, "WATCH_RESYNC_S", 0.0)
    mark = len(fake_server.request_log)
    backend.list_watched("Pod")
    assert len(pod_lists(fake_server, mark)) == 1 and pod_watches(fake_server, mark) == []


def test_a_failed_watch_request_is_the_clusters_error(fake_server, fake_core, tmp_path):
    from apps.clusters.backends.errors import TransientBackendError

    fake_core.create_namespace({"metadata": {"name": NS}})
    backend = KubernetesBackend(str(kubeconfig_for(fake_server, tmp_path)))
    backend.list_watched("Pod")
    fake_server.inject(r"/pods$", status="reset", times=1)
    with pytest.raises(TransientBackendError):
        backend.list_watched("Pod")
    mark = len(fake_server.request_log)
    assert backend.list_watched("Pod") == []
    assert len(pod_lists(fake_server, mark)) == 1  # the view was dropped: listed again


# -- reconcile over the watched view ---------------------------------------------------------------


def scheduled_jobs(project, user, a100, n, **extra):
    from tests.kube.test_reconcile import schedule_and_push, submit

    return [schedule_and_push(submit(project, user, a100, name=f"train-{i}", **extra)) for i in range(n)]


def job_pod(server, job):
    from tests.kube.test_reconcile import pods_for, workload

    (pod,) = pods_for(server, workload(job))
    return pod["metadata"]["namespace"], pod["metadata"]["name"]


@pytest.mark.django_db
def test_a_second_pass_reads_only_the_change_and_concludes_as_a_full_list(
    kube_cluster, server, member_project, a100
):
    user, project = member_project
    jobs = scheduled_jobs(project, user, a100, 2)
    for job in jobs:
        server.set_pod_phase(*job_pod(server, job), "Running")
    mark = len(server.request_log)
    assert reconcile_cluster(cluster=kube_cluster).running == 2
    assert len(pod_lists(server, mark)) == 1 and pod_watches(server, mark) == []

    server.set_pod_phase(*job_pod(server, jobs[0]), "Succeeded")
    mark = len(server.request_log)
    result = reconcile_cluster(cluster=kube_cluster)
    assert result.succeeded == 1
    assert pod_lists(server, mark) == []
    (watched,) = pod_watches(server, mark)
    assert watched["objects"] == 1  # the pod's MODIFIED event, then silence (no early bookmark)
    collection_gets = [
        r for r in server.request_log[mark:] if r["method"] == "GET" and "watch" not in r["query"]
    ]
    assert [
        r["path"]
        for r in collection_gets
        if r["path"].rsplit("/", 1)[-1] in ("pods", "jobs", "nodes", "deployments")
    ] == []
    jobs[0].refresh_from_db()
    jobs[1].refresh_from_db()
    assert jobs[0].state == JobState.SUCCEEDED and jobs[1].state == JobState.RUNNING
    assert not Allocation.objects.filter(job=jobs[0], released_at__isnull=True).exists()
    # the view the pass worked from is what a full list reads now
    backend = KubernetesBackend(kube_cluster)
    for kind, selector in (("Pod", MANAGED_BY), ("Job", MANAGED_BY), ("Node", "")):
        assert snapshot_any(backend.list_watched(kind, selector)) == snapshot_any(
            backend.list_owned(kind, None, selector)
        )


def snapshot_any(items: list[dict]) -> dict:
    return {
        (o["metadata"].get("namespace", ""), o["metadata"]["name"]): o["metadata"]["resourceVersion"]
        for o in items
    }


@pytest.mark.django_db
def test_after_compaction_the_pass_relists_and_is_still_correct(kube_cluster, server, member_project, a100):
    user, project = member_project
    (job,) = scheduled_jobs(project, user, a100, 1, max_retries=1)
    server.set_pod_phase(*job_pod(server, job), "Running")
    assert reconcile_cluster(cluster=kube_cluster).running == 1
    server.set_pod_phase(*job_pod(server, job), "Failed", exit_code=1, reason="Error")
    server.compact()
    mark = len(server.request_log)
    assert reconcile_cluster(cluster=kube_cluster).retried == 1
    assert len(pod_lists(server, mark)) == 1  # 410 Expired: relisted
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.attempt == 1


@pytest.mark.django_db
def test_a_workload_and_its_pod_deleted_between_passes_are_seen_gone(
    kube_cluster, server, member_project, a100
):
    """As with a full list (tests/kube/test_reconcile.py, an object deleted behind our back): the
    deletion arrives as DELETED events and the attempt fails."""
    from tests.kube.test_reconcile import workload

    user, project = member_project
    (job,) = scheduled_jobs(project, user, a100, 1, max_retries=0)
    namespace, pod = job_pod(server, job)
    server.set_pod_phase(namespace, pod, "Running")
    assert reconcile_cluster(cluster=kube_cluster).running == 1
    w = workload(job)
    batch = KubernetesBackend(kube_cluster)
    batch.delete("Job", w.namespace, w.name)  # kubectl delete, by someone else
    server.advance(31)  # the pod's grace period ends: the kubelet stops it (Failed)
    server.advance(1)  # and removes it
    assert [p for p in server.objects("Pod", namespace) if p["metadata"]["name"] == pod] == []
    mark = len(server.request_log)
    assert reconcile_cluster(cluster=kube_cluster).failed == 1
    assert pod_lists(server, mark) == []
    (watched,) = pod_watches(server, mark)
    assert watched["objects"] >= 2  # its changes up to the DELETED event
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert f"Job {w.namespace}/{w.name} was deleted outside Suanchi" in job.state_reason
    # its cards are let go once a pass sees its objects gone (as with a full list)
    assert not Allocation.objects.filter(
        job=job, released_at__isnull=True, releasing_since__isnull=True
    ).exists()
    from apps.scheduling.push import push_job_run

    push_job_run(job_id=job.pk)
    reconcile_cluster(cluster=kube_cluster)
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()


def test_without_an_early_bookmark_the_view_stops_when_the_stream_is_silent(fake_server, fake_core, tmp_path):
    """A real API server sends no bookmark once it caught up (the fake neither): the view stops
    reading when the stream stayed silent for WATCH_IDLE_S, with every change sent before applied."""
    fake_core.create_namespace({"metadata": {"name": NS}})
    labels = {"app.kubernetes.io/managed-by": "suanchi"}
    make_pod(fake_core, "a", labels)
    backend = KubernetesBackend(str(kubeconfig_for(fake_server, tmp_path)))
    backend.list_watched("Pod")
    make_pod(fake_core, "b", labels)
    fake_core.delete_namespaced_pod("a", NS)
    mark = len(fake_server.request_log)
    assert [o["metadata"]["name"] for o in backend.list_watched("Pod")] == ["b"]
    (watched,) = pod_watches(fake_server, mark)
    assert watched["objects"] == 2 and pod_lists(fake_server, mark) == []
    view = WatchedView.of(backend._view_id, "Pod", MANAGED_BY)
    assert view.resource_version == fake_core.list_namespaced_pod(NS).metadata.resource_version


def test_a_name_deleted_and_created_again_between_two_reads_is_deleted_then_added(ns, fake_server):
    make_pod(ns, "a")
    rv = ns.list_namespaced_pod(NS).metadata.resource_version
    with fake_server._lock:  # both in one step of the server (no request between them)
        old = fake_server._store.pop(("pods", NS, "a"))
        new = {**old, "metadata": {**old["metadata"], "uid": "new-uid"}}
        fake_server._bump(new)
        fake_server._store[("pods", NS, "a")] = new
    got = events(ns, resource_version=rv)
    assert [(t, n) for t, n, _ in got] == [("DELETED", "a"), ("ADDED", "a")]
    assert int(got[0][2]) < int(got[1][2]) == int(ns.read_namespaced_pod("a", NS).metadata.resource_version)
