"""The object store, faults to inject, watch streams and bookmark timing."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tests.kube.fake_apiserver.resources import Resource


class _Fault:
    def __init__(self, pattern: str, status, times: int, method: str | None):
        self.regex = re.compile(pattern)
        self.status = status
        self.remaining = times
        self.method = method


class _Store(dict):
    """The object store; remembers which keys were written or removed since the last watch flush
    (:meth:`FakeApiServer._watch_flush`), and the last state of a removed object."""

    def __init__(self):
        super().__init__()
        self.touched: set = set()
        self.removed: dict = {}

    def __setitem__(self, key, value):
        self.touched.add(key)
        super().__setitem__(key, value)

    def __delitem__(self, key):
        self.removed[key] = self[key]
        super().__delitem__(key)

    def pop(self, key, *default):
        if key in self:
            self.removed[key] = self[key]
        return super().pop(key, *default)


@dataclass
class _WatchStream:
    """An accepted watch request, streamed by the handler outside the server's lock."""

    res: Resource
    ns: str
    reqs: list
    fsel: str
    cursor: int  # the last resourceVersion delivered
    initial: list  # synthetic ADDED objects (resourceVersion unset or "0")
    deadline: float  # time.monotonic()
    bookmarks: bool
    error: dict | None = None  # an ERROR event's Status, sent alone
    next_bookmark: float | None = None  # time.monotonic() of the next BOOKMARK; None: no more


# The watch cache's bookmark schedule (kubernetes/kubernetes, read, not run):
# staging/src/k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go @ 04d6b4f11d533e92dc999e981f73f7b44dacd591,
# ``nextBookmarkTime``: "(a) right before the watcher timeout - for now we simply set it 2s before
# the deadline" and "(b) roughly every minute"; no time left before that ("heartbeatTime.Before(now)")
# schedules none. Case (c), "immediately", applies only while a ``bookmarkAfterResourceVersion`` is
# awaited, which cacher.go ``getBookmarkAfterResourceVersionLockedFunc`` sets only for
# ``sendInitialEvents=true`` (else 0: ``setBookmarkAfterResourceVersion`` counts it as sent), so a
# plain watch gets no bookmark after its replay. The frequency is cacher.go's
# ``defaultBookmarkFrequency = time.Minute``; the cacher re-schedules a watcher after each bookmark
# it sent. The real server fires them from one-second buckets ("you can get the bookmark within
# (X-1,X+1) period", cacher.go @ 00319881a809400fd88feac10e724a9e4afae4d9); the fake sends on time.
BOOKMARK_BEFORE_DEADLINE_S = 2.0
BOOKMARK_FREQUENCY_S = 60.0


def next_bookmark_time(now: float, deadline: float, frequency: float = BOOKMARK_FREQUENCY_S) -> float | None:
    """When the watch cache sends a watch's next BOOKMARK (``nextBookmarkTime``), or None (no more)."""
    heartbeat = min(now + frequency, deadline - BOOKMARK_BEFORE_DEADLINE_S)
    return heartbeat if heartbeat > now else None
