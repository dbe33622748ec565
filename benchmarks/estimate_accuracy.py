"""How far gpuwise's time estimates are from measured runs it was not fitted to.

Two data sets, kept apart:

- **throughput**: per-step tokens/s/GPU (or images/s/GPU) of measured configurations,
  ``src/gpuwise/estimate/data/measured_throughput.csv`` (framework benchmark tables, papers);
- **GPU-hours**: whole pretraining runs, ``src/gpuwise/estimate/data/published_runs.csv``
  (these include failures, restarts and idle time: gpuwise divides by its goodput model).

For each, leave-one-source-out (LOSO): the framework factors (the only thing fitted) are refitted
on the throughput rows of every *other* source, then the held-out source's rows are predicted.
The baseline is the fixed rule "6·N FLOPs per token at 40% of the dense 16-bit peak" on the same
rows (N = all parameters; fp8 rows use the bf16 peak, fp32 rows the fp32/TF32 peak they ran at).
Error = predicted / measured - 1 (throughput) or predicted / reported - 1 (GPU-hours).

Also printed: per GPU model, the count of measured configurations gpuwise calls "does not fit",
and how often the p10–p90 range (quantiles of the other sources' LOSO residuals) holds the
measured value.

Run: ``PYTHONPATH=src python benchmarks/estimate_accuracy.py`` (a few seconds).
``--write-residuals`` also writes the LOSO residual quantiles per workload class to
``src/gpuwise/estimate/data/estimate_residuals.csv`` (what ``Estimate.wall_hours_p10/p90`` use).
"""

from __future__ import annotations

import argparse
import collections
import math
import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from gpuwise.estimate import estimate_workload
from gpuwise.estimate.measured import (
    MeasuredRun,
    fit_efficiency,
    fit_run_efficiency,
    load_measured_runs,
    log_residual,
    run_gpu_hours,
    workload_class,
)
from gpuwise.estimate.throughput import PublishedRun, load_published_runs
from gpuwise.hardware import GpuSpec, find_gpu

# GPU-hours rows that come from the same paper as throughput rows share its fold.
_RUN_SOURCE = {
    "llama-7b": "llama",
    "llama-13b": "llama",
    "llama-33b": "llama",
    "llama-65b": "llama",
    "tinyllama-1.1b": "tinyllama",
    "llamat-7b": "fms",
}


def _peak16(gpu: GpuSpec, precision: str) -> float:
    if precision == "fp32":
        return (gpu.peak_fp32_tflops or 0.0) * 1e12
    if precision == "tf32":
        return (gpu.peak_tf32_tflops or 0.0) * 1e12
    return ((gpu.peak_bf16_tflops or gpu.peak_fp16_tflops) or 0.0) * 1e12


def _rule40(run: MeasuredRun, precision: str) -> float:
    """Per-GPU throughput the 40% rule predicts."""
    m = run.workload.model
    gpu = find_gpu(run.gpu)
    if m.arch == "cnn":
        per_sample = 2 * m.forward_gmacs_per_sample * 1e9 * (3 if run.workload.is_training else 1)
        return 0.4 * _peak16(gpu, precision) / per_sample
    return 0.4 * _peak16(gpu, precision) / (6 * m.total_params)


def _row_precision(run: MeasuredRun) -> str:
    p = run.workload.precision
    if p == "fp32" and run.workload.model.arch == "cnn" and find_gpu(run.gpu).peak_tf32_tflops:
        return "tf32"
    return p


def _q(values: list[float], p: float) -> float:
    if not values:
        return math.nan
    s = sorted(values)
    k = (len(s) - 1) * p
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _summary(errs: list[float]) -> str:
    a = [abs(e) for e in errs]
    return f"{statistics.median(a):6.1%} {_q(a, 0.9):6.1%}" if a else "     -      -"


def throughput_set(
    runs_in: list[MeasuredRun] | None = None,
) -> tuple[list[tuple[MeasuredRun, float, float]], dict[str, list[float]]]:
    """[(run, LOSO log residual, rule-40 log residual)] and LOSO residuals by class."""
    runs = list(load_measured_runs()) if runs_in is None else runs_in
    sources = sorted({r.source_id for r in runs})
    out: list[tuple[MeasuredRun, float, float]] = []
    for s in sources:
        eff = fit_efficiency([r for r in runs if r.source_id != s])
        for r in runs:
            if r.source_id == s:
                out.append(
                    (r, log_residual(r, eff), math.log(_rule40(r, _row_precision(r)) / r.value))
                )
    by_class: dict[str, list[float]] = collections.defaultdict(list)
    for r, res, _ in out:
        by_class[workload_class(r.workload)].append(res)
    return out, by_class


def _run_source(run: PublishedRun) -> str:
    if run.name in _RUN_SOURCE:
        return _RUN_SOURCE[run.name]
    return (
        run.source.split(" ")[0] + " " + run.source.split(" ")[1]
        if " " in run.source
        else run.source
    )


def gpu_hours_set() -> list[tuple[PublishedRun, str, float, float, float, float]]:
    """[(run, source, gpuwise GPU-hours, rule-40 GPU-hours, goodput, run efficiency)], leaving each source
    out of both fits: the framework factors (throughput rows) and the whole-run efficiency (GPU-hours rows)."""
    measured = list(load_measured_runs())
    runs = load_published_runs()
    out = []
    for run in runs:
        src = _run_source(run)
        eff = fit_efficiency([r for r in measured if r.source_id != src])
        run_eff = fit_run_efficiency([r for r in runs if _run_source(r) != src], eff)
        hours, gp = run_gpu_hours(run, replace(eff, run_efficiency=run_eff))
        rule = (
            6
            * run.model.total_params
            * run.tokens
            / (0.4 * _peak16(find_gpu(run.gpu), "bf16"))
            / 3600
        )
        out.append((run, src, hours, rule, gp, run_eff))
    return out


def _attention_share(run: MeasuredRun) -> float:
    est = estimate_workload(run.workload, run.gpu, run.gpus, calibration=None, suggest=False)
    p = est.step_parts or {}
    compute = sum(
        p.get(k, 0.0) for k in ("matmul_s", "memory_bound_s", "recompute_s", "attention_s")
    )
    return p.get("attention_s", 0.0) / compute if compute else 0.0


def ablation(rows: list[tuple[MeasuredRun, float, float]]) -> None:
    """The same leave-one-source-out run with the ``attention`` column ignored (every row
    FlashAttention-2), so the effect of that one data column is on the record."""
    as_fa2 = [
        replace(r, workload=r.workload.with_changes(flash_attention_version=2))
        for r in load_measured_runs()
    ]
    alt, _ = throughput_set(as_fa2)
    print("\nABLATION: the attention column ignored (every row read as FlashAttention-2)\n")
    print(f"{'group':42s} {'rows':>4s}  {'as committed':>12s}  {'all FlashAttention-2':>20s}")

    def med(sel: list[float]) -> str:
        return f"{statistics.median([abs(math.exp(x) - 1) for x in sel]):.1%}" if sel else "-"

    pairs = list(zip(rows, alt, strict=True))  # same sources, same order

    def line(label: str, keep: Callable[[MeasuredRun], bool]) -> None:
        a = [x for (r, x, _), _alt in pairs if keep(r)]
        b = [y for (r, _, _), (_, y, _) in pairs if keep(r)]
        print(f"{label:42s} {len(a):4d}  {med(a):>12s}  {med(b):>20s}")

    line("all", lambda r: True)
    for gpu in sorted({r.gpu for r, _, _ in rows}):
        line(f"  GPU {gpu}", lambda r, g=gpu: r.gpu == g)
    share = {id(r): _attention_share(r) for r, _, _ in rows}
    fa1 = [r for r, _, _ in rows if r.workload.flash_attention_version == 1]
    line("  FlashAttention-1 rows, attention < 10%", lambda r: r in fa1 and share[id(r)] < 0.1)
    line("  FlashAttention-1 rows, attention >= 10%", lambda r: r in fa1 and share[id(r)] >= 0.1)
    line(
        "  the other rows (FlashAttention-2; CNNs)",
        lambda r: r.workload.flash_attention_version == 2,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--write-residuals",
        action="store_true",
        help="write the LOSO residual quantiles to src/gpuwise/estimate/data/estimate_residuals.csv",
    )
    parser.add_argument("--rows", action="store_true", help="print every row")
    parser.add_argument(
        "--ablation",
        action="store_true",
        help="also rerun the LOSO with every row read as FlashAttention-2 (what the attention "
        "column changes), split by the attention share of the named compute time",
    )
    args = parser.parse_args()

    rows, by_class = throughput_set()
    print(
        f"THROUGHPUT SET: {len(rows)} measured configurations, {len({r.source_id for r, _, _ in rows})} sources, "
        f"{len({r.gpu for r, _, _ in rows})} GPU models (leave-one-source-out)\n"
    )
    if args.rows:
        for r, res, rule in rows:
            print(
                f"  {r.source_id:10s} {r.gpu:10s} {r.gpus:5d} {r.label:52s} meas {r.value:9.0f} "
                f"gpuwise {math.exp(res) - 1:+7.1%} rule40 {math.exp(rule) - 1:+7.1%}"
            )
        print()
    hdr = f"{'group':22s} {'rows':>4s}  {'gpuwise med':>11s} {'p90':>6s}   {'40% rule med':>12s} {'p90':>6s}"
    print(hdr)
    print("-" * len(hdr))

    def line(label: str, sel: list[tuple[MeasuredRun, float, float]]) -> None:
        g = [math.exp(x) - 1 for _, x, _ in sel]
        b = [math.exp(y) - 1 for _, _, y in sel]
        print(f"{label:22s} {len(sel):4d}  {_summary(g):>18s}   {_summary(b):>19s}")

    line("all", rows)
    for gpu in sorted({r.gpu for r, _, _ in rows}):
        line(f"  GPU {gpu}", [x for x in rows if x[0].gpu == gpu])
    for src in sorted({r.source_id for r, _, _ in rows}):
        line(f"  source {src}", [x for x in rows if x[0].source_id == src])
    for klass in sorted(by_class):
        line(f"  class {klass}", [x for x in rows if workload_class(x[0].workload) == klass])

    # p10-p90 coverage. The range is symmetric in log space: ± the 80th percentile of the other sources'
    # |LOSO log residual| (a new stack can be faster or slower than the ones fitted), so it holds the
    # held-out source only if the cross-validated errors of the others are representative.
    inside = 0
    for r, res, _ in rows:
        others = [abs(x) for q, x, _ in rows if q.source_id != r.source_id]
        # res = log(pred/measured throughput) = log(measured time / predicted time)
        inside += abs(res) <= _q(others, 0.8)
    print(
        f"\np10-p90 range holds the measured value: {inside}/{len(rows)} = {inside / len(rows):.0%} (goal 75-85%)"
    )

    verdicts: dict[str, list[str]] = collections.defaultdict(list)
    for r, _, _ in rows:
        est = estimate_workload(r.workload, r.gpu, r.gpus, calibration=None, suggest=False)
        frag = est.memory.breakdown.get("allocator_overhead", 0.0)
        verdicts[est.memory.verdict].append(
            f"{r.source_id} {r.gpu} x{r.gpus} {r.label}: {est.memory.per_gpu_gib:.1f} GiB "
            f"({est.memory.per_gpu_gib - frag:.1f} without the fragmentation allowance) of "
            f"{est.memory.capacity_gib:.0f}"
        )
    print(f'measured configurations called "does not fit": {len(verdicts["does not fit"])}')
    for line_ in verdicts["does not fit"]:
        print(f"  {line_}")
    print(
        f'measured configurations called "tight" (fit only without the assumed 5% allocator '
        f"fragmentation): {len(verdicts['tight'])}"
    )
    for line_ in verdicts["tight"]:
        print(f"  {line_}")

    hours = gpu_hours_set()
    print(
        f"\nGPU-HOURS SET: {len(hours)} published pretraining runs, {len({h[1] for h in hours})} sources "
        "(framework factors fitted on the throughput rows, whole-run efficiency on the GPU-hours rows, "
        "of the other sources)\n"
    )
    print(
        f"  {'run':16s} {'GPU':10s} {'reported':>11s} {'goodput':>7s} {'run eff':>7s} {'gpuwise':>8s} "
        f"{'40% rule':>8s}"
    )
    g_err, b_err = [], []
    by_gpu_h: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    for run, _, est_h, rule_h, gp, reff in hours:
        e, b = est_h / run.gpu_hours - 1, rule_h / run.gpu_hours - 1
        g_err.append(e)
        b_err.append(b)
        by_gpu_h[run.gpu].append((e, b))
        print(
            f"  {run.name:16s} {run.gpu:10s} {run.gpu_hours:11,.0f} {gp:7.0%} {reff:7.2f} {e:+8.1%} {b:+8.1%}"
        )
    for gpu, pairs in sorted(by_gpu_h.items()):
        print(
            f"  GPU {gpu:10s} rows {len(pairs):2d}: gpuwise median |error| "
            f"{statistics.median([abs(e) for e, _ in pairs]):.1%}, 40% rule "
            f"{statistics.median([abs(b) for _, b in pairs]):.1%}"
        )
    print(
        f"\n  median |error|: gpuwise {statistics.median([abs(x) for x in g_err]):.1%}, "
        f"40% rule {statistics.median([abs(x) for x in b_err]):.1%}; p90 |error|: gpuwise "
        f"{_q([abs(x) for x in g_err], 0.9):.1%}, 40% rule {_q([abs(x) for x in b_err], 0.9):.1%}"
    )
    run_res = [math.log(1 + e) for e in g_err]
    srcs = [h[1] for h in hours]
    inside_h = sum(
        abs(x) <= _q([abs(y) for y, t in zip(run_res, srcs, strict=True) if t != s], 0.8)
        for x, s in zip(run_res, srcs, strict=True)
    )
    print(
        f"  p10-p90 range holds the reported GPU-hours: {inside_h}/{len(hours)} = {inside_h / len(hours):.0%}"
    )

    if args.ablation:
        ablation(rows)

    if args.write_residuals:
        path = (
            Path(__file__).resolve().parents[1] / "src/gpuwise/estimate/data/estimate_residuals.csv"
        )
        lines = [
            "# Leave-one-source-out residuals of gpuwise's time estimates, written by",
            "# `python benchmarks/estimate_accuracy.py --write-residuals` (do not edit by hand). The p10-p90 range",
            "# is symmetric in log space: log_p10 = -w, log_p90 = +w, w = 80th percentile of |log(measured time /",
            "# predicted time)| over the leave-one-source-out predictions. Estimate.wall_hours_p10/p90 = wall_hours",
            "# × exp(log_p10/log_p90). throughput: the per-step set; pretraining-run: whole published runs.",
            "class,rows,log_p10,log_p90",
        ]
        pooled = [abs(x) for v in by_class.values() for x in v]
        w = _q(pooled, 0.8)
        lines.append(f"throughput,{len(pooled)},{-w:.4f},{w:.4f}")
        wr = _q([abs(x) for x in run_res], 0.8)
        lines.append(f"pretraining-run,{len(run_res)},{-wr:.4f},{wr:.4f}")
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"\nwrote {path.name}")


if __name__ == "__main__":
    main()
