"""The one place gpuwise.train imports torch: a missing extra becomes a clear error."""

from __future__ import annotations

from gpuwise.errors import MissingExtraError

try:
    import torch
except ImportError as exc:  # pragma: no cover - exercised in an environment without torch
    raise MissingExtraError("torch", "train") from exc


def rank_and_world() -> tuple[int, int]:
    """This process's (rank, world size) in the default process group; (0, 1) without one.

    The one answer to "which rank am I" once torch.distributed is up. Before that (or where torch
    must not be imported), :func:`gpuwise.train.progress.global_rank` reads torchrun's ``RANK``.
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return int(torch.distributed.get_rank()), int(torch.distributed.get_world_size())
    return 0, 1


__all__ = ["rank_and_world", "torch"]
