"""Timing that is right on both CPU and CUDA: synchronise, warm up, take the best of several trials.

Peak benchmarks report the best trial (as nccl-tests, nvbandwidth and gpu-burn do): a slower
trial measures interference (other processes, clock ramp-up), not the hardware.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def sync(device: Any) -> None:
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize()


def best_seconds(
    fn: Callable[[], object], device: Any, *, iters: int, trials: int = 3, warmup: int = 1
) -> float:
    """Seconds per call of ``fn``: the best over ``trials`` of the mean of ``iters`` calls."""
    import torch

    for _ in range(warmup):
        fn()
    sync(device)
    best = float("inf")
    cuda = getattr(device, "type", str(device)) == "cuda"
    for _ in range(trials):
        if cuda:
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1000.0
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            seconds = time.perf_counter() - t0
        best = min(best, seconds / iters)
    return max(best, 1e-9)
