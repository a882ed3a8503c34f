"""The server itself (start, stop, faults, the request router) and the kubeconfig that reaches it."""

from __future__ import annotations

import copy
import json
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import yaml

from tests.kube.fake_apiserver.controllers import ControllersMixin
from tests.kube.fake_apiserver.dra import DraMixin
from tests.kube.fake_apiserver.handler import _Handler
from tests.kube.fake_apiserver.patch import APPLY_PATCH
from tests.kube.fake_apiserver.quotas_events import QuotasEventsMixin
from tests.kube.fake_apiserver.reads import ReadsMixin
from tests.kube.fake_apiserver.resources import (
    _LOG_PATH_RE,
    _PATH_RE,
    GROUP_PREFIX,
    KIND_TO_PLURAL,
    RESOURCES,
    ApiError,
    discovery_document,
)
from tests.kube.fake_apiserver.scheduler import SchedulerMixin
from tests.kube.fake_apiserver.store import BOOKMARK_FREQUENCY_S, _Fault, _Store
from tests.kube.fake_apiserver.validation import ValidationMixin
from tests.kube.fake_apiserver.writes import WritesMixin


class FakeApiServer(
    SchedulerMixin,
    ControllersMixin,
    ValidationMixin,
    DraMixin,
    ReadsMixin,
    QuotasEventsMixin,
    WritesMixin,
    ThreadingHTTPServer,
):
    """Start with :meth:`start`, stop with :meth:`stop` (or use it as a context manager)."""

    daemon_threads = True

    def __init__(self, controllers: bool = True, timeout_delay: float = 3.0):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.controllers = controllers
        self.timeout_delay = timeout_delay
        # Extended resources kube-scheduler leaves to an extender (HAMi's managedResources with
        # ignoredByScheduler: true): see _extended_shortfall.
        self.ignored_by_scheduler: set[str] = set()
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.RLock()
        self._store: _Store = _Store()
        self._rv = 1000
        # Every request: {"method", "path", "query", "objects"} (items listed / events watched).
        self.request_log: list[dict] = []
        # Watch: the history of changes (the apiserver's watch cache), oldest first, as
        # (rv, plural, namespace, type, object, previous object); a watch from a version before
        # _history_start answers 410 Expired.
        self.watch_history_size = 20000
        self._history: list[tuple] = []
        self._history_rvs: list[int] = []
        self._history_start = self._rv
        self._watch_last: dict[tuple[str, str, str], dict] = {}  # key -> the state last recorded
        self._bumped: list[dict] = []
        self.watch_poll_s = 0.02
        self.watch_default_timeout = 60.0
        # The watch cache's bookmark frequency (cacher.go defaultBookmarkFrequency; a test may shorten it).
        self.bookmark_frequency_s = BOOKMARK_FREQUENCY_S
        # Seconds every list and watch waits before its response headers: a request queued by API
        # Priority and Fairness, or a watch cache behind the version asked for (it blocks up to 3 s:
        # staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go @ 00f3bd4418723bfd579a3b13ac1f824083ac5942
        # ``blockTimeout = 3 * time.Second``). A watch's timeoutSeconds counts from after the wait.
        self.header_delay_s = 0.0
        self._stopping = False
        self._faults: list[_Fault] = []
        self._thread: threading.Thread | None = None
        self._t = 0.0  # the fake's clock, seconds (moved by advance())
        self._terminate_at: dict[tuple[str, str, str], float] = {}  # pod key -> end of its grace
        self._taint_since: dict[tuple[str, str, str | None], float] = {}  # (node, key, value) -> t
        self._removed_failed: dict[str, int] = {}  # Job uid -> its pods removed before success
        self._create_retry_at: dict[str, float] = {}  # owner uid -> when a refused pod create is retried
        # The Job controller's backoff after a failed pod creation (pkg/controller/job
        # DefaultJobPodFailureBackOff, 10 s), on the fake's clock.
        self.create_backoff = 10.0
        # SelfSubjectAccessReview answers: (verb, group, resource) tuples that are denied.
        self.rbac_denied: set[tuple[str, str, str]] = set()
        # List paging: the snapshots that continue tokens read from, oldest first (see _list).
        self._list_snapshots: dict[tuple[int, str, str], list] = {}
        self.list_snapshots_kept = 32
        self._compacted_rv = 0
        self.git_version = "v1.34.1"
        # Container logs (set_pod_log): (namespace, pod, container, previous) -> text.
        self._logs: dict[tuple[str, str, str, bool], str] = {}
        # The NVIDIA DRA kubelet plugin's feature gates ({"TimeSlicingSettings": bool, "MPSSupport":
        # bool}); None: the driver's claim preparation is not modelled (every bound pod may run).
        self.nvidia_dra_feature_gates: dict[str, bool] | None = None
        self._prepare_failed: dict[tuple[str, str], str] = {}  # (namespace, pod) -> kubelet's message

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeApiServer:
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping = True
        self.shutdown()
        self.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- test controls ---------------------------------------------------------------------------
    def inject(
        self, path_regex: str, status: int | str = 500, times: int = 1, method: str | None = None
    ) -> None:
        """Make the next ``times`` requests whose path matches ``path_regex`` (``re.search``; and
        ``method``, when given) fail: ``status`` an int = answer that HTTP code with a Status body,
        without processing; ``"timeout"`` = process the request, then hold the answer for
        ``timeout_delay`` seconds (longer than the client's timeout); ``"reset"`` = close the socket
        with an RST after reading the request, without processing it."""
        if not (isinstance(status, int) or status in ("timeout", "reset")):
            raise ValueError(f"status must be an HTTP code, 'timeout' or 'reset', not {status!r}")
        with self._lock:
            self._faults.append(_Fault(path_regex, status, times, method))

    def _take_fault(self, method: str, path: str):
        with self._lock:
            for fault in self._faults:
                if fault.remaining > 0 and fault.regex.search(path) and fault.method in (None, method):
                    fault.remaining -= 1
                    return fault.status
        return None

    def objects(self, kind: str, namespace: str | None = None) -> list[dict]:
        """Copies of the stored objects of a kind (``Job`` or ``jobs``), sorted by namespace/name."""
        plural = KIND_TO_PLURAL.get(kind, kind)
        with self._lock:
            items = [
                copy.deepcopy(o)
                for (p, ns, _), o in sorted(self._store.items())
                if p == plural and (namespace is None or ns == namespace)
            ]
        return items

    def _handle(self, method: str, path: str, query: dict, raw: bytes, content_type: str):
        if (
            path.rstrip("/") == "/version"
        ):  # the client asks for /version/; https://kubernetes.io/docs/reference/using-api/ (version.Info)
            major, minor = self.git_version.lstrip("v").split(".")[:2]
            return 200, {
                "major": major,
                "minor": minor,
                "gitVersion": self.git_version,
                "platform": "linux/amd64",
            }
        discovery = discovery_document(path, f"127.0.0.1:{self.port}") if method == "GET" else None
        if discovery is not None:
            return 200, discovery
        log = _LOG_PATH_RE.match(path)
        if log:
            return self._pod_log(method, log.group("ns"), log.group("name"), query)
        m = _PATH_RE.match(path)
        if not m:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({method} {path})"
            )
        prefix, ns, plural, name, sub = m.group("prefix", "ns", "plural", "name", "sub")
        res = RESOURCES.get(plural)
        if res is None or GROUP_PREFIX[res.api_version] != prefix:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({method} {path})"
            )
        if ns is not None and not res.namespaced:
            raise ApiError(404, "NotFound", f"{res.plural} is not namespaced")
        if res.namespaced and name is not None and ns is None:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({method} {path})"
            )
        ns = ns or ""
        body = None
        apply = method == "PATCH" and content_type.split(";")[0].strip() == APPLY_PATCH
        if raw:
            try:
                # A server-side apply body is YAML (JSON is YAML too); every other body is JSON.
                body = yaml.safe_load(raw) if apply else json.loads(raw)
            except (ValueError, yaml.YAMLError) as e:
                raise ApiError(400, "BadRequest", f"the body of the request was in an unknown format: {e}")
        if res.plural == "selfsubjectaccessreviews":
            return self._access_review(method, name, body)
        with self._lock:
            if name is None:
                if method == "GET" and query.get("watch", ["false"])[0] in ("1", "true"):
                    return 200, self._watch_open(res, ns, query)
                if method == "GET":
                    return 200, self._list(res, ns, query)
                if method == "POST":
                    created = self._create(res, ns, body, query)
                    self._run_controllers()
                    return 201, created
                raise ApiError(
                    405,
                    "MethodNotAllowed",
                    f"the server does not allow this method on the requested resource ({method})",
                )
            if method == "GET":
                return 200, copy.deepcopy(self._get(res, ns, name))
            if method == "DELETE":
                return self._delete(res, ns, name, query, body)
            if method == "PATCH" and apply:
                code, applied = self._apply(res, ns, name, body, query, status_only=bool(sub))
                self._run_controllers()
                return code, applied
            if method == "PATCH":
                patched = self._patch(res, ns, name, body, content_type, status_only=bool(sub))
                self._run_controllers()
                return 200, patched
            if method == "PUT":
                replaced = self._replace(res, ns, name, body, status_only=bool(sub))
                self._run_controllers()
                return 200, replaced
            raise ApiError(
                405,
                "MethodNotAllowed",
                f"the server does not allow this method on the requested resource ({method})",
            )

    def _access_review(self, method: str, name: str | None, body) -> tuple[int, dict]:
        """POST a SelfSubjectAccessReview: status.allowed unless (verb, group, resource) is in
        ``rbac_denied`` (https://kubernetes.io/docs/reference/access-authn-authz/authorization/
        #checking-api-access)."""
        if method != "POST" or name is not None:
            raise ApiError(405, "MethodNotAllowed", "selfsubjectaccessreviews only support create")
        attrs = ((body or {}).get("spec") or {}).get("resourceAttributes")
        if not isinstance(attrs, dict) or not attrs.get("verb"):
            raise ApiError(400, "BadRequest", "spec.resourceAttributes.verb is required")
        key = (attrs.get("verb", ""), attrs.get("group", ""), attrs.get("resource", ""))
        allowed = key not in self.rbac_denied
        review = copy.deepcopy(body)
        review.update(apiVersion="authorization.k8s.io/v1", kind="SelfSubjectAccessReview")
        review.setdefault("metadata", {})
        review["status"] = {"allowed": allowed}
        if not allowed:
            review["status"]["reason"] = "denied by the fake API server's rbac_denied"
        return 201, review


def kubeconfig_for(server: FakeApiServer, directory: Path | None = None, context: str = "fake") -> Path:
    """Write a kubeconfig (no auth, plain http) pointing at ``server``; returns its path.

    Written under ``directory`` when given, else a fresh temporary directory."""
    import tempfile

    directory = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="fake-kube-"))
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server.url}}],
        "users": [{"name": f"{context}-user", "user": {}}],
        "contexts": [
            {
                "name": context,
                "context": {"cluster": context, "user": f"{context}-user", "namespace": "default"},
            }
        ],
        "current-context": context,
        "preferences": {},
    }
    path = directory / f"kubeconfig-{server.port}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
