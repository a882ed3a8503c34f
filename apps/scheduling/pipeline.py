"""The engine's decisions handed to persistence batch by batch, decided in a thread of their own.

A cycle decides every job on its snapshot first, then persists the decisions in batches; the decisions
never depend on what persisting does (a placement dropped at persist time goes back to the snapshot
only after every job was decided: ``persist._drop``). So the engine can go on deciding while the
first batches are written: persisting waits on PostgreSQL most of its time, with the interpreter lock
released, and the engine runs then. At 10,000 nodes the engine's second of Python went into those
waits instead of before them.

The thread decides only: it must not query (a second connection would not see the caller's
transaction), and ``DecisionStream`` refuses any query it tries. The requests, which read the catalog
and the clusters, are built before it starts (``services._decide``).
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from django.db import connection

# While the engine thread runs, the thread that persists gets the interpreter back within this many
# seconds of each reply from PostgreSQL (the default 5 ms, per statement and COPY flush of a batch,
# added most of what the overlap saved).
SWITCH_INTERVAL_S = 0.0005
_DONE = object()


class _Failed:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _refuse_query(execute, sql, params, many, context):
    raise RuntimeError("the scheduling engine's thread must not query the database")


class DecisionStream:
    """``decide(item)`` for every item, in order, yielded ``batch`` results at a time (``batches``).

    ``threaded``: decided in a thread while the caller consumes the batches (more than one batch);
    otherwise every item is decided before the first batch is yielded, as a single pass would.
    ``decided_s``: seconds from the start of the first decision to the end of the last."""

    def __init__(self, decide: Callable[[Any], Any], items: Sequence, batch: int, *, threaded: bool) -> None:
        self.decide, self.items, self.batch = decide, items, max(1, batch)
        self.threaded = threaded and len(items) > self.batch
        self.decided_s = 0.0

    def batches(self) -> Iterator[list]:
        if not self.threaded:
            started = time.perf_counter()
            out = [self.decide(item) for item in self.items]
            self.decided_s = time.perf_counter() - started
            for i in range(0, len(out), self.batch):
                yield out[i : i + self.batch]
            return
        handoff: queue.SimpleQueue = queue.SimpleQueue()
        stop = threading.Event()
        thread = threading.Thread(
            target=self._work, args=(handoff, stop), name="scheduling-engine", daemon=True
        )
        interval = sys.getswitchinterval()
        sys.setswitchinterval(min(interval, SWITCH_INTERVAL_S))
        thread.start()
        try:
            while (chunk := handoff.get()) is not _DONE:
                if isinstance(chunk, _Failed):
                    raise chunk.exc
                yield chunk
        finally:  # also when the caller stops early or failed: the thread ends before the snapshot moves
            stop.set()
            thread.join()
            sys.setswitchinterval(interval)

    def _work(self, handoff: queue.SimpleQueue, stop: threading.Event) -> None:
        started = time.perf_counter()
        try:
            with connection.execute_wrapper(_refuse_query):
                chunk = []
                for item in self.items:
                    if stop.is_set():
                        return
                    chunk.append(self.decide(item))
                    if len(chunk) == self.batch:
                        handoff.put(chunk)
                        chunk = []
                if chunk:
                    handoff.put(chunk)
            self.decided_s = time.perf_counter() - started
            handoff.put(_DONE)
        except BaseException as exc:  # handed to the caller's thread, raised there
            handoff.put(_Failed(exc))
        finally:
            connection.close()  # a query refused above may have opened this thread's connection
