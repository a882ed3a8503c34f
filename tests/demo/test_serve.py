"""`make run` → `manage.py serve`: the worker's and beat's output goes to var/log/worker.log and
var/log/beat.log, the terminal keeps the web server's address and only their warnings and errors,
and Ctrl-C (SIGINT to the foreground process group) stops every process."""

from __future__ import annotations

import io
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

from apps.demo import logtee
from apps.demo.logtee import LogTee, open_log
from tests.fixtures.waiting import wait_until

INFO = "[2026-12-01 18:00:00,123: INFO/MainProcess] Task worker.tasks.push.push_clusters_task[1] received"
WARNING = "[2026-12-01 18:00:01,000: WARNING/MainProcess] consumer: Connection to broker lost."
ERROR = "[2026-12-01 18:00:02,000: ERROR/ForkPoolWorker-1] Task worker.tasks.x[2] raised unexpected: ValueError('x')"
DJANGO_WARNING = "2026-12-01 18:00:03,000 WARNING apps.clusters.pusher cluster demo unreachable"
DJANGO_INFO = "2026-12-01 18:00:04,000 INFO apps.scheduling cycle placed 3"


def test_the_log_gets_every_line_and_the_terminal_only_warnings_errors_and_their_tracebacks():
    log, terminal = io.StringIO(), io.StringIO()
    tee = LogTee("worker", log=log, terminal=terminal)
    # (line, reaches the terminal)
    lines = [
        # Python's warnings module, as Celery prints it when run as root: the message, not its source line
        (
            ".venv/lib/python3.11/site-packages/celery/platforms.py:893: SecurityWarning: You're running the worker with superuser privileges: this is",
            True,
        ),
        ("absolutely not recommended!", True),
        ("", False),
        ("Please specify a different user using the --uid option.", False),
        ("  _warn_or_raise_security_error(egid, euid, gid, uid,", False),
        (" -------------- celery@demo v5.4.0 (opalescent)", False),  # the startup banner
        ("[config]", False),
        (INFO, False),
        ("  a second line of that INFO record", False),
        (WARNING, True),
        (ERROR, True),
        ("Traceback (most recent call last):", True),
        ('  File "worker/tasks/x.py", line 3, in x', True),
        ("ValueError: x", True),
        (INFO, False),
        (DJANGO_WARNING, True),
        (DJANGO_INFO, False),
        ("worker: Warm shutdown (MainProcess)", False),
        # a crash outside logging, two chained tracebacks
        ("Traceback (most recent call last):", True),
        ('  File "worker/celery.py", line 1, in <module>', True),
        ("KeyError: 'x'", True),
        ("", False),
        ("During handling of the above exception, another exception occurred:", True),
        ("", True),
        ("Traceback (most recent call last):", True),
        ("ModuleNotFoundError: No module named 'nope'", True),
        ("Error: Invalid value for '-A' / '--app'", True),  # Click
        ("celery beat v5.4.0 (opalescent) is starting.", False),
    ]
    shown = [tee.feed(line + "\n") for line, _visible in lines]
    assert log.getvalue() == "".join(line + "\n" for line, _visible in lines)
    assert shown == [visible for _line, visible in lines]
    assert terminal.getvalue().splitlines() == [f"worker | {line}" for line, visible in lines if visible]
    assert list(tee.recent)[-1] == "celery beat v5.4.0 (opalescent) is starting."


def test_a_large_log_is_rotated_once_at_start(tmp_path, monkeypatch):
    monkeypatch.setattr(logtee, "ROTATE_BYTES", 15)
    path = tmp_path / "log" / "worker.log"
    with open_log(path) as f:
        f.write("first run, long enough\n")
    with open_log(path) as f:
        f.write("second run\n")
    assert (tmp_path / "log" / "worker.log.1").read_text() == "first run, long enough\n"
    assert path.read_text() == "second run\n"
    with open_log(path) as f:  # under the limit: appended
        f.write("third run\n")
    assert path.read_text() == "second run\nthird run\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, predicate, deadline: float) -> None:
    """Until ``predicate()`` holds, by the shared ``deadline`` (a monotonic time) of the steps."""
    wait_until(predicate, timeout=max(0.0, deadline - time.monotonic()), step=0.5, what=what)


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.django_db(transaction=True)  # committed schema: the served processes use this database
def test_serve_sends_worker_and_beat_to_their_logs_and_ctrl_c_stops_everything(tmp_path):
    db = settings.DATABASES["default"]
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL", "REDIS_URL")}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings.local",  # as `make run`: filesystem broker under var/
        DATABASE_URL=f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        SUANCHI_VAR_DIR=str(tmp_path / "var"),
        DJANGO_STATIC_ROOT=str(tmp_path / "static"),
        DJANGO_DEBUG="0",
    )
    port = _free_port()
    base = Path(settings.BASE_DIR)
    serve = subprocess.Popen(
        [sys.executable, str(base / "manage.py"), "serve", "--port", str(port), "--web-workers", "1"],
        cwd=tmp_path,  # the banner shows the log paths relative to here (var/log/…)
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    pgid = serve.pid
    terminal: list[str] = []
    reader = threading.Thread(target=lambda: terminal.extend(iter(serve.stdout.readline, "")), daemon=True)
    reader.start()
    worker_log = tmp_path / "var" / "log" / "worker.log"
    beat_log = tmp_path / "var" / "log" / "beat.log"
    try:
        deadline = time.monotonic() + 240
        _wait("the banner", lambda: any("Suanchi is up" in line for line in terminal), deadline)
        _wait("the worker to be ready", lambda: " ready." in _read(worker_log), deadline)
        _wait("beat to send a task", lambda: "Sending due task" in _read(beat_log), deadline)
        _wait("the worker to run a task", lambda: "succeeded in" in _read(worker_log), deadline)

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
                    return response.status == 200
            except OSError:
                return False

        _wait("the web server", healthy, deadline)

        text = "".join(terminal)
        assert f"Suanchi is up: http://127.0.0.1:{port}/" in text
        assert "  worker log: var/log/worker.log (its warnings and errors also appear here)\n" in text
        assert "  beat log: var/log/beat.log (its warnings and errors also appear here)\n" in text
        # The INFO lines are in the files, not on the terminal.
        assert re.search(r": INFO/MainProcess\]", _read(worker_log))
        assert re.search(r": INFO/MainProcess\] Scheduler: Sending due task", _read(beat_log))
        for line in terminal:
            assert "INFO/" not in line and "Sending due task" not in line and "celery@" not in line, line
        pids = {int(m.group(2)) for m in re.finditer(r"started (web|worker|beat) \(pid (\d+)\)", text)}
        assert len(pids) == 3

        os.killpg(pgid, signal.SIGINT)  # Ctrl-C
        serve.wait(timeout=60)
        _wait("every process of the group to exit", lambda: not _group_alive(pgid), time.monotonic() + 30)
        reader.join(timeout=5)
        assert "worker: Warm shutdown (MainProcess)" in _read(worker_log)  # a clean stop, logged
    finally:
        if _group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)
        serve.wait(timeout=30)
