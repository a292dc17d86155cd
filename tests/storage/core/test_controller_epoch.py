"""The controller epoch fence's rule (nothing fences a stale controller, hole 3 of
issue 38): a pod takes calls of the newest epoch it has seen or newer, and
refuses older ones, epoch 0 (none sent) included once any epoch was seen."""

from __future__ import annotations

import pytest

from cairn.common.errors import StaleControllerEpoch
from cairn.storage.core.controller_epoch import NO_EPOCH, admit


def test_the_same_or_a_newer_epoch_is_taken_and_becomes_the_highest() -> None:
    assert admit(NO_EPOCH, NO_EPOCH) == NO_EPOCH
    assert admit(NO_EPOCH, 1) == 1
    assert admit(3, 3) == 3
    assert admit(3, 7) == 7


@pytest.mark.parametrize(("highest", "epoch"), [(1, 0), (7, 6), (7, 0), (0, -1)])
def test_an_older_epoch_is_refused(highest: int, epoch: int) -> None:
    with pytest.raises(StaleControllerEpoch) as refused:
        admit(highest, epoch)
    assert refused.value.reason == "STALE_CONTROLLER_EPOCH"
