"""A parser for the Prometheus text exposition format (version 0.0.4). Pure Python, no Django.

Grammar handled (https://prometheus.io/docs/instrumenting/exposition_formats/):
``# HELP name text`` / ``# TYPE name type`` / other ``#`` comments / blank lines, and samples
``name{label="value",...} value [timestamp_ms]`` where label values escape ``\\``, ``\"`` and ``\n``
and values may be ``NaN``, ``+Inf``, ``-Inf``. A line that does not follow the grammar is reported
with its (1-based) line number and skipped; nothing else on the page is lost because of it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
METRIC_TYPES = ("counter", "gauge", "histogram", "summary", "untyped")
# The largest exporter page accepted (characters): a DCGM page for 8 cards is about 200 KB.
MAX_TEXT_CHARS = 8 * 1024 * 1024
# Sample timestamps a scrape may carry: 2000-01-01T00:00:00Z ≤ t < 2100-01-01T00:00:00Z, in milliseconds.
TIMESTAMP_MIN_MS = 946_684_800_000
TIMESTAMP_MAX_MS = 4_102_444_800_000


@dataclass(slots=True)
class RawSample:
    name: str
    labels: dict[str, str]
    value: float
    timestamp: float | None  # seconds since the epoch (the text carries milliseconds), None if absent
    line: int = 0


@dataclass
class Exposition:
    samples: list[RawSample] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)
    # (line number, message) for each line that was skipped.
    errors: list[tuple[int, str]] = field(default_factory=list)


class _LineError(Exception):
    pass


def _parse_value(text: str) -> float:
    lowered = text.lower()
    if lowered in ("nan",):
        return math.nan
    if lowered in ("+inf", "inf"):
        return math.inf
    if lowered == "-inf":
        return -math.inf
    try:
        return float(text)
    except ValueError:
        raise _LineError(f"value {text!r} is not a number") from None


def _parse_labels(line: str, pos: int) -> tuple[dict[str, str], int]:
    """Parse ``{a="b",...}`` starting at ``line[pos] == "{"``; return labels and the index after ``}``."""
    labels: dict[str, str] = {}
    pos += 1
    length = len(line)
    while True:
        while pos < length and line[pos] in " \t":
            pos += 1
        if pos >= length:
            raise _LineError("unterminated label set")
        if line[pos] == "}":
            return labels, pos + 1
        match = _LABEL_NAME.match(line, pos)
        if not match:
            raise _LineError(f"bad label name at column {pos + 1}")
        name = match.group(0)
        pos = match.end()
        while pos < length and line[pos] in " \t":
            pos += 1
        if pos >= length or line[pos] != "=":
            raise _LineError(f"expected '=' after label {name!r}")
        pos += 1
        while pos < length and line[pos] in " \t":
            pos += 1
        if pos >= length or line[pos] != '"':
            raise _LineError(f"label {name!r} value must be double-quoted")
        pos += 1
        chars: list[str] = []
        while True:
            if pos >= length:
                raise _LineError(f"unterminated value of label {name!r}")
            ch = line[pos]
            if ch == "\\":
                if pos + 1 >= length:
                    raise _LineError(f"dangling escape in label {name!r}")
                nxt = line[pos + 1]
                chars.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
                pos += 2
                continue
            if ch == '"':
                pos += 1
                break
            chars.append(ch)
            pos += 1
        if name in labels:
            raise _LineError(f"label {name!r} given twice")
        labels[name] = "".join(chars)
        while pos < length and line[pos] in " \t":
            pos += 1
        if pos < length and line[pos] == ",":
            pos += 1
        elif pos < length and line[pos] != "}":
            raise _LineError(f"expected ',' or '}}' at column {pos + 1}")


def parse_line(line: str, number: int = 0) -> RawSample:
    match = _NAME.match(line)
    if not match:
        raise _LineError("a sample line starts with a metric name")
    name = match.group(0)
    pos = match.end()
    labels: dict[str, str] = {}
    if pos < len(line) and line[pos] == "{":
        labels, pos = _parse_labels(line, pos)
    rest = line[pos:].split()
    if not rest:
        raise _LineError(f"{name}: missing value")
    if len(rest) > 2:
        raise _LineError(f"{name}: unexpected text after the timestamp")
    if pos < len(line) and line[pos] not in " \t":
        raise _LineError(f"{name}: expected a space before the value")
    value = _parse_value(rest[0])
    timestamp = None
    if len(rest) == 2:
        try:
            millis = int(rest[1])
        except ValueError:
            raise _LineError(f"{name}: timestamp {rest[1]!r} is not an integer of milliseconds") from None
        # An int64 of milliseconds in the format; bounded to dates a reading can carry, so a value like
        # 99999999999999999999 is this line's error, not an OSError that lost the whole page.
        if not TIMESTAMP_MIN_MS <= millis < TIMESTAMP_MAX_MS:
            raise _LineError(
                f"{name}: timestamp {rest[1][:24]!r} is out of range "
                f"(milliseconds between 2000-01-01 and 2100-01-01)"
            )
        timestamp = millis / 1000.0
    return RawSample(name=name, labels=labels, value=value, timestamp=timestamp, line=number)


def parse(text: str) -> Exposition:
    out = Exposition()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 2 and parts[1] == "TYPE":
                if len(parts) < 4 or not _NAME.fullmatch(parts[2]) or parts[3].strip() not in METRIC_TYPES:
                    out.errors.append((number, "malformed # TYPE line"))
                    continue
                out.types[parts[2]] = parts[3].strip()
            continue
        try:
            out.samples.append(parse_line(line, number))
        except _LineError as exc:
            out.errors.append((number, str(exc)))
    return out
