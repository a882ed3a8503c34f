"""The demo's background processes write their whole output to a log file; the terminal gets only
what needs a person (warnings, errors and the lines that belong to them, such as a traceback).

``manage.py serve`` runs the Celery worker and beat with their output piped through a
:class:`LogTee`: every line goes to ``var/log/<name>.log``; a line goes to the terminal too, prefixed
with the process name, when it opens a record at WARNING or above, continues such a record (a line
that opens no record: a traceback, a multi-line message), or is an error or warning printed outside
the logging system (a traceback, Python's ``warnings`` output, Click's ``Error: …``).

Record headers recognised: Celery's default ``worker_log_format`` / ``worker_task_log_format``
(``[%(asctime)s: %(levelname)s/%(processName)s] …``, docs.celeryq.dev "Configuration and defaults",
worker_log_format) and Django's ``LOGGING`` "plain" formatter in ``config/settings/base.py``
(``%(asctime)s %(levelname)s %(name)s …``).
"""

from __future__ import annotations

import logging
import re
import threading
from collections import deque
from pathlib import Path
from typing import IO

# The level name as the header writes it: "[2026-12-01 18:00:00,123: WARNING/MainProcess] ..." or
# "2026-12-01 18:00:00,123 WARNING apps.clusters ...".
_HEADER = re.compile(
    r"^\[\d{4}-\d\d-\d\d [\d:,.]+: (?P<a>[A-Z]+)/[^\]]*\]"
    r"|^\d{4}-\d\d-\d\d [\d:,.]+ (?P<b>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
)
# A traceback printed outside a record, and the lines that chain two of them (traceback.py's texts).
_TRACEBACK = re.compile(
    r"^(Traceback \(most recent call last\):|During handling of the above exception"
    r"|The above exception was the direct cause)"
)
# warnings.formatwarning: "<file>:<line>: <Category>: <message>", then the source line indented.
_PY_WARNING = re.compile(r"^\S+:\d+: \w*Warning: ")
# Click's usage errors ("Error: No such option ...") and an exception's last line ("ValueError: x").
_ERROR_LINE = re.compile(r"^(Error: |(\w+\.)*\w*(Error|Exception)\b:)")
# A log file larger than this at start is moved to <name>.log.1 (one old generation kept).
ROTATE_BYTES = 10 * 1024 * 1024


def open_log(path: Path) -> IO[str]:
    """The log file, appended to; a file over ``ROTATE_BYTES`` becomes ``<name>.1`` first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.stat().st_size > ROTATE_BYTES:
        path.replace(path.with_name(path.name + ".1"))
    return path.open("a", encoding="utf-8", errors="replace")


class LogTee:
    """Copies one process's output to ``log``; warnings and errors also to ``terminal``."""

    def __init__(
        self, name: str, *, log: IO[str], terminal: IO[str], threshold: int = logging.WARNING, keep: int = 20
    ) -> None:
        self.name = name
        self.log = log
        self.terminal = terminal
        self.threshold = threshold
        self.mode: str | None = None  # what the current lines belong to (see _visible)
        self.recent: deque[str] = deque(maxlen=keep)  # the last lines, for "why did it exit"
        self._lock = threading.Lock()

    def _visible(self, line: str) -> bool:
        """Whether ``line`` reaches the terminal; ``self.mode`` says what the current lines belong to:
        ``record`` (a log record shown), ``traceback``, ``warning`` (a warnings-module message), or
        None (lines nobody needs to see: INFO records, Celery's startup banner)."""
        match = _HEADER.match(line)
        if match is not None:
            level = logging.getLevelName(match.group("a") or match.group("b"))
            self.mode = "record" if isinstance(level, int) and level >= self.threshold else None
            return self.mode is not None
        if _TRACEBACK.match(line):
            self.mode = "traceback"
            return True
        if _PY_WARNING.match(line):
            self.mode = "warning"
            return True
        if self.mode == "traceback":
            if line[:1] not in ("", " ", "\t"):  # the exception's own line ends the traceback
                self.mode = None
            return True
        if self.mode == "warning":
            if not line.strip() or line[:1] in (" ", "\t"):  # a blank or the source line ends it
                self.mode = None
                return False
            return True
        if self.mode == "record":
            return True
        return bool(_ERROR_LINE.match(line))

    def feed(self, line: str) -> bool:
        """Take one line of output (with or without its newline); True when the terminal got it."""
        line = line.rstrip("\r\n")
        with self._lock:
            self.log.write(line + "\n")
            self.log.flush()
            self.recent.append(line)
            shown = self._visible(line)
            if shown:
                self.terminal.write(f"{self.name} | {line}\n")
                self.terminal.flush()
        return shown

    def pump(self, stream: IO[str]) -> None:
        """Read ``stream`` to its end (a thread's target: one per child process)."""
        for line in iter(stream.readline, ""):
            self.feed(line)

    def start(self, stream: IO[str]) -> threading.Thread:
        thread = threading.Thread(target=self.pump, args=(stream,), name=f"logtee-{self.name}", daemon=True)
        thread.start()
        return thread
