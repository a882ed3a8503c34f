"""Watched views: what one process knows of one kind of one Kubernetes cluster, kept up to date by
"list, then watch from the list's resourceVersion" (:func:`read_watched`, used by
:meth:`~apps.clusters.backends.kubernetes.KubernetesBackend.list_watched`)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from apps.clusters.backends.base import API_VERSIONS
from apps.clusters.backends.errors import TransientBackendError, error_from_api_exception
from apps.core.process_state import register_reset

# A watch reads only what changed since a resourceVersion; a full relist still happens this often.
WATCH_RESYNC_S = 300.0
# ``timeoutSeconds`` of one catch-up watch: the server ends the stream after it. The watch cache
# sends its only BOOKMARK of such a watch 2 s before that deadline (none when it is 2 s or less
# away; kubernetes staging/src/k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go
# ``nextBookmarkTime``), so 3 s puts it about 1 s into the stream: the end of a stream that never
# falls silent (a busy Node stream). Nothing relies on it coming.
WATCH_TIMEOUT_S = 3
# How long a catch-up watch may wait for its response headers: API Priority and Fairness may queue
# the request, and a watch cache behind the version asked for blocks up to 3 s before it answers
# (storage/cacher/watch_cache.go ``blockTimeout = 3 * time.Second``).
WATCH_HEADERS_S = 6.0
# Once the headers came, a stream silent this long has sent every change there was (the watch
# cache sends the replay as soon as the watch starts).
WATCH_IDLE_S = 0.5


def _response_socket(response: Any):
    """The socket a streamed urllib3 response reads from: its connection's, or, once http.client
    let go of it there (an answer with ``Connection: close``: http/client.py HTTPConnection.getresponse
    closes the connection object and the response's file keeps the socket), the file's. None when
    neither is there."""
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is None:
        raw = getattr(getattr(getattr(response, "_fp", None), "fp", None), "raw", None)
        sock = getattr(raw, "_sock", None)
    return sock if hasattr(sock, "settimeout") else None


def _view_key(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


@dataclass
class WatchedView:
    """What this process knows of one kind of one cluster: the objects at ``resource_version``.
    Kept per process (the per-cluster reconcile lock keeps two processes from working one cluster
    at once; in a process, ``lock`` makes readers take turns)."""

    items: dict[tuple[str, str], dict] = field(default_factory=dict)
    resource_version: str = ""
    listed_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    lists: int = 0  # full lists made
    watches: int = 0  # catch-up watches made
    events: int = 0  # watch events applied

    def clear(self) -> None:
        self.items, self.resource_version = {}, ""

    # One registry per process: (cluster, API server, kind, selector) -> view.
    _all: ClassVar[dict[tuple, WatchedView]] = {}
    _all_lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def of(cls, cluster_id: tuple, kind: str, selector: str) -> WatchedView:
        with cls._all_lock:
            return cls._all.setdefault((*cluster_id, kind, selector), cls())

    @classmethod
    def forget(cls, cluster_id: tuple | None = None) -> None:
        """Drop the views of one cluster (all when None): the next read lists."""
        with cls._all_lock:
            for key in [k for k in cls._all if cluster_id is None or k[: len(cluster_id)] == cluster_id]:
                del cls._all[key]


register_reset(WatchedView.forget)  # per-process views: one reset hook (apps.core.process_state)


def read_watched(backend: Any, kind: str, selector: str) -> list[dict]:
    """The objects of ``kind`` matching ``selector`` in all namespaces, from this process's
    :class:`WatchedView` of the cluster: the first read lists (paged, ``list_owned``) and keeps
    the list's ``resourceVersion``; a later read watches from that version and applies only the
    changes since ("list, then watch from the list's resourceVersion": Kubernetes API concepts,
    "Efficient detection of changes"). A 410 Expired (the version left the server's history)
    or any other refusal of the watch relists; so does a view older than ``WATCH_RESYNC_S``
    (informers resync the same way). The objects are shared with the view: read only."""
    view = WatchedView.of(backend._view_id, kind, selector)
    with view.lock:  # one reader at a time in this process (other processes have their own view)
        due = not view.resource_version or time.monotonic() - view.listed_at >= WATCH_RESYNC_S
        if due or not _catch_up(backend, view, kind, selector):
            _relist(backend, view, kind, selector)
        return list(view.items.values())


def _relist(backend: Any, view: WatchedView, kind: str, selector: str) -> None:
    view.clear()
    items, rv = backend._list_pages(kind, None, selector)
    view.items = {_view_key(o): o for o in items}
    view.resource_version, view.listed_at = rv, time.monotonic()
    view.lists += 1


def _catch_up(backend: Any, view: WatchedView, kind: str, selector: str) -> bool:
    """Apply the events after ``view.resource_version``: a watch from that version with a short
    ``timeoutSeconds`` (``WATCH_TIMEOUT_S``), read until the first of

    - ``WATCH_IDLE_S`` without a byte once the response headers came: caught up. The watch cache
      sends every change after the version at once when the watch starts, so a silent stream has
      nothing more to send;
    - a BOOKMARK (every change up to its version was sent): an earlier end where one comes. A real
      API server sends none after the replay, only 2 s before the deadline or once a minute
      (``WATCH_TIMEOUT_S``), so nothing waits for one;
    - the end of the stream (the server's ``timeoutSeconds``), or ``WATCH_TIMEOUT_S +
      WATCH_IDLE_S`` after the headers on our side (a stream that never falls silent).

    The wait for the headers has its own limit, ``WATCH_HEADERS_S`` (a request queued by API
    Priority and Fairness, a lagging watch cache), within the call's ``_timeout``.

    Why not something exact: a consistent list (``resourceVersionMatch``) reads everything again,
    which is what the watch avoids; ``sendInitialEvents`` (a watch that ends its initial events
    with a bookmark) needs a server with WatchList enabled and starts from the whole state, not
    from our version. A watch from our version that stopped early is still correct: the events
    come in resourceVersion order, so the view is consistent at the last one applied, and the
    next pass continues from there.

    False when the server refuses to continue from there (the caller relists); a failure before
    any answer is the cluster's error (raised)."""
    from kubernetes import watch
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    func, _ = backend._method("list", kind, all_namespaces=True)
    what = f"watch {kind} ({selector}) from {view.resource_version}"
    timeout = backend._timeout(what)
    # return_type=object: the client hands back the JSON objects as they are (no model
    # deserialization) and still turns an ERROR event into an ApiException (kubernetes/watch/watch.py).
    w = watch.Watch(return_type=object)
    opened: list[float] = []
    idle = min(WATCH_IDLE_S, timeout)

    def call(*args, **kwargs):
        # The client returns once the headers came (urllib3 preload_content=False): from then on
        # each read of the socket waits at most ``idle`` (the read timeout below covered the
        # headers only; urllib3 sets it again on a connection it reuses).
        response = func(*args, **kwargs)
        opened.append(time.monotonic())
        sock = _response_socket(response)
        if sock is not None:  # else each read waits up to the header limit (still bounded)
            sock.settimeout(idle)
        return response

    # (connect, read) timeouts (kubernetes/client/rest.py: a pair becomes urllib3.Timeout(connect=,
    # read=)); the read timeout is the wait for the headers.
    stream = w.stream(
        call,
        resource_version=view.resource_version,
        timeout_seconds=max(1, min(WATCH_TIMEOUT_S, int(timeout))),
        allow_watch_bookmarks=True,
        label_selector=selector or None,
        _request_timeout=(timeout, min(WATCH_HEADERS_S, timeout)),
    )
    try:
        for event in stream:
            obj = event.get("raw_object") or {}
            rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            kind_of = event.get("type")
            if kind_of == "BOOKMARK":
                view.resource_version = rv or view.resource_version
                break
            if kind_of in ("ADDED", "MODIFIED"):
                obj.setdefault("kind", kind)
                obj.setdefault("apiVersion", API_VERSIONS[kind])
                view.items[_view_key(obj)] = obj
            elif kind_of == "DELETED":
                view.items.pop(_view_key(obj), None)
            else:
                return False  # not an event type of the API: trust nothing, relist
            view.resource_version = rv or view.resource_version
            view.events += 1
            if time.monotonic() - opened[0] >= WATCH_TIMEOUT_S + WATCH_IDLE_S:
                break  # never silent: consistent here, the next pass goes on from this version
    except ApiException as e:  # an ERROR event (410 Expired, ...) or a refused request
        if e.status in (401, 403):
            raise error_from_api_exception(what, e) from e
        return False
    except (HTTPError, OSError) as e:
        if not opened:  # no answer at all: the cluster's error, as a failed list would be
            view.clear()
            raise TransientBackendError(f"{what}: {e}") from e
        # answered, then silent or cut: consistent at the last event applied
    finally:
        w.stop()
        stream.close()
    view.watches += 1
    return True
