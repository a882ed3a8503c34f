"""What the parser tests share: the fixture files, and the helpers that edit a fixture or catch a
parse error."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.core.errors import ParseFailed

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def replace_once(text: str, old: str, new: str) -> str:
    assert old in text, f"{old!r} not in fixture"
    return text.replace(old, new, 1)


def line_of(text: str, needle: str) -> int:
    """1-based number of the first line containing ``needle``."""
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in text")


def parse_error(parser, text: str) -> ParseFailed:
    with pytest.raises(ParseFailed) as caught:
        parser(text)
    return caught.value
