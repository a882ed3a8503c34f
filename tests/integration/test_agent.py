"""The node agent end to end: the real script runs fake vendor tools and posts to a live server."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from apps.inventory.models import Cluster, Device, DeviceEvent, Node
from apps.inventory.services.tokens import agent_token_create

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "platform" / "agent" / "suanchi-agent"
FIXTURES = ROOT / "tests" / "inventory" / "fixtures"

pytestmark = pytest.mark.django_db(transaction=True)


def fake_tool(bin_dir: Path, name: str, outputs: dict[str, Path]) -> None:
    """A shell script that prints a fixture chosen by its whole argument list ("" = no argument);
    any other arguments (e.g. `npu-smi info -t topo`) exit 2, as a tool without that command would."""
    cases = "\n".join(f'  "{arg}") cat "{path}" ;;' for arg, path in outputs.items())
    script = bin_dir / name
    script.write_text(f'#!/bin/sh\ncase "$*" in\n{cases}\n  *) echo "unsupported" >&2; exit 2 ;;\nesac\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def run_agent(live_server, bin_dir: Path, key: str, node: str) -> subprocess.CompletedProcess:
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SUANCHI_URL": live_server.url,
        "SUANCHI_AGENT_TOKEN": key,
        "NODE_NAME": node,
        "SUANCHI_CLUSTER": "prod",
        "HOME": os.environ.get("HOME", "/tmp"),
    }
    return subprocess.run(
        [sys.executable, str(AGENT), "--once"], env=env, capture_output=True, text=True, timeout=60
    )


def test_the_agent_registers_a_node_and_its_npus_then_a_missing_chip_is_lost(live_server, tmp_path):
    cluster = Cluster.objects.create(name="Prod", slug="prod")
    _, key = agent_token_create(cluster=cluster, name="agent", actor="test")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    full = FIXTURES / "npu_smi_910b3_8chip.txt"
    fake_tool(bin_dir, "npu-smi", {"info": full})

    done = run_agent(live_server, bin_dir, key, "ascend-01")
    assert done.returncode == 0, done.stderr
    node = Node.objects.get(name="ascend-01")
    assert node.cluster == cluster
    assert node.pending_approval  # registered by an agent: no work until staff approve it
    assert node.driver_version
    assert Device.objects.filter(node=node, vendor="huawei").count() == 8

    # Chip 7 disappears from the output (the first line of its two-line block and the second).
    lines = full.read_text().splitlines(keepends=True)
    trimmed = tmp_path / "npu_smi_7chips.txt"
    trimmed.write_text("".join(_drop_chip(lines, 7)))
    fake_tool(bin_dir, "npu-smi", {"info": trimmed})
    done = run_agent(live_server, bin_dir, key, "ascend-01")
    assert done.returncode == 0, done.stderr
    lost = Device.objects.get(node=node, index=7)
    assert lost.health == Device.Health.LOST
    assert DeviceEvent.objects.filter(kind="lost", device=lost).count() == 1


def test_a_revoked_token_is_refused_and_the_agent_exits_non_zero(live_server, tmp_path):
    cluster = Cluster.objects.create(name="Prod", slug="prod")
    token, key = agent_token_create(cluster=cluster, name="agent", actor="test")
    token.revoked = True
    token.save()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_tool(bin_dir, "npu-smi", {"info": FIXTURES / "npu_smi_910b3_8chip.txt"})
    done = run_agent(live_server, bin_dir, key, "ascend-01")
    assert done.returncode == 1
    assert "HTTP 401" in done.stderr
    assert not Node.objects.filter(name="ascend-01").exists()


def _drop_chip(lines: list[str], npu_id: int) -> list[str]:
    """Remove the two table rows (and the separator after them) of one chip from `npu-smi info`."""
    out: list[str] = []
    skip = 0
    for line in lines:
        if skip:
            skip -= 1
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0].split()[:1] == [str(npu_id)] and "910B" in line:
            skip = 2  # the chip's second row and the separator after it
            continue
        out.append(line)
    return out


def test_on_a_hygon_node_with_dtk_rocm_smi_the_agent_reports_hy_smi_only(live_server, tmp_path):
    """DTK installs a rocm-smi beside hy-smi; its output would describe the DCUs as AMD cards, which the
    server refuses as a vendor mismatch. The agent lets hy-smi speak for the node and exits 0."""
    cluster = Cluster.objects.create(name="Prod", slug="prod")
    # hy-smi prints no card identity: Hygon cards enter the ledger by import, hy-smi refreshes them.
    node = Node.objects.create(cluster=cluster, name="hygon-01")
    for index in range(4):
        Device.objects.create(node=node, vendor="hygon", index=index, serial=f"HY-{index}")
    _, key = agent_token_create(cluster=cluster, name="agent", actor="test")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "rocm-smi-called"
    rocm = bin_dir / "rocm-smi"
    rocm.write_text(f'#!/bin/sh\ntouch "{calls}"\ncat "{FIXTURES / "rocm_smi_mi210_xgmi.json"}"\n')
    rocm.chmod(rocm.stat().st_mode | stat.S_IEXEC)
    fake_tool(bin_dir, "hy-smi", {"": FIXTURES / "hy_smi_dcu.txt"})

    done = run_agent(live_server, bin_dir, key, "hygon-01")
    assert done.returncode == 0, done.stderr
    assert not calls.exists()
    assert not Device.objects.filter(vendor="amd").exists()
    assert set(Device.objects.filter(node=node).values_list("vendor", flat=True)) == {"hygon"}
