"""Locks that die with their owner (apps.core.locks): a holder killed with SIGKILL frees the ledger
lock and the scheduling-cycle lock within seconds, on PostgreSQL (advisory locks) and in the SQLite
demo (flock), and a release never frees a lock somebody else holds."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from apps.billing import services as billing
from apps.core.locks import AdvisoryLock, FileLock, owner_lock, try_lock
from worker.tasks.scheduling import scheduling_cycle_task

ROOT = Path(__file__).resolve().parents[2]
FREED_WITHIN_S = 5.0  # "a crashed worker delays nothing by more than a few seconds"


def _spawn(code: str, *, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _read_line(proc: subprocess.Popen, *, timeout: float = 60.0) -> str:
    """The child's next line of output (it prints whole lines and flushes)."""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            proc.kill()
            pytest.fail(f"the child said nothing in {timeout} s")
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=10)
        pytest.fail(f"the child exited ({proc.returncode}) before taking the lock")
    return line.strip()


def _kill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)  # no finally, no atexit: the lock is never released by the code
    proc.wait(timeout=10)
    proc.stdout.close()


def _seconds_until(taken) -> float | None:
    """Poll ``taken()`` for up to FREED_WITHIN_S; the seconds it took to return True, else None."""
    started = time.monotonic()
    while time.monotonic() - started < FREED_WITHIN_S:
        if taken():
            return time.monotonic() - started
        time.sleep(0.1)
    return None


def _test_database_env() -> dict[str, str]:
    """The environment of a child that uses this test run's database and cache (same key prefix)."""
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.test", "PYTHONPATH": str(ROOT)}


# The child points the settings at the test database (pytest-django's test_… copy) before it opens
# any connection; DATABASE_URL stays as it is so the cache key prefix is this run's.
CHILD_SETUP = """
    import sys, time
    import django
    django.setup()
    from django.conf import settings
    settings.DATABASES["default"]["NAME"] = {name!r}
"""


def _ledger_taken() -> bool:
    with billing.ledger_lock("after-the-crash") as taken:
        return taken


@pytest.mark.django_db
def test_a_killed_holder_of_the_ledger_lock_frees_it_within_seconds():
    child = _spawn(
        CHILD_SETUP.format(name=connection.settings_dict["NAME"])
        + """
    from apps.billing import services
    with services.ledger_lock("metering") as taken:
        print("taken" if taken else "busy", flush=True)
        time.sleep(600)
    """,
        env=_test_database_env(),
    )
    try:
        assert _read_line(child) == "taken"
        assert not _ledger_taken()  # the child holds it: metering and month close are refused
    finally:
        _kill(child)
    elapsed = _seconds_until(_ledger_taken)
    assert elapsed is not None, f"the ledger lock was still held {FREED_WITHIN_S} s after its holder died"


@pytest.mark.django_db
def test_a_killed_scheduling_cycle_holds_up_the_next_cycle_for_seconds_only():
    child = _spawn(
        CHILD_SETUP.format(name=connection.settings_dict["NAME"])
        + """
    import worker.tasks.scheduling as tasks

    def hang(**kwargs):
        print("cycling", flush=True)
        time.sleep(600)

    tasks.scheduling_cycle_run = hang  # a cycle that is killed half-way
    tasks.scheduling_cycle_task.run()
    """,
        env=_test_database_env(),
    )
    try:
        assert _read_line(child) == "cycling"
        assert scheduling_cycle_task.run() == {"skipped": "another cycle is running"}
    finally:
        _kill(child)
    outcomes = []

    def cycle_ran() -> bool:
        outcomes.append(scheduling_cycle_task.run())
        return "skipped" not in outcomes[-1]

    assert _seconds_until(cycle_ran) is not None, outcomes[-3:]
    assert "cycle_id" in outcomes[-1]


def test_a_killed_holder_in_the_sqlite_demo_frees_the_ledger_lock_within_seconds(tmp_path):
    """The demo: SQLite under var/, the file cache, no Redis, no PostgreSQL; two processes."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(DJANGO_SETTINGS_MODULE="config.settings.local", SUANCHI_VAR_DIR=str(tmp_path))
    script = """
        import sys, time
        import django
        django.setup()
        from django.db import connection
        from apps.billing import services
        assert connection.vendor == "sqlite", connection.vendor
        if sys.argv[1] == "hold":
            with services.ledger_lock("metering") as taken:
                print("taken" if taken else "busy", flush=True)
                time.sleep(600)
        for _ in range(2):  # busy while the holder lives, then free within seconds of its death
            sys.stdin.readline()
            started = time.monotonic()
            while True:
                with services.ledger_lock("close") as taken:
                    if taken or time.monotonic() - started > {limit}:
                        break
                time.sleep(0.1)
            print("taken" if taken else "busy", flush=True)
    """.replace("{limit}", str(FREED_WITHIN_S))

    def spawn(role: str) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(script), role],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        return proc

    holder = spawn("hold")
    waiter = spawn("wait")
    try:
        assert _read_line(holder) == "taken"
        waiter.stdin.write("\n")
        waiter.stdin.flush()
        assert _read_line(waiter, timeout=60 + FREED_WITHIN_S) == "busy"
        _kill(holder)
        waiter.stdin.write("\n")
        waiter.stdin.flush()
        assert _read_line(waiter, timeout=FREED_WITHIN_S + 10) == "taken"
    finally:
        if holder.poll() is None:
            _kill(holder)
        waiter.kill()
        waiter.wait(timeout=10)
    assert list((tmp_path).glob("suanchi.sqlite3.locks/*.lock"))  # next to the database file


def test_a_killed_holder_of_a_file_lock_frees_it_at_once(tmp_path):
    child = _spawn(
        f"""
        import time
        from pathlib import Path
        from apps.core.locks import FileLock
        lock = FileLock("suanchi:test", directory=Path({str(tmp_path)!r}))
        print("taken" if lock.acquire() else "busy", flush=True)
        time.sleep(600)
        """,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    lock = FileLock("suanchi:test", directory=tmp_path)
    try:
        assert _read_line(child) == "taken"
        assert not lock.acquire()
    finally:
        _kill(child)
    assert _seconds_until(lock.acquire) is not None
    lock.release()


@pytest.mark.django_db
def test_the_database_picks_the_lock_and_postgres_locks_on_a_session_of_their_own():
    lock = owner_lock("suanchi:test")
    assert isinstance(lock, AdvisoryLock)
    assert lock.acquire()
    try:
        assert lock._conn is not connection and lock._conn.connection is not None
        with lock._conn.cursor() as cursor:
            cursor.execute("SHOW application_name")
            assert cursor.fetchone()[0] == "suanchi lock suanchi:test"
    finally:
        lock.release()
    assert lock._conn is None and not lock.held


@pytest.fixture(params=["postgres", "flock"])
def make_lock(request, tmp_path):
    if request.param == "postgres":
        request.getfixturevalue("db")
        return lambda: AdvisoryLock("suanchi:test")
    return lambda: FileLock("suanchi:test", directory=tmp_path)


def test_a_second_release_never_frees_the_next_holders_lock(make_lock):
    first, second, third = make_lock(), make_lock(), make_lock()
    assert first.acquire()
    assert not second.acquire()
    first.release()
    assert second.acquire()
    first.release()  # late or repeated: ours is long gone, the second holder's stays
    assert not third.acquire()
    second.release()
    assert third.acquire()
    third.release()


def test_threads_racing_for_a_lock_have_exactly_one_winner(make_lock):
    threads_n = 8
    barrier = threading.Barrier(threads_n)
    done = threading.Event()
    results: list[bool] = []
    errors: list[BaseException] = []

    def contend() -> None:
        lock = make_lock()
        try:
            barrier.wait(timeout=30)
            results.append(lock.acquire())
            done.wait(timeout=30)  # the winner holds it until everybody has tried
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            lock.release()
            connection.close()

    threads = [threading.Thread(target=contend) for _ in range(threads_n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(results) + len(errors) < threads_n and time.monotonic() < deadline:
        time.sleep(0.01)
    done.set()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors[:3]
    assert sorted(results) == [False] * (threads_n - 1) + [True]


@pytest.mark.django_db
def test_try_lock_frees_what_it_took_even_on_an_exception_and_never_what_it_did_not():
    with pytest.raises(RuntimeError), try_lock("suanchi:test", holder="a") as taken:
        assert taken
        raise RuntimeError("boom")
    other = AdvisoryLock("suanchi:test")
    assert other.acquire()  # freed on the way out
    try:
        with try_lock("suanchi:test", holder="b") as taken:
            assert not taken
        assert not AdvisoryLock("suanchi:test").acquire()  # a busy exit left the holder's lock alone
    finally:
        other.release()
    assert settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
