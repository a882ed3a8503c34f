"""ResourceQuota admission, Events the components record, and pod logs."""

from __future__ import annotations

import copy
import json
import secrets
from decimal import Decimal

from tests.kube.fake_apiserver.names import FieldErrors
from tests.kube.fake_apiserver.quantity import (
    _quota_counts,
    canonical_quantity,
    format_quantity,
    parse_quantity,
    pod_quota_usage,
)
from tests.kube.fake_apiserver.resources import RESOURCES, ApiError, _now


class QuotasEventsMixin:
    """ResourceQuota admission, Events the components record, and pod logs. Mixed into :class:`FakeApiServer`."""

    # -- ResourceQuota admission (staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota) ---
    def _validate_quota(self, quota: dict) -> None:
        """pkg/apis/core/validation ValidateResourceQuota: every ``spec.hard`` value is a Quantity;
        kube-apiserver stores it canonicalised (``1000m`` → ``1``, ``1024Mi`` → ``1Gi``)."""
        hard = (quota.get("spec") or {}).get("hard") or {}
        name = quota["metadata"].get("name", "")
        for key, value in list(hard.items()):
            try:
                hard[key] = canonical_quantity(value)
            except (ValueError, ArithmeticError):
                raise self._invalid(
                    RESOURCES["resourcequotas"],
                    name,
                    f"spec.hard[{key}]",
                    f"Invalid value: {json.dumps(value)}: quantities must be numbers with a unit",
                ) from None

    def _quota_used(self, namespace: str, skip: tuple | None = None) -> dict[str, Decimal]:
        used: dict[str, Decimal] = {}
        for key, pod in self._store.items():
            if key[0] == "pods" and key[1] == namespace and key != skip and _quota_counts(pod):
                for name, q in pod_quota_usage(pod).items():
                    used[name] = used.get(name, Decimal(0)) + q
        return used

    def _admit_pod(self, pod: dict) -> None:
        """The ResourceQuota admission plugin's checkRequest (controller.go): for each quota of the
        namespace that constrains something the pod requests, used + requested must stay within
        hard, else 403 Forbidden ``pods "x" is forbidden: exceeded quota: <name>, requested: …,
        used: …, limited: …`` (only the exceeded resources, sorted, ``name=quantity``). Not
        implemented: the "must specify requests/limits" constraint, scopes and scope selectors."""
        meta = pod["metadata"]
        ns = meta.get("namespace", "")
        requested = pod_quota_usage(pod)
        used = None
        for (plural, qns, qname), quota in sorted(self._store.items()):
            if plural != "resourcequotas" or qns != ns:
                continue
            hard = {k: parse_quantity(v)[0] for k, v in ((quota.get("spec") or {}).get("hard") or {}).items()}
            restricted = sorted(set(hard) & set(requested))
            if not restricted:
                continue
            if used is None:
                used = self._quota_used(ns, skip=("pods", ns, meta.get("name", "")))
            failed = [r for r in restricted if used.get(r, Decimal(0)) + requested[r] > hard[r]]
            if failed:

                def show(values: dict, failed: list[str] = failed) -> str:
                    return ",".join(
                        f"{r}={format_quantity(values.get(r, Decimal(0)), 'binary' if 'memory' in r or 'storage' in r else 'decimal')}"
                        for r in failed
                    )

                raise ApiError(
                    403,
                    "Forbidden",
                    f'pods "{meta.get("name", "")}" is forbidden: exceeded quota: {qname}, requested: {show(requested)}, '
                    f"used: {show(used)}, limited: {show(hard)}",
                    {"name": meta.get("name", ""), "kind": "pods"},
                )

    def _sync_quotas(self) -> None:
        """pkg/controller/resourcequota: ``status.hard`` = ``spec.hard``, ``status.used`` = what the
        namespace's non-terminal pods count against each constrained resource."""
        for (plural, ns, _name), quota in list(self._store.items()):
            if plural != "resourcequotas":
                continue
            hard = dict((quota.get("spec") or {}).get("hard") or {})
            used_all = self._quota_used(ns)
            used = {
                k: format_quantity(used_all.get(k, Decimal(0)), parse_quantity(v)[1]) for k, v in hard.items()
            }
            status = {"hard": hard, "used": used}
            if quota.get("status") != status:
                quota["status"] = status
                self._bump(quota)

    def _record_event(
        self, owner: dict, reason: str, message: str, component: str, type_: str = "Warning"
    ) -> None:
        """A core/v1 Event on ``owner`` as client-go's EventRecorder writes it (name
        ``<object>.<hex>``; a repeat of the same reason and message bumps ``count`` and
        ``lastTimestamp``, as the event correlator's aggregation does)."""
        meta = owner["metadata"]
        ns = meta.get("namespace", "")
        for (plural, ens, _), ev in self._store.items():
            inv = ev.get("involvedObject") or {}
            if (
                plural == "events"
                and ens == ns
                and inv.get("uid") == meta["uid"]
                and ev.get("reason") == reason
                and ev.get("message") == message
            ):
                ev["count"] = ev.get("count", 1) + 1
                ev["lastTimestamp"] = _now()
                self._bump(ev)
                return
        name = f"{meta['name']}.{secrets.token_hex(8)}"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {
                "apiVersion": owner.get("apiVersion", ""),
                "kind": owner.get("kind", ""),
                "name": meta["name"],
                "namespace": ns,
                "uid": meta["uid"],
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "count": 1,
            "firstTimestamp": _now(),
            "lastTimestamp": _now(),
            "source": {"component": component},
            "reportingComponent": component,
        }
        self._new_meta(event)
        self._store[("events", ns, name)] = event

    # -- pod events and logs (issue 21) ------------------------------------------------------------
    def _record_scheduled(self, pod: dict, node: str) -> None:
        """kube-scheduler's event when it binds a pod (pkg/scheduler/schedule_one.go: reason
        ``Scheduled``, "Successfully assigned <ns>/<pod> to <node>", Normal)."""
        meta = pod["metadata"]
        if not meta.get("uid"):
            return
        self._record_event(
            pod,
            "Scheduled",
            f"Successfully assigned {meta.get('namespace', '')}/{meta['name']} to {node}",
            "default-scheduler",
            "Normal",
        )

    def _record_kubelet_events(self, pod: dict, what: str) -> None:
        """The kubelet's container events (reasons of pkg/kubelet/events/event.go, messages of
        pkg/kubelet/images and pkg/kubelet/kuberuntime): on start ``Pulled`` ("Container image ...
        already present on machine"), ``Created`` ("Created container: <name>"), ``Started``
        ("Started container <name>"); on a graceful delete of running containers ``Killing``
        ("Stopping container <name>"); on a crash loop ``BackOff`` (Warning, "Back-off restarting
        failed container <name> in pod <pod>_<ns>(<uid>)")."""
        meta = pod["metadata"]
        ns, name = meta.get("namespace", ""), meta["name"]
        running = {
            cs.get("name")
            for cs in (pod.get("status") or {}).get("containerStatuses") or []
            if "running" in (cs.get("state") or {})
        }
        for c in (pod.get("spec") or {}).get("containers", []):
            cname = c.get("name", "")
            if what == "Started":
                self._record_event(
                    pod,
                    "Pulled",
                    f'Container image "{c.get("image", "")}" already present on machine',
                    "kubelet",
                    "Normal",
                )
                self._record_event(pod, "Created", f"Created container: {cname}", "kubelet", "Normal")
                self._record_event(pod, "Started", f"Started container {cname}", "kubelet", "Normal")
            elif what == "Killing" and cname in running:
                self._record_event(pod, "Killing", f"Stopping container {cname}", "kubelet", "Normal")
            elif what == "BackOff":
                self._record_event(
                    pod,
                    "BackOff",
                    f"Back-off restarting failed container {cname} in pod {name}_{ns}({meta['uid']})",
                    "kubelet",
                )

    def set_pod_log(
        self, namespace: str, name: str, text: str, container: str | None = None, previous: bool = False
    ) -> None:
        """What a container wrote (``container`` defaults to the pod's first one); ``previous`` =
        the log of its last terminated instance (``kubectl logs --previous``)."""
        with self._lock:
            pod = self._store.get(("pods", namespace, name))
            if pod is None:
                raise KeyError(f"no pod {namespace}/{name}")
            if container is None:
                container = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("name", "")
            self._logs[(namespace, name, container, previous)] = text

    def _pod_log(self, method: str, ns: str, name: str, query: dict) -> tuple:
        """GET /api/v1/namespaces/{ns}/pods/{name}/log, text/plain (Kubernetes API reference, Pod v1,
        "read log of the specified Pod"; query PodLogOptions ``container``, ``tailLines``,
        ``limitBytes``, ``previous``; ``follow``, ``sinceSeconds``, ``sinceTime``, ``timestamps`` are
        not implemented and ignored). In kube-apiserver's order: 404 for a missing pod; 422 for
        invalid options (pkg/apis/core/validation ValidatePodLogOptions); the container
        (pkg/registry/core/pod/strategy.go LogLocation: the only one, else 400 "a container name must
        be specified for pod <pod>, choose one of: [<names>]", 400 "container <c> is not valid for
        pod <pod>"); an unbound pod has no log location, an empty answer; then the kubelet
        (pkg/kubelet/kubelet_pods.go validateContainerLogStatus): 400 "previous terminated container
        ... not found", "container ... is waiting to start: <reason>". ``tailLines`` keeps the last
        lines, then ``limitBytes`` stops after that many bytes."""
        if method != "GET":
            raise ApiError(
                405,
                "MethodNotAllowed",
                f"the server does not allow this method on the requested resource ({method})",
            )
        with self._lock:
            pod = copy.deepcopy(self._get(RESOURCES["pods"], ns, name))
            text = None

            def number(key: str) -> int | None:
                raw = query.get(key, [""])[0]
                if raw == "":
                    return None
                try:
                    return int(raw)
                except ValueError:
                    raise ApiError(
                        400, "BadRequest", f'strconv.ParseInt: parsing "{raw}": invalid syntax'
                    ) from None

            tail, limit = number("tailLines"), number("limitBytes")
            errs = FieldErrors()
            if tail is not None and tail < 0:
                errs.invalid("tailLines", tail, "must be greater than or equal to 0")
            if limit is not None and limit < 1:
                errs.invalid("limitBytes", limit, "must be greater than 0")
            if errs:
                raise ApiError(
                    422,
                    "Invalid",
                    f'PodLogOptions "{name}" is invalid: '
                    + ", ".join(f"{c['field']}: {c['message']}" for c in errs),
                    {"name": name, "kind": "PodLogOptions", "causes": list(errs)},
                )
            previous = query.get("previous", ["false"])[0] in ("1", "true", "True")
            spec = pod.get("spec") or {}
            names = [c.get("name", "") for c in spec.get("containers") or []]
            init_names = [c.get("name", "") for c in spec.get("initContainers") or []]
            container = query.get("container", [""])[0]
            if not container:
                if len(names) == 1:
                    container = names[0]
                elif not names:
                    raise ApiError(400, "BadRequest", f"a container name must be specified for pod {name}")
                else:
                    message = f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]"
                    if init_names:
                        message += f" or one of the init containers: [{' '.join(init_names)}]"
                    raise ApiError(400, "BadRequest", message)
            elif container not in names + init_names:
                raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
            if not spec.get("nodeName"):
                return 200, b""
            cstatus = next(
                (
                    cs
                    for cs in (pod.get("status") or {}).get("containerStatuses") or []
                    if cs.get("name") == container
                ),
                {},
            )
            state, last = cstatus.get("state") or {}, cstatus.get("lastState") or {}
            if previous:
                if not last.get("terminated"):
                    raise ApiError(
                        400,
                        "BadRequest",
                        f'previous terminated container "{container}" in pod "{name}" not found',
                    )
            elif not (state.get("running") or state.get("terminated") or last.get("terminated")):
                reason = (state.get("waiting") or {}).get("reason") or "ContainerCreating"
                raise ApiError(
                    400,
                    "BadRequest",
                    f'container "{container}" in pod "{name}" is waiting to start: {reason}',
                )
            text = self._logs.get((ns, name, container, previous), "")
        lines = text.splitlines(keepends=True)
        if tail is not None:
            lines = lines[len(lines) - tail :] if tail else []
        data = "".join(lines).encode()
        if limit is not None:
            data = data[:limit]
        return 200, data
