"""The simulated cluster, in memory: objects kept in a dict, pods "run" for their expected duration,
so everything above the backend interface (push, reconcile, preemption) is shared with a real
cluster. The durable one the demo runs (its state in the database) is
:mod:`apps.clusters.backends.simulated_durable`."""

from __future__ import annotations

import copy
import datetime as dt
import random
import threading
import uuid
import zlib
from typing import Any

from apps.clusters.backends.base import (
    API_VERSIONS,
    EXPECTED_DURATION_ANNOTATION,
    KINDS,
    MANAGED_BY,
    POD_EVENT_LIMIT,
    ApplyResult,
    ClusterBackend,
    LogOptions,
    apply_result,
    object_key,
    object_ref,
)
from apps.clusters.backends.errors import PermanentBackendError
from apps.clusters.backends.objects import apply_patch, parse_selector, selector_matches, with_last_applied
from apps.clusters.backends.taints import merge_owned_taints, validate_taints

LOG_STEP_S = 10  # a simulated container writes one log line every 10 simulated seconds


class SimulatedBackend(ClusterBackend):
    """In-memory cluster. A Job gets one pod, a Deployment ``replicas`` pods, like the controllers.

    Pods stay Pending for 1-5 simulated seconds, then run; a Job's pod succeeds after its expected
    duration (annotation ``suanchi.io/expected-duration-seconds`` on the Job or its template,
    default ``default_duration``) times a random factor in [0.9, 1.1]; Deployment pods run until
    deleted. All randomness comes from ``seed``, so a run is reproducible; time only moves with
    :meth:`advance`.
    """

    name = "simulated"

    def __init__(self, seed: int = 0, default_duration: float = 3600.0, now: dt.datetime | None = None):
        self._rng = random.Random(seed)
        self._lock = threading.RLock()
        self._store: dict[tuple[str, str, str], dict] = {}
        self._rv = 0
        self._t = 0.0
        self._epoch = now or dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
        self.default_duration = default_duration
        # pod key -> {"start_at": t, "end_at": t | None}
        self._schedule: dict[tuple[str, str, str], dict] = {}

    # -- state ------------------------------------------------------------------------------------
    def to_state(self) -> dict:
        """Everything needed to carry on elsewhere (another process, after a restart), as JSON."""
        with self._lock:
            version, internal, gauss = self._rng.getstate()
            return {
                "objects": [[*key, obj] for key, obj in sorted(self._store.items())],
                "schedule": [[*key, plan] for key, plan in sorted(self._schedule.items())],
                "rv": self._rv,
                "t": self._t,
                "epoch": self._epoch.isoformat(),
                "default_duration": self.default_duration,
                "rng": [version, list(internal), gauss],
            }

    @classmethod
    def from_state(cls, state: dict, seed: int = 0) -> SimulatedBackend:
        epoch = dt.datetime.fromisoformat(state["epoch"]) if state.get("epoch") else None
        backend = cls(seed=seed, default_duration=state.get("default_duration", 3600.0), now=epoch)
        backend._store = {(k, ns, n): obj for k, ns, n, obj in state.get("objects", [])}
        backend._schedule = {(k, ns, n): plan for k, ns, n, plan in state.get("schedule", [])}
        backend._rv = state.get("rv", 0)
        backend._t = state.get("t", 0.0)
        if state.get("rng"):
            version, internal, gauss = state["rng"]
            backend._rng.setstate((version, tuple(internal), gauss))
        return backend

    # -- time -------------------------------------------------------------------------------------
    @property
    def clock(self) -> float:
        """Simulated seconds since the backend was created."""
        return self._t

    def simulated_now(self) -> dt.datetime:
        """The simulated instant now (the epoch plus the simulated seconds)."""
        return self._epoch + dt.timedelta(seconds=self._t)

    def _ts(self) -> str:
        return (self._epoch + dt.timedelta(seconds=self._t)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _bump(self, obj: dict) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)

    def _uid(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    # -- interface --------------------------------------------------------------------------------
    def get(self, kind: str, namespace: str | None, name: str) -> dict | None:
        self._check_kind(kind)
        with self._lock:
            obj = self._store.get((kind, (namespace or "") if KINDS[kind][2] else "", name))
            return copy.deepcopy(obj) if obj else None

    @staticmethod
    def _check_kind(kind: str) -> None:
        if kind not in KINDS:
            raise PermanentBackendError(f"unsupported kind {kind!r} (supported: {', '.join(KINDS)})")

    def apply(self, obj: dict) -> ApplyResult:
        kind, namespace, name = object_key(obj)
        ref = object_ref(kind, namespace, name)
        if obj.get("apiVersion", API_VERSIONS[kind]) != API_VERSIONS[kind]:
            raise PermanentBackendError(
                f"create {ref}: apiVersion {obj.get('apiVersion')!r} is not {API_VERSIONS[kind]}"
            )
        if kind == "Node" and (obj.get("spec") or {}).get("taints") is not None:
            validate_taints(obj["spec"]["taints"])
        with self._lock:
            if namespace and ("Namespace", "", namespace) not in self._store:
                raise PermanentBackendError(
                    f'create {ref}: 404 NotFound: namespaces "{namespace}" not found', 404, "NotFound"
                )
            live = self._store.get((kind, namespace, name))
            if live is None:
                live = with_last_applied(obj)
                live["apiVersion"] = API_VERSIONS[kind]
                meta = live["metadata"]
                meta.update(uid=self._uid(), creationTimestamp=self._ts(), generation=1)
                if namespace:
                    meta["namespace"] = namespace
                if kind == "Namespace":
                    meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = name
                    live["status"] = {"phase": "Active"}
                self._bump(live)
                self._store[(kind, namespace, name)] = live
                self._after_create(kind, live)
                return apply_result("created", kind, namespace, name, copy.deepcopy(live))
            patch = apply_patch(obj, live)
            if patch is None:
                return apply_result("unchanged", kind, namespace, name, copy.deepcopy(live))
            old_spec = copy.deepcopy(live.get("spec"))
            for key in ("labels", "annotations"):
                if key in patch.get("metadata", {}):
                    live["metadata"][key] = _merge(live["metadata"].get(key) or {}, patch["metadata"][key])
            for key in ("spec", "data"):
                if key in patch:
                    live[key] = _merge(live.get(key), patch[key])
            if live.get("spec") != old_spec:
                live["metadata"]["generation"] += 1
            self._bump(live)
            return apply_result("updated", kind, namespace, name, copy.deepcopy(live))

    def delete(self, kind: str, namespace: str | None, name: str) -> bool:
        self._check_kind(kind)
        namespace = (namespace or "") if KINDS[kind][2] else ""
        with self._lock:
            obj = self._store.pop((kind, namespace, name), None)
            if obj is None:
                return False
            if kind == "Namespace":
                for key in [k for k in self._store if k[1] == name]:
                    self._store.pop(key)
                    self._schedule.pop(key, None)
            elif kind in ("Job", "Deployment"):  # propagationPolicy Background
                uid = obj["metadata"]["uid"]
                for key, pod in list(self._store.items()):
                    if key[0] == "Pod" and key[1] == namespace and owner_uid(pod) == uid:
                        self._store.pop(key)
                        self._schedule.pop(key, None)
            self._schedule.pop((kind, namespace, name), None)
            return True

    def list_owned(self, kind: str, namespace: str | None = None, selector: str = MANAGED_BY) -> list[dict]:
        self._check_kind(kind)
        reqs = parse_selector(selector)
        with self._lock:
            return [
                copy.deepcopy(obj)
                for (k, ns, _), obj in sorted(self._store.items())
                if k == kind
                and (not namespace or ns == namespace)
                and selector_matches(obj["metadata"].get("labels") or {}, reqs)
            ]

    def patch_node(self, name: str, labels: dict | None = None, taints: list | None = None) -> dict:
        with self._lock:
            node = self._store.get(("Node", "", name))
            if node is None:
                raise PermanentBackendError(
                    f'patch Node {name}: 404 NotFound: nodes "{name}" not found', 404, "NotFound"
                )
            if taints is not None:
                validate_taints(taints)
            node_labels = node["metadata"].setdefault("labels", {})
            for key, value in (labels or {}).items():
                if value is None:
                    node_labels.pop(key, None)
                else:
                    node_labels[key] = value
            if taints is not None:  # only Suanchi's taints are replaced, as on a real cluster
                spec = node.setdefault("spec", {})
                merged = merge_owned_taints(spec.get("taints") or [], taints)
                if merged:
                    spec["taints"] = merged
                else:
                    spec.pop("taints", None)
            self._bump(node)
            return copy.deepcopy(node)

    # -- simulation -------------------------------------------------------------------------------
    def _after_create(self, kind: str, obj: dict) -> None:
        meta = obj["metadata"]
        if kind == "Job":
            labels = {
                "job-name": meta["name"],
                "batch.kubernetes.io/job-name": meta["name"],
                "controller-uid": meta["uid"],
                "batch.kubernetes.io/controller-uid": meta["uid"],
            }
            duration = _expected_duration(obj, self.default_duration) * self._rng.uniform(0.9, 1.1)
            self._spawn_pod(obj, labels, duration)
            obj["status"] = {"active": 1}
        elif kind == "Deployment":
            replicas = (obj.get("spec") or {}).get("replicas", 1)
            for _ in range(replicas):
                self._spawn_pod(obj, {"pod-template-hash": meta["uid"][:10]}, None)
            obj["status"] = {"replicas": replicas, "observedGeneration": 1}
        elif kind == "Pod":
            obj["status"] = {"phase": "Pending"}
            duration = float(meta.get("annotations", {}).get(EXPECTED_DURATION_ANNOTATION, 0)) or None
            self._schedule[("Pod", meta["namespace"], meta["name"])] = {
                "start_at": self._t + self._rng.uniform(1, 5),
                "duration": duration,
            }

    def _spawn_pod(self, owner: dict, labels: dict, duration: float | None) -> None:
        template = (owner.get("spec") or {}).get("template") or {}
        tmeta = template.get("metadata") or {}
        ometa = owner["metadata"]
        suffix = "".join(self._rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
        name = f"{ometa['name']}-{suffix}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": ometa["namespace"],
                "labels": {**(tmeta.get("labels") or {}), **labels},
                "annotations": dict(tmeta.get("annotations") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": owner["apiVersion"],
                        "kind": owner["kind"],
                        "name": ometa["name"],
                        "uid": ometa["uid"],
                        "controller": True,
                    }
                ],
                "uid": self._uid(),
                "creationTimestamp": self._ts(),
                "generation": 1,
            },
            "spec": copy.deepcopy(template.get("spec") or {}),
            "status": {"phase": "Pending"},
        }
        self._bump(pod)
        key = ("Pod", ometa["namespace"], name)
        self._store[key] = pod
        self._schedule[key] = {"start_at": self._t + self._rng.uniform(1, 5), "duration": duration}

    def pods_of(self, namespace: str, job_name: str) -> list[dict]:
        return self.list_owned("Pod", namespace, f"job-name={job_name}")

    # -- what a user reads of a pod (issue 21): synthetic, from the pod's real lifecycle -----------
    def _instant(self, value: str | None) -> dt.datetime | None:
        if not value:
            return None
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))

    def _pod_container(self, pod: dict, container: str | None) -> str:
        names = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
        ref = f"{pod['metadata']['name']}"
        if container:
            if container not in names:
                raise PermanentBackendError(
                    f"container {container} is not valid for pod {ref}", 400, "BadRequest"
                )
            return container
        if len(names) != 1:
            raise PermanentBackendError(
                f"a container name must be specified for pod {ref}, choose one of: [{' '.join(names)}]",
                400,
                "BadRequest",
            )
        return names[0]

    def pod_events(self, namespace: str, pod: str, *, limit: int = POD_EVENT_LIMIT) -> list[dict]:
        """The Events a scheduler and a kubelet would have written for this pod, made up from what the
        simulation did to it (bound when created, started at ``status.startTime``, stopped when
        deleted). Reasons and messages follow kube-scheduler ("Scheduled") and the kubelet
        (pkg/kubelet/events: Pulled, Created, Started, Killing). Marked simulated
        (``source.component`` "suanchi-simulator")."""
        with self._lock:
            live = self._store.get(("Pod", namespace, pod))
            if live is None:
                return []
            live = copy.deepcopy(live)
        meta, spec, status = live["metadata"], live.get("spec") or {}, live.get("status") or {}
        node = spec.get("nodeName") or (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname") or ""
        containers = spec.get("containers") or []
        out: list[tuple[str, str, str, str]] = []  # (at, type, reason, message)
        out.append(
            (
                meta.get("creationTimestamp", ""),
                "Normal",
                "Scheduled",
                f"Successfully assigned {namespace}/{pod} to {node or 'a simulated node'}",
            )
        )
        if status.get("startTime"):
            for c in containers:
                name = c.get("name", "")
                out += [
                    (
                        status["startTime"],
                        "Normal",
                        "Pulled",
                        f'Container image "{c.get("image", "")}" already present on machine',
                    ),
                    (status["startTime"], "Normal", "Created", f"Created container: {name}"),
                    (status["startTime"], "Normal", "Started", f"Started container {name}"),
                ]
        if meta.get("deletionTimestamp"):
            for c in containers:
                out.append(
                    (
                        meta["deletionTimestamp"],
                        "Normal",
                        "Killing",
                        f"Stopping container {c.get('name', '')}",
                    )
                )
        events = []
        for i, (at, type_, reason, message) in enumerate(out[:limit]):
            events.append(
                {
                    "metadata": {"name": f"{pod}.sim{i}", "namespace": namespace},
                    "involvedObject": {
                        "kind": "Pod",
                        "name": pod,
                        "namespace": namespace,
                        "uid": meta["uid"],
                    },
                    "type": type_,
                    "reason": reason,
                    "message": message,
                    "count": 1,
                    "firstTimestamp": at,
                    "lastTimestamp": at,
                    "source": {"component": "suanchi-simulator"},
                }
            )
        return events

    def _pod_log(self, namespace: str, pod: str, options: LogOptions) -> str:
        """Synthetic log lines, one per ``LOG_STEP_S`` simulated seconds the container ran (from
        ``startTime`` to its end or now), each marked ``[simulated]``, the exit on the last line. The
        errors follow the API server and the kubelet: 404 for a missing pod, 400 "a container name
        must be specified" / "is waiting to start" (pkg/registry/core/pod/strategy.go LogLocation,
        pkg/kubelet/kubelet_pods.go validateContainerLogStatus)."""
        with self._lock:
            live = self._store.get(("Pod", namespace, pod))
            if live is None:
                raise PermanentBackendError(f'pods "{pod}" not found', 404, "NotFound")
            live = copy.deepcopy(live)
            now = self._epoch + dt.timedelta(seconds=self._t)
        container, tail_lines, limit_bytes = options.container, options.tail_lines, options.limit_bytes
        name = self._pod_container(live, container)
        status = live.get("status") or {}
        if options.previous:
            raise PermanentBackendError(
                f'previous terminated container "{name}" in pod "{pod}" not found', 400, "BadRequest"
            )
        start = self._instant(status.get("startTime"))
        if start is None:
            raise PermanentBackendError(
                f'container "{name}" in pod "{pod}" is waiting to start: ContainerCreating',
                400,
                "BadRequest",
            )
        state = {}
        for cs in status.get("containerStatuses") or []:
            if cs.get("name") == name:
                state = cs.get("state") or {}
        terminated = state.get("terminated")
        end = self._instant((terminated or {}).get("finishedAt")) or now
        steps = max(0, int((end - start).total_seconds() // LOG_STEP_S))
        lines = []
        uid = live["metadata"].get("uid", "")
        first = max(1, steps - max(0, tail_lines) + 1)  # only the lines the tail can show are made
        for i in range(first, steps + 1):
            at = start + dt.timedelta(seconds=i * LOG_STEP_S)
            noise = (zlib.crc32(f"{uid}/{i}".encode()) % 1000) / 1000  # varies per line, reproducibly
            loss = 2.5 / (1 + i / 60) + 0.05 * noise
            lines.append(
                f"{at:%Y-%m-%dT%H:%M:%SZ} [simulated] {name}: step {i} loss={loss:.4f} "
                f"samples/s={900 + 200 * noise:.1f}"
            )
        if terminated:
            lines.append(
                f"{end:%Y-%m-%dT%H:%M:%SZ} [simulated] {name}: exited with code "
                f"{terminated.get('exitCode')} ({terminated.get('reason') or 'Completed'})"
            )
        if tail_lines >= 0:
            lines = lines[-tail_lines:] if tail_lines else []
        text = "".join(line + "\n" for line in lines)
        data = text.encode()
        if limit_bytes and len(data) > limit_bytes:  # limitBytes stops reading after that many bytes
            data = data[:limit_bytes]
        return data.decode("utf-8", errors="replace")

    def advance(self, seconds: float) -> list[tuple[str, str, str]]:
        """Move the simulated clock; returns the (namespace, pod, new phase) transitions, in order."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        transitions: list[tuple[str, str, str]] = []
        with self._lock:
            self._t += seconds
            for key in sorted(self._schedule):
                plan = self._schedule[key]
                pod = self._store.get(key)
                if pod is None:
                    continue
                phase = pod["status"].get("phase")
                if phase == "Pending" and self._t >= plan["start_at"]:
                    self._set_phase(pod, "Running", at=plan["start_at"])
                    transitions.append((key[1], key[2], "Running"))
                    phase = "Running"
                if (
                    phase == "Running"
                    and plan["duration"] is not None
                    and self._t >= plan["start_at"] + plan["duration"]
                ):
                    self._set_phase(pod, "Succeeded", exit_code=0, reason="Completed")
                    transitions.append((key[1], key[2], "Succeeded"))
        return transitions

    def inject_failure(
        self, namespace: str, name: str, reason: str = "Error", exit_code: int = 1
    ) -> list[str]:
        """Fail the pod ``name`` — or, when ``name`` is a Job/Deployment, its pods. Returns the pods failed."""
        with self._lock:
            pods = []
            if ("Pod", namespace, name) in self._store:
                pods = [self._store[("Pod", namespace, name)]]
            else:
                owner = self._store.get(("Job", namespace, name)) or self._store.get(
                    ("Deployment", namespace, name)
                )
                if owner is None:
                    raise KeyError(f"no pod, Job or Deployment {namespace}/{name}")
                uid = owner["metadata"]["uid"]
                pods = [
                    p
                    for (k, ns, _), p in self._store.items()
                    if k == "Pod" and ns == namespace and owner_uid(p) == uid
                ]
            for pod in pods:
                self._set_phase(pod, "Failed", exit_code=exit_code, reason=reason)
            return [p["metadata"]["name"] for p in pods]

    def _set_phase(
        self, pod: dict, phase: str, exit_code: int | None = None, reason: str = "", at: float | None = None
    ) -> None:
        status = pod["status"]
        status["phase"] = phase
        now = self._ts()
        if phase == "Running":
            start = (self._epoch + dt.timedelta(seconds=at if at is not None else self._t)).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
            status["startTime"] = start
            state = {"running": {"startedAt": start}}
        else:
            status.setdefault("startTime", now)
            state = {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": reason,
                    "startedAt": status["startTime"],
                    "finishedAt": now,
                }
            }
            if phase == "Failed":
                status["reason"] = reason
        status["containerStatuses"] = [
            {
                "name": c.get("name", ""),
                "image": c.get("image", ""),
                "ready": phase == "Running",
                "restartCount": 0,
                "state": state,
            }
            for c in (pod.get("spec") or {}).get("containers", [])
        ]
        if phase != "Running":
            self._schedule.pop(("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"]), None)
        self._bump(pod)
        self._sync_owner(pod)

    def _sync_owner(self, pod: dict) -> None:
        ns = pod["metadata"]["namespace"]
        job_name = (pod["metadata"].get("labels") or {}).get("job-name")
        job = self._store.get(("Job", ns, job_name)) if job_name else None
        if job is None:
            return
        uid = job["metadata"]["uid"]
        phases = [
            p["status"].get("phase")
            for (k, n, _), p in self._store.items()
            if k == "Pod" and n == ns and owner_uid(p) == uid
        ]
        status = job.setdefault("status", {})
        status.update(
            active=sum(p in ("Pending", "Running") for p in phases),
            succeeded=phases.count("Succeeded"),
            failed=phases.count("Failed"),
        )
        if "Running" in phases:
            status.setdefault("startTime", self._ts())
        if status["succeeded"]:
            status["conditions"] = [{"type": "Complete", "status": "True", "lastTransitionTime": self._ts()}]
            status["completionTime"] = self._ts()
        elif status["failed"] > (job.get("spec") or {}).get("backoffLimit", 6):
            status["conditions"] = [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "lastTransitionTime": self._ts(),
                }
            ]
        self._bump(job)


def _merge(live: Any, desired: Any) -> Any:
    """RFC 7386 merge-patch semantics for the simulated update (dicts merge, null removes,
    everything else replaces)."""
    if isinstance(live, dict) and isinstance(desired, dict):
        out = dict(live)
        for key, value in desired.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = _merge(live.get(key), value)
        return out
    return copy.deepcopy(desired)


def owner_uid(obj: dict) -> str | None:
    refs = obj["metadata"].get("ownerReferences") or []
    return refs[0]["uid"] if refs else None


def _expected_duration(obj: dict, default: float) -> float:
    for meta in (
        obj.get("metadata") or {},
        ((obj.get("spec") or {}).get("template") or {}).get("metadata") or {},
    ):
        value = (meta.get("annotations") or {}).get(EXPECTED_DURATION_ANNOTATION)
        if value is not None:
            try:
                return float(value)
            except ValueError:
                raise PermanentBackendError(
                    f"{EXPECTED_DURATION_ANNOTATION}={value!r} is not a number of seconds"
                )
    return default
