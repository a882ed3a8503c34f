"""The scheduler, the kubelet, the taint manager and the garbage collector: nodes, pod placement and pod ends."""

from __future__ import annotations

import copy
import uuid
from decimal import Decimal

from tests.kube.fake_apiserver.quantity import _is_extended, parse_quantity
from tests.kube.fake_apiserver.resources import _now


class SchedulerMixin:
    """The scheduler, the kubelet, the taint manager and the garbage collector: nodes, pod placement and pod ends. Mixed into :class:`FakeApiServer`."""

    def set_pod_phase(
        self, namespace: str, name: str, phase: str, exit_code: int | None = None, reason: str = ""
    ) -> dict:
        if phase not in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
            raise ValueError(f"unknown pod phase {phase!r}")
        with self._lock:
            pod = self._store.get(("pods", namespace, name))
            if pod is None:
                raise KeyError(f"no pod {namespace}/{name}")
            if phase == "Running" and (namespace, name) in self._prepare_failed:
                failed = self._prepare_failed[(namespace, name)]
                raise RuntimeError(f"the kubelet cannot start {namespace}/{name}: {failed}")
            now = _now()
            status = pod.setdefault("status", {})
            status["phase"] = phase
            if reason:
                status["reason"] = reason
            else:
                status.pop("reason", None)
            if phase in ("Running", "Succeeded", "Failed"):
                status.setdefault("startTime", now)
            containers = pod.get("spec", {}).get("containers", [])
            cstatuses = []
            for c in containers:
                if phase == "Running":
                    state = {"running": {"startedAt": now}}
                elif phase in ("Succeeded", "Failed"):
                    code = exit_code if exit_code is not None else (0 if phase == "Succeeded" else 1)
                    state = {
                        "terminated": {
                            "exitCode": code,
                            "reason": reason or ("Completed" if phase == "Succeeded" else "Error"),
                            "startedAt": status["startTime"],
                            "finishedAt": now,
                        }
                    }
                else:
                    state = {"waiting": {"reason": reason or "ContainerCreating"}}
                cstatuses.append(
                    {
                        "name": c.get("name", ""),
                        "image": c.get("image", ""),
                        "imageID": "",  # ContainerStatus.imageID is required (empty before the image is pulled)
                        "ready": phase == "Running",
                        "restartCount": 0,
                        "state": state,
                    }
                )
            was_running = any(
                "running" in (cs.get("state") or {}) for cs in status.get("containerStatuses") or []
            )
            status["containerStatuses"] = cstatuses
            self._bump(pod)
            if phase == "Running" and not was_running:
                self._record_kubelet_events(pod, "Started")
            self._run_controllers()
            return copy.deepcopy(pod)

    def add_node(
        self,
        name: str,
        labels: dict | None = None,
        ready: bool = True,
        *,
        capacity: dict | None = None,
        allocatable: dict | None = None,
        taints: list | None = None,
    ) -> dict:
        """Register a Node, as a kubelet would, with a Ready condition. ``capacity`` /
        ``allocatable`` (quantities as strings, e.g. {"nvidia.com/gpu": "8"}; allocatable defaults
        to capacity) and ``taints`` go to ``status`` and ``spec.taints`` when given."""
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": {},
            "status": {},
        }
        if capacity is not None:
            node["status"]["capacity"] = {k: str(v) for k, v in capacity.items()}
            node["status"]["allocatable"] = {k: str(v) for k, v in (allocatable or capacity).items()}
        if taints:
            node["spec"]["taints"] = copy.deepcopy(taints)
        with self._lock:
            self._new_meta(node)
            self._bump(node)
            self._store[("nodes", "", name)] = node
        return self.set_node_ready(name, ready)

    def set_node_ready(self, name: str, ready: bool | None) -> dict:
        """The node lifecycle controller's view (pkg/controller/nodelifecycle): Ready True; False
        (reason KubeletNotReady) with the ``node.kubernetes.io/not-ready`` taints; ``None`` = the
        kubelet stopped posting status (Ready Unknown) with the ``node.kubernetes.io/unreachable``
        taints. Each is NoSchedule + NoExecute; pods tolerate the NoExecute one 300 s by default."""
        with self._lock:
            node = self._store.get(("nodes", "", name))
            if node is None:
                raise KeyError(f"no node {name}")
            status = {True: "True", False: "False", None: "Unknown"}[ready]
            node.setdefault("status", {})["conditions"] = [
                {
                    "type": "Ready",
                    "status": status,
                    "reason": {"True": "KubeletReady", "False": "KubeletNotReady"}.get(
                        status, "NodeStatusUnknown"
                    ),
                    "lastTransitionTime": _now(),
                }
            ]
            spec = node.setdefault("spec", {})
            lifecycle = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
            taints = [t for t in spec.get("taints") or [] if t.get("key") not in lifecycle]
            if ready is not True:
                key = lifecycle[0] if ready is False else lifecycle[1]
                taints += [
                    {"key": key, "effect": "NoSchedule"},
                    {"key": key, "effect": "NoExecute", "timeAdded": _now()},
                ]
            if taints:
                spec["taints"] = taints
            else:
                spec.pop("taints", None)
            self._bump(node)
            self._run_controllers()
            return copy.deepcopy(node)

    # -- internals -------------------------------------------------------------------------------
    def _bump(self, obj: dict) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        self._bumped.append(obj)

    def _new_meta(self, obj: dict) -> None:
        meta = obj["metadata"]
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        meta["generation"] = 1
        self._bump(obj)

    # -- controllers ------------------------------------------------------------------------------
    # What kube-controller-manager, kube-scheduler and the kubelet do, run synchronously after every
    # change and on :meth:`advance` (the fake's clock; real time is not used for deadlines).

    def _owned_by(self, owner_uid: str, namespace: str) -> list[tuple[tuple[str, str, str], dict]]:
        return [
            (key, p)
            for key, p in sorted(self._store.items())
            if key[0] == "pods"
            and key[1] == namespace
            and any(ref.get("uid") == owner_uid for ref in p["metadata"].get("ownerReferences") or [])
        ]

    def _schedule_pod(self, pod: dict) -> None:
        """kube-scheduler, reduced to what Suanchi uses: a pod pinned by ``nodeSelector``
        ``kubernetes.io/hostname`` (or ``nodeName``) is bound to that node when it exists. Admission
        plugin DefaultTolerationSeconds (plugin/pkg/admission/defaulttolerationseconds) adds the
        300 s tolerations of ``node.kubernetes.io/not-ready`` and ``unreachable`` (NoExecute)."""
        spec = pod.setdefault("spec", {})
        tolerations = spec.setdefault("tolerations", [])
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not any(
                t.get("key") == key and t.get("effect") in (None, "", "NoExecute") for t in tolerations
            ):
                tolerations.append(
                    {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
                )
        if spec.get("resourceClaims"):
            return  # bound by the DynamicResources plugin once its claims are allocated (_schedule_dra)
        host = spec.get("nodeName") or (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname")
        if host and ("nodes", "", host) in self._store:
            bound_by_scheduler = not spec.get("nodeName")
            if bound_by_scheduler:
                missing = self._extended_shortfall(pod, self._store[("nodes", "", host)])
                if missing:
                    self._hold_unschedulable(pod, missing)
                    return
            spec["nodeName"] = host
            if bound_by_scheduler:
                self._record_scheduled(pod, host)
                self._mark_scheduled(pod)

    # kube-scheduler's NodeResourcesFit for extended resources (pkg/scheduler/framework/plugins/
    # noderesources/fit.go): a pod fits a node when, for every extended resource it requests (requests
    # default to limits; extended resources must have requests == limits), the node's
    # ``status.allocatable`` minus what the non-terminal pods bound there request covers it; a name the
    # node does not advertise counts as 0 ("Insufficient <name>"). Names in ``ignored_by_scheduler``
    # are skipped, as a scheduler extender's ``managedResources`` with ``ignoredByScheduler: true``
    # make kube-scheduler do (HAMi's chart: charts/hami/templates/_helpers.tpl
    # "hami-vgpu.scheduler.managedResources"). A node registered without any ``capacity`` is not
    # modelled (the tests that never said what it has) and takes any pod, as before.
    def _extended_requests(self, pod: dict) -> dict[str, Decimal]:
        wanted: dict[str, Decimal] = {}
        for c in (pod.get("spec") or {}).get("containers") or []:
            resources = c.get("resources") or {}
            merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            for rname, qty in merged.items():
                if _is_extended(rname) and rname not in self.ignored_by_scheduler:
                    wanted[rname] = wanted.get(rname, Decimal(0)) + parse_quantity(str(qty))[0]
        return wanted

    def _extended_shortfall(self, pod: dict, node: dict) -> list[str]:
        allocatable = (node.get("status") or {}).get("allocatable")
        wanted = self._extended_requests(pod)
        if allocatable is None or not wanted:
            return []
        name = node["metadata"]["name"]
        used: dict[str, Decimal] = {}
        for key, other in self._store.items():
            if (
                key[0] == "pods"
                and other is not pod
                and (other.get("spec") or {}).get("nodeName") == name
                and (other.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            ):
                for rname, qty in self._extended_requests(other).items():
                    used[rname] = used.get(rname, Decimal(0)) + qty
        return sorted(
            rname
            for rname, qty in wanted.items()
            if parse_quantity(str(allocatable.get(rname, "0")))[0] - used.get(rname, Decimal(0)) < qty
        )

    def _hold_unschedulable(self, pod: dict, missing: list[str]) -> None:
        """The pod stays Pending: PodScheduled False (Unschedulable) and a ``FailedScheduling`` Warning
        from default-scheduler, in kube-scheduler's wording ("0/3 nodes are available: 1 Insufficient
        nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector.")."""
        total = sum(1 for k in self._store if k[0] == "nodes")
        parts = [f"1 Insufficient {rname}" for rname in missing]
        if total > 1:
            parts.append(f"{total - 1} node(s) didn't match Pod's node affinity/selector")
        message = f"0/{total} nodes are available: " + ", ".join(parts) + "."
        status = pod.setdefault("status", {})
        conditions = status.get("conditions") or []
        current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if current is not None and current.get("message") == message:
            return
        status["conditions"] = [c for c in conditions if c.get("type") != "PodScheduled"] + [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": _now(),
            }
        ]
        if pod["metadata"].get("uid"):
            self._record_event(pod, "FailedScheduling", message, "default-scheduler")

    @staticmethod
    def _mark_scheduled(pod: dict) -> None:
        status = pod.setdefault("status", {})
        conditions = status.get("conditions") or []
        if any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions):
            status["conditions"] = [c for c in conditions if c.get("type") != "PodScheduled"] + [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()}
            ]

    def _retry_unschedulable(self) -> None:
        """kube-scheduler retries an unschedulable pod when the cluster changes (a pod leaves, a node's
        allocatable grows): pods held by :meth:`_hold_unschedulable` are tried again."""
        for key, pod in list(self._store.items()):
            spec = pod.get("spec") or {}
            if (
                key[0] != "pods"
                or spec.get("nodeName")
                or spec.get("resourceClaims")
                or pod["metadata"].get("deletionTimestamp")
                or (pod.get("status") or {}).get("phase") != "Pending"
                or not any(
                    c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                    for c in (pod.get("status") or {}).get("conditions") or []
                )
            ):
                continue
            rv = self._rv
            self._schedule_pod(pod)
            if spec.get("nodeName") or self._rv != rv:
                self._bump(pod)

    def _delete_pod_gracefully(self, key: tuple[str, str, str], grace: int | None = None) -> None:
        """Graceful deletion (pkg/registry/core/pod/strategy.go CheckGracefulDelete): a pod that was
        never bound to a node, or that is already Succeeded/Failed, goes at once; otherwise it gets
        ``deletionTimestamp`` and ``deletionGracePeriodSeconds`` (``terminationGracePeriodSeconds``,
        default 30) and stays, Terminating, until the kubelet stopped it (:meth:`advance`)."""
        pod = self._store.get(key)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        phase = (pod.get("status") or {}).get("phase")
        if grace is None:
            grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
        if grace == 0 or not (pod.get("spec") or {}).get("nodeName") or phase in ("Succeeded", "Failed"):
            self._remove_pod(key)
            return
        pod["metadata"]["deletionTimestamp"] = _now()
        pod["metadata"]["deletionGracePeriodSeconds"] = grace
        self._terminate_at[key] = self._t + grace
        self._bump(pod)
        self._record_kubelet_events(pod, "Killing")

    def _remove_pod(self, key: tuple[str, str, str]) -> None:
        pod = self._store.pop(key, None)
        self._terminate_at.pop(key, None)
        self._prepare_failed.pop((key[1], key[2]), None)
        if pod is None:
            return
        # Job tracking with finalizers (batch.kubernetes.io/job-tracking): a pod removed before it
        # succeeded is counted as failed by its Job.
        if (pod.get("status") or {}).get("phase") != "Succeeded":
            for ref in pod["metadata"].get("ownerReferences") or []:
                if ref.get("kind") == "Job":
                    self._removed_failed[ref["uid"]] = self._removed_failed.get(ref["uid"], 0) + 1

    def _kubelet_stop(self, pod: dict) -> None:
        """The kubelet killed the containers of a deleted pod: SIGKILL after the grace period, exit
        code 137; a pod with restartPolicy Never/OnFailure ends Failed (pkg/kubelet/status)."""
        now = _now()
        status = pod.setdefault("status", {})
        status["phase"] = "Failed"
        status.setdefault("startTime", now)
        status["containerStatuses"] = [
            {
                "name": c.get("name", ""),
                "image": c.get("image", ""),
                "imageID": "",  # ContainerStatus.imageID is required (empty before the image is pulled)
                "ready": False,
                "restartCount": 0,
                "state": {
                    "terminated": {
                        "exitCode": 137,
                        "reason": "Error",
                        "startedAt": status["startTime"],
                        "finishedAt": now,
                    }
                },
            }
            for c in (pod.get("spec") or {}).get("containers", [])
        ]
        self._bump(pod)

    @staticmethod
    def _tolerates(toleration: dict, taint: dict) -> bool:
        """k8s.io/api/core/v1 toleration.go ToleratesTaint."""
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            return False
        if toleration.get("key") and toleration["key"] != taint.get("key"):
            return False
        if toleration.get("operator") == "Exists":
            return True
        if not toleration.get("key") and toleration.get("operator") != "Exists":
            return False
        return (toleration.get("value") or "") == (taint.get("value") or "")

    def _taint_eviction(self) -> None:
        """pkg/controller/tainteviction: a pod on a node with a NoExecute taint it does not tolerate
        gets the ``DisruptionTarget`` condition (reason DeletionByTaintManager) and is deleted; one
        that tolerates it for ``tolerationSeconds`` is deleted once that time since the taint passed."""
        for (plural, _, name), node in list(self._store.items()):
            if plural != "nodes":
                continue
            taints = [
                t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") == "NoExecute"
            ]
            seen = {(t.get("key"), t.get("value")) for t in taints}
            for tkey in [k for k in self._taint_since if k[0] == name and k[1:] not in seen]:
                del self._taint_since[tkey]
            for t in taints:
                self._taint_since.setdefault((name, t.get("key"), t.get("value")), self._t)
            if not taints:
                continue
            for key, pod in list(self._store.items()):
                if key[0] != "pods" or (pod.get("spec") or {}).get("nodeName") != name:
                    continue
                if pod["metadata"].get("deletionTimestamp") or pod["status"].get("phase") in (
                    "Succeeded",
                    "Failed",
                ):
                    continue
                tolerations = (pod.get("spec") or {}).get("tolerations") or []
                evict = False
                for t in taints:
                    matching = [tol for tol in tolerations if self._tolerates(tol, t)]
                    if not matching:
                        evict = True
                        break
                    limits = [
                        tol["tolerationSeconds"]
                        for tol in matching
                        if tol.get("tolerationSeconds") is not None
                    ]
                    if len(limits) == len(matching):
                        since = self._taint_since[(name, t.get("key"), t.get("value"))]
                        if self._t >= since + max(0, min(limits)):
                            evict = True
                            break
                if evict:
                    pod["status"].setdefault("conditions", []).append(
                        {
                            "type": "DisruptionTarget",
                            "status": "True",
                            "reason": "DeletionByTaintManager",
                            "message": "Taint manager: deleting due to NoExecute taint",
                            "lastTransitionTime": _now(),
                        }
                    )
                    self._bump(pod)
                    self._delete_pod_gracefully(key)

    def _garbage_collect(self) -> None:
        """pkg/controller/garbagecollector: dependents whose owner is gone are deleted (Background);
        an owner deleted with Foreground (finalizer ``foregroundDeletion``) goes once its dependents
        are gone."""
        uids = {o["metadata"]["uid"]: key for key, o in self._store.items()}
        for key, obj in list(self._store.items()):
            refs = obj["metadata"].get("ownerReferences") or []
            if not refs or any(ref.get("uid") in uids for ref in refs):
                continue
            if key[0] == "pods":
                self._delete_pod_gracefully(key)
            elif key[0] != "events":  # a ReplicaSet whose Deployment is gone; then its pods
                del self._store[key]
                self._rv += 1  # a change: the next pass collects its pods
        for key, obj in list(self._store.items()):
            meta = obj["metadata"]
            if "foregroundDeletion" in (meta.get("finalizers") or []) and not self._owned_by(
                meta["uid"], key[1]
            ):
                del self._store[key]
