"""Speed of ``estimate_workload``: the planner calls it for hundreds of (GPU, count) setups.

Run: ``PYTHONPATH=src python benchmarks/estimate_speed.py``. Goal: < 1 ms per call without
suggestions. The first call also fits the MFU model (numpy import + a 13-row least squares).
"""

from __future__ import annotations

import statistics
import time

from gpuwise.errors import GpuwiseError
from gpuwise.estimate import estimate_workload, workload_from_options

GPUS = ["A100-80GB", "A100", "H100", "H200", "L4", "L40S", "A10", "V100", "T4", "B200", "MI300X"]
COUNTS = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def _time(wl: object, suggest: bool) -> tuple[float, int, int]:
    times, ok, failed = [], 0, 0
    for gpu in GPUS:
        for n in COUNTS:
            t = time.perf_counter()
            try:
                estimate_workload(wl, gpu, n, calibration=None, suggest=suggest)  # type: ignore[arg-type]
                ok += 1
            except GpuwiseError:  # e.g. bf16 on a V100: the planner skips such setups
                failed += 1
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3, ok, failed


def main() -> None:
    t = time.perf_counter()
    first = workload_from_options(model="gpt2")
    estimate_workload(first, "H100", calibration=None, suggest=False)
    print(f"first call (fits the MFU model): {(time.perf_counter() - t) * 1e3:.1f} ms\n")
    print(f"{'workload':44s} {'suggest':>7s} {'median ms/call':>15s} {'ok':>4s} {'refused':>8s}")
    for label, kw in (
        (
            "llama-2-70b pretrain 2T tokens, ZeRO-3",
            dict(model="llama-2-70b", tokens="2e12", zero=3),
        ),
        ("llama-2-7b finetune", dict(model="llama-2-7b", task="finetune", samples="100k")),
        ("mixtral-8x7b inference", dict(model="mixtral-8x7b", task="inference", requests="1M")),
    ):
        wl = workload_from_options(**kw)  # type: ignore[arg-type]
        for suggest in (False, True):
            ms, ok, failed = _time(wl, suggest)
            print(f"{label:44s} {suggest!s:>7s} {ms:15.3f} {ok:4d} {failed:8d}")


if __name__ == "__main__":
    main()
