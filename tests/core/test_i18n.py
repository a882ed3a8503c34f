"""The zh-hans catalogue is complete and its compiled file matches it: every UI string has a
translation that keeps its placeholders, and the .mo Django loads gives the .po's answers."""

from __future__ import annotations

import gettext
import re
from pathlib import Path

import polib
import pytest

LOCALE = Path(__file__).resolve().parents[2] / "locale" / "zh_Hans" / "LC_MESSAGES"
PLACEHOLDER = re.compile(r"%\([a-z_0-9]+\)[sd]|\{[a-z_0-9]+\}")


@pytest.fixture(scope="module")
def po():
    return polib.pofile(str(LOCALE / "django.po"))


def test_every_string_is_translated_and_none_is_fuzzy(po):
    missing = [e.msgid for e in po if not e.obsolete and e.msgid and not e.translated()]
    fuzzy = [e.msgid for e in po if not e.obsolete and "fuzzy" in e.flags]
    assert not missing and not fuzzy, (missing[:10], fuzzy[:10])
    assert len([e for e in po if not e.obsolete]) > 1000


def test_translations_keep_their_placeholders(po):
    bad = []
    for e in po:
        if e.obsolete or not e.msgid:
            continue
        texts = [e.msgstr] if not e.msgid_plural else list(e.msgstr_plural.values())
        for text in texts:
            if sorted(PLACEHOLDER.findall(text)) != sorted(PLACEHOLDER.findall(e.msgid)):
                bad.append(e.msgid)
    assert not bad, bad[:10]


def test_the_compiled_catalogue_matches_the_source(po):
    with (LOCALE / "django.mo").open("rb") as handle:
        compiled = gettext.GNUTranslations(handle)
    stale = [
        e.msgid
        for e in po
        if not e.obsolete
        and e.msgid
        and not e.msgid_plural
        and not e.msgctxt
        and compiled.gettext(e.msgid) != e.msgstr
    ]
    assert not stale, f"run compilemessages: {stale[:5]}"
