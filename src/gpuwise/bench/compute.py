"""GPU (or CPU) micro-benchmarks: matmul TFLOP/s per precision, device-memory bandwidth,
host↔device transfers (pinned and pageable), NCCL all-reduce bus bandwidth.

Each function measures and returns plain numbers; :mod:`gpuwise.bench.runner` puts them beside
the datasheet peaks. torch is imported inside the functions.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from gpuwise.bench.timing import best_seconds

# PCIe per-direction bandwidth of an x16 link, GB/s: transfer rate (GT/s per lane) × 16 lanes
# × 128b/130b encoding ÷ 8 bits. Rates from the PCI-SIG specifications (Gen3 8 GT/s, Gen4
# 16 GT/s, Gen5 32 GT/s). Gen6 uses FLIT encoding and is left out rather than guessed.
PCIE_GT_S = {3: 8.0, 4: 16.0, 5: 32.0}


def pcie_x16_gb_s(gen: int | None) -> float | None:
    """Per-direction x16 PCIe bandwidth in GB/s for a generation, None when unknown."""
    rate = PCIE_GT_S.get(gen or 0)
    return rate * 16 * (128 / 130) / 8 if rate else None


def _dtype(precision: str) -> Any:
    import torch

    return {
        "fp32": torch.float32,
        "tf32": torch.float32,
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
    }[precision]


def matmul_tflops(device: Any, precision: str, n: int, iters: int) -> float:
    """TFLOP/s of an ``n×n @ n×n`` matmul (2·n³ FLOPs) in ``precision``.

    tf32 switches ``torch.backends.cuda.matmul.allow_tf32`` on for the run only; fp32 runs with
    it off so the two are told apart.
    """
    import torch

    if precision == "fp8":
        return _fp8_tflops(device, n, iters)
    dtype = _dtype(precision)
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    try:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        out = torch.empty(n, n, device=device, dtype=dtype)
        seconds = best_seconds(lambda: torch.mm(a, b, out=out), device, iters=iters)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return 2 * n**3 / seconds / 1e12


def fp8_supported(device: Any) -> str | None:
    """None when fp8 matmuls can run here, else why not."""
    import torch

    if getattr(device, "type", "cpu") != "cuda":
        return (
            "fp8 matmul needs an NVIDIA GPU with compute capability ≥ 8.9 (Ada, Hopper, Blackwell)"
        )
    if torch.cuda.get_device_capability(device) < (8, 9):
        cc = ".".join(map(str, torch.cuda.get_device_capability(device)))
        return f"fp8 matmul needs compute capability ≥ 8.9; this GPU has {cc}"
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return f"torch {torch.__version__} has no fp8 matmul (torch._scaled_mm)"
    return None


def _fp8_tflops(device: Any, n: int, iters: int) -> float:
    import torch

    a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
    b = (
        torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()
    )  # _scaled_mm wants column-major B
    one = torch.tensor(1.0, device=device)
    seconds = best_seconds(
        lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
        device,
        iters=iters,
    )
    return 2 * n**3 / seconds / 1e12


def copy_gb_s(device: Any, nbytes: int, iters: int) -> float:
    """Device-memory bandwidth of ``dst.copy_(src)``: each copy reads and writes ``nbytes``."""
    import torch

    n = nbytes // 4
    src = torch.empty(n, device=device, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    seconds = best_seconds(lambda: dst.copy_(src), device, iters=iters)
    return 2 * n * 4 / seconds / 1e9


def transfer_gb_s(device: Any, nbytes: int, iters: int, *, to_device: bool, pinned: bool) -> float:
    """Host→device (or device→host) copy bandwidth from pinned or pageable host memory."""
    import torch

    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    if to_device:
        seconds = best_seconds(lambda: dev.copy_(host, non_blocking=pinned), device, iters=iters)
    else:
        seconds = best_seconds(lambda: host.copy_(dev, non_blocking=pinned), device, iters=iters)
    return nbytes / seconds / 1e9


def _allreduce_worker(
    rank: int, world: int, init_file: str, nbytes: int, iters: int, out_file: str, backend: str
) -> None:
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        x = torch.ones(
            nbytes // 2, dtype=torch.bfloat16 if backend == "nccl" else torch.float16, device=device
        )
        seconds = best_seconds(lambda: dist.all_reduce(x), device, iters=iters)
        if rank == 0:
            with open(out_file, "w") as f:
                f.write(repr(seconds))
    finally:
        dist.destroy_process_group()


def allreduce_bus_gb_s(world: int, nbytes: int, iters: int, backend: str = "nccl") -> float:
    """All-reduce bus bandwidth across ``world`` local GPUs (one process each), as nccl-tests
    defines it: algbw = bytes / time; busbw = algbw × 2(n−1)/n (nccl-tests ``doc/PERFORMANCE.md``).

    ``backend="gloo"`` runs the same code on CPU processes (tests use it; it measures memory
    copies between processes, not a GPU interconnect)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="gpuwise-nccl-") as tmp:
        init_file, out_file = os.path.join(tmp, "init"), os.path.join(tmp, "seconds")
        mp.spawn(  # type: ignore[attr-defined,no-untyped-call]
            _allreduce_worker,
            args=(world, init_file, nbytes, iters, out_file, backend),
            nprocs=world,
            join=True,
        )
        with open(out_file) as f:
            seconds = float(f.read())
    return nbytes / seconds / 1e9 * 2 * (world - 1) / world
