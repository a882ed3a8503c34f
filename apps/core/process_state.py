"""State a process keeps in memory between requests or tasks, behind one reset hook.

A few modules keep per-process state for speed: the scheduler's parked unschedulable jobs
(``apps.scheduling.services._HINTS``), its cached fleet snapshot (``apps.scheduling.snapshot._CACHE``),
the list+watch views of Kubernetes clusters (``apps.clusters.backends.watch.WatchedView``). Each owner
registers, next to the state, the function that drops it::

    _HINTS = UnschedulableQueue()
    register_reset(_HINTS.clear)

``reset_process_state()`` calls them all: the test suite runs it around every test (tests/conftest.py),
so one test's state never answers for the next; anything else that must start a process afresh (a
demo reset, a fork) calls the same hook. Only state of modules already imported is registered, and
a module that was never imported holds none.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_RESETS: list[Callable[[], object]] = []
_LOCK = threading.Lock()


def register_reset(reset: Callable[[], object]) -> Callable[[], object]:
    """Register ``reset`` (no arguments) to run at ``reset_process_state()``; once per function
    (a module imported twice does not register twice). Returns it, so it can decorate."""
    with _LOCK:
        if reset not in _RESETS:
            _RESETS.append(reset)
    return reset


def reset_process_state() -> None:
    """Drop every registered piece of per-process state, in the order registered."""
    with _LOCK:
        resets = list(_RESETS)
    for reset in resets:
        reset()


def registered_resets() -> list[Callable[[], object]]:
    """What ``reset_process_state`` calls (tests check each owner registered its state)."""
    with _LOCK:
        return list(_RESETS)
