"""The Job, Deployment, ReplicaSet and namespace controllers, and the clock that drives them."""

from __future__ import annotations

import copy
import json

from tests.kube.fake_apiserver.names import qualified_resource
from tests.kube.fake_apiserver.resources import (
    RESOURCES,
    ApiError,
    Resource,
    _not_found,
    _now,
    _random_suffix,
)


class ControllersMixin:
    """The Job, Deployment, ReplicaSet and namespace controllers, and the clock that drives them. Mixed into :class:`FakeApiServer`."""

    def _sync_jobs(self) -> None:
        """pkg/controller/job (Kubernetes 1.31+): ``parallelism`` pods; ``succeeded`` / ``failed``
        (a pod removed before it succeeded counts as failed) / ``terminating``; more than
        ``backoffLimit`` failures → ``FailureTarget`` (reason BackoffLimitExceeded), active pods
        deleted, ``Failed`` once none is left terminating; ``completions`` successes →
        ``SuccessCriteriaMet``, then ``Complete``. A failed pod is replaced while the limit allows."""
        for key, job in list(self._store.items()):
            if key[0] != "jobs" or job["metadata"].get("deletionTimestamp"):
                continue
            spec, status = job.get("spec") or {}, job.setdefault("status", {})
            conditions = list(status.get("conditions") or [])
            types = {c["type"] for c in conditions if c.get("status") == "True"}
            if types & {"Complete", "Failed"}:
                continue
            pods = [p for _, p in self._owned_by(job["metadata"]["uid"], key[1])]
            terminating = [
                p
                for p in pods
                if p["metadata"].get("deletionTimestamp")
                and p["status"].get("phase") not in ("Succeeded", "Failed")
            ]
            active = [
                p
                for p in pods
                if not p["metadata"].get("deletionTimestamp")
                and p["status"].get("phase") in ("Pending", "Running")
            ]
            succeeded = sum(p["status"].get("phase") == "Succeeded" for p in pods)
            failed = sum(p["status"].get("phase") == "Failed" for p in pods) + self._removed_failed.get(
                job["metadata"]["uid"], 0
            )
            before = copy.deepcopy(status)
            status.update(
                active=len(active), succeeded=succeeded, failed=failed, terminating=len(terminating)
            )
            if any(p["status"].get("phase") == "Running" for p in pods):
                status.setdefault("startTime", _now())
            completions = spec.get("completions", spec.get("parallelism", 1))
            now = _now()
            if "FailureTarget" not in types and "SuccessCriteriaMet" not in types:
                if failed > spec.get("backoffLimit", 6):
                    conditions.append(
                        {
                            "type": "FailureTarget",
                            "status": "True",
                            "reason": "BackoffLimitExceeded",
                            "message": "Job has reached the specified backoff limit",
                            "lastTransitionTime": now,
                        }
                    )
                    types.add("FailureTarget")
                    for pkey, p in self._owned_by(job["metadata"]["uid"], key[1]):
                        if p["status"].get("phase") in ("Pending", "Running"):
                            self._delete_pod_gracefully(pkey)
                elif succeeded >= completions:
                    conditions.append(
                        {
                            "type": "SuccessCriteriaMet",
                            "status": "True",
                            "reason": "CompletionsReached",
                            "message": "Reached expected number of succeeded pods",
                            "lastTransitionTime": now,
                        }
                    )
                    types.add("SuccessCriteriaMet")
                else:
                    missing = (
                        min(spec.get("parallelism", 1), completions - succeeded)
                        - len(active)
                        - len(terminating)
                    )
                    self._job_add_pods(job, pods, missing, completions)
            pods = [p for _, p in self._owned_by(job["metadata"]["uid"], key[1])]
            still = any(p["status"].get("phase") not in ("Succeeded", "Failed") for p in pods)
            if "FailureTarget" in types and not still:
                target = next(c for c in conditions if c["type"] == "FailureTarget")
                conditions.append({**target, "type": "Failed", "lastTransitionTime": now})
            elif "SuccessCriteriaMet" in types and not still:
                conditions.append(
                    {
                        "type": "Complete",
                        "status": "True",
                        "reason": "CompletionsReached",
                        "message": "Reached expected number of succeeded pods",
                        "lastTransitionTime": now,
                    }
                )
                status["completionTime"] = now
            status["active"] = sum(
                1
                for p in pods
                if not p["metadata"].get("deletionTimestamp")
                and p["status"].get("phase") in ("Pending", "Running")
            )
            status["terminating"] = sum(
                1
                for p in pods
                if p["metadata"].get("deletionTimestamp")
                and p["status"].get("phase") not in ("Succeeded", "Failed")
            )
            if conditions:
                status["conditions"] = conditions
            for field in ("active", "succeeded", "failed", "terminating"):  # omitempty
                if not status.get(field):
                    status.pop(field, None)
            if status != before:
                self._bump(job)

    def _job_add_pods(self, job: dict, pods: list[dict], missing: int, completions: int) -> None:
        """The pods a Job still misses: after a refused creation, once its backoff is over (the free
        completion indexes of an Indexed Job); else replacements for failed pods (the first pods are
        _after_create's)."""
        spec = job.get("spec") or {}
        retry_at = self._create_retry_at.get(job["metadata"]["uid"])
        if missing > 0 and retry_at is not None:
            if self._t >= retry_at:  # a refused creation, tried again after the backoff
                indexes = None
                if spec.get("completionMode") == "Indexed":
                    taken = {
                        p["metadata"].get("annotations", {}).get("batch.kubernetes.io/job-completion-index")
                        for p in pods
                    }
                    indexes = [i for i in range(completions) if str(i) not in taken][:missing]
                self._spawn_pods(
                    job,
                    len(indexes) if indexes is not None else missing,
                    self._job_pod_labels(job),
                    indexes,
                )
        elif missing > 0 and pods:  # replacements for failed pods (creation is _after_create's)
            self._spawn_pods(job, missing, self._job_pod_labels(job))

    # -- Deployments and ReplicaSets -----------------------------------------------------------------
    @staticmethod
    def _template_hash(template: dict) -> str:
        """pkg/controller/deployment/util ComputeHash: a stable hash of the pod template (FNV there,
        sha256 here), the ``pod-template-hash`` label of the ReplicaSet and its pods."""
        import hashlib

        digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
        return "".join("bcdfghjklmnpqrstvwxz2456789"[int(c, 16) % 27] for c in digest[:10])

    def _live_pods(self, owner_uid: str, ns: str) -> list[tuple[tuple[str, str, str], dict]]:
        return [
            (k, p)
            for k, p in self._owned_by(owner_uid, ns)
            if not p["metadata"].get("deletionTimestamp")
            and p["status"].get("phase") not in ("Succeeded", "Failed")
        ]

    def _sync_deployments(self) -> None:
        """pkg/controller/deployment: a ReplicaSet per pod template (``<deployment>-<hash>``, owned by
        the Deployment); a template change makes a new one and scales the old ones to 0 —
        ``Recreate`` scales the new one up only once every old pod is gone (recreate.go),
        ``RollingUpdate`` at once (surge and availability budgets are not modelled). A change of
        ``replicas`` alone scales the current ReplicaSet. Status: replicas, updatedReplicas,
        readyReplicas, availableReplicas (pods Running and ready), observedGeneration."""
        for key, dep in list(self._store.items()):
            if key[0] != "deployments" or dep["metadata"].get("deletionTimestamp"):
                continue
            ns, meta, spec = key[1], dep["metadata"], dep.get("spec") or {}
            template = copy.deepcopy(spec.get("template") or {})
            h = self._template_hash(template)
            owned = [
                (k, rs)
                for k, rs in sorted(self._store.items())
                if k[0] == "replicasets"
                and k[1] == ns
                and any(r.get("uid") == meta["uid"] for r in rs["metadata"].get("ownerReferences") or [])
            ]
            current = next(
                (rs for _k, rs in owned if rs["metadata"]["labels"].get("pod-template-hash") == h), None
            )
            if current is None:
                template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = h
                selector = copy.deepcopy(spec.get("selector") or {})
                selector.setdefault("matchLabels", {})["pod-template-hash"] = h
                name = f"{meta['name']}-{h}"
                current = {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "metadata": {
                        "name": name,
                        "namespace": ns,
                        "labels": {**(template["metadata"].get("labels") or {})},
                        "ownerReferences": [
                            {
                                "apiVersion": "apps/v1",
                                "kind": "Deployment",
                                "name": meta["name"],
                                "uid": meta["uid"],
                                "controller": True,
                                "blockOwnerDeletion": True,
                            }
                        ],
                    },
                    "spec": {"replicas": 0, "selector": selector, "template": template},
                    "status": {"replicas": 0},
                }
                self._new_meta(current)
                self._store[("replicasets", ns, name)] = current
            old = [rs for _k, rs in owned if rs is not current]
            for rs in old:
                if rs["spec"].get("replicas"):
                    rs["spec"]["replicas"] = 0
                    self._bump(rs)
            recreate = (spec.get("strategy") or {}).get("type") == "Recreate"
            old_pods = [p for rs in old for _k, p in self._owned_by(rs["metadata"]["uid"], ns)]
            want = 0 if recreate and old_pods else spec.get("replicas", 1)
            if current["spec"].get("replicas") != want:
                current["spec"]["replicas"] = want
                self._bump(current)
            pods = [p for rs in [current, *old] for _k, p in self._live_pods(rs["metadata"]["uid"], ns)]
            ready = [p for p in pods if p["status"].get("phase") == "Running"]
            updated = self._live_pods(current["metadata"]["uid"], ns)
            status = {
                "observedGeneration": meta.get("generation", 1),
                "replicas": len(pods),
                "updatedReplicas": len(updated),
                "readyReplicas": len(ready),
                "availableReplicas": len(ready),
            }
            status = {k: v for k, v in status.items() if v}  # omitempty
            if dep.get("status") != status:
                dep["status"] = status
                self._bump(dep)

    def _sync_replicasets(self) -> None:
        """pkg/controller/replicaset: keep ``spec.replicas`` live pods (not terminating, not ended);
        extra pods are deleted (gracefully) — the newest first."""
        for key, rs in list(self._store.items()):
            if key[0] != "replicasets":
                continue
            live = self._live_pods(rs["metadata"]["uid"], key[1])
            want = rs["spec"].get("replicas", 1)
            if len(live) < want:
                retry_at = self._create_retry_at.get(rs["metadata"]["uid"])
                if retry_at is None or self._t >= retry_at:
                    self._spawn_pods(rs, want - len(live), {})
            elif len(live) > want:
                newest = sorted(live, key=lambda kp: int(kp[1]["metadata"]["resourceVersion"]), reverse=True)
                for pkey, _p in newest[: len(live) - want]:
                    self._delete_pod_gracefully(pkey)
            count = len(self._live_pods(rs["metadata"]["uid"], key[1]))
            if (rs.get("status") or {}).get("replicas") != count:
                rs["status"] = {"replicas": count}
                self._bump(rs)

    def set_pod_crash_loop(self, namespace: str, name: str, restarts: int, exit_code: int = 1) -> dict:
        """The kubelet restarting a crashing container (restartPolicy Always): the pod stays
        ``Running``, its container waits in ``CrashLoopBackOff`` with ``restartCount`` and the last
        termination (pkg/kubelet/kuberuntime, "Container restart policy" in the Pod Lifecycle docs)."""
        with self._lock:
            pod = self._store.get(("pods", namespace, name))
            if pod is None:
                raise KeyError(f"no pod {namespace}/{name}")
            now = _now()
            status = pod.setdefault("status", {})
            status["phase"] = "Running"
            status.setdefault("startTime", now)
            status["containerStatuses"] = [
                {
                    "name": c.get("name", ""),
                    "image": c.get("image", ""),
                    "imageID": "",  # ContainerStatus.imageID is required (empty before the image is pulled)
                    "ready": False,
                    "restartCount": restarts,
                    "state": {
                        "waiting": {
                            "reason": "CrashLoopBackOff",
                            "message": f"back-off 5m0s restarting failed container={c.get('name', '')}",
                        }
                    },
                    "lastState": {
                        "terminated": {
                            "exitCode": exit_code,
                            "reason": "Error",
                            "startedAt": now,
                            "finishedAt": now,
                        }
                    },
                }
                for c in (pod.get("spec") or {}).get("containers", [])
            ]
            self._bump(pod)
            self._record_kubelet_events(pod, "BackOff")
            self._run_controllers()
            return copy.deepcopy(pod)

    def _run_controllers(self) -> None:
        if not self.controllers:
            return
        for _ in range(5):  # until nothing changes (each pass may enable the next)
            rv = self._rv
            self._sync_namespaces()
            self._taint_eviction()
            self._garbage_collect()
            self._sync_resource_claims()
            self._schedule_dra()
            self._retry_unschedulable()
            self._sync_jobs()
            self._sync_deployments()
            self._sync_replicasets()
            self._sync_quotas()
            if self._rv == rv:
                break

    def advance(self, seconds: float = 0.0) -> None:
        """Move the fake's clock: the kubelet stops pods whose grace period ran out (they end
        Failed, still Terminating) and removes pods that are Terminating and already stopped (its
        final delete, grace 0); tolerations with ``tolerationSeconds`` expire; controllers run."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        with self._lock:
            self._t += seconds
            for key, pod in list(self._store.items()):
                if (
                    key[0] == "pods"
                    and pod["metadata"].get("deletionTimestamp")
                    and pod["status"].get("phase") in ("Succeeded", "Failed")
                ):
                    self._remove_pod(key)
            for key, due in sorted(self._terminate_at.items()):
                pod = self._store.get(key)
                if (
                    pod is not None
                    and self._t >= due
                    and pod["status"].get("phase") not in ("Succeeded", "Failed")
                ):
                    self._kubelet_stop(pod)
            self._run_controllers()

    def _job_pod_labels(self, job: dict) -> dict:
        meta = job["metadata"]
        return {
            "job-name": meta["name"],
            "batch.kubernetes.io/job-name": meta["name"],
            "controller-uid": meta["uid"],
            "batch.kubernetes.io/controller-uid": meta["uid"],
        }

    def _spawn_pods(self, owner: dict, count: int, labels: dict, indexes: list[int] | None = None) -> int:
        """Create ``count`` pods from the owner's template through admission; returns how many were
        created. A refused pod (e.g. 403 exceeded quota) is a ``FailedCreate`` Warning event on the
        owner — ``Error creating: <the API's message>`` (pkg/controller/controller_utils.go
        CreatePods) — and the controller tries again after its backoff (:attr:`create_backoff`)."""
        template = owner.get("spec", {}).get("template", {})
        created = 0
        owner_meta = owner["metadata"]
        for i in range(count):
            name = f"{owner_meta['name'][:58]}-{_random_suffix()}"
            annotations = dict(template.get("metadata", {}).get("annotations", {}))
            pod_labels = {**template.get("metadata", {}).get("labels", {}), **labels}
            if indexes is not None:
                # pkg/controller/job/indexed_job_utils.go: the completion index annotation and label.
                annotations["batch.kubernetes.io/job-completion-index"] = str(indexes[i])
                pod_labels["batch.kubernetes.io/job-completion-index"] = str(indexes[i])
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": owner_meta["namespace"],
                    "labels": pod_labels,
                    "annotations": annotations,
                    "ownerReferences": [
                        {
                            "apiVersion": owner["apiVersion"],
                            "kind": owner["kind"],
                            "name": owner_meta["name"],
                            "uid": owner_meta["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": copy.deepcopy(template.get("spec", {})),
                "status": {"phase": "Pending"},
            }
            self._default_pod_spec(pod["spec"], pod=True)
            try:
                self._namespace_lifecycle(RESOURCES["pods"], owner_meta["namespace"], name)
                self._admit_pod(pod)
            except ApiError as e:
                self._record_event(
                    owner,
                    "FailedCreate",
                    f"Error creating: {e.message}",
                    "job-controller" if owner["kind"] == "Job" else "replicaset-controller",
                )
                self._create_retry_at[owner_meta["uid"]] = self._t + self.create_backoff
                return created
            self._new_meta(pod)
            self._schedule_pod(pod)
            self._store[("pods", owner_meta["namespace"], name)] = pod
            created += 1
        self._create_retry_at.pop(owner_meta["uid"], None)
        return created

    def _after_create(self, res: Resource, obj: dict) -> None:
        if res.plural == "pods":
            self._schedule_pod(obj)
        if not self.controllers:
            return
        if res.plural == "jobs":
            spec = obj.get("spec") or {}
            count = min(spec.get("parallelism", 1), spec.get("completions", spec.get("parallelism", 1)))
            indexes = list(range(count)) if spec.get("completionMode") == "Indexed" else None
            created = self._spawn_pods(obj, count, self._job_pod_labels(obj), indexes)
            obj["status"] = {"active": created} if created else {}

    # -- NamespaceLifecycle admission -----------------------------------------------------------------
    def _namespace_lifecycle(self, res: Resource, ns: str, name: str) -> None:
        """plugin/pkg/admission/namespace/lifecycle/admission.go: creating in a namespace that does
        not exist is 404 ``namespaces "x" not found``; in one that is being deleted (``Terminating``)
        403 Forbidden ``<resource> "<name>" is forbidden: unable to create new content in namespace
        <ns> because it is being terminated`` with a cause {reason NamespaceTerminating, field
        metadata.namespace} (k8s.io/api/core/v1 NamespaceTerminatingCause)."""
        namespace = self._store.get(("namespaces", "", ns))
        if namespace is None:
            raise _not_found(RESOURCES["namespaces"], ns)
        if namespace["metadata"].get("deletionTimestamp"):
            group, qual = qualified_resource(res)
            raise ApiError(
                403,
                "Forbidden",
                f'{qual} "{name}" is forbidden: unable to create new content in namespace {ns} '
                "because it is being terminated",
                {
                    "name": name,
                    "group": group,
                    "kind": res.plural,
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {ns} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )

    def _sync_namespaces(self, force: bool = False) -> None:
        """pkg/controller/namespace (deletion.go): a namespace with ``deletionTimestamp`` stays
        ``Terminating`` while its content is deleted — pods gracefully (they keep it Terminating until
        the kubelet removed them), everything else at once — then the ``kubernetes`` finalizer goes
        and so does the namespace. ``force`` (the fake without controllers) removes it all at once."""
        for key, namespace in list(self._store.items()):
            if key[0] != "namespaces" or not namespace["metadata"].get("deletionTimestamp"):
                continue
            ns = key[2]
            for ckey in sorted(k for k in self._store if k[1] == ns and k[0] != "namespaces"):
                if ckey not in self._store:
                    continue
                if ckey[0] == "pods" and not force:
                    self._delete_pod_gracefully(ckey)
                elif ckey[0] == "pods":
                    self._remove_pod(ckey)
                else:
                    del self._store[ckey]
                    self._rv += 1
            if not any(k[1] == ns and k[0] != "namespaces" for k in self._store):
                del self._store[key]
                self._rv += 1
