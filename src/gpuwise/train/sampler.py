"""A sampler whose position restores in O(1): no replaying of consumed batches.

The order of epoch ``e`` is a permutation drawn from ``seed + e`` alone, so resuming at sample
``i`` of epoch ``e`` recomputes that permutation and starts at ``i`` (fast-forwarding by iterating
batches took hours in transformers#21934 and hit an NCCL timeout in accelerate#2606). Under DDP
each rank takes every ``num_replicas``-th index of what is left of the same permutation.

The position is counted in *global* samples (consumed by all ranks together), so a run saved on
4 ranks resumes on 2 or 3 without repeating or skipping a sample: the consumed prefix of the
permutation is the same whatever the world size, and the rest is dealt out round-robin again.

Randomness inside DataLoader workers (augmentations drawing from ``torch``, ``random`` or
``numpy``) is made resumable the same way: every index the sampler yields is a
:class:`SampleIndex` that carries a seed derived from (sampler seed, epoch, dataset index), and
:func:`worker_init` makes each worker reseed the three global generators from it before each
sample. A sample's draws then depend on the sample alone, not on which worker fetched it, how
many batches that worker fetched before, the loader's base seed or the world size, so a resumed
run draws the same augmentations as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpuwise.errors import InputError
from gpuwise.train._torch import torch

_MASK64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """SplitMix64's finaliser: spreads nearby integers over 64 bits."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """The seed of the randomness used to load sample ``index`` in ``epoch`` (63 bits)."""
    return _mix64(_mix64(_mix64(seed & _MASK64) ^ (epoch & _MASK64)) ^ (int(index) & _MASK64)) >> 1


class SampleIndex(int):
    """A dataset index (an ``int``) that carries the seed for the randomness of its sample."""

    seed: int

    def __new__(cls, index: int, seed: int) -> SampleIndex:
        obj = super().__new__(cls, index)
        obj.seed = seed
        return obj

    def __reduce__(self) -> tuple[Any, tuple[int, int]]:
        return (SampleIndex, (int(self), self.seed))


class ResumableSampler(torch.utils.data.Sampler[int]):
    """Shuffled (or sequential) indices with ``state_dict()`` / ``load_state_dict()``.

    The training loop tells it how far the model has consumed with :meth:`set_position` (the
    DataLoader prefetches, so the sampler alone cannot know).
    """

    def __init__(
        self,
        length: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        rank: int = 0,
        num_replicas: int = 1,
        drop_last: bool = True,
    ) -> None:
        if length < 1:
            raise InputError(
                f"a sampler over {length} samples has nothing to give",
                hint="pass the dataset length (at least 1)",
            )
        self.length = length
        self.seed = seed
        self.shuffle = shuffle
        self.rank = rank
        self.num_replicas = num_replicas
        self.drop_last = drop_last
        self.epoch = 0
        self.start = 0  # samples of the epoch consumed by all ranks together

    def __len__(self) -> int:
        left = max(self.length - self.start, 0)
        return left // self.num_replicas if self.drop_last else -(-left // self.num_replicas)

    def epoch_indices(self, epoch: int) -> list[int]:
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + epoch)
            order = torch.randperm(self.length, generator=g).tolist()
        else:
            order = list(range(self.length))
        return order

    def rank_indices(self, epoch: int, start: int) -> list[int]:
        """This rank's indices of ``epoch`` from global position ``start`` on."""
        rest = self.epoch_indices(epoch)[start:]
        if self.drop_last:
            rest = rest[: len(rest) - len(rest) % self.num_replicas]
        return rest[self.rank :: self.num_replicas]

    def __iter__(self) -> Iterator[int]:
        epoch, seed = self.epoch, self.seed
        for index in self.rank_indices(epoch, self.start):
            yield SampleIndex(index, sample_seed(seed, epoch, index))

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self.start = epoch, 0

    def set_position(self, epoch: int, start: int) -> None:
        """Resume at global sample ``start`` of ``epoch`` (consumed by all ranks together)."""
        self.epoch, self.start = epoch, start

    def state_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "epoch": self.epoch,
            "start": self.start,
            "length": self.length,
            "position": "global",
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["length"]) != self.length:
            raise InputError(
                f"the checkpoint's sampler covered {state['length']} samples, "
                f"this one covers {self.length}",
                hint="resume with the same dataset, or start a new checkpoint folder",
            )
        self.seed, self.epoch, self.start = (
            int(state["seed"]),
            int(state["epoch"]),
            int(state["start"]),
        )
        if state.get("position") != "global":  # saved before positions were global: per-rank count
            self.start *= self.num_replicas


def ignore_sigterm_worker_init(worker_id: int) -> None:
    """``worker_init_fn`` for DataLoader workers: leave SIGTERM/SIGINT to the main process, so
    workers live until the emergency checkpoint is written (KempnerForge#177, olmoearth#604)."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _seed_all(seed: int) -> None:
    import random

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy ships with torch's usual installs
        return
    np.random.seed(seed & 0xFFFF_FFFF)


def _seed_of(indices: Any) -> int | None:
    mixed = 0
    for index in indices:
        seed = getattr(index, "seed", None)
        if seed is None:
            return None
        mixed = _mix64(mixed ^ int(seed))
    return mixed >> 1 if indices else None


def seed_samples(dataset: Any) -> bool:
    """Make ``dataset`` (a worker's copy) reseed ``random``, ``torch`` and ``numpy`` from each
    :class:`SampleIndex` before loading that sample. False when the dataset cannot be hooked.

    The DataLoader's fetcher calls ``dataset.__getitems__(indices)`` when the dataset has one;
    this installs one on the instance. A dataset with its own ``__getitems__`` (batched fetch,
    e.g. ``Subset``) is seeded once per batch from all of the batch's seeds instead. A loader
    without automatic batching (``batch_size=None``) fetches ``dataset[index]`` directly and is
    not hooked."""
    own = getattr(dataset, "__getitems__", None)
    if getattr(own, "_gpuwise_seeded", False):
        return True

    def getitems(indices: list[Any]) -> Any:
        if own is not None:
            seed = _seed_of(indices)
            if seed is not None:
                _seed_all(seed)
            return own(indices)
        out = []
        for index in indices:
            seed = getattr(index, "seed", None)
            if seed is not None:
                _seed_all(seed)
            out.append(dataset[index])
        return out

    getitems._gpuwise_seeded = True  # type: ignore[attr-defined]
    try:
        dataset.__getitems__ = getitems
    except (AttributeError, TypeError):  # __slots__ or a read-only attribute
        return False
    return True


def worker_init(worker_id: int) -> None:
    """``worker_init_fn`` for DataLoader workers: leave SIGTERM/SIGINT to the main process (see
    :func:`ignore_sigterm_worker_init`) and seed each sample's randomness from its
    :class:`SampleIndex`, so augmentations are restored exactly on resume. ``resilient`` installs
    it (around yours) by itself; pass it yourself outside ``resilient``."""
    ignore_sigterm_worker_init(worker_id)
    info = torch.utils.data.get_worker_info()
    if info is not None:
        seed_samples(info.dataset)


class SeededWorkerInit:
    """:func:`worker_init`, then the user's own ``worker_init_fn`` (picklable for ``spawn``)."""

    def __init__(self, inner: Any = None) -> None:
        self.inner = inner

    def __call__(self, worker_id: int) -> None:
        worker_init(worker_id)
        if self.inner is not None:
            self.inner(worker_id)


def install_worker_seeding(loader: Any) -> None:
    """Give ``loader``'s workers :func:`worker_init` (keeping any ``worker_init_fn`` it has)."""
    if not getattr(loader, "num_workers", 0):
        return  # samples load in the main process, whose RNG the checkpoint restores
    current = getattr(loader, "worker_init_fn", None)
    if current is worker_init or isinstance(current, SeededWorkerInit):
        return
    if current is ignore_sigterm_worker_init:
        current = None  # worker_init does that too
    loader.worker_init_fn = SeededWorkerInit(current)
