"""A simulated cluster whose state lives in the database (``SimulatedCluster``).

The in-memory :class:`~apps.clusters.backends.simulated_memory.SimulatedBackend` is per process; the demo runs a web
server, Celery workers and beat in several processes that must all see one cluster, and a restart
must not make every running job look "deleted behind our back". Each call here loads the state under
a row lock, moves the simulated clock to the wall clock (times ``SIMULATED_TIME_SCALE``, plus any
explicit :meth:`advance`), runs the in-memory backend and stores the state back. The lock is held
for microseconds of Python work, never around a network call (there is none).

The simulation follows what a real cluster does with Suanchi's objects (``FaithfulSimulatedBackend``),
so the demo shows the same lifecycle as production:

* **Termination with grace.** Deleting a Job or Deployment (Background propagation) removes it at
  once; its pods become Terminating (``deletionTimestamp``, ``terminationGracePeriodSeconds``,
  default 30 s) and are removed when the grace period ran out (the kubelet's SIGKILL, then its final
  delete). A pod that never started, or already ended, goes at once (pkg/registry/core/pod/strategy.go
  ``CheckGracefulDelete``; Kubernetes docs "Pod Lifecycle" → "Termination of Pods", "Garbage
  Collection" → "Background cascading deletion").
* **NoExecute eviction.** A pod on a node with a ``NoExecute`` taint it does not tolerate gets the
  ``DisruptionTarget`` condition (reason ``DeletionByTaintManager``) and is deleted gracefully
  (pkg/controller/tainteviction; Kubernetes docs "Taints and Tolerations", "Pod disruption
  conditions"). Simplification: a toleration with ``tolerationSeconds`` tolerates for good.
* **Deployment rollout.** A change of a Deployment's ``spec.template`` starts a new revision: with
  Suanchi's ``Recreate`` strategy every old pod is terminated first and the new pods are created once
  they are gone (Kubernetes docs "Deployments" → "Recreate Deployment"); a change of ``replicas``
  alone adds pods or deletes the newest extra ones, the others keep running.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.clusters.backends.base import POD_EVENT_LIMIT, ApplyResult, ClusterBackend, LogOptions
from apps.clusters.backends.simulated_memory import SimulatedBackend, owner_uid
from apps.clusters.models import SimulatedCluster
from apps.core.conf import suanchi_setting

T = TypeVar("T")

DEFAULT_GRACE_SECONDS = 30  # terminationGracePeriodSeconds default (core/v1 PodSpec)
TERMINAL = ("Succeeded", "Failed")


def _tolerates(toleration: dict, taint: dict) -> bool:
    """core/v1 Toleration.ToleratesTaint (k8s.io/api/core/v1/toleration.go): an empty effect matches
    every effect; ``Exists`` (or an empty key with Exists) matches any value; ``Equal`` the value."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def _template_hash(template: dict) -> str:
    return hashlib.sha256(json.dumps(template or {}, sort_keys=True).encode()).hexdigest()[:10]


class FaithfulSimulatedBackend(SimulatedBackend):
    """The in-memory simulation with graceful termination, NoExecute eviction and Deployment
    rollouts (see the module docstring). Its extra state (pods terminating, rollouts waiting) is
    carried in ``to_state`` / ``from_state`` like the rest."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._terminate: dict[tuple[str, str, str], float] = {}  # pod key -> end of its grace
        self._rollouts: dict[tuple[str, str, str], str] = {}  # Deployment key -> template hash waiting

    def to_state(self) -> dict:
        state = super().to_state()
        state["terminate"] = [[*k, due] for k, due in sorted(self._terminate.items())]
        state["rollouts"] = [[*k, h] for k, h in sorted(self._rollouts.items())]
        return state

    @classmethod
    def from_state(cls, state: dict, seed: int = 0) -> FaithfulSimulatedBackend:
        backend = super().from_state(state, seed=seed)
        backend._terminate = {(k, ns, n): due for k, ns, n, due in state.get("terminate", [])}
        backend._rollouts = {(k, ns, n): h for k, ns, n, h in state.get("rollouts", [])}
        return backend

    # -- deletion -----------------------------------------------------------------------------------
    def _pods_owned(self, uid: str, namespace: str) -> list[tuple[tuple[str, str, str], dict]]:
        return [
            (key, pod)
            for key, pod in sorted(self._store.items())
            if key[0] == "Pod" and key[1] == namespace and owner_uid(pod) == uid
        ]

    def _delete_pod(self, key: tuple[str, str, str]) -> None:
        """Graceful deletion of one pod: a pod that never ran or already ended goes now, a running one
        is Terminating until its grace period ran out."""
        pod = self._store.get(key)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        phase = (pod.get("status") or {}).get("phase")
        grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
        if phase != "Running" or not grace:
            self._store.pop(key, None)
            self._schedule.pop(key, None)
            return
        pod["metadata"]["deletionTimestamp"] = self._ts()
        pod["metadata"]["deletionGracePeriodSeconds"] = grace
        self._terminate[key] = self._t + grace
        self._bump(pod)

    def delete(self, kind: str, namespace: str | None, name: str) -> bool:
        self._check_kind(kind)
        if kind not in ("Job", "Deployment", "Pod"):
            return super().delete(kind, namespace, name)
        namespace = namespace or ""
        with self._lock:
            key = (kind, namespace, name)
            obj = self._store.get(key)
            if obj is None:
                return False
            if kind == "Pod":
                self._delete_pod(key)
                return True
            self._store.pop(key)
            self._schedule.pop(key, None)
            self._rollouts.pop(key, None)
            for pod_key, _pod in self._pods_owned(obj["metadata"]["uid"], namespace):
                self._delete_pod(pod_key)  # the garbage collector, propagationPolicy Background
            return True

    # -- Deployment rollout -------------------------------------------------------------------------
    def apply(self, obj: dict) -> ApplyResult:
        kind = obj.get("kind")
        if kind != "Deployment":
            return super().apply(obj)
        with self._lock:
            meta = obj.get("metadata") or {}
            key = ("Deployment", meta.get("namespace", ""), meta.get("name", ""))
            before = copy.deepcopy(self._store.get(key))
            result = super().apply(obj)
            live = self._store.get(key)
            if before is None or live is None or result.action != "updated":
                return result
            old_spec, new_spec = before.get("spec") or {}, live.get("spec") or {}
            pods = [
                (k, p)
                for k, p in self._pods_owned(live["metadata"]["uid"], key[1])
                if not p["metadata"].get("deletionTimestamp")
            ]
            if _template_hash(old_spec.get("template")) != _template_hash(new_spec.get("template")):
                # Recreate: every old pod ends first; the new revision's pods come once they are gone.
                for pod_key, _pod in pods:
                    self._delete_pod(pod_key)
                self._rollouts[key] = _template_hash(new_spec.get("template"))
                self._roll_out()
            else:
                want = int(new_spec.get("replicas", 1))
                for _ in range(want - len(pods)):
                    self._spawn_pod(
                        live, {"pod-template-hash": _template_hash(new_spec.get("template"))}, None
                    )
                for pod_key, _pod in sorted(pods, key=lambda kp: kp[1]["metadata"]["creationTimestamp"])[
                    want:
                ]:
                    self._delete_pod(pod_key)
                live["status"] = {**(live.get("status") or {}), "replicas": want}
            return result

    def _roll_out(self) -> None:
        for key, digest in sorted(self._rollouts.items()):
            dep = self._store.get(key)
            if dep is None:
                self._rollouts.pop(key)
                continue
            if self._pods_owned(dep["metadata"]["uid"], key[1]):
                continue  # old pods still terminating
            replicas = int((dep.get("spec") or {}).get("replicas", 1))
            for _ in range(replicas):
                self._spawn_pod(dep, {"pod-template-hash": digest}, None)
            dep["status"] = {"replicas": replicas, "observedGeneration": dep["metadata"].get("generation", 1)}
            self._rollouts.pop(key)

    # -- NoExecute taints ---------------------------------------------------------------------------
    def _evict_untolerated(self) -> None:
        no_execute = {
            key[2]: [
                t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") == "NoExecute"
            ]
            for key, node in self._store.items()
            if key[0] == "Node"
        }
        for key, pod in sorted(self._store.items()):
            if key[0] != "Pod" or pod["metadata"].get("deletionTimestamp"):
                continue
            if (pod.get("status") or {}).get("phase") in TERMINAL:
                continue
            spec = pod.get("spec") or {}
            node = spec.get("nodeName") or (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname")
            tolerations = spec.get("tolerations") or []
            untolerated = [
                t
                for t in no_execute.get(node or "", [])
                if not any(_tolerates(tol, t) for tol in tolerations)
            ]
            if not untolerated:
                continue
            pod["status"].setdefault("conditions", []).append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "DeletionByTaintManager",
                    "message": "Taint manager: deleting due to NoExecute taint",
                    "lastTransitionTime": self._ts(),
                }
            )
            self._bump(pod)
            self._delete_pod(key)

    def patch_node(self, name: str, labels: dict | None = None, taints: list | None = None) -> dict:
        with self._lock:
            node = super().patch_node(name, labels=labels, taints=taints)
            self._evict_untolerated()
            return node

    # -- time ---------------------------------------------------------------------------------------
    def advance(self, seconds: float) -> list[tuple[str, str, str]]:
        with self._lock:
            transitions = super().advance(seconds)
            for key, due in sorted(self._terminate.items()):
                pod = self._store.get(key)
                if pod is None:
                    self._terminate.pop(key)
                elif self._t >= due or (pod.get("status") or {}).get("phase") in TERMINAL:
                    # SIGKILL after the grace period, then the kubelet's final delete.
                    self._store.pop(key)
                    self._schedule.pop(key, None)
                    self._terminate.pop(key)
                    transitions.append((key[1], key[2], "Deleted"))
            self._evict_untolerated()
            self._roll_out()
            return transitions


class DurableSimulatedBackend(ClusterBackend):
    name = "simulated"

    def __init__(self, cluster: Any, time_scale: float | None = None) -> None:
        self.cluster = cluster
        self.time_scale = (
            float(suanchi_setting("SIMULATED_TIME_SCALE", 1.0)) if time_scale is None else time_scale
        )

    def _row(self) -> SimulatedCluster:
        try:
            return SimulatedCluster.objects.select_for_update().get(cluster_id=self.cluster.pk)
        except SimulatedCluster.DoesNotExist:
            try:
                with transaction.atomic():
                    SimulatedCluster.objects.create(cluster_id=self.cluster.pk, started_at=timezone.now())
            except IntegrityError:
                pass  # another process created it first
            return SimulatedCluster.objects.select_for_update().get(cluster_id=self.cluster.pk)

    def _run(self, fn: Callable[[FaithfulSimulatedBackend], T], *, extra_seconds: float = 0.0) -> T:
        with transaction.atomic():
            row = self._row()
            state = row.state or {"epoch": row.started_at.isoformat()}
            sim = FaithfulSimulatedBackend.from_state(state, seed=self.cluster.pk)
            offset = float(state.get("offset", 0.0)) + extra_seconds
            target = (timezone.now() - row.started_at).total_seconds() * self.time_scale + offset
            if target > sim.clock:
                sim.advance(target - sim.clock)
            result = fn(sim)
            row.state = {**sim.to_state(), "offset": offset}
            row.save(update_fields=["state", "updated_at"])
            return result

    # -- the backend interface --------------------------------------------------------------------
    def get(self, kind: str, namespace: str | None, name: str) -> dict | None:
        return self._run(lambda sim: sim.get(kind, namespace, name))

    def apply(self, obj: dict) -> ApplyResult:
        return self._run(lambda sim: sim.apply(obj))

    def delete(self, kind: str, namespace: str | None, name: str) -> bool:
        return self._run(lambda sim: sim.delete(kind, namespace, name))

    def _known_nodes(self, sim: SimulatedBackend) -> None:
        """A simulated cluster runs every node of the ledger (but a retired one): listing Nodes shows
        them all, as ``kubectl get nodes`` would on a real cluster."""
        from apps.inventory.models import Node

        for name in (
            Node.objects.filter(cluster_id=self.cluster.pk)
            .exclude(status=Node.Status.RETIRED)
            .values_list("name", flat=True)
        ):
            if sim.get("Node", None, name) is None:
                sim.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}}})

    def list_owned(self, kind: str, namespace: str | None = None, selector: str | None = None) -> list[dict]:
        if kind == "Node":

            def nodes(sim: SimulatedBackend) -> list[dict]:
                self._known_nodes(sim)
                return (
                    sim.list_owned(kind, namespace, selector)
                    if selector is not None
                    else sim.list_owned(kind)
                )

            return self._run(nodes)
        if selector is None:
            return self._run(lambda sim: sim.list_owned(kind, namespace))
        return self._run(lambda sim: sim.list_owned(kind, namespace, selector))

    def patch_node(self, name: str, labels: dict | None = None, taints: list | None = None) -> dict:
        def patch(sim: SimulatedBackend) -> dict:
            if sim.get("Node", None, name) is None:  # a simulated cluster knows every ledger node
                sim.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}}})
            return sim.patch_node(name, labels=labels, taints=taints)

        return self._run(patch)

    def pod_events(self, namespace: str, pod: str, *, limit: int = POD_EVENT_LIMIT) -> list[dict]:
        return self._run(lambda sim: sim.pod_events(namespace, pod, limit=limit))

    def _pod_log(self, namespace: str, pod: str, options: LogOptions) -> str:
        return self._run(lambda sim: sim._pod_log(namespace, pod, options))

    # -- simulation controls (tests, demo) ----------------------------------------------------------
    def simulated_now(self) -> Any:
        """This cluster's simulated instant now (its clock moved to the wall clock first)."""
        return self._run(lambda sim: sim.simulated_now())

    def advance(self, seconds: float) -> list[tuple[str, str, str]]:
        """Move this cluster's clock forward by ``seconds`` beyond the wall clock."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        return self._run(lambda sim: [], extra_seconds=seconds)

    def inject_failure(
        self, namespace: str, name: str, reason: str = "Error", exit_code: int = 1
    ) -> list[str]:
        return self._run(lambda sim: sim.inject_failure(namespace, name, reason=reason, exit_code=exit_code))

    def pods_of(self, namespace: str, job_name: str) -> list[dict]:
        return self._run(lambda sim: sim.pods_of(namespace, job_name))
