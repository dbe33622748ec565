"""A sampler whose position restores in O(1): no replaying of consumed batches.

The order of epoch ``e`` is a permutation drawn from ``seed + e`` alone, so resuming at sample
``i`` of epoch ``e`` recomputes that permutation and starts at ``i`` (fast-forwarding by iterating
batches took hours in transformers#21934 and hit an NCCL timeout in accelerate#2606). Under DDP
each rank takes every ``num_replicas``-th index of what is left of the same permutation.

The position is counted in *global* samples (consumed by all ranks together), so a run saved on
4 ranks resumes on 2 or 3 without repeating or skipping a sample: the consumed prefix of the
permutation is the same whatever the world size, and the rest is dealt out round-robin again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpuwise.errors import InputError
from gpuwise.train._torch import torch


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
        return iter(self.rank_indices(self.epoch, self.start))

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
