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
    a, b = (
        ResumableSampler(64, seed=1, rank=0, num_replicas=2),
        ResumableSampler(64, seed=1, rank=1, num_replicas=2),
    )
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


@pytest.mark.parametrize(
    ("saved_world", "new_world", "consumed_batches"),
    [
        (4, 2, 3),  # 4 ranks x 3 batches consumed, the rest on 2 ranks
        (4, 3, 2),  # ... on 3 ranks (the rest does not divide evenly)
        (2, 1, 5),  # ... on one process
        (1, 4, 7),  # grow
    ],
)
def test_a_different_world_size_resumes_without_repeating_or_skipping(
    saved_world: int, new_world: int, consumed_batches: int
) -> None:
    batch, length = 4, 100
    consumed = consumed_batches * batch * saved_world
    before = [
        ResumableSampler(length, seed=7, rank=r, num_replicas=saved_world)
        for r in range(saved_world)
    ]
    seen = [i for s in before for i in list(s)[: consumed_batches * batch]]
    state = before[0].state_dict()
    state["start"] = consumed  # what resilient() records: global samples of the epoch
    after = [
        ResumableSampler(length, seed=0, rank=r, num_replicas=new_world, drop_last=False)
        for r in range(new_world)
    ]
    for s in after:
        s.load_state_dict(state)
    rest = [i for s in after for i in s]
    assert sorted(seen + rest) == list(range(length))  # every sample exactly once in the epoch
