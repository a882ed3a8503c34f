"""The embedded broker: kombu's filesystem transport with whole message files and kept claims.

Stock kombu (``kombu/transport/filesystem.py``, 5.x) writes a message by opening its final name in the
queue folder and then locking and writing it, while a reader moves any matching name away and parses
it without looking at the lock: a message read in between is an empty or partial file, and
``JSONDecodeError('Expecting value: line 1 column 1 (char 0)')`` ends the worker (celery/kombu#1551).
A message moved to another filesystem (its default ``tempfile.gettempdir()``) is copied, not renamed,
so two readers can both get it, or a half of it. Exchange tables are truncated before they are locked
and rewritten, so a publisher can read an empty table and route a message nowhere.

This subclass keeps the folder layout and file names (a stock reader still reads its files) and
changes how files move:

- a message is written under ``<queue folder>/.incoming/`` and renamed into the queue folder whole;
- a reader claims a file by renaming it into ``<queue folder>/.claimed/<pid>/`` (same filesystem, so
  exactly one reader wins); a file still locked by a stock writer, or one that does not parse yet, goes
  back to the queue and is tried again on the next poll; one that still does not parse after
  ``unreadable_after`` seconds is moved to ``.unreadable/`` and logged, never dropped silently;
- the claimed file stays until the message is acknowledged, rejected or restored; the claims of a
  worker that died (its pid is gone) go back to the queue when the next worker starts consuming, so an
  ``acks_late`` task survives a killed worker;
- exchange tables are rewritten to a temporary name and renamed over the old one, under a lock file.

``filesystem://`` resolves to this transport in every process that imports :mod:`worker.celery`.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from contextlib import contextmanager, suppress
from pathlib import Path
from queue import Empty
from time import monotonic, sleep

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

try:
    import fcntl
except ImportError:  # pragma: no cover - the demo runs on POSIX (stock kombu needs pywin32 elsewhere)
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

INCOMING = ".incoming"
CLAIMED = ".claimed"
UNREADABLE = ".unreadable"
# How long a file may stay unparseable before it is set aside (a writer needs milliseconds).
UNREADABLE_AFTER = 30.0
# A stock writer truncates an exchange table before locking it: a reader retries an empty read this often.
TABLE_READ_TRIES = 50


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _locked_by_writer(path: str) -> bool:
    """Whether a stock kombu writer still holds its exclusive lock on ``path``."""
    if fcntl is None:  # pragma: no cover
        return False
    with open(path, "rb") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    return False


class Channel(filesystem.Channel):
    """Filesystem channel with atomic message and table files and claims kept until ack."""

    def __init__(self, *args, **kwargs):
        self._claims: dict[str, str] = {}  # delivery tag -> claimed file
        self._no_ack_queues: set[str] = set()
        self._unreadable_since: dict[str, float] = {}
        self._reclaimed = False
        super().__init__(*args, **kwargs)

    # -- folders ------------------------------------------------------------------------------------
    def _folder(self, base: str, *names: str) -> str:
        path = os.path.join(base, *names)
        os.makedirs(path, exist_ok=True)
        return path

    @property
    def _claim_folder(self) -> str:
        return self._folder(self.data_folder_in, CLAIMED, str(os.getpid()))

    @property
    def unreadable_after(self) -> float:
        return float(self.transport_options.get("unreadable_after", UNREADABLE_AFTER))

    # -- messages -----------------------------------------------------------------------------------
    def _put(self, queue, payload, **kwargs):
        """Write the message under ``.incoming/`` and rename it into the queue folder whole."""
        # The name as stock kombu makes it (milliseconds, a uuid, the queue): readers sort and filter on it.
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        temporary = os.path.join(self._folder(self.data_folder_out, INCOMING), name)
        try:
            with open(temporary, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.rename(temporary, os.path.join(self.data_folder_out, name))
        except OSError as exc:
            with suppress(OSError):
                os.unlink(temporary)
            raise ChannelError(f"Cannot add file {name!r} to directory") from exc

    def _reclaim_orphans(self) -> None:
        """Put the claims of consumers that died (pid gone) back into the queue, in their order."""
        self._reclaimed = True
        root = os.path.join(self.data_folder_in, CLAIMED)
        try:
            owners = os.listdir(root)
        except FileNotFoundError:
            return
        for owner in owners:
            if not owner.isdigit() or int(owner) == os.getpid() or _pid_alive(int(owner)):
                continue
            folder = os.path.join(root, owner)
            try:
                names = sorted(os.listdir(folder))
            except FileNotFoundError:  # another consumer reclaimed it first
                continue
            for name in names:
                try:
                    os.rename(os.path.join(folder, name), os.path.join(self.data_folder_in, name))
                except FileNotFoundError:
                    continue
                logger.warning("broker: message %s of stopped consumer %s returned to its queue", name, owner)
            with suppress(OSError):
                os.rmdir(folder)

    def _read_claimed(self, name: str, claimed: str):
        """The claimed file's payload, or None (and the file back in the queue) while it is incomplete."""
        try:
            if not _locked_by_writer(claimed):
                with open(claimed, "rb") as f:
                    payload = loads(bytes_to_str(f.read()))
                if isinstance(payload, dict):
                    self._unreadable_since.pop(name, None)
                    return payload
        except (OSError, ValueError):
            pass
        first = self._unreadable_since.setdefault(name, monotonic())
        if monotonic() - first > self.unreadable_after:
            self._unreadable_since.pop(name, None)
            aside = os.path.join(self._folder(self.data_folder_in, UNREADABLE), name)
            os.rename(claimed, aside)
            logger.error("broker: message file %s does not parse; moved to %s", name, aside)
        else:
            os.rename(claimed, os.path.join(self.data_folder_in, name))
        return None

    def _get(self, queue):
        """Claim, read and return the oldest whole message of ``queue``; skip files still being written."""
        if not self._reclaimed:
            self._reclaim_orphans()
        suffix = f"{queue}.msg"
        claim_folder = self._claim_folder
        for name in sorted(os.listdir(self.data_folder_in)):
            if name.partition(".")[2] != suffix:
                continue
            claimed = os.path.join(claim_folder, name)
            try:
                os.rename(os.path.join(self.data_folder_in, name), claimed)
            except FileNotFoundError:  # another reader claimed it first
                continue
            payload = self._read_claimed(name, claimed)
            if payload is None:
                continue
            tag = payload.get("properties", {}).get("delivery_tag")
            if tag is None or queue in self._no_ack_queues:
                self._finish(claimed)
            else:
                self._claims[tag] = claimed
            return payload
        raise Empty()

    def _finish(self, claimed: str) -> None:
        try:
            if self.store_processed:
                shutil.move(claimed, self.processed_folder)
            else:
                os.unlink(claimed)
        except OSError:
            logger.warning("broker: could not remove the delivered message file %s", claimed)

    def _release(self, delivery_tag) -> None:
        claimed = self._claims.pop(delivery_tag, None)
        if claimed is not None:
            self._finish(claimed)

    def basic_consume(self, queue, no_ack, callback, consumer_tag, **kwargs):
        if no_ack:
            self._no_ack_queues.add(queue)
        return super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)

    def basic_get(self, queue, no_ack=False, **kwargs):
        message = super().basic_get(queue, no_ack=no_ack, **kwargs)
        if message is not None and no_ack:
            self._release(message.delivery_tag)
        return message

    def basic_ack(self, delivery_tag, multiple=False):
        super().basic_ack(delivery_tag, multiple=multiple)
        self._release(delivery_tag)

    def basic_reject(self, delivery_tag, requeue=False):
        super().basic_reject(delivery_tag, requeue=requeue)
        self._release(delivery_tag)

    def _restore(self, message):
        """Requeue an unacknowledged message (a new file), then drop its claim."""
        super()._restore(message)
        self._release(message.delivery_tag)

    # -- exchange tables ----------------------------------------------------------------------------
    @contextmanager
    def _table_lock(self, exchange):
        file = self._exchange_file(exchange)
        self.control_folder.mkdir(parents=True, exist_ok=True)
        with open(file.with_name(file.name + ".lock"), "a") as lock_file:
            filesystem.lock(lock_file, filesystem.LOCK_EX)
            try:
                yield file
            finally:
                filesystem.unlock(lock_file)

    def get_table(self, exchange):
        file = self._exchange_file(exchange)
        for _ in range(TABLE_READ_TRIES):
            try:
                data = file.read_bytes()
            except FileNotFoundError:
                return []
            except OSError as exc:
                raise ChannelError(f"Cannot open {file}") from exc
            try:
                return [filesystem.exchange_queue_t(*q) for q in loads(bytes_to_str(data))]
            except ValueError:  # a stock writer between truncating and writing it
                sleep(0.01)
        raise ChannelError(f"Exchange table {file} does not parse")

    def _write_table(self, file: Path, queues) -> None:
        temporary = file.with_name(f".{file.name}.{uuid.uuid4().hex}.tmp")
        temporary.write_bytes(str_to_bytes(dumps(list(queues))))
        os.replace(temporary, file)

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        try:
            with self._table_lock(exchange) as file:
                queues = self.get_table(exchange)
                if entry not in queues:
                    self._write_table(file, [entry, *queues])
        except OSError as exc:
            raise ChannelError(f"Cannot bind {queue!r} to {exchange!r}") from exc

    def _delete(self, queue, exchange, routing_key, pattern, *args, **kwargs):
        # the virtual channel's part (purge the queue), not the stock in-place table rewrite
        super(filesystem.Channel, self)._delete(queue, exchange, routing_key, pattern, *args, **kwargs)
        entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with self._table_lock(exchange) as file:
            queues = self.get_table(exchange)
            if entry in queues:
                self._write_table(file, [q for q in queues if q != entry])


class Transport(filesystem.Transport):
    """kombu's filesystem transport with :class:`Channel`."""

    Channel = Channel


def register() -> None:
    """Make ``filesystem://`` mean this transport in this process (kombu resolves aliases at connect)."""
    TRANSPORT_ALIASES["filesystem"] = f"{__name__}:Transport"
