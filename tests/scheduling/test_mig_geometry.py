"""Issue 18 item 5: the engine places a MIG slice only where a real GPU-instance placement is free.

Geometry data: ``apps/catalog/data/mig-geometry.yaml`` (NVIDIA's ``nvidia-smi mig -lgipp``
placements); engine hook: ``apps/scheduling/engine/mig.py``.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.catalog.mig import carve, model_geometry, valid_layout
from apps.catalog.models import ComputeTemplate
from apps.jobs.models import Allocation, JobState
from apps.scheduling.engine import (
    DeviceGroup,
    DeviceState,
    Engine,
    Isolation,
    NodeState,
    Placement,
    Request,
    Snapshot,
)
from apps.scheduling.engine import mig as engine_mig
from apps.scheduling.lifecycle import job_submit
from apps.scheduling.services import scheduling_cycle_run
from apps.scheduling.snapshot import fleet_snapshot

MODELS = {"A100 80GB SXM4": 81920, "H100 SXM5 80GB": 81920}


def _snapshot(model: str, cards: int = 2) -> Snapshot:
    geometry = model_geometry(model)
    devices = [
        DeviceState(f"{model}-{i}", i, vendor="nvidia", model=model, memory_mib=MODELS[model], mig=geometry)
        for i in range(cards)
    ]
    return Snapshot([NodeState("n1", cpu_milli=256_000, memory_mib=1 << 20, devices=devices)])


def _mig_request(rid: str, model: str, profile: str) -> Request:
    p = model_geometry(model).profiles[profile]
    return Request(
        rid,
        groups=(
            DeviceGroup(
                count=1,
                whole=False,
                compute=max(1, 1000 * p.compute // 7),
                memory_mib=int(profile.split(".")[1].split("gb")[0]) * 1024,
                profile=profile,
                models={model},
            ),
        ),
    )


def _layouts(snapshot: Snapshot) -> dict[str, list[tuple[str, int]]]:
    return {d.id: sorted(d.mig_used.values()) for d in snapshot.nodes[0].devices}


# ------------------------------------------------------------------ the property (acceptance)


@pytest.mark.parametrize("model", sorted(MODELS))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_mig_allocations_and_releases_never_leave_an_uncarvable_card(model, data):
    geometry = model_geometry(model)
    profiles = sorted(geometry.profiles)
    snapshot = _snapshot(model)
    engine = Engine(seed=data.draw(st.integers(0, 1000)))
    live: list[str] = []
    for step in range(data.draw(st.integers(5, 40))):
        if live and data.draw(st.booleans()):
            rid = live.pop(data.draw(st.integers(0, len(live) - 1)))
            engine.release(snapshot, rid)
        else:
            profile = data.draw(st.sampled_from(profiles))
            # what the hardware would allow right now, card by card, without moving anything
            could = any(engine_mig.fits_profile(d, profile) for d in snapshot.nodes[0].devices)
            decision = engine.place(snapshot, _mig_request(f"r{step}", model, profile))
            assert decision.placed == could, (profile, _layouts(snapshot), decision.explanation)
            if decision.placed:
                live.append(f"r{step}")
                (assignment,) = decision.placement.parts[0].devices
                assert (
                    assignment.profile == profile
                    and assignment.mig_start in geometry.profiles[profile].starts
                )
            else:
                assert f"no free MIG placement for {profile}" in decision.explanation
        assert snapshot.check_invariants() == []
        for device in snapshot.nodes[0].devices:
            layout = list(device.mig_used.values())
            assert valid_layout(geometry, layout) is None  # the recorded starts are real placements
            assert carve(geometry, [name for name, _start in layout]) is not None  # the set has one


# ------------------------------------------------------------------ engine behaviour


def test_a100_takes_two_3g_slices_per_card_and_refuses_a_third_with_the_geometry_reason():
    snapshot = _snapshot("A100 80GB SXM4", cards=1)
    engine = Engine(seed=1)
    starts = [engine.place(snapshot, _mig_request(f"r{i}", "A100 80GB SXM4", "3g.40gb")) for i in range(3)]
    assert [d.placed for d in starts] == [True, True, False]
    assert sorted(d.placement.parts[0].devices[0].mig_start for d in starts[:2]) == [0, 4]
    assert starts[2].explanation == "0/1 nodes are available: 1 no free MIG placement for 3g.40gb."
    # 3g + 3g leave one compute slice and no memory slice: not even a 1g.10gb fits (NVIDIA placements)
    assert not engine.place(snapshot, _mig_request("small", "A100 80GB SXM4", "1g.10gb")).placed


def test_seven_1g_instances_fill_an_a100_although_7_x_one_seventh_rounds_above_the_card():
    # 1g = 14.29 % of the card -> 143 milli by share; 7 x 143 > 1000. The geometry counts slots instead.
    snapshot = _snapshot("A100 80GB SXM4", cards=1)
    engine = Engine(seed=1)
    placed = [
        engine.place(snapshot, _mig_request(f"r{i}", "A100 80GB SXM4", "1g.10gb")).placed for i in range(8)
    ]
    assert placed == [True] * 7 + [False]
    device = snapshot.nodes[0].devices[0]
    assert sorted(start for _p, start in device.mig_used.values()) == [0, 1, 2, 3, 4, 5, 6]
    assert device.hard_used <= 1000 and device.mem_used <= device.memory_mib
    assert snapshot.check_invariants() == []


def test_a_freed_placement_is_reused_and_the_start_slot_survives_a_round_trip():
    model = "H100 SXM5 80GB"
    snapshot = _snapshot(model, cards=1)
    engine = Engine(seed=3)
    first = engine.place(snapshot, _mig_request("a", model, "4g.40gb"))
    second = engine.place(snapshot, _mig_request("b", model, "3g.40gb"))
    assert (
        first.placement.parts[0].devices[0].mig_start,
        second.placement.parts[0].devices[0].mig_start,
    ) == (0, 4)
    engine.release(snapshot, "a")
    assert engine.place(snapshot, _mig_request("c", model, "2g.20gb")).placed
    # the ledger form keeps profile and start; a fresh snapshot rebuilt from it has the same layout
    restored = _snapshot(model, cards=1)
    for rid in ("b", "c"):
        restored.apply(Placement.from_dict(snapshot.placements[rid].to_dict()))
    assert _layouts(restored) == _layouts(snapshot)
    # a placement naming an overlapping start is refused, not applied
    bad = Placement.from_dict(
        {
            "request_id": "bad",
            "parts": [
                {
                    "node": "n1",
                    "devices": [
                        {
                            "device_id": f"{model}-0",
                            "whole": False,
                            "memory_mib": 20480,
                            "compute": 142,
                            "isolation": "hard",
                            "profile": "1g.20gb",
                            "mig_start": 4,
                        }
                    ],
                }
            ],
        }
    )
    assert "overlaps" in restored.check_placement(bad)


def test_soft_slices_and_mig_instances_never_share_a_card_and_non_mig_cards_keep_todays_sizing():
    model = "A100 80GB SXM4"
    snapshot = _snapshot(model, cards=1)
    engine = Engine(seed=1)
    soft = Request(
        "soft",
        groups=(
            DeviceGroup(count=1, whole=False, compute=250, memory_mib=10240, isolation=Isolation.SHARED),
        ),
    )
    assert engine.place(snapshot, _mig_request("m", model, "1g.10gb")).placed
    refused = engine.place(snapshot, soft)
    assert not refused.placed
    engine.release(snapshot, "m")
    assert engine.place(snapshot, soft).placed
    assert not engine.place(snapshot, _mig_request("m2", model, "1g.10gb")).placed  # card is soft-sliced now
    # a card without a geometry (H200: placements not sourced) sizes MIG slices by share and memory
    h200 = DeviceState("h200-0", 0, vendor="nvidia", model="H200 SXM 141GB", memory_mib=144384)
    snap = Snapshot([NodeState("n2", cpu_milli=64_000, memory_mib=1 << 20, devices=[h200])])
    group = DeviceGroup(count=1, whole=False, compute=429, memory_mib=70 * 1024, profile="3g.71gb")
    decisions = [engine.place(snap, Request(f"h{i}", groups=(group,))) for i in range(3)]
    assert [d.placed for d in decisions] == [True, True, False]
    assert decisions[0].placement.parts[0].devices[0].mig_start is None and not h200.mig_used


# ------------------------------------------------------------------ the ledger: templates, cycle, restore


@pytest.fixture
def mig_3g(a100):
    return ComputeTemplate.objects.create(
        device_model=a100,
        name="A100 MIG 3g.40gb",
        slug="a100-mig-3g",
        memory_mib=40960,
        compute_share=Decimal("42.86"),
        isolation="hard",
        partition_profile="3g.40gb",
        max_instances=2,
    )


def test_a_mig_job_is_priced_at_submit_as_its_instance_is_held(fleet, member_project, mig_3g):
    """Issue 29 §9: 0.4290 CU at submit (42.86 % rounded up to 429 milli) vs 0.4280 held (3 of 7
    compute slices, 428 milli)."""
    user, project = member_project
    job = job_submit(
        project=project, actor=user, name="m", image="pytorch:2.3", request_kind="template", template=mig_3g
    )
    asked = job.requested_cu
    scheduling_cycle_run()
    (held,) = Allocation.objects.filter(job=job)
    assert held.compute_milli == 428
    assert asked == held.compute_units == Decimal("0.4280")


def test_mig_jobs_through_the_cycle_get_real_start_slots_persisted_and_restored(
    fleet, member_project, mig_3g
):
    user, project = member_project
    jobs = [
        job_submit(
            project=project,
            actor=user,
            name=f"m{i}",
            image="pytorch:2.3",
            request_kind="template",
            template=mig_3g,
        )
        for i in range(17)
    ]
    scheduling_cycle_run()
    placed = [j for j in jobs if (j.refresh_from_db() or j.state) == JobState.SCHEDULED]
    # 8 A100 cards x 2 placements of 3g.40gb ({0,4}:4): 16 fit, the 17th waits
    assert len(placed) == 16
    rows = list(Allocation.objects.filter(released_at__isnull=True))
    per_card = Counter(r.device_id for r in rows)
    assert set(per_card.values()) == {2}
    for device_id in per_card:
        assert sorted(r.mig_start for r in rows if r.device_id == device_id) == [0, 4]
    assert all(r.partition_profile == "3g.40gb" for r in rows)
    # a snapshot rebuilt from the ledger holds exactly these instances
    snapshot = fleet_snapshot()
    layouts = {
        d.id: sorted(d.mig_used.values()) for n in snapshot.nodes for d in n.devices if d.mig is not None
    }
    assert layouts and all(v == [("3g.40gb", 0), ("3g.40gb", 4)] for v in layouts.values())
    assert snapshot.check_invariants() == []


def test_a_cards_ingested_lgipp_listing_supplies_its_placements_to_the_snapshot(fleet, a100):
    from apps.inventory.models import Device

    card = Device.objects.filter(node__name="gpu-01").order_by("index").first()
    # as merged from nvidia-smi mig -lgipp: profile 9 (3g) only at slot 4 on this card
    card.mig_profiles = [{"id": 9, "name": None, "placements": [{"start": 4, "size": 4}]}]
    card.save(update_fields=["mig_profiles"])
    snapshot = fleet_snapshot()
    devices = {d.id: d for n in snapshot.nodes for d in n.devices}
    assert devices[str(card.pk)].mig.profiles["3g.40gb"].starts == (4,)
    other = next(d for d in devices.values() if d.id != str(card.pk) and d.model == a100.name)
    assert other.mig.profiles["3g.40gb"].starts == (0, 4)
    ascend_card = next(d for d in devices.values() if d.vendor == "huawei")
    assert ascend_card.mig is None


def test_persistence_refuses_a_second_instance_on_the_same_start_slot(fleet, member_project, mig_3g):
    from apps.scheduling.allocations import claim_placement, device_usage, locked_device_caps
    from apps.scheduling.engine.model import Decision

    user, project = member_project
    job = job_submit(
        project=project, actor=user, name="m", image="pytorch:2.3", request_kind="template", template=mig_3g
    )
    scheduling_cycle_run()
    row = Allocation.objects.get(job=job)
    # another cycle's stale proposal: the same card, the same start slot (counters alone would allow it)
    stale = Decision(
        "0" * 32,
        "other",
        "test",
        placement=Placement.from_dict(
            {
                "request_id": "other",
                "parts": [
                    {
                        "node": row.node.name,
                        "devices": [
                            {
                                "device_id": str(row.device_id),
                                "whole": False,
                                "memory_mib": row.memory_mib,
                                "compute": row.compute_milli,
                                "isolation": "hard",
                                "profile": "3g.40gb",
                                "mig_start": row.mig_start,
                            }
                        ],
                    }
                ],
            }
        ),
    )
    caps = locked_device_caps([row.device_id])
    assert claim_placement(stale, device_usage([row.device_id]), caps) is None
    free = 0 if row.mig_start == 4 else 4
    fresh = Placement.from_dict(
        {
            **stale.placement.to_dict(),
            "parts": [
                {
                    **stale.placement.to_dict()["parts"][0],
                    "devices": [{**stale.placement.to_dict()["parts"][0]["devices"][0], "mig_start": free}],
                }
            ],
        }
    )
    stale.placement = fresh
    assert claim_placement(stale, device_usage([row.device_id]), caps) is not None


def test_the_simulator_models_mig_cards_and_leaves_plain_runs_alone():
    from apps.scheduling.engine import trace_replay

    nodes = [trace_replay.NodeSpec(f"n{i}", 64_000, 262_144, 4, "A100") for i in range(3)]
    pods = [
        trace_replay.PodSpec(f"p{i}", 2_000, 4_096, 1, milli)
        for i, milli in enumerate([100, 150, 300, 450, 500, 600, 1000, 250, 700, 140] * 3)
    ]
    plain = trace_replay.run_once(nodes, pods, "bestfit", 42, frag=False)
    again = trace_replay.run_once(nodes, pods, "bestfit", 42, frag=False, mig=None)
    assert {k: v for k, v in plain.items() if k != "seconds"} == {
        k: v for k, v in again.items() if k != "seconds"
    }
    assert "mig" not in plain
    geometry = trace_replay.mig_geometry("A100-80GB")
    # smallest profile covering the share: 100 -> 1g, 150 -> 2g (1/7 = 142.9 milli < 150), 450 -> 4g
    assert [trace_replay.mig_profile_for(geometry, m) for m in (100, 150, 450, 1000)] == [
        "1g.10gb",
        "2g.20gb",
        "4g.40gb",
        "7g.80gb",
    ]
    mig_run = trace_replay.run_once(nodes, pods, "bestfit", 42, frag=False, mig="A100-80GB")
    assert mig_run["mig"] == "A100-80GB" and mig_run["invariant_problems"] == 0
    assert mig_run["unallocated_at_100"] < 100.0 and mig_run["pods"] == plain["pods"]
    with pytest.raises(ValueError, match="unknown MIG geometry"):
        trace_replay.mig_geometry("B300")
