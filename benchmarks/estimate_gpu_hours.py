"""GPU-hours accuracy of ``gpuwise.estimate`` on published pretraining runs.

For each run in ``src/gpuwise/estimate/data/published_runs.csv`` the estimate sees only the
model shape, the token count, the sequence length and the GPU type, and predicts GPU-hours.
Three predictors are compared against the reported GPU-hours:

- ``fixed40``: time = FLOPs / (peak × 40%), the usual rule of thumb;
- ``gpuwise``: ``gpuwise.estimate`` with its MFU model fitted to all rows (in-sample);
- ``gpuwise LOO``: the MFU model refitted without the row it predicts (leave-one-out), the
  honest out-of-sample figure.

Run: ``PYTHONPATH=src python benchmarks/estimate_gpu_hours.py``. Target: median |error| ≤ 15%.
"""

from __future__ import annotations

import statistics

from gpuwise.estimate import estimate_workload
from gpuwise.estimate.throughput import (
    fit_mfu_model,
    load_published_runs,
    machine_balance,
    mfu_model,
    peak_flops,
    training_flops_per_token,
)
from gpuwise.estimate.workload import Workload
from gpuwise.hardware import find_gpu


def main() -> None:
    runs = load_published_runs()
    fit = mfu_model()
    print(
        f"MFU model: log MFU = {fit.b0:+.3f} {fit.b_balance:+.3f}·log(balance/153) "
        f"{fit.b_hidden:+.3f}·log(hidden/4096)   (fitted on {fit.rows} runs; A100-80GB, h=4096 → "
        f"{fit.predict(153, 4096):.1%})\n"
    )
    header = (
        f"{'run':16s} {'GPU':10s} {'params':>8s} {'tokens':>8s} {'reported':>11s} {'obs MFU':>7s} "
        f"{'fixed40':>8s} {'gpuwise':>8s} {'LOO':>8s}"
    )
    print(header)
    print("-" * len(header))
    err_fixed, err_in, err_loo = [], [], []
    for i, run in enumerate(runs):
        gpu = find_gpu(run.gpu)
        flops = training_flops_per_token(run.model, run.seq_len, "pretrain") * run.tokens
        peak = peak_flops(gpu, "bf16")
        fixed = flops / (peak * 0.40) / 3600
        wl = Workload(
            model=run.model, task="pretrain", tokens=run.tokens, seq_len=run.seq_len, zero=1
        )
        est = estimate_workload(wl, gpu, 8, calibration=None, suggest=False)
        assert est.gpu_hours is not None
        loo_fit = fit_mfu_model([r for j, r in enumerate(runs) if j != i])
        loo = flops / (peak * loo_fit.predict(machine_balance(gpu), run.model.hidden)) / 3600
        e_f, e_i, e_l = (
            fixed / run.gpu_hours - 1,
            est.gpu_hours / run.gpu_hours - 1,
            loo / run.gpu_hours - 1,
        )
        err_fixed.append(abs(e_f))
        err_in.append(abs(e_i))
        err_loo.append(abs(e_l))
        print(
            f"{run.name:16s} {gpu.name:10s} {run.model.total_params / 1e9:7.1f}B {run.tokens / 1e12:7.2f}T "
            f"{run.gpu_hours:11,.0f} {run.observed_mfu(gpu):7.1%} {e_f:+8.1%} {e_i:+8.1%} {e_l:+8.1%}"
        )
    print("-" * len(header))
    for label, errs in (
        ("median |error|", statistics.median),
        ("mean |error|", statistics.mean),
        ("max |error|", max),
    ):
        print(f"{label:60s} {errs(err_fixed):8.1%} {errs(err_in):8.1%} {errs(err_loo):8.1%}")
    print(
        "\nerror = predicted / reported GPU-hours - 1. Reported hours include restarts and downtime;"
        "\nthe MFU model is fitted to them, so its figures are 'effective' MFU."
    )


if __name__ == "__main__":
    main()
