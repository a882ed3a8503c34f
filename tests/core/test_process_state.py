"""Per-process state sits behind one reset hook (apps.core.process_state): each owner registers the
function that drops its state, and ``reset_process_state()`` (run around every test) calls them all."""

from __future__ import annotations

from apps.core.process_state import register_reset, registered_resets, reset_process_state


def test_each_owner_registers_its_state_once():
    from apps.clusters.backends.watch import WatchedView
    from apps.scheduling import services, snapshot

    resets = registered_resets()
    for reset in (
        WatchedView.forget,
        services.unschedulable_queue().clear,
        snapshot.snapshot_cache().invalidate,
    ):
        assert resets.count(reset) == 1, reset


def test_the_hook_drops_every_registered_state():
    from apps.clusters.backends.watch import WatchedView
    from apps.scheduling import services

    WatchedView.of(("test", "https://apiserver.invalid"), "Pod", "")
    services.unschedulable_queue().parked[1] = object()
    reset_process_state()
    assert WatchedView._all == {} and services.unschedulable_queue().parked == {}


def test_registering_twice_keeps_one_entry():
    calls = []

    def reset():
        calls.append(1)

    register_reset(reset)
    register_reset(reset)
    reset_process_state()
    assert calls == [1]
