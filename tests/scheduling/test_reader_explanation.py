"""Issue 29 §9: a member reads the scheduler's counts over the nodes they can see."""

from __future__ import annotations

import pytest

from apps.scheduling.engine.filters import explain_counts
from apps.scheduling.engine_texts import explanation_for_reader

COUNTS = {"insufficient free cards": 6, "node quarantined": 3, "pool reserved for another project": 1}


def test_a_member_reads_the_counts_without_the_pools_reserved_for_others():
    text = explain_counts(10, COUNTS)
    assert text == (
        "0/10 nodes are available: 6 insufficient free cards, 3 node quarantined, 1 pool reserved for another project."
    )
    assert explanation_for_reader(text, staff=False) == (
        "0/9 nodes are available: 6 insufficient free cards, 3 node quarantined."
    )
    assert explanation_for_reader(text, staff=True) == text


@pytest.mark.parametrize(
    ("text", "member_reads"),
    [
        ("0/4 nodes are available: 4 pool reserved for another project.", "0/0 nodes are available."),
        # a prefix and reasons with dots and colons stay as they are
        (
            "No device could: 0/3 nodes are available: 2 runtime precheck failed: driver 535.154.05 < 580.65.06 "
            "required by CUDA 13.0, 1 pool reserved for another project.",
            "No device could: 0/2 nodes are available: 2 runtime precheck failed: driver 535.154.05 < 580.65.06 "
            "required by CUDA 13.0.",
        ),
        # nothing hidden, no counted frame: unchanged
        (
            "0/3 nodes are available: 3 insufficient free cards.",
            "0/3 nodes are available: 3 insufficient free cards.",
        ),
        ("quota: guarantee used up", "quota: guarantee used up"),
        ("", ""),
    ],
)
def test_other_shapes(text, member_reads):
    assert explanation_for_reader(text, staff=False) == member_reads
