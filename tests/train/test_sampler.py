"""ResumableSampler: a resumed sampler yields exactly what the uninterrupted one would, in O(1)."""

from __future__ import annotations

import pytest

from gpuwise.errors import InputError
from gpuwise.train import ResumableSampler


@pytest.mark.parametrize(("epoch", "start"), [(0, 0), (0, 37), (3, 99), (5, 100)])
def test_resume_at_any_position_continues_the_same_order(epoch: int, start: int) -> None:
    full = ResumableSampler(100, seed=4)
    full.set_epoch(epoch)
    expected = list(full)[start:]
    resumed = ResumableSampler(100, seed=0)
    resumed.load_state_dict({"seed": 4, "epoch": epoch, "start": start, "length": 100})
    assert list(resumed) == expected
    assert len(resumed) == len(expected)


def test_epochs_differ_and_ranks_partition_the_epoch() -> None:
    a, b = ResumableSampler(64, seed=1, rank=0, num_replicas=2), ResumableSampler(64, seed=1, rank=1, num_replicas=2)
    assert sorted(list(a) + list(b)) == list(range(64))
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first


def test_resume_is_constant_time_for_huge_positions() -> None:
    s = ResumableSampler(10, seed=0)
    s.set_position(10**9, 5)  # a billion epochs in: no replay, just a seeded permutation
    assert len(list(s)) == 5


def test_a_different_dataset_is_refused() -> None:
    s = ResumableSampler(10)
    with pytest.raises(InputError, match="same dataset"):
        s.load_state_dict({"seed": 0, "epoch": 0, "start": 0, "length": 11})
