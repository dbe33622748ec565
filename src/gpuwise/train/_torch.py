"""The one place gpuwise.train imports torch: a missing extra becomes a clear error."""

from __future__ import annotations

import atexit
import functools
import time

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


GLOO_EXIT_SETTLE_S = 0.2
"""How long a process that ran gloo collectives lets gloo's worker threads finish at exit."""


@functools.cache
def settle_gloo_at_exit() -> None:
    """At interpreter exit, release the GIL for :data:`GLOO_EXIT_SETTLE_S` first (once per process).

    gloo's worker thread drops a finished collective's tensors a moment after the caller was
    woken, and dropping a tensor made in Python takes the GIL. When that moment falls after the
    interpreter began finalizing, Python ends the thread inside a C++ destructor and the process
    aborts: "terminate called without an active exception", exit -6, after the training finished
    (torch 2.13). The script of ``tests/train/test_step_zero.py`` aborted so in 5 of 130 runs on
    2 loaded cores, and in none of 60 with this pause. An exit handler runs before finalization,
    so the threads finish while the interpreter is whole. A barrier after the last collective did
    not help (11 of 60)."""
    atexit.register(time.sleep, GLOO_EXIT_SETTLE_S)


__all__ = ["rank_and_world", "settle_gloo_at_exit", "torch"]
