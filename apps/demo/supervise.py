"""The demo's process supervisor: the web server, and background processes restarted when they exit.

``manage.py serve`` runs gunicorn, a Celery worker and Celery beat through :class:`Supervisor`. A
background process (``restart=True``) that exits is started again after a delay that doubles with each
quick exit (``base_delay`` up to ``max_delay``; a run longer than ``stable_after`` starts the count
again), with one line in the terminal per restart and its log file appended to, not replaced. The web
server is never stopped because of them. The web server itself exiting ends the group (its error is on
the terminal; restarting it on a taken port would only repeat it). ``stop()`` (Ctrl-C, SIGTERM) stops
all of them: SIGTERM, then SIGKILL for those still running after ``grace`` seconds.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from django.utils.translation import gettext as _

from apps.demo.logtee import LogTee


@dataclass
class Child:
    """One supervised process: its command, whether it comes back after exiting, where its output goes."""

    name: str
    argv: Sequence[str]
    restart: bool = False
    tee: LogTee | None = None  # output piped through it (log file + terminal); None: inherited
    env: dict[str, str] | None = None
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    failures: int = 0  # quick exits in a row (the backoff's exponent)
    restarts: int = 0
    due: float | None = None  # when a restart is scheduled
    pumps: list[threading.Thread] = field(default_factory=list)


@dataclass(frozen=True)
class Restart:
    """A scheduled restart, as the terminal line reports it (kept for tests and the soak benchmark)."""

    name: str
    returncode: int
    delay: float
    number: int


class Supervisor:
    def __init__(
        self,
        children: Sequence[Child],
        *,
        cwd: str,
        write: Callable[[str], None],
        base_delay: float = 1.0,
        max_delay: float = 60.0,
        stable_after: float = 60.0,
        poll: float = 0.2,
        grace: float = 10.0,
    ) -> None:
        self.children = {child.name: child for child in children}
        self.cwd = cwd
        self.write = write
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.stable_after = stable_after
        self.poll = poll
        self.grace = grace
        self.history: list[Restart] = []
        self.exited: str | None = None  # the name of a child whose exit ended the group
        self._stopping = threading.Event()

    def delay_for(self, failures: int) -> float:
        """The wait before restart number ``failures`` of a quick-exit run: doubling, capped."""
        return min(self.max_delay, self.base_delay * 2 ** max(0, failures - 1))

    def _spawn(self, child: Child) -> None:
        piped = child.tee is not None
        child.proc = subprocess.Popen(
            list(child.argv),
            cwd=self.cwd,
            env=child.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if piped else None,
            stderr=subprocess.STDOUT if piped else None,
            text=piped or None,
            encoding="utf-8" if piped else None,
            errors="replace" if piped else None,
        )
        child.started_at = time.monotonic()
        child.due = None
        if child.tee is not None:
            child.pumps = [p for p in child.pumps if p.is_alive()]
            child.pumps.append(child.tee.start(child.proc.stdout))

    def start(self) -> None:
        for child in self.children.values():
            self._spawn(child)
            self.write(_("started %(name)s (pid %(pid)s)") % {"name": child.name, "pid": child.proc.pid})

    def _on_exit(self, child: Child, returncode: int, now: float) -> None:
        if not child.restart:
            self.exited = child.name
            self.write(
                _("%(name)s exited with code %(code)s; stopping the rest")
                % {"name": child.name, "code": returncode}
            )
            self._stopping.set()
            return
        if now - child.started_at >= self.stable_after:
            child.failures = 0
        child.failures += 1
        child.restarts += 1
        delay = self.delay_for(child.failures)
        child.due = now + delay
        self.history.append(Restart(child.name, returncode, delay, child.restarts))
        self.write(
            _("%(name)s exited with code %(code)s; restarting it in %(delay)s s (restart %(number)s)")
            % {"name": child.name, "code": returncode, "delay": f"{delay:g}", "number": child.restarts}
        )

    def step(self) -> None:
        """One pass: notice exits, start the restarts that are due."""
        now = time.monotonic()
        for child in self.children.values():
            if child.due is not None:
                if now >= child.due and not self._stopping.is_set():
                    self._spawn(child)
                continue
            returncode = child.proc.poll() if child.proc is not None else None
            if returncode is not None:
                self._on_exit(child, returncode, now)

    def run(self) -> None:
        """Supervise until :meth:`stop` or until a child that is not restarted exits; then stop all."""
        try:
            while not self._stopping.is_set():
                self.step()
                self._stopping.wait(self.poll)
        finally:
            self.shutdown()

    def stop(self, *_args) -> None:
        """Ask :meth:`run` to stop everything (safe from a signal handler or another thread)."""
        self._stopping.set()

    def shutdown(self) -> None:
        running = [c.proc for c in self.children.values() if c.proc is not None and c.proc.poll() is None]
        for proc in running:
            proc.terminate()
        deadline = time.monotonic() + self.grace
        for proc in running:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for child in self.children.values():
            for pump in child.pumps:  # a pipe ends once its process (and any child holding it) is gone
                pump.join(timeout=2)
            if child.tee is not None and not any(p.is_alive() for p in child.pumps):
                child.tee.log.close()
