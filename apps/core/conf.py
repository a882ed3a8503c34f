"""The one reader of the project's switches: ``settings.SUANCHI`` (config/settings/base.py).

Every module reads a switch as ``suanchi_setting("NAME")`` (a key every settings file defines: a missing
one is a broken settings file and raises ``KeyError`` as before) or ``suanchi_setting("NAME", default)``.
The dict is looked up at each call, so a test that replaces ``settings.SUANCHI`` is seen at once.
``tests/core/test_settings_read.py`` checks that no other way of reading it remains in apps/ and worker/.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

_REQUIRED = object()


def suanchi_setting(name: str, default: Any = _REQUIRED) -> Any:
    """``settings.SUANCHI[name]``; with a ``default``, that default when the key is absent."""
    values = settings.SUANCHI
    if default is _REQUIRED:
        return values[name]
    return values.get(name, default)
