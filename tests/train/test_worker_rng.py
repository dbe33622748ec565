"""Randomness inside DataLoader workers: a resumed run draws the same augmentations."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from gpuwise.train import ResumableSampler, resilient
from gpuwise.train.sampler import SampleIndex, sample_seed, worker_init


class Augmented(torch.utils.data.Dataset[torch.Tensor]):
    """Each sample draws from torch, Python and NumPy's global generators, as augmentations do."""

    def __len__(self) -> int:
        return 40

    def __getitem__(self, index: int) -> torch.Tensor:
        noise = [torch.rand(()).item(), random.random(), float(np.random.rand())]
        return torch.tensor([float(index), *noise])


def _run(
    ckpt: str, max_steps: int, stop_at: int | None, persistent: bool
) -> tuple[list[list[float]], int]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(
        Augmented(),
        batch_size=4,
        sampler=ResumableSampler(40, seed=5),
        num_workers=2,
        persistent_workers=persistent,
    )
    seen: list[list[float]] = []
    with resilient(
        model,
        opt,
        checkpoint_dir=ckpt,
        max_steps=max_steps,
        every_steps=3,
        watcher=False,
        async_write=False,
    ) as run:
        for batch in run.batches(loader):
            run.step(model(batch).pow(2).mean())
            seen.append(batch.flatten().tolist())
            if stop_at is not None and run.global_step == stop_at:
                break
    return seen, run.resumed_from or 0


@pytest.mark.slow
@pytest.mark.parametrize("persistent", [False, True])
def test_worker_randomness_after_a_resume_equals_the_uninterrupted_run(
    persistent: bool, tmp_path: Path
) -> None:
    # 10 batches per epoch: the run crosses into epoch 1; the stop is mid-epoch, after step 7,
    # so the resumed loader hands the next batch to another worker than the uninterrupted one
    reference, _ = _run(str(tmp_path / "ref"), 14, None, persistent)
    first, _ = _run(str(tmp_path / "run"), 14, 7, persistent)
    rest, resumed = _run(str(tmp_path / "run"), 14, None, persistent)
    assert resumed == 6
    assert len(reference) == 14
    assert first[:resumed] + rest == reference
    noise = [v for batch in reference for v in batch[1::4]]
    assert len(set(noise)) == len(noise)  # the augmentations do vary from sample to sample


def test_the_seed_of_a_sample_depends_on_seed_epoch_and_index_only() -> None:
    a = sample_seed(5, 0, 7)
    assert a == sample_seed(5, 0, 7)
    assert len({a, sample_seed(6, 0, 7), sample_seed(5, 1, 7), sample_seed(5, 0, 8)}) == 4
    sampler = ResumableSampler(12, seed=5, rank=1, num_replicas=2)
    sampler.set_position(3, 4)
    indices = list(sampler)
    assert all(isinstance(i, SampleIndex) and i.seed == sample_seed(5, 3, i) for i in indices)
    # pickled to a worker, the index keeps its seed
    import pickle

    back = pickle.loads(pickle.dumps(indices[0]))
    assert back == indices[0] and back.seed == indices[0].seed


def test_worker_init_seeds_each_sample_in_a_worker_but_not_in_the_main_process() -> None:
    loader = torch.utils.data.DataLoader(
        Augmented(),
        batch_size=4,
        sampler=ResumableSampler(40, seed=5),
        num_workers=1,
        worker_init_fn=worker_init,
    )
    first = next(iter(loader))
    torch.manual_seed(123)  # another base seed for the workers: same samples, same draws
    again = next(iter(loader))
    assert torch.equal(first, again)
