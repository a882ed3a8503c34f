"""Texts stored in the database (event messages, state reasons, trace steps) in the reader's language.

Services and workers write texts that people read later, in their own language: an event written by a
worker at night is read in Chinese by one person and in English by another. Such a text is written from
a **registered message id** with parameters::

    MOVED = stored("moved to %(to)s (was %(was)s)")
    device_event_create(..., message=MOVED % {"to": target, "was": current})

The row keeps the English sentence (readable in the database, the API and old exports, and rows
written before this existed still display). At display, ``localize(text)`` finds the registered id the
sentence was made from, recovers its parameters, translates the id into the active language and puts
the parameters back — each parameter itself localized (a nested registered text, or a word of a
registered vocabulary such as a pool status). Unknown texts come back unchanged.

A person's own words (a cancel reason, any free text someone typed that is stored) are never looked
up: they are written into a registered id as a parameter whose name starts with ``user_``
(``USER_PARAM_PREFIX``) — ``CANCELLED_BECAUSE % {"user_reason": typed}`` — and shown exactly as
typed, in every language, even when they copy a system sentence word for word. Ids with such a
parameter are tried first, so no registered sentence inside the typed text can take the whole text
over.

``stored`` is an extraction keyword of ``manage.py makemessages`` (apps/core/management/commands/
makemessages.py), so every registered id is in the catalogue that ``tests/core/test_i18n.py`` checks.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache

from django.utils.translation import gettext

_PLACEHOLDER = re.compile(r"%\((\w+)\)[sd]")
_PATTERNS: dict[str, re.Pattern] = {}
_PLAIN: set[str] = set()
_VOCABULARY: dict[str, object] = {}  # stored word -> its (lazy) label
_MAX_DEPTH = 3
# Parameters named so hold a person's own words: shown as written, never localized (see above).
USER_PARAM_PREFIX = "user_"


def _compile(msgid: str) -> re.Pattern:
    parts, last, names = [], 0, set()
    for match in _PLACEHOLDER.finditer(msgid):
        parts.append(re.escape(msgid[last : match.start()].replace("%%", "%")))  # "%%" is printed "%"
        name = match.group(1)
        # A "%(n)d" parameter is a whole number (given back as an int: "%d" refuses a string).
        value = r"-?\d+" if match.group(0).endswith("d") else ".+?"
        parts.append(f"(?P={name})" if name in names else f"(?P<{name}>{value})")
        names.add(name)
        last = match.end()
    parts.append(re.escape(msgid[last:].replace("%%", "%")))
    return re.compile("".join(parts), re.DOTALL)


def stored(msgid: str) -> str:
    """Register ``msgid`` (English, with ``%(name)s`` parameters) as a text that is stored and
    translated at display. Returns it unchanged, like ``gettext_noop``."""
    if _PLACEHOLDER.search(msgid):
        if msgid not in _PATTERNS:
            _PATTERNS[msgid] = _compile(msgid)
            _ordered.cache_clear()
    else:
        _PLAIN.add(msgid)
    return msgid


def stored_vocabulary(choices) -> None:
    """Register the values of a ``TextChoices`` (or ``(value, label)`` pairs) so that a parameter equal
    to a value is shown as its translated label (``gray`` → 灰度)."""
    pairs = choices.choices if hasattr(choices, "choices") else choices
    for value, label in pairs:
        _VOCABULARY.setdefault(str(value), label)


@lru_cache(maxsize=1)
def _ordered() -> tuple[tuple[str, re.Pattern], ...]:
    # Ids carrying a person's words first; then the most literal text first: "moved to %(to)s (was
    # %(was)s)" before "moved to %(to)s".
    def literal(msgid: str) -> int:
        return len(_PLACEHOLDER.sub("", msgid))

    def by_user(msgid: str) -> bool:
        return any(m.group(1).startswith(USER_PARAM_PREFIX) for m in _PLACEHOLDER.finditer(msgid))

    return tuple(
        sorted(_PATTERNS.items(), key=lambda item: (not by_user(item[0]), -literal(item[0]), item[0]))
    )


_DISCOVERED = False
_DISCOVER_LOCK = threading.Lock()


def discover() -> None:
    """Import every module that registers stored texts, once per process: the list
    ``settings.STORED_TEXT_MODULES`` (config/settings/base.py).

    A text is registered when the module that defines it is imported; a web process showing a job's
    events has not necessarily imported the worker module that wrote one of them (e.g. the scaling
    service), and the sentence then stayed English. Like Django's ``INSTALLED_APPS``, the modules are
    named in settings and imported at first use; tests/core/test_stored_text.py checks that every
    module calling ``stored(`` is listed."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    with _DISCOVER_LOCK:
        if _DISCOVERED:
            return
        import importlib

        from django.conf import settings

        for name in settings.STORED_TEXT_MODULES:
            importlib.import_module(name)
        _DISCOVERED = True


def _param(msgid: str, name: str, value: str, depth: int):
    if name.startswith(USER_PARAM_PREFIX):
        return value  # a person's own words: as written
    if f"%({name})d" in msgid:
        return int(value)
    return localize(value, depth=depth + 1)


def localize(text, *, depth: int = 0) -> str:
    """``text`` in the active language when it was made from a registered id; else unchanged."""
    if not text or not isinstance(text, str):
        return text
    if not _DISCOVERED:
        discover()
    if text in _PLAIN:
        return gettext(text)
    if text in _VOCABULARY:
        return str(_VOCABULARY[text])
    if depth >= _MAX_DEPTH:
        return text
    for msgid, pattern in _ordered():
        match = pattern.fullmatch(text)
        if match is None:
            continue
        params = {name: _param(msgid, name, value, depth) for name, value in match.groupdict().items()}
        try:
            return gettext(msgid) % params
        except (KeyError, TypeError, ValueError):
            return text
    return text


def registered() -> list[str]:
    """Every registered id (tests check each is in the catalogue and translated)."""
    return sorted(_PATTERNS) + sorted(_PLAIN)
