"""Issue 27 §5: the engine proposed a card that a whole-card request held.

Cause: the fleet index (``index.NodeClasses``) follows the snapshot's change log; when the log had been
trimmed past it (more than 100,000 changes that no decision followed, as a local search or a long
replay makes), it was rebuilt with *new* signature ids. The engine's per-request index kept its heap,
memoized scores and device choices under the old ids, so an old id now named another state's nodes:
the engine picked such a node and applied the device choice evaluated for a different state
(``CapacityError: device n1/gpu0: held as a whole card``). Now a lagging index re-reads every node under
the same ids, and an engine index never outlives the fleet index it was built on.
"""

from __future__ import annotations

import pytest

from apps.scheduling.engine import (
    DeviceAssignment,
    DeviceGroup,
    DeviceState,
    Engine,
    Isolation,
    NodePart,
    NodeState,
    Placement,
    Request,
    Snapshot,
)
from apps.scheduling.engine import engine as engine_module
from apps.scheduling.engine.index import NodeClasses


def _fleet(nodes: int = 3) -> Snapshot:
    snap = Snapshot()
    for n in range(nodes):
        snap.add_node(
            NodeState(
                f"n{n}",
                cpu_milli=64_000,
                memory_mib=65_536,
                devices=[DeviceState(f"n{n}/gpu{i}", i, kind="gpu", model="T4") for i in range(2)],
            )
        )
    return snap


def _share(rid: str) -> Request:
    group = DeviceGroup(whole=False, compute=500, isolation=Isolation.SHARED, kind="gpu", models={"T4"})
    return Request(rid, cpu_milli=1_000, groups=(group,))


def _churn(snap: Snapshot, node: str, times: int) -> None:
    """Changes no decision follows (what a local search's moves look like to the index)."""
    probe = Placement("churn", (NodePart(node, 1, 0),))
    for _ in range(times):
        snap.apply(probe)
        snap.release("churn")


def _whole(snap: Snapshot, rid: str, node: str, card: int) -> None:
    snap.apply(
        Placement(
            rid,
            (NodePart(node, 0, 0, (DeviceAssignment(f"{node}/gpu{card}", card, 0, True, 0, 1000, "hard"),)),),
        )
    )


@pytest.mark.parametrize("policy", ["packing", "slotfrag", "fgd", "topology"])
def test_a_decision_after_the_change_log_was_trimmed_takes_a_card_that_is_free(policy):
    snap = _fleet()
    engine = Engine(policy, tie_break="order")
    first = engine.place(snap, _share("r1"))
    assert first.placed
    engine.place(snap, _share("r2"))
    engine.release(snap, "r2")
    holder = next(n for n in ("n1", "n2") if n not in first.placement.nodes)
    _whole(snap, "w", holder, 0)
    _churn(snap, "n2", 100_001)  # 200,002 changes: the log (200,000 kept) is trimmed past the index
    assert snap.log_offset > 0
    untouched = snap.copy()

    decision = engine.place(snap, _share("r3"))  # raised CapacityError: held as a whole card

    assert decision.placed
    (part,) = decision.placement.parts
    (card,) = part.devices
    assert snap.node(part.node).device(card.device_id).whole_by is None
    assert snap.check_invariants() == []
    # the same choice as an engine that never saw the old state
    fresh = Engine(policy, tie_break="order").place(untouched, _share("r3"))
    assert fresh.placement.parts == decision.placement.parts


def test_the_fleet_index_keeps_its_signature_ids_when_the_log_is_trimmed_past_it():
    snap = _fleet(4)
    snap.log_limit = 8  # a short log: the same as 200,000 changes, cheaply
    engine = Engine("slotfrag", tie_break="order")
    engine.place(snap, _share("a"))
    before = NodeClasses.of(snap)
    ids = dict(before.sig_ids)
    _whole(snap, "w", "n3", 1)
    _churn(snap, "n2", 20)
    assert snap.log_offset > before.seq  # the index is behind the log's start

    after = NodeClasses.of(snap)

    assert after is before  # followed, not rebuilt with new ids
    assert all(after.sig_ids[key] == sid for key, sid in ids.items())
    fresh = NodeClasses(snap)
    as_sets = lambda idx: {  # noqa: E731
        (idx.sig_class[sid], tuple(pos)) for sid, pos in idx.members.items()
    }
    assert as_sets(after) == as_sets(fresh)
    # and the engine's own index for the shape still places on cards that are free
    for i in range(5):
        d = engine.place(snap, _share(f"b{i}"))
        assert d.placed
    assert snap.check_invariants() == []


def test_an_engine_index_past_its_memo_bound_starts_over(monkeypatch):
    # Before: past the bound the memo was cleared but the heap kept its ids: the next pick read a
    # missing evaluation (KeyError). Now the index starts over and offers every signature again.
    monkeypatch.setattr(engine_module, "MAX_EVALS", 1)
    snap = _fleet(4)
    engine = Engine("packing", tie_break="order")
    for i in range(10):
        assert engine.place(snap, _share(f"s{i}")).placed
    assert snap.check_invariants() == []
    assert sum(len(n.devices[0].slices) + len(n.devices[1].slices) for n in snap.nodes) == 10
