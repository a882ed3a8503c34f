"""Issue 21 §5: texts stored by services and workers are shown in the reader's language."""

from __future__ import annotations

import contextlib

import polib
import pytest
from django.utils import translation

from apps.core import stored_text
from apps.core.stored_text import localize, stored
from tests.core.test_i18n import LOCALE


def test_a_stored_sentence_is_translated_with_its_parameters_and_unknown_text_is_kept():
    msgid = stored("moved to %(to)s (was %(was)s)")
    text = msgid % {"to": "gray", "was": "production"}
    with translation.override("en"):
        assert localize(text) == text
    with translation.override("zh-hans"):
        shown = localize(text)
    # The sentence and the pool statuses are translated (vocabulary of Device.PoolStatus).
    assert "moved to" not in shown and "production" not in shown, shown
    with translation.override("zh-hans"):
        assert localize("a sentence nobody registered") == "a sentence nobody registered"


def test_the_most_specific_pattern_wins_and_nested_texts_are_translated():
    outer = stored("submitted: %(request)s")
    inner = stored("moved to %(to)s (was %(was)s)")
    text = outer % {"request": inner % {"to": "gray", "was": "production"}}
    with translation.override("zh-hans"):
        shown = localize(text)
    assert "submitted" not in shown and "moved to" not in shown


def test_every_registered_text_is_in_the_catalogue_and_translated():
    import django.apps

    for config in django.apps.apps.get_app_configs():  # import the service modules that register texts
        if config.name.startswith("apps."):
            for module in ("services", "signals", "lifecycle", "reconcile", "faults"):
                with contextlib.suppress(ModuleNotFoundError):
                    __import__(f"{config.name}.{module}")
    po = polib.pofile(str(LOCALE / "django.po"))
    known = {e.msgid: e for e in po if not e.obsolete}
    missing = [m for m in stored_text.registered() if m not in known or not known[m].translated()]
    assert not missing, missing[:10]


@pytest.mark.parametrize("value", ["", None, 5])
def test_non_text_passes_through(value):
    assert localize(value) == value
