"""Named locks that die with their owner.

A process that holds one of these locks and is killed (SIGKILL, OOM killer, a node gone) delays
the next holder by seconds, never by a time-to-live: the lock is not a row or a cache key that
somebody must delete, it is a property of something the operating system or the database server
tears down when the owner goes away.

- **PostgreSQL** (tests, production): a session-level advisory lock, ``pg_try_advisory_lock``, on a
  connection of its own (https://www.postgresql.org/docs/current/explicit-locking.html#ADVISORY-LOCKS
  and .../functions-admin.html#FUNCTIONS-ADVISORY-LOCKS). The server releases a session's advisory
  locks when the session ends, so a killed process (its socket closed by the kernel) frees the lock at
  once. The connection is dedicated so that nothing else can end the session under the holder: not a
  rollback, not Django closing the thread's connection between tasks (``CONN_MAX_AGE``), not a test's
  wrapping transaction. For a host that vanishes without closing its socket the session asks the
  server to probe it with TCP keepalives (``tcp_keepalives_idle``/``_interval``/``_count`` are
  per-session settings, .../runtime-config-connection.html#GUC-TCP-KEEPALIVES-IDLE), so the lock is
  freed within about ``KEEPALIVE_IDLE_S + KEEPALIVE_INTERVAL_S × KEEPALIVE_COUNT`` seconds. Advisory
  locks belong to one database (the lock tag includes the database), so test databases side by side
  never share a lock. Session locks need a session: behind PgBouncer use session pooling for Suanchi
  (transaction pooling would hand the lock's session to someone else).
- **SQLite** (the embedded demo: web, worker and beat on one machine sharing one database file): an
  exclusive ``flock(2)`` on a file next to the database (https://man7.org/linux/man-pages/man2/flock.2.html).
  The kernel drops the lock when the last descriptor of the open file is closed — including when the
  process dies — and ``flock`` is atomic, unlike the file cache's ``add`` (a check then a write). The
  lock's scope is the database's scope: SQLite itself only works for processes of one host.

Because a lock lives exactly as long as its owner's session or descriptor, there is no expiry, hence
no heartbeat to renew it and no way for a release to delete a lock that another holder took after
ours expired: a release only ever ends our own session's lock or closes our own descriptor.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections

logger = logging.getLogger(__name__)

KEEPALIVE_IDLE_S = 5
KEEPALIVE_INTERVAL_S = 2
KEEPALIVE_COUNT = 3


def advisory_key(name: str) -> int:
    """The signed 64-bit key of a named lock (``pg_try_advisory_lock(bigint)``)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class OwnerLock:
    """One attempt at a named lock. ``acquire()`` never waits; ``release()`` is idempotent."""

    def __init__(self, name: str, *, holder: str = "") -> None:
        self.name = name
        self.holder = holder  # who takes it, shown to operators (pg_stat_activity, the lock file)
        self.held = False

    def acquire(self) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def release(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class AdvisoryLock(OwnerLock):
    """A PostgreSQL session advisory lock on a connection opened for it alone."""

    def __init__(self, name: str, *, holder: str = "", using: str = DEFAULT_DB_ALIAS) -> None:
        super().__init__(name, holder=holder)
        self.using = using
        self.key = advisory_key(name)
        self._conn: Any = None

    def acquire(self) -> bool:
        if self.held:
            raise RuntimeError(f"lock {self.name!r} is already held by this object")
        conn = connections.create_connection(self.using)  # a new session, not the thread's connection
        try:
            with conn.cursor() as cursor:
                cursor.execute(
                    "SELECT set_config('application_name', %s, false),"
                    " set_config('tcp_keepalives_idle', %s, false),"
                    " set_config('tcp_keepalives_interval', %s, false),"
                    " set_config('tcp_keepalives_count', %s, false)",
                    [
                        f"suanchi lock {self.name} {self.holder}".strip()[:63],
                        str(KEEPALIVE_IDLE_S),
                        str(KEEPALIVE_INTERVAL_S),
                        str(KEEPALIVE_COUNT),
                    ],
                )
                cursor.execute("SELECT pg_try_advisory_lock(%s)", [self.key])
                taken = bool(cursor.fetchone()[0])
        except BaseException:
            conn.close()
            raise
        if not taken:
            conn.close()
            return False
        self._conn = conn
        self.held = True
        return True

    def release(self) -> None:
        if not self.held:
            return
        conn, self._conn, self.held = self._conn, None, False
        try:
            with conn.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [self.key])
        except Exception:  # noqa: BLE001 - a broken session has released its locks already
            logger.warning("could not unlock %s; closing its session releases it", self.name, exc_info=True)
        finally:
            conn.close()  # ending the session releases the lock in any case


class FileLock(OwnerLock):
    """An exclusive, non-blocking ``flock`` on ``directory/<name>.lock``."""

    def __init__(self, name: str, *, directory: Path, holder: str = "") -> None:
        super().__init__(name, holder=holder)
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._")[:80] or "lock"
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        self.path = Path(directory) / f"{slug}-{digest}.lock"
        self._fd: int | None = None

    def acquire(self) -> bool:
        import fcntl  # POSIX only, like the demo's process model

        if self.held:
            raise RuntimeError(f"lock {self.name!r} is already held by this object")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # os.open descriptors are not inherited across exec (PEP 446): a spawned child never keeps it.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        # For whoever looks at the file: who holds it.
        os.write(fd, (f"{os.getpid()} {self.name} {self.holder}".strip() + "\n").encode())
        self._fd = fd
        self.held = True
        return True

    def release(self) -> None:
        if not self.held:
            return
        fd, self._fd, self.held = self._fd, None, False
        if fd is not None:
            os.close(fd)  # closing the only descriptor of the open file releases the flock


def lock_directory(using: str = DEFAULT_DB_ALIAS) -> Path:
    """Where SQLite deployments keep their lock files: next to the database file, so every process
    sharing the database shares the locks (an in-memory database falls back to the var directory)."""
    name = str(connections.settings[using].get("NAME") or "")
    if name and name != ":memory:" and not name.startswith("file:"):
        path = Path(name)
        return path.with_name(path.name + ".locks")
    return Path(getattr(settings, "VAR_DIR", tempfile.gettempdir())) / "locks"


def owner_lock(name: str, *, holder: str = "", using: str = DEFAULT_DB_ALIAS) -> OwnerLock:
    """The lock named ``name`` for the database ``using`` (not yet taken); ``holder`` says who
    takes it, for operators."""
    engine = connections.settings[using]["ENGINE"]
    vendor = connections[using].vendor
    if vendor == "postgresql":
        return AdvisoryLock(name, holder=holder, using=using)
    if vendor == "sqlite":
        return FileLock(name, directory=lock_directory(using), holder=holder)
    raise ImproperlyConfigured(f"apps.core.locks supports PostgreSQL and SQLite databases, not {engine}")


@contextmanager
def try_lock(name: str, *, holder: str = "", using: str = DEFAULT_DB_ALIAS) -> Iterator[bool]:
    """Take the lock ``name`` if nobody holds it, without waiting. Yields whether it was taken and
    releases it on exit (only if taken)::

        with try_lock("suanchi:scheduling-cycle") as taken:
            if not taken:
                return "busy"
            ...
    """
    lock = owner_lock(name, holder=holder, using=using)
    taken = lock.acquire()
    try:
        yield taken
    finally:
        if taken:
            lock.release()
