"""``manage.py serve`` keeps the web server up when the worker or beat exits: the background process is
restarted with a doubling, capped delay, one terminal line per restart and its log appended; the web
server keeps answering; Ctrl-C / SIGTERM still stops everything. Real child processes and a real HTTP
server; waits are for conditions, not fixed sleeps."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from apps.demo.logtee import LogTee, open_log
from apps.demo.supervise import Child, Supervisor
from tests.fixtures.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - a local test server
            return response.status
    except OSError:
        return None


@pytest.fixture
def web():
    port = _free_port()
    child = Child("web", [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"])
    return child, f"http://127.0.0.1:{port}/"


def _supervise(children, **kwargs):
    lines: list[str] = []
    supervisor = Supervisor(children, cwd=str(ROOT), write=lines.append, poll=0.01, grace=5, **kwargs)
    supervisor.start()
    thread = threading.Thread(target=supervisor.run, daemon=True)
    thread.start()
    return supervisor, thread, lines


def test_a_background_process_that_exits_is_restarted_with_backoff_while_the_web_keeps_answering(
    tmp_path, web
):
    web_child, url = web
    log = tmp_path / "log" / "worker.log"
    terminal = open(os.devnull, "w")  # noqa: SIM115 - closed below
    flaky = Child(
        "worker",
        [sys.executable, "-c", "import sys; print('ERROR boom', flush=True); sys.exit(3)"],
        restart=True,
        tee=LogTee("worker", log=open_log(log), terminal=terminal),
    )
    supervisor, thread, lines = _supervise(
        [web_child, flaky], base_delay=0.05, max_delay=0.2, stable_after=600
    )
    try:
        web_pid = web_child.proc.pid
        wait_until(lambda: _answers(url) == 200, what="the web server")
        wait_until(lambda: len(supervisor.history) >= 5, what="five restarts")
        assert [r.delay for r in supervisor.history[:5]] == [0.05, 0.1, 0.2, 0.2, 0.2]
        assert all(r.name == "worker" and r.returncode == 3 for r in supervisor.history[:5])
        assert _answers(url) == 200
        assert web_child.proc.pid == web_pid and web_child.proc.poll() is None
        restart_lines = [line for line in lines if "restarting it in" in line]
        assert restart_lines[:2] == [
            "worker exited with code 3; restarting it in 0.05 s (restart 1)",
            "worker exited with code 3; restarting it in 0.1 s (restart 2)",
        ]
        assert len(restart_lines) == len(supervisor.history)  # one line per restart
        # the log is appended across restarts, not replaced
        wait_until(lambda: log.read_text().count("ERROR boom") >= 5, what="five runs in the log")
    finally:
        supervisor.stop()
        thread.join(timeout=30)
        terminal.close()
    assert not thread.is_alive()
    assert web_child.proc.poll() is not None and flaky.proc.poll() is not None
    assert supervisor.exited is None


def test_a_run_longer_than_stable_after_starts_the_backoff_again():
    supervisor = Supervisor([], cwd=str(ROOT), write=print, base_delay=1, max_delay=60)
    assert [supervisor.delay_for(n) for n in (1, 2, 3, 6, 7, 20)] == [1, 2, 4, 32, 60, 60]
    quick = Child("beat", [sys.executable, "-c", "pass"], restart=True)
    supervisor.children = {"beat": quick}
    supervisor.stable_after = 0.0  # every run counts as stable: the delay never grows
    supervisor.start()
    for _ in range(3):
        wait_until(lambda: quick.proc.poll() is not None, what="beat to exit")
        supervisor.step()
        quick.due = 0.0  # due now
        supervisor.step()
    supervisor.shutdown()
    assert [r.delay for r in supervisor.history] == [1, 1, 1]


def test_stop_ends_all_children_and_the_web_exiting_ends_the_group(tmp_path, web):
    web_child, url = web
    steady = Child("beat", [sys.executable, "-c", "import time; time.sleep(300)"], restart=True)
    supervisor, thread, lines = _supervise([web_child, steady])
    wait_until(lambda: _answers(url) == 200, what="the web server")
    web_child.proc.send_signal(signal.SIGKILL)
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert supervisor.exited == "web"
    assert steady.proc.poll() is not None  # stopped with the group, not left behind
    assert supervisor.history == []
    assert lines[-1] == "web exited with code -9; stopping the rest"


SERVE_STARTED = re.compile(r"started (\w+) \(pid (\d+)\)")


def _children_of(pid: int) -> dict[int, str]:
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found[int(entry.name)] = cmdline
    return found


@pytest.mark.integration
def test_serve_restarts_a_killed_worker_and_the_web_keeps_answering(tmp_path):
    """The finding: the worker died (JSONDecodeError in the filesystem transport) and serve stopped the
    web server with it. Here the real ``serve`` loses its worker to SIGKILL and keeps serving."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL")}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings.local",
        SUANCHI_VAR_DIR=str(tmp_path / "var"),
        DJANGO_STATIC_ROOT=str(tmp_path / "static"),
        PYTHONUNBUFFERED="1",
    )
    serve = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port), "--web-workers", "1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(serve.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        url = f"http://127.0.0.1:{port}/healthz"
        pids = wait_until(
            lambda: (
                {m[1]: int(m[2]) for line in lines if (m := SERVE_STARTED.search(line))}.keys()
                >= {"web", "worker", "beat"}
                and {m[1]: int(m[2]) for line in lines if (m := SERVE_STARTED.search(line))}
            ),
            timeout=120,
            what="serve to start web, worker and beat",
        )
        wait_until(lambda: _answers(url) == 200, timeout=120, what="the web server")
        os.kill(pids["worker"], signal.SIGKILL)
        wait_until(lambda: any("worker exited with code -9; restarting it in 1 s" in line for line in lines))
        new_worker = wait_until(
            lambda: [
                pid
                for pid, cmd in _children_of(serve.pid).items()
                if " worker " in cmd and pid != pids["worker"]
            ],
            what="a new worker process",
        )
        assert _answers(url) == 200
        assert serve.poll() is None
        assert pids["web"] in _children_of(serve.pid)  # the same web server, never stopped
    finally:
        serve.send_signal(signal.SIGINT)  # Ctrl-C
        returncode = serve.wait(timeout=60)
        reader.join(timeout=10)
    assert returncode == 0
    assert not _children_of(serve.pid)
    assert all(not Path(f"/proc/{pid}").exists() for pid in [*pids.values(), *new_worker])
