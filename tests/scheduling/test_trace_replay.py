"""The trace simulator: both CSV variants, the benchmark method, the JSON shape, determinism."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from apps.scheduling.engine import trace_replay
from apps.scheduling.management.commands.simulate import Command

NODES = """sn,cpu_milli,memory_mib,gpu,model
node-0,32000,131072,2,T4
node-1,32000,131072,2,T4
node-2,64000,262144,4,V100M16
node-3,64000,262144,4,V100M16
node-4,16000,65536,1,P100
"""

PODS_5 = """name,cpu_milli,memory_mib,num_gpu,gpu_milli
p0,4000,8192,1,500
p1,4000,8192,1,500
p2,8000,16384,2,1000
p3,2000,4096,0,0
p4,4000,8192,1,250
p5,16000,32768,4,1000
p6,4000,8192,1,1000
p7,4000,8192,1,750
p8,2000,4096,1,250
"""

PODS_FULL = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p0,4000,8192,1,500,,LS,Running,0,100,0
p1,4000,8192,1,1000,V100M16,LS,Running,1,100,1
p2,8000,16384,2,1000,T4|V100M16,BE,Running,2,100,2
p3,2000,4096,0,0,,Burstable,Succeeded,3,100,3
p4,4000,8192,1,250,P100,LS,Running,4,100,4
p5,16000,32768,4,1000,,LS,Running,5,100,5
"""


@pytest.fixture
def trace(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods5.csv").write_text(PODS_5)
    (tmp_path / "pods_full.csv").write_text(PODS_FULL)
    return {
        "nodes": tmp_path / "nodes.csv",
        "pods5": tmp_path / "pods5.csv",
        "full": tmp_path / "pods_full.csv",
        "dir": tmp_path,
    }


def test_loads_both_pod_csv_variants(trace):
    five = trace_replay.load_pods(trace["pods5"])
    full = trace_replay.load_pods(trace["full"])
    assert [p.gpu for p in five[:4]] == [500, 500, 2000, 0]
    assert five[0].models == frozenset()
    assert full[2].models == frozenset({"T4", "V100M16"})
    assert full[1].models == frozenset({"V100M16"})
    nodes = trace_replay.load_nodes(trace["nodes"])
    assert sum(n.gpus for n in nodes) == 13
    req = trace_replay.to_request(full[2])
    assert (
        req.groups[0].count == 2
        and req.groups[0].whole
        and req.groups[0].models == frozenset({"T4", "V100M16"})
    )
    share = trace_replay.to_request(five[0])
    assert not share.groups[0].whole and share.groups[0].compute == 500


def test_workload_is_shuffled_and_inflated_to_130_percent_of_capacity(trace):
    pods = trace_replay.load_pods(trace["pods5"])
    capacity = 13 * 1000
    order = trace_replay.workload(pods, 42, capacity)
    total = sum(p.gpu for p in order)
    assert total >= 1.3 * capacity
    assert total - order[-1].gpu < 1.3 * capacity  # stops as soon as 130 % is reached
    assert sorted(p.name for p in order[: len(pods)]) == sorted(p.name for p in pods)
    assert order == trace_replay.workload(pods, 42, capacity)
    assert order != trace_replay.workload(pods, 43, capacity)


def test_model_constraints_are_respected(trace):
    nodes = trace_replay.load_nodes(trace["nodes"])
    pods = trace_replay.load_pods(trace["full"])
    snap = trace_replay.build_snapshot(nodes)
    from apps.scheduling.engine import Engine

    engine = Engine("bestfit", seed=1)
    d = engine.place(snap, trace_replay.to_request(pods[4]))  # P100 only
    assert d.placement.nodes == ("node-4",)
    d = engine.place(snap, trace_replay.to_request(pods[1]))  # V100M16 only
    assert d.placement.nodes[0] in ("node-2", "node-3")


def test_main_prints_and_writes_the_json_shape(trace, capsys):
    out = trace["dir"] / "out.json"
    code = trace_replay.main(
        [
            "--nodes",
            str(trace["nodes"]),
            "--pods",
            str(trace["pods5"]),
            "--policy",
            "random,bestfit,slotfrag",
            "--seeds",
            "1-3",
            "--json",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "bestfit" in printed and "unallocated" in printed
    data = json.loads(out.read_text())
    assert set(data) == {"random", "bestfit", "slotfrag", "offline"}
    offline = data.pop("offline")
    assert "lp-bound" in printed and "hindsight" in printed
    assert offline["seeds"] == [1, 2, 3] and set(offline["per_seed"]) == {"1", "2", "3"}
    best = min(data, key=lambda name: data[name]["unallocated_at_100"]["mean"])
    assert offline["best_online"] == best
    assert offline["gap_to_bound"] == pytest.approx(
        data[best]["unallocated_at_100"]["mean"] - offline["bound"]["mean"], abs=1e-3
    )
    for res in data.values():
        assert set(res["unallocated_at_100"]) == {"mean", "sd"}
        assert isinstance(res["failed_pods"], (int, float))
        assert res["seeds"] == [1, 2, 3]
        assert set(res["curve"]) <= {str(x) for x in range(75, 131)}
        assert "100" in res["curve"] and "130" in res["curve"]
        assert all(0 <= v <= 100 for v in res["curve"].values())


def test_full_variant_runs_too(trace):
    nodes = trace_replay.load_nodes(trace["nodes"])
    pods = trace_replay.load_pods(trace["full"])
    results = trace_replay.run_benchmark(nodes, pods, ["fgd", "packing"], [5, 6])
    assert set(results) == {"fgd", "packing"}
    assert results["fgd"]["fragmentation_at_100"] is not None


def test_a_run_is_deterministic_per_seed(trace):
    nodes = trace_replay.load_nodes(trace["nodes"])
    pods = trace_replay.load_pods(trace["pods5"])
    for policy in ("random", "slotfrag"):
        a = trace_replay.run_once(nodes, pods, policy, 7)
        b = trace_replay.run_once(nodes, pods, policy, 7)
        assert a["curve"] == b["curve"] and a["failed_pods"] == b["failed_pods"]


def test_curve_points_average_the_pods_whose_arrival_rounds_there():
    records = [(99.4, 90.0), (99.6, 91.0), (100.2, 92.0), (100.4, 94.0), (102.0, 97.0), (106.0, 98.0)]
    curve = trace_replay.curve_from_records(records, points=(100, 101, 102, 104))
    assert curve[100] == pytest.approx((91.0 + 92.0 + 94.0) / 3)
    assert curve[101] == pytest.approx((91.0 + 92.0 + 94.0 + 97.0) / 4)  # empty bucket: the pods within ±1
    assert curve[102] == 97.0
    assert curve[104] == 97.0  # nothing within ±1 either: the allocation reached by then


def test_bestfit_is_never_worse_than_random_on_a_fragmentation_trap(tmp_path):
    # four 2-GPU nodes; half-card pods scattered at random block the 2-card pods, best fit pairs them up
    (tmp_path / "n.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(f"n{i},64000,262144,2,T4\n" for i in range(4))
    )
    pods = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli"]
    pods += [f"half{i},1000,1024,1,500" for i in range(4)]
    pods += [f"pair{i},1000,1024,2,1000" for i in range(3)]
    (tmp_path / "p.csv").write_text("\n".join(pods) + "\n")
    nodes = trace_replay.load_nodes(tmp_path / "n.csv")
    trap = trace_replay.load_pods(tmp_path / "p.csv")
    for seed in range(10):
        best = trace_replay.run_once(nodes, trap, "bestfit", seed)
        rand = trace_replay.run_once(nodes, trap, "random", seed)
        assert best["unallocated_at_100"] <= rand["unallocated_at_100"] + 1e-9


def test_management_command_wraps_the_same_cli(trace):
    out = io.StringIO()
    target = trace["dir"] / "cmd.json"
    call_command(
        Command(),
        "--nodes",
        str(trace["nodes"]),
        "--pods",
        str(trace["pods5"]),
        "--policy",
        "bestfit",
        "--seeds",
        "42",
        "--json",
        str(target),
        "--quiet",
        stdout=out,
    )
    assert "bestfit" in out.getvalue()
    assert json.loads(target.read_text())["bestfit"]["seeds"] == [42]


def test_unknown_policy_is_refused(trace, capsys):
    assert (
        trace_replay.main(["--nodes", str(trace["nodes"]), "--pods", str(trace["pods5"]), "--policy", "nope"])
        == 2
    )
    assert "unknown policy" in capsys.readouterr().out


def test_all_variants_prints_gaps_and_the_margin_below_fgd(tmp_path, capsys):
    # the benchmark's --all-variants on a hand-made 6-node trace dir (a gzip pod list, as the repo keeps
    # the published variants): a row per variant and policy, FGD's published default figure beside it
    import gzip
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "openb_trace_replay.py"
    spec = importlib.util.spec_from_file_location("openb_trace_replay", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"n{i},32000,131072,{1 + i % 4},T4\n" for i in range(6))
    )
    rows = [f"p{i},{2000 + 1000 * (i % 5)},8192,{1 + i % 3},{400 if i % 4 == 0 else 1000}" for i in range(30)]
    with gzip.open(tmp_path / "openb_pod_list_default.csv.gz", "wt") as fh:
        fh.write("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "\n".join(rows) + "\n")
    target = tmp_path / "out.json"
    argv = ["--all-variants", "--trace-dir", str(tmp_path), "--variants", "default", "--seeds", "1-2"]
    argv += ["--policies", "bestfit,slotfrag", "--hindsight-seconds", "0.2", "--bound-seconds", "2"]
    assert bench.main([*argv, "--json", str(target)]) == 0
    out = capsys.readouterr().out
    assert "margin" in out and "4.77" in out
    got = json.loads(target.read_text())["default"]["rows"]
    assert [r["policy"] for r in got] == ["bestfit", "slotfrag"]
    for r in got:
        assert r["gap_to_bound"] >= -1e-6 and r["bound"] <= r["hindsight"] + 1e-6
        assert r["margin_below_fgd_pct"] == pytest.approx(100 * (4.77 - r["unallocated"]) / 4.77)
    # --no-offline: the same policy figures and margin, no offline reference and so no gaps
    assert bench.main([*argv, "--no-offline", "--json", str(target)]) == 0
    quick = json.loads(target.read_text())["default"]["rows"]
    assert [r["unallocated"] for r in quick] == [r["unallocated"] for r in got]
    assert all(r["bound"] is None and r["gap_to_bound"] is None for r in quick)
    assert [r["margin_below_fgd_pct"] for r in quick] == [r["margin_below_fgd_pct"] for r in got]
    row = next(
        line for line in capsys.readouterr().out.splitlines() if line.startswith("default      slotfrag")
    )
    assert row.split()[5:9] == ["-", "-", "-", "-"]  # bound, hindsight, both gaps
