"""The demo's embedded broker (worker/broker.py, ``filesystem://``): a reader never takes a message that
is still being written (celery/kombu#1551: the stock transport parses it, raises JSONDecodeError and
the worker dies, the message gone), concurrent writers and readers lose and duplicate nothing,
concurrent queue bindings all land in the exchange table, and a message held by a consumer that is
killed goes back to its queue. Real processes on a real folder; no Django database."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from queue import Empty
from time import monotonic

import kombu
import pytest
from kombu.utils.json import dumps

from worker import broker

ROOT = Path(__file__).resolve().parents[2]
broker.register()


@pytest.fixture(autouse=True)
def _fresh_broker_state():
    """kombu keeps the bindings a process declared in one state per transport class; each test has
    its own folder, so its bindings start empty."""
    broker.Transport.global_state.clear()
    yield
    broker.Transport.global_state.clear()


def _options(folder: Path, **extra) -> dict:
    return {
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        "control_folder": str(folder / "control"),
        "polling_interval": 0.01,
        **extra,
    }


def _connection(folder: Path, **extra) -> kombu.Connection:
    (folder / "queue").mkdir(parents=True, exist_ok=True)
    return kombu.Connection("filesystem://", transport_options=_options(folder, **extra))


def _messages(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder / "queue") if n.endswith(".msg"))


def _raw_message(conn: kombu.Connection, queue: str, body: dict) -> bytes:
    """The bytes a publisher writes for ``body`` on ``queue`` (what a message file holds)."""
    channel = conn.default_channel
    message = channel.prepare_message(dumps(body), content_type="application/json", content_encoding="utf-8")
    channel._inplace_augment_message(message, "", queue)
    return dumps(message).encode()


def _stock_writer_file(folder: Path, queue: str) -> Path:
    """A file named the way kombu's filesystem ``_put`` names it, in the queue folder."""
    return folder / "queue" / f"{int(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"


def test_it_resolves_filesystem_urls_to_the_atomic_transport(tmp_path):
    with _connection(tmp_path) as conn:
        assert isinstance(conn.transport, broker.Transport)


def test_a_reader_leaves_a_half_written_message_in_place_and_delivers_it_once_whole(tmp_path):
    """kombu's own writer opens the final name, locks it, then writes: a reader that meets the file
    locked and half-written, or empty and not yet locked, leaves it and gets it on a later poll."""
    with _connection(tmp_path) as conn:
        queue = conn.SimpleQueue("jobs")
        raw = _raw_message(conn, "jobs", {"job": 1})
        path = _stock_writer_file(tmp_path, "jobs")
        with open(path, "wb", buffering=0) as f:
            broker.filesystem.lock(f, broker.filesystem.LOCK_EX)
            f.write(raw[: len(raw) // 2])
            with pytest.raises(Empty):
                queue.get_nowait()
            assert _messages(tmp_path) == [path.name]
            f.write(raw[len(raw) // 2 :])
            broker.filesystem.unlock(f)
        message = queue.get_nowait()
        assert message.payload == {"job": 1}
        message.ack()

        empty = _stock_writer_file(tmp_path, "jobs")
        empty.touch()  # opened, not locked yet
        with pytest.raises(Empty):
            queue.get_nowait()
        assert _messages(tmp_path) == [empty.name]
        empty.write_bytes(_raw_message(conn, "jobs", {"job": 2}))
        message = queue.get_nowait()
        assert message.payload == {"job": 2}
        message.ack()
        assert _messages(tmp_path) == []
        queue.close()


def test_a_file_that_never_parses_is_set_aside_and_logged_and_the_queue_moves_on(tmp_path, caplog):
    with _connection(tmp_path, unreadable_after=0.0) as conn:
        queue = conn.SimpleQueue("jobs")
        bad = _stock_writer_file(tmp_path, "jobs")
        bad.write_bytes(b'{"body": ')
        queue.put({"job": 3})
        got = None
        for _ in range(1000):  # the broken file is retried, then moved aside; the good one comes through
            try:
                got = queue.get_nowait()
                break
            except Empty:
                continue
        assert got is not None and got.payload == {"job": 3}
        got.ack()
        for _ in range(1000):
            if not _messages(tmp_path):
                break
            with pytest.raises(Empty):
                queue.get_nowait()
        assert _messages(tmp_path) == []
        assert (tmp_path / "queue" / broker.UNREADABLE / bad.name).read_bytes() == b'{"body": '
        assert any(bad.name in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)
        queue.close()


WRITERS, PER_WRITER, READERS = 4, 250, 2


def _write_many(folder: str, writer: int, start) -> None:
    start.wait()
    with _connection(Path(folder)) as conn:
        queue = conn.SimpleQueue("load")
        for n in range(PER_WRITER):
            queue.put({"id": f"{writer}-{n}"})
        queue.close()


def _read_until_done(folder: str, writers_done, results, errors) -> None:
    try:
        with _connection(Path(folder)) as conn:
            queue = conn.SimpleQueue("load")
            seen: list[str] = []
            idle = 0
            while idle < 20:  # the writers are done and the folder stayed empty for 20 polls
                try:
                    message = queue.get(timeout=0.05)
                except Empty:
                    idle = idle + 1 if writers_done.is_set() else 0
                    continue
                seen.append(message.payload["id"])
                message.ack()
                idle = 0
            queue.close()
        results.put(seen)
    except BaseException as exc:  # reported to the test, not lost in a child's stderr
        errors.put(repr(exc))
        results.put([])


def test_concurrent_writers_and_readers_lose_and_duplicate_no_message(tmp_path):
    context = multiprocessing.get_context("spawn")
    start, writers_done = context.Event(), context.Event()
    results, errors = context.Queue(), context.Queue()
    (tmp_path / "queue").mkdir()
    readers = [
        context.Process(target=_read_until_done, args=(str(tmp_path), writers_done, results, errors))
        for _ in range(READERS)
    ]
    writers = [context.Process(target=_write_many, args=(str(tmp_path), w, start)) for w in range(WRITERS)]
    for process in readers + writers:
        process.start()
    start.set()
    for process in writers:
        process.join(timeout=120)
        assert process.exitcode == 0
    writers_done.set()
    received = [item for _ in readers for item in results.get(timeout=120)]
    for process in readers:
        process.join(timeout=30)
    reported = []
    while not errors.empty():
        reported.append(errors.get())
    assert reported == []
    sent = {f"{w}-{n}" for w in range(WRITERS) for n in range(PER_WRITER)}
    assert len(received) == len(sent)  # no duplicates ...
    assert set(received) == sent  # ... and none lost
    assert _messages(tmp_path) == []


def _bind_many(folder: str, worker: int, start, errors) -> None:
    start.wait()
    try:
        with _connection(Path(folder)) as conn:
            channel = conn.default_channel
            for n in range(20):
                channel._queue_bind("fan", "", "", f"q-{worker}-{n}")
                channel.get_table("fan")  # a publisher reading while others write
    except BaseException as exc:
        errors.put(repr(exc))


def test_concurrent_bindings_of_a_new_exchange_all_land_in_its_table(tmp_path):
    context = multiprocessing.get_context("spawn")
    start, errors = context.Event(), context.Queue()
    processes = [context.Process(target=_bind_many, args=(str(tmp_path), w, start, errors)) for w in range(6)]
    for process in processes:
        process.start()
    start.set()
    for process in processes:
        process.join(timeout=120)
    reported = []
    while not errors.empty():
        reported.append(errors.get())
    assert reported == []
    with _connection(tmp_path) as conn:
        table = conn.default_channel.get_table("fan")
    assert sorted(q.queue for q in table) == sorted(f"q-{w}-{n}" for w in range(6) for n in range(20))


HOLDER = """
import sys, time
import kombu
from worker import broker
broker.register()
options = {"data_folder_in": sys.argv[1], "data_folder_out": sys.argv[1], "control_folder": sys.argv[2]}
with kombu.Connection("filesystem://", transport_options=options) as conn:
    message = conn.SimpleQueue("late").get(timeout=30)
    print(message.payload["id"], flush=True)
    time.sleep(120)  # killed before it acknowledges
"""


def test_a_message_held_by_a_killed_consumer_goes_back_to_its_queue(tmp_path):
    with _connection(tmp_path) as conn:
        queue = conn.SimpleQueue("late")
        queue.put({"id": "acks-late"})
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(tmp_path / "queue"), str(tmp_path / "control")],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout.readline().strip() == "acks-late"
            assert _messages(tmp_path) == []  # claimed, not in the queue
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=30)
            holder.stdout.close()
        message = queue.get(timeout=5)
        assert message.payload == {"id": "acks-late"}
        message.ack()
        assert not (tmp_path / "queue" / broker.CLAIMED / str(holder.pid)).exists()
        queue.close()


DEMO_CONFIG = """
import json
from pathlib import Path
import django
django.setup()
from django.conf import settings
from worker.celery import app
from apps.demo.management.commands.serve import background_commands
with app.connection_for_write() as conn:
    transport = type(conn.transport)
print(json.dumps({
    "transport": f"{transport.__module__}:{transport.__name__}",
    "remote_control": app.conf.worker_enable_remote_control,
    "task_events": app.conf.worker_send_task_events,
    "sent_event": app.conf.task_send_sent_event,
    "worker": background_commands(Path("bin"), Path(settings.VAR_DIR))["worker"],
}))
"""


def test_the_demo_settings_use_the_atomic_broker_without_broadcast_traffic(tmp_path):
    """What ``make run`` gets: ``filesystem://`` is worker/broker.py in the Celery app, remote control
    (pidbox), events and heartbeats are off, and Celery's mingle and gossip with them."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL")}
    env.update(DJANGO_SETTINGS_MODULE="config.settings.local", SUANCHI_VAR_DIR=str(tmp_path / "var"))
    out = subprocess.run(
        [sys.executable, "-c", DEMO_CONFIG], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout
    config = json.loads(out.strip().splitlines()[-1])
    assert config["transport"] == "worker.broker:Transport"
    assert (config["remote_control"], config["task_events"], config["sent_event"]) == (False, False, False)
    assert {"--without-heartbeat", "--without-gossip", "--without-mingle"} <= set(config["worker"])
