"""Refuse JSON nested deeper than a sane limit, without recursing.

``json.loads`` recurses once per ``[`` / ``{``: a body of 100 000 ``[`` raises ``RecursionError``
(a 500) and even a few thousand levels cost stack on every request. ``nesting_depth`` scans the
text iteratively — strings removed first, so brackets inside them do not count — and callers refuse
the document before it reaches the decoder (issue 15, finding 5a). Strings follow RFC 8259 §7.
"""

from __future__ import annotations

import re
from itertools import accumulate

# Far deeper than any document this API takes (a node report is 4 levels, a compute request 5).
MAX_JSON_DEPTH = 64

# A JSON string (RFC 8259 §7): a quote, then runs of ordinary characters or backslash escapes.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DELTA = {"[": 1, "{": 1, "]": -1, "}": -1}


def nesting_depth(text: str) -> int:
    """The deepest bracket nesting of ``text`` outside JSON strings (0 for a scalar)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_DELTA.__getitem__, brackets)), default=0)


def too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``text`` nests deeper than ``limit`` (cheap when it has fewer brackets than that)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    return nesting_depth(text) > limit
