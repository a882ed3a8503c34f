"""The backend of a real cluster: the official ``kubernetes`` client (kubeconfig file per cluster, or
the in-cluster service account), every call bounded and every failure mapped to a
:class:`~apps.clusters.backends.errors.BackendError`."""

from __future__ import annotations

import json
import time
from typing import Any

from apps.clusters.backends.base import (
    API_VERSIONS,
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
from apps.clusters.backends.errors import (
    BackendError,
    ImmutableFieldError,
    PermanentBackendError,
    TransientBackendError,
    error_from_api_exception,
    immutable_fields,
)
from apps.clusters.backends.objects import apply_patch, with_last_applied
from apps.clusters.backends.taints import node_merge_patch, validate_taints
from apps.clusters.backends.watch import read_watched

NODE_PATCH_ATTEMPTS = 5
# Objects per list call (reconcile reads every owned Job, Deployment, Pod and Node of a cluster).
LIST_PAGE_SIZE = 500


class KubernetesBackend(ClusterBackend):
    name = "kubernetes"

    def __init__(
        self,
        cluster_or_kubeconfig_path=None,
        context: str | None = None,
        in_cluster: bool = False,
        timeout: float = 10,
    ):
        from kubernetes import client, config

        from apps.clusters.kubeconfig_safety import kubeconfig_for_client

        kubeconfig = cluster_or_kubeconfig_path
        if (
            kubeconfig is not None
            and not isinstance(kubeconfig, str | bytes)
            and hasattr(kubeconfig, "backend")
        ):
            cluster = kubeconfig
            kubeconfig = cluster.kubeconfig_path or None
            context = context or cluster.kube_context or None
            in_cluster = in_cluster or cluster.in_cluster
        # Every call is bounded: ``_request_timeout`` (the official client's per-request limit, a
        # total for connect + answer: kubernetes/client/rest.py RESTClientObject.request turns a
        # number into urllib3.Timeout(total=...)); a pass of several calls (paged lists) is also
        # bounded as a whole by ``deadline`` (``set_deadline``): no call starts after it, and none
        # waits past it.
        self.timeout = timeout
        self.deadline: float | None = None  # time.monotonic() value
        configuration = client.Configuration()
        try:
            if in_cluster:
                config.load_incluster_config(client_configuration=configuration)
            else:
                # Read and checked here, handed over as a dict: no program runs, no file is read
                # besides this one, nothing is written back (apps.clusters.kubeconfig_safety).
                config.load_kube_config_from_dict(
                    kubeconfig_for_client(kubeconfig),
                    context=context,
                    client_configuration=configuration,
                    persist_config=False,
                )
        except Exception as e:  # ConfigException, missing file, bad YAML, a refused field
            where = "in-cluster config" if in_cluster else f"kubeconfig {kubeconfig or '(default)'}"
            raise PermanentBackendError(f"cannot load {where}: {e}") from e
        configuration.retries = False  # no hidden retries: the caller decides
        self.api_client = client.ApiClient(configuration)
        # The watched views of this cluster (list_watched): its row and its API server.
        self._view_id = (
            getattr(cluster_or_kubeconfig_path, "pk", None) or str(kubeconfig),
            configuration.host,
        )
        self._apis = {
            "CoreV1Api": client.CoreV1Api(self.api_client),
            "BatchV1Api": client.BatchV1Api(self.api_client),
            "AppsV1Api": client.AppsV1Api(self.api_client),
            "ResourceV1Api": client.ResourceV1Api(self.api_client),
        }

    def close(self) -> None:
        self.api_client.close()

    def set_deadline(self, seconds: float | None) -> None:
        """Bound the calls made from now on to ``seconds`` in all (None: each call by ``timeout`` only)."""
        self.deadline = None if seconds is None else time.monotonic() + seconds

    def _timeout(self, what: str) -> float:
        if self.deadline is None:
            return self.timeout
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TransientBackendError(f"{what}: not sent, the pass ran out of time (deadline exceeded)")
        return min(self.timeout, left)

    # The client's typed methods, e.g. create_namespaced_job / read_node / list_pod_for_all_namespaces.
    def _method(self, verb: str, kind: str, all_namespaces: bool = False):
        if kind not in KINDS:
            raise PermanentBackendError(f"unsupported kind {kind!r} (supported: {', '.join(KINDS)})")
        api_name, snake, namespaced = KINDS[kind]
        if verb == "list" and all_namespaces and namespaced:
            method = f"list_{snake}_for_all_namespaces"
        else:
            method = f"{verb}_namespaced_{snake}" if namespaced else f"{verb}_{snake}"
        return getattr(self._apis[api_name], method), namespaced

    def _call(self, what: str, func, *args, **kwargs) -> dict:
        """Call the client without model deserialization; map every failure."""
        data = self._call_bytes(what, func, *args, **kwargs)
        try:
            return json.loads(data) if data else {}
        except ValueError as e:  # a 2xx answer that is not JSON
            raise TransientBackendError(f"{what}: unreadable answer ({e})") from e

    def _call_bytes(self, what: str, func, *args, **kwargs) -> bytes:
        """The raw body of a client call (JSON, or text/plain for a pod log); every failure mapped.
        ``_request_timeout`` as one number bounds the whole request (kubernetes/client/rest.py turns
        it into ``urllib3.Timeout(total=...)``)."""
        from kubernetes.client.exceptions import ApiException
        from pydantic import ValidationError
        from urllib3.exceptions import HTTPError, ProtocolError
        from urllib3.exceptions import TimeoutError as Urllib3Timeout

        timeout = self._timeout(what)
        try:
            response = func(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
            return response.data if hasattr(response, "data") else response.read()
        except ApiException as e:
            raise error_from_api_exception(what, e) from e
        except ValidationError as e:
            errors = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()[:5])
            raise PermanentBackendError(f"{what}: invalid object: {errors}") from e
        except Urllib3Timeout as e:  # includes connect timeouts and refusals (NewConnectionError)
            raise TransientBackendError(f"{what}: timed out or could not connect ({e})") from e
        except ProtocolError as e:
            raise TransientBackendError(f"{what}: connection broken ({e})") from e
        except HTTPError as e:
            raise TransientBackendError(f"{what}: HTTP transport error ({e})") from e
        except (ConnectionError, TimeoutError, OSError) as e:
            raise TransientBackendError(f"{what}: network error ({e})") from e
        except ValueError as e:  # a 2xx answer that is not JSON
            raise TransientBackendError(f"{what}: unreadable answer ({e})") from e

    def get(self, kind: str, namespace: str | None, name: str) -> dict | None:
        func, namespaced = self._method("read", kind)
        args = (name, namespace) if namespaced else (name,)
        try:
            return self._call(f"get {object_ref(kind, namespace or '', name)}", func, *args)
        except PermanentBackendError as e:
            if e.status == 404:
                return None
            raise

    def apply(self, obj: dict) -> ApplyResult:
        kind, namespace, name = object_key(obj)
        ref = object_ref(kind, namespace, name)
        body = with_last_applied(obj)
        body.setdefault("apiVersion", API_VERSIONS[kind])
        func, namespaced = self._method("create", kind)
        try:
            live = self._call(f"create {ref}", func, *((namespace, body) if namespaced else (body,)))
            return apply_result("created", kind, namespace, name, live)
        except PermanentBackendError as e:
            if e.status != 409:
                raise
        live = self.get(kind, namespace, name)
        if live is None:
            raise TransientBackendError(f"create {ref}: 409 AlreadyExists, but it was gone when read back")
        patch = apply_patch(obj, live)
        if patch is None:
            return apply_result("unchanged", kind, namespace, name, live)
        patch.setdefault("metadata", {})["resourceVersion"] = live["metadata"]["resourceVersion"]
        func, _ = self._method("patch", kind)
        args = (name, namespace, patch) if namespaced else (name, patch)
        try:
            updated = self._call(f"update {ref}", func, *args, _content_type="application/merge-patch+json")
        except PermanentBackendError as e:
            fields = immutable_fields(e)
            if fields:
                # pkg/apis/batch/validation ValidateJobSpecUpdate, pkg/apis/apps/validation
                # ValidateDeploymentUpdate: the object must be replaced, not patched.
                raise ImmutableFieldError(
                    e.message,
                    fields,
                    live=live,
                    status=e.status,
                    reason=e.reason,
                    causes=e.causes,
                ) from e
            raise
        return apply_result("updated", kind, namespace, name, updated)

    def delete(self, kind: str, namespace: str | None, name: str) -> bool:
        func, namespaced = self._method("delete", kind)
        args = (name, namespace) if namespaced else (name,)
        kwargs = {"propagation_policy": "Background"} if kind in ("Job", "Deployment") else {}
        try:
            self._call(f"delete {object_ref(kind, namespace or '', name)}", func, *args, **kwargs)
            return True
        except PermanentBackendError as e:
            if e.status == 404:
                return False
            raise

    def list_owned(self, kind: str, namespace: str | None = None, selector: str = MANAGED_BY) -> list[dict]:
        """Every matching object, read in pages of ``LIST_PAGE_SIZE`` (``limit`` / ``continue``: the
        server answers from one consistent snapshot, so a page boundary never loses or repeats an
        object; Kubernetes API concepts, "Retrieving large results sets in chunks"). A token that
        expired (410 Gone: its snapshot was compacted) restarts the list once from the beginning."""
        return self._list_pages(kind, namespace, selector)[0]

    def _list_pages(self, kind: str, namespace: str | None, selector: str) -> tuple[list[dict], str]:
        """``list_owned`` and the list's ``metadata.resourceVersion`` (the snapshot every page came
        from: the version a watch continues from)."""
        func, namespaced = self._method("list", kind, all_namespaces=not namespace)
        args = (namespace,) if namespaced and namespace else ()
        where = f" in {namespace}" if namespace else ""
        what = f"list {kind}{where} ({selector})"
        items: list[dict] = []
        token, restarted = "", False
        while True:
            page = {"_continue": token} if token else {}
            try:
                result = self._call(
                    what, func, *args, label_selector=selector or None, limit=LIST_PAGE_SIZE, **page
                )
            except PermanentBackendError as e:
                if e.status == 410 and token and not restarted:
                    items, token, restarted = [], "", True
                    continue
                raise
            items.extend(result.get("items") or [])
            token = (result.get("metadata") or {}).get("continue") or ""
            if not token:
                break
        for item in items:  # lists carry items without kind/apiVersion
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", API_VERSIONS[kind])
        return items, str((result.get("metadata") or {}).get("resourceVersion") or "")

    def list_watched(self, kind: str, selector: str = MANAGED_BY) -> list[dict]:
        """From this process's :class:`~apps.clusters.backends.watch.WatchedView` of the cluster:
        listed once, then caught up by watching from the list's resourceVersion
        (:func:`~apps.clusters.backends.watch.read_watched`). The objects are shared: read only."""
        return read_watched(self, kind, selector)

    def list_watched_kinds(self, wanted: list[tuple[str, str]]) -> list[list[dict]]:
        """``list_watched`` of every ``(kind, selector)`` at the same time, one thread each, so a
        pass waits for the slowest kind, not for the sum of them. Each read keeps its own bounds
        (``_timeout``, the pass deadline, the watch's header and idle limits). The threads share
        this backend's ``ApiClient``: a call keeps no state on it (kubernetes/client/api_client.py
        ``call_api`` returns the response it got) and its transport is urllib3's ``PoolManager``,
        whose pools are a "Thread-safe connection pool for one host" (urllib3/connectionpool.py);
        the client's pool holds ``connection_pool_maxsize`` connections (CPU count x 5) and opens
        more when they are busy. Each kind has its own :class:`WatchedView` and lock."""
        if len(wanted) <= 1:
            return super().list_watched_kinds(wanted)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(wanted), thread_name_prefix="list-watched") as pool:
            futures = [pool.submit(self.list_watched, kind, selector) for kind, selector in wanted]
        # The pool waited for every read (each is bounded): raise the first failure in order.
        return [f.result() for f in futures]

    def list_events(self, *, field_selector: str = "") -> list[dict]:
        """Events carry no labels of ours: they are selected by field (Kubernetes docs "Field
        Selectors"; Event fields: pkg/registry/core/event/strategy.go, e.g. ``reason``,
        ``involvedObject.uid``)."""
        func, _ = self._method("list", "Event", all_namespaces=True)
        result = self._call(f"list Event ({field_selector})", func, field_selector=field_selector or None)
        return result.get("items") or []

    def pod_events(self, namespace: str, pod: str, *, limit: int = POD_EVENT_LIMIT) -> list[dict]:
        """``CoreV1Api.list_namespaced_event`` with ``fieldSelector=involvedObject.kind=Pod,
        involvedObject.name=<pod>`` (Event selectable fields: pkg/registry/core/event/strategy.go
        ToSelectableFields) and ``limit`` (Kubernetes API concepts, "Retrieving large results sets
        in chunks"; one page is all the page shows)."""
        api = self._apis["CoreV1Api"]
        result = self._call(
            f"list Event of pod {namespace}/{pod}",
            api.list_namespaced_event,
            namespace,
            field_selector=f"involvedObject.kind=Pod,involvedObject.name={pod}",
            limit=limit,
        )
        return result.get("items") or []

    def _pod_log(self, namespace: str, pod: str, options: LogOptions) -> str:
        """``CoreV1Api.read_namespaced_pod_log``: GET /api/v1/namespaces/{ns}/pods/{name}/log,
        text/plain, with ``tailLines`` / ``limitBytes`` / ``container`` / ``previous`` (Kubernetes API
        reference, Pod v1 "read log of the specified Pod"). The bytes are decoded as UTF-8 with
        replacement: ``limitBytes`` may cut a character in two."""
        api = self._apis["CoreV1Api"]
        kwargs: dict[str, Any] = {"tail_lines": options.tail_lines, "limit_bytes": options.limit_bytes}
        if options.container:
            kwargs["container"] = options.container
        if options.previous:
            kwargs["previous"] = True
        data = self._call_bytes(
            f"read log of pod {namespace}/{pod}", api.read_namespaced_pod_log, pod, namespace, **kwargs
        )
        return data.decode("utf-8", errors="replace") if isinstance(data, bytes) else str(data or "")

    def patch_node(self, name: str, labels: dict | None = None, taints: list | None = None) -> dict:
        """Read-modify-write of the labels and taints Suanchi owns, guarded by the Node's
        ``resourceVersion`` and retried on 409 Conflict. ``Node.spec.taints`` has no patch strategy
        (a patch replaces the whole list, k8s.io/api core/v1 NodeSpec), so the list sent is the live
        one with only Suanchi's taints swapped: cordon (``node.kubernetes.io/unschedulable``),
        not-ready, autoscaler and operator taints survive. A merge patch carrying
        ``metadata.resourceVersion`` is refused with 409 when the Node changed since it was read
        (Kubernetes API concepts, "Resource versions" / optimistic concurrency)."""
        if taints is not None:
            validate_taints(taints)
        func, _ = self._method("patch", "Node")
        last: BackendError | None = None
        for _attempt in range(NODE_PATCH_ATTEMPTS):
            live = self.get("Node", None, name)
            if live is None:
                raise PermanentBackendError(
                    f'patch Node {name}: 404 NotFound: nodes "{name}" not found', 404, "NotFound"
                )
            patch = node_merge_patch(live, labels, taints)
            if patch is None:
                return live
            try:
                return self._call(
                    f"patch Node {name}", func, name, patch, _content_type="application/merge-patch+json"
                )
            except TransientBackendError as e:
                if e.status != 409:
                    raise
                last = e  # the Node changed under us (a kubelet, an operator): read it again
        raise TransientBackendError(
            f"patch Node {name}: still conflicting after {NODE_PATCH_ATTEMPTS} attempts ({last})",
            409,
            "Conflict",
        )
