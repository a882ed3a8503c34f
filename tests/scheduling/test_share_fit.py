"""The share-fit rule (``apps.scheduling.engine.share``): the fit test and the free compute it implies."""

from __future__ import annotations

import pytest

from apps.scheduling.engine.share import WHOLE, free_hard, free_shared, share_fits


def test_hard_slices_fit_the_real_card_and_shared_ones_the_overcommit():
    assert share_fits(WHOLE, 0, 150)
    assert not share_fits(WHOLE + 1, 0, 150)  # overcommit never lends hard compute
    assert share_fits(0, 1500, 150) and not share_fits(0, 1501, 150)
    assert share_fits(400, 900, 150) and not share_fits(400, 901, 150)  # 400·150 + 900·100 = 1000·150
    assert not share_fits(600, 500, 100)  # no overcommit: hard + shared ≤ one card


@pytest.mark.parametrize("factor", [100, 110, 125, 133, 150])
def test_free_compute_is_the_largest_slice_that_still_fits(factor):
    for hard in range(0, WHOLE + 1, 37):
        for shared in range(0, 1501, 41):
            if not share_fits(hard, shared, factor):
                continue
            room = free_shared(hard, shared, factor)
            assert share_fits(hard, shared + room, factor) and not share_fits(hard, shared + room + 1, factor)
            room = free_hard(hard, shared, factor)
            assert share_fits(hard + room, shared, factor) and not share_fits(hard + room + 1, shared, factor)
