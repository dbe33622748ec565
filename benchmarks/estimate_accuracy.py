"""How far gpuwise's time estimates are from measured runs it was not fitted to.

Two data sets, kept apart:

- **throughput**: per-step tokens/s/GPU (or images/s/GPU) of measured configurations,
  ``src/gpuwise/estimate/data/measured_throughput.csv`` (framework benchmark tables, papers);
- **GPU-hours**: whole pretraining runs, ``src/gpuwise/estimate/data/published_runs.csv``
  (these include failures, restarts and idle time: gpuwise divides by its goodput model).

For each, leave-one-STACK-out: the framework factors (the only thing fitted) are refitted on the
throughput rows of every *other* stack (NeMo/Megatron, llm-foundry, torchtitan, ...; the
``stack`` column), then the held-out stack's rows are predicted with ``--stack`` as they ran — a
stack the fit never saw gets the central factor, as an unmeasured stack does for a user. Printed
per GPU, per stack family and per stack: median |error|, the signed median (bias: + means gpuwise
promises more throughput than the run got), p90 |error| and p10–p90 coverage, next to the rule.
The baseline is the fixed rule "6·N FLOPs per token at 40% of the dense 16-bit peak" on the same
rows (N = all parameters; fp8 rows use the bf16 peak, fp32 rows the fp32/TF32 peak they ran at).
Error = predicted / measured - 1 (throughput) or predicted / reported - 1 (GPU-hours).

Also printed: per GPU model, the count of measured configurations gpuwise calls "does not fit",
and how often the p10–p90 range (quantiles of the other stacks' held-out residuals) holds the
measured value.

**Through the CLI**: every measured row is written as a ``gpuwise estimate`` command line (its
options from ``measured.measured_options``, ``--model`` a preset or a config.json written for the
row) and parsed by the command's own parser and options table (``cli.estimate.estimate_inputs``);
the workload and setup that come out are what is fitted and predicted. The script says how many
rows the CLI builds exactly as the library loader does, and prints one command line.

Run: ``PYTHONPATH=src python benchmarks/estimate_accuracy.py`` (about a minute).
``--write-residuals`` also writes the LOSO residual quantiles per workload class to
``src/gpuwise/estimate/data/estimate_residuals.csv`` (what ``Estimate.wall_hours_p10/p90`` use).
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import math
import shutil
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from gpuwise.cli.estimate import estimate_inputs
from gpuwise.estimate.efficiency import THIN_GPU_ROWS, UNIT_EFFICIENCY, workload_class
from gpuwise.estimate.measured import (
    MeasuredRun,
    estimate_with,
    fit_efficiency,
    fit_run_efficiency,
    load_measured_runs,
    log_residual,
    measured_model_config,
    run_gpu_hours,
)
from gpuwise.estimate.options import OPTIONS
from gpuwise.estimate.throughput import Network, PublishedRun, load_published_runs
from gpuwise.hardware import GpuSpec, find_gpu

# GPU-hours rows that come from the same stack as throughput rows share its fold.
_RUN_SOURCE = {
    "llama-7b": "meta-llama",
    "llama-13b": "meta-llama",
    "llama-33b": "meta-llama",
    "llama-65b": "meta-llama",
    "tinyllama-1.1b": "lit-gpt",
    "llamat-7b": "fms-fsdp",
}


# Stack families for the table: Megatron-Core, the PyTorch FSDP stacks, the CNN benchmark stacks.
FAMILY = {
    "megatron": "megatron",
    "llm-foundry": "pytorch-fsdp",
    "torchtitan": "pytorch-fsdp",
    "fms-fsdp": "pytorch-fsdp",
    "lit-gpt": "pytorch-fsdp",
    "meta-llama": "pytorch-fsdp",
    "dle-pytorch": "cnn",
    "pytorch-examples": "cnn",
    "tensorflow": "cnn",
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


def held_out_width(rows: list[tuple[MeasuredRun, float, float]], run: MeasuredRun) -> float:
    """The half-width (log) of the p10-p90 range the estimator would give ``run`` had its stack
    never been seen, by the estimator's own rule (``EfficiencyModel.interval``): the 80th percentile
    of the other stacks' |residual| on the same GPU generation (never below that of all of them),
    or, for a GPU with fewer than
    ``THIN_GPU_ROWS`` rows in the other stacks, the 90th percentile of all of them (wider)."""
    others = [(q, x) for q, x, _ in rows if q.stack != run.stack]
    if sum(q.gpu == run.gpu for q, _ in others) < THIN_GPU_ROWS:
        return _q([abs(x) for _, x in others], 0.9)
    arch = find_gpu(run.gpu).architecture
    same = [abs(x) for q, x in others if find_gpu(q.gpu).architecture == arch]
    return max(_q(same, 0.8), _q([abs(x) for _, x in others], 0.8))


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


def row_argv(run: MeasuredRun, folder: Path) -> list[str]:
    """The ``gpuwise estimate`` arguments of one measured row (a config.json written to ``folder``
    for a model that is not a preset)."""
    seq = dict(run.options).get("seq_len") or dict(run.options).get("prompt_len") or "2048"
    cfg = measured_model_config(run.model, int(seq))
    if cfg is None:
        model = run.workload.model.name
    else:
        path = folder / f"{run.model}-s{seq}" / "config.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cfg), encoding="utf-8")
        model = str(path)
    argv = ["--model", model]
    for name, value in run.options:
        if OPTIONS[name].kind == "switch":  # a bare flag
            argv += [OPTIONS[name].flag] if value == "on" else []
        else:
            argv += [OPTIONS[name].flag, value]
    if run.gpus_per_node is not None:
        argv += ["--gpus-per-node", str(run.gpus_per_node)]
    if run.inter_node_gbit_s is not None:
        argv += ["--inter-node-gbps", f"{run.inter_node_gbit_s:g}"]
    return [*argv, "--gpu", run.gpu, "--gpus", str(run.gpus), "--no-calibration"]


@functools.lru_cache(maxsize=2)
def cli_runs(name: str = "measured_throughput.csv") -> tuple[tuple[MeasuredRun, ...], int, str]:
    """(the measured rows of ``data/<name>`` as the CLI builds them, rows identical to the library
    loader's, an example command line)."""
    folder = Path(tempfile.mkdtemp(prefix="gpuwise-accuracy-"))
    out, same, example = [], 0, ""
    try:
        for run in load_measured_runs(name):
            argv = row_argv(run, folder)
            inputs = estimate_inputs(argv)
            wl = inputs.workload
            named = replace(
                wl,
                model=replace(
                    wl.model, name=run.workload.model.name, source=run.workload.model.source
                ),
            )
            same += named == run.workload
            if not example and run.source_id == "nemo" and run.workload.virtual_pipeline > 1:
                example = "gpuwise estimate " + " ".join(argv).replace(str(folder), "<tmp>")
            out.append(
                replace(
                    run,
                    workload=wl,
                    gpus=inputs.gpus,
                    gpus_per_node=inputs.setup.gpus_per_node,
                    inter_node_gbit_s=inputs.setup.inter_node_gbit_s,
                )
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return tuple(out), same, example


def throughput_set(
    runs_in: list[MeasuredRun] | None = None,
) -> tuple[list[tuple[MeasuredRun, float, float]], dict[str, list[float]]]:
    """[(run, leave-one-stack-out log residual, rule-40 log residual)] and those residuals by class."""
    runs = list(cli_runs()[0]) if runs_in is None else runs_in
    stacks = sorted({r.stack for r in runs})
    out: list[tuple[MeasuredRun, float, float]] = []
    for s in stacks:
        eff = fit_efficiency([r for r in runs if r.stack != s])
        for r in runs:
            if r.stack == s:
                out.append(
                    (r, log_residual(r, eff), math.log(_rule40(r, _row_precision(r)) / r.value))
                )
    by_class: dict[str, list[float]] = collections.defaultdict(list)
    for r, res, _ in out:
        by_class[workload_class(r.workload)].append(res)
    return out, by_class


def row_out_residuals() -> list[tuple[MeasuredRun, float, bool]]:
    """[(run, |log residual|, its stack is measured)] for every row, predicted by a fit on all the
    other rows (its stack's and class's other rows included). Those of a row run with a ``--stack``
    the fit knows for its class are the error a user of a measured stack sees; grouped by workload
    class, they say how far a class's own rows stray from its fitted factor, which the pooled range
    does not see for a class with few rows (MoE)."""
    runs = list(cli_runs()[0])
    out = []
    for i, r in enumerate(runs):
        eff = fit_efficiency(runs[:i] + runs[i + 1 :])
        stack = r.workload.stack
        known = stack != "unknown" and workload_class(r.workload) in eff.by_stack.get(stack, {})
        out.append((r, abs(log_residual(r, eff)), known))
    return out


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
    measured = list(cli_runs()[0])
    runs = load_published_runs()
    out = []
    for run in runs:
        src = _run_source(run)
        eff = fit_efficiency([r for r in measured if r.stack != src])
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
    est = estimate_with(run, UNIT_EFFICIENCY)
    p = est.step_parts or {}
    compute = sum(
        p.get(k, 0.0) for k in ("matmul_s", "memory_bound_s", "recompute_s", "attention_s")
    )
    return p.get("attention_s", 0.0) / compute if compute else 0.0


def ablation(rows: list[tuple[MeasuredRun, float, float]]) -> None:
    """The same leave-one-stack-out run with the ``attention`` column ignored (every row
    FlashAttention-2), so the effect of that one data column is on the record."""
    as_fa2 = [
        replace(r, workload=r.workload.with_changes(flash_attention_version=2))
        for r in cli_runs()[0]
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


def print_table(rows: list[tuple[MeasuredRun, float, float]]) -> None:
    """Median |error|, signed median (bias: + = gpuwise promises more throughput than the run got),
    p90 |error| and p10-p90 coverage, each group next to the 40% rule on the same rows."""
    hdr = (
        f"{'group':30s} {'rows':>4s}  {'gpuwise med':>11s} {'signed':>7s} {'p90':>6s} {'p10-p90':>7s}"
        f"   {'40% rule med':>12s} {'signed':>7s} {'p90':>6s}"
    )
    print(hdr)
    print("-" * len(hdr))

    def line(label: str, sel: list[tuple[MeasuredRun, float, float]]) -> None:
        g = [math.exp(x) - 1 for _, x, _ in sel]
        b = [math.exp(y) - 1 for _, _, y in sel]
        hold = sum(abs(res) <= held_out_width(rows, r) for r, res, _ in sel) / len(sel)
        print(
            f"{label:30s} {len(sel):4d}  {statistics.median([abs(e) for e in g]):11.1%} "
            f"{statistics.median(g):+7.1%} {_q([abs(e) for e in g], 0.9):6.1%} {hold:7.0%}   "
            f"{statistics.median([abs(e) for e in b]):12.1%} {statistics.median(b):+7.1%} "
            f"{_q([abs(e) for e in b], 0.9):6.1%}"
        )

    line("all", rows)
    for gpu in sorted({r.gpu for r, _, _ in rows}):
        line(f"  GPU {gpu}", [x for x in rows if x[0].gpu == gpu])
    for fam in sorted(set(FAMILY.values())):
        line(f"  family {fam}", [x for x in rows if FAMILY[x[0].stack] == fam])
    for st in sorted({r.stack for r, _, _ in rows}):
        line(f"    stack {st}", [x for x in rows if x[0].stack == st])
    for klass in sorted({workload_class(r.workload) for r, _, _ in rows}):
        line(f"  class {klass}", [x for x in rows if workload_class(x[0].workload) == klass])


def per_gpu_coverage(rows: list[tuple[MeasuredRun, float, float]]) -> None:
    """Per GPU model: LOSO median |error| next to the 40% rule, and how often the p10-p90 range the
    estimator would print for that GPU (held-out stack) holds the measured value."""
    print("\n  per GPU     rows  gpuwise  40% rule  below rule?  p10-p90 holds")
    for gpu in sorted({r.gpu for r, _, _ in rows}):
        sel = [x for x in rows if x[0].gpu == gpu]
        g = statistics.median([abs(math.exp(x) - 1) for _, x, _ in sel])
        b = statistics.median([abs(math.exp(y) - 1) for _, _, y in sel])
        hold = sum(abs(res) <= held_out_width(rows, r) for r, res, _ in sel)
        verdict = ("yes" if g < b else "NO") if len(sel) >= 5 else "(< 5 rows)"
        print(
            f"  {gpu:10s} {len(sel):5d}  {g:7.1%}  {b:8.1%}  {verdict:>11s}  {hold}/{len(sel)} = {hold / len(sel):.0%}"
        )


def print_gpu_hours() -> list[float]:
    """The GPU-hours set, printed; returns its LOSO log residuals."""
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
    return run_res


# Llama 3.1 405B from Meta's published layout (Llama 3 paper, Sec. 3.3.2 and Table 4: 16,384 H100, TP8
# CP1 PP16, 8K sequences, 16 per data-parallel group per step = 2,048, FSDP sharding optimizer states and
# gradients (ZeRO-2), no activation checkpointing; model card: 30.84M GPU-hours). The interleaving (V
# model chunks per GPU) is not published, so every V Meta's 8-layer stages allow is shown, next to the
# step's TFLOPs/GPU, which Table 4 measured (400).
META_405B_ARGS = (
    "--model llama-3.1-405b --gpu H100 --gpus 16384 --tensor-parallel 8 --pipeline-parallel 16 "
    "--seq-len 8192 --global-batch 2048 --tokens 15.6T --zero 2 --grad-ckpt none"
)
META_405B_TFLOPS = 400.0
META_405B_GPU_HOURS = 30.84e6


def print_meta_405b() -> None:
    """The 405B example through the CLI's parser: with the shipped fit, and with the whole-run
    efficiency fitted without the 405B run (its only published figure is the one compared)."""
    from gpuwise.estimate import estimate_workload
    from gpuwise.estimate.measured import default_efficiency

    shipped = default_efficiency()
    runs = load_published_runs()
    held = replace(
        shipped,
        run_efficiency=fit_run_efficiency([r for r in runs if r.name != "llama-3.1-405b"], shipped),
    )
    print(
        "\nLLAMA 3.1 405B FROM META'S PUBLISHED LAYOUT (published 30.84M GPU-hours; through the CLI):"
        f"\n  gpuwise estimate {META_405B_ARGS} --virtual-pipeline V\n"
        f"\n  {'V':>2s} {'TFLOP/s':>7s} {'stepping':>9s} {'goodput':>7s} {'GPU-hours':>10s} {'error':>7s} "
        f"{'p10-p90':>13s}   {'405B run held out':>17s}"
    )
    print(f"  (Table 4 measured {META_405B_TFLOPS:.0f} TFLOP/s per GPU on this layout)")
    hours_by_v = []
    for v in (1, 2, 4, 8):
        inputs = estimate_inputs([*META_405B_ARGS.split(), "--virtual-pipeline", str(v)])
        a, b = (
            estimate_workload(
                inputs.workload,
                inputs.setup.gpu,
                inputs.gpus,
                calibration=inputs.calibration,
                efficiency=eff,
                **inputs.setup.kwargs(),
            )
            for eff in (shipped, held)
        )
        assert a.gpu_hours and a.wall_hours_p10 and a.wall_hours_p90 and b.gpu_hours
        print(
            f"  {v:2d} {a.tokens_per_second / a.gpus * a.flops_per_token / 1e12:7.0f} "
            f"{a.gpu_hours * a.goodput / 1e6:8.1f}M {a.goodput:7.0%} "
            f"{a.gpu_hours / 1e6:9.1f}M {a.gpu_hours / META_405B_GPU_HOURS - 1:+7.0%} "
            f"{a.wall_hours_p10 * a.gpus / 1e6:5.1f}-{a.wall_hours_p90 * a.gpus / 1e6:5.1f}M"
            f"   {b.gpu_hours / 1e6:8.1f}M {b.gpu_hours / META_405B_GPU_HOURS - 1:+7.0%}"
        )
        hours_by_v.append(a.gpu_hours)
    print(
        f"  V is not published: gpuwise's answer is the range over V, {min(hours_by_v) / 1e6:.1f}M to "
        f"{max(hours_by_v) / 1e6:.1f}M GPU-hours ({min(hours_by_v) / META_405B_GPU_HOURS - 1:+.0%} to "
        f"{max(hours_by_v) / META_405B_GPU_HOURS - 1:+.0%}); no V is chosen to match the published figure"
    )


@functools.cache
def catalog_gpus() -> frozenset[str]:
    """The GPUs the bundled price catalog offers: the GPUs issue 32 says matter."""
    from importlib import resources

    from gpuwise.catalog import load_catalog

    bundled = resources.files("gpuwise.catalog").joinpath("data/offers.csv.gz")
    with resources.as_file(bundled) as path:
        return frozenset(o.gpu for o in load_catalog([path]).offers)


def _outside_summary(label: str, errs: list[float], rule: list[float], held: list[bool]) -> str:
    return (
        f"  {label}: {len(errs)} rows, median |error| gpuwise "
        f"{statistics.median([abs(e) for e in errs]):.1%} (signed {statistics.median(errs):+.1%}), "
        f"40% rule {statistics.median([abs(e) for e in rule]):.1%} (signed "
        f"{statistics.median(rule):+.1%}); p10-p90 holds {sum(held)}/{len(held)} = "
        f"{sum(held) / len(held):.0%}"
    )


def print_outside_check() -> None:
    """The validation-only throughput rows (nothing is fitted to them), predicted with the shipped fit
    through the CLI's argument path, next to the rule; the range is the one the estimate prints.
    The headline counts GPUs the catalog offers (issue 32: "GPUs the catalog carries are the GPUs
    that matter; others may stay out, said so"); the others are printed and summed apart."""
    from gpuwise.estimate.measured import default_efficiency

    runs, same, _ = cli_runs("validation_throughput.csv")
    eff = default_efficiency()
    offered = catalog_gpus()
    print(
        f"\nOUTSIDE CHECK: {len(runs)} validation-only rows (validation_throughput.csv; none fitted; "
        f"{same}/{len(runs)} built by the CLI exactly as the loader builds them)\n"
        f"  {'source':9s} {'GPU':6s} {'GPUs':>4s} {'row':48s} {'measured':>9s} {'gpuwise':>8s} "
        f"{'in p10-p90':>10s} {'40% rule':>8s}"
    )
    # (source, in the catalog) -> (errors, rule errors, inside the range)
    groups: dict[tuple[str, bool], tuple[list[float], list[float], list[bool]]] = {}
    moe: tuple[list[float], list[float], list[bool]] = ([], [], [])  # MoE rows on catalog GPUs
    for r in runs:
        est = estimate_with(r, eff)
        pred = r.per_gpu(est.tokens_per_second, est.samples_per_second)
        klass = workload_class(r.workload)
        q = eff.interval(klass, r.gpu, r.workload.stack) or (1.0, 1.0)
        inside = q[0] <= r.value / pred <= q[1]  # measured time / predicted time
        err, rule = pred / r.value - 1, _rule40(r, _row_precision(r)) / r.value - 1
        e, ru, h = groups.setdefault((r.source_id, r.gpu in offered), ([], [], []))
        e.append(err)
        ru.append(rule)
        h.append(inside)
        if klass == "transformer-moe-train" and r.gpu in offered:
            moe[0].append(err)
            moe[1].append(rule)
            moe[2].append(inside)
        tp = dict(r.options).get("tensor_parallel", "1")
        mark = "" if r.gpu in offered else "  (not in the catalog)"
        print(
            f"  {r.source_id:9s} {r.gpu:6s} {r.gpus:4d} {r.label + ' tp' + tp:48s} {r.value:9,.0f} "
            f"{err:+8.1%} {'yes' if inside else 'no':>10s} {rule:+8.1%}{mark}"
        )

    def pooled(keep: Callable[[str, bool], bool]) -> tuple[list[float], list[float], list[bool]]:
        chosen = [v for k, v in groups.items() if keep(*k)]
        return (
            [x for v in chosen for x in v[0]],
            [x for v in chosen for x in v[1]],
            [x for v in chosen for x in v[2]],
        )

    print("  by source (catalog GPUs):")
    for src in dict.fromkeys(k[0] for k in groups if k[1]):
        print(_outside_summary(f"  {src:9s}", *pooled(lambda s, c, src=src: c and s == src)))
    print(_outside_summary("GPUs in the catalog", *pooled(lambda s, c: c)))
    if moe[0]:  # issue 32 item 4: the MoE class is fitted on 6 rows of one stack
        print(_outside_summary("  of which MoE (transformer-moe-train)", *moe))
    if any(not c for _, c in groups):
        gpus = sorted({r.gpu for r in runs if r.gpu not in offered})
        print(
            _outside_summary(
                f"GPUs not in the catalog ({', '.join(gpus)}; shown, not counted)",
                *pooled(lambda s, c: not c),
            )
        )
    print(_outside_summary("all rows", *pooled(lambda s, c: True)))


_RING_SHARE = {"all-reduce": 1.0, "all-gather": 0.5, "reduce-scatter": 0.5}


def nccl_tests_seconds(kind: str, size_bytes: float, n: int, net: Network) -> tuple[float, float]:
    """gpuwise's (wire, latency) seconds for one nccl-tests row of ``kind`` and nccl-tests' size column.

    For all-gather and reduce-scatter that size is the whole gathered (or reduced) array, so each GPU
    moves (n-1)/n of it, half an all-reduce of the same size (nccl-tests' bus bandwidth is algbw ×
    (n-1)/n there, × 2(n-1)/n for all-reduce; the FSDP step's 1.5 all-reduces for 2 all-gathers and
    a reduce-scatter count the same way); the latency is ``collective_latency_s`` of that kind."""
    from gpuwise.estimate.throughput import allreduce_seconds, collective_latency_s

    if kind not in _RING_SHARE:
        raise ValueError(f"unknown collective {kind!r}: one of {', '.join(_RING_SHARE)}")
    wire = _RING_SHARE[kind] * allreduce_seconds(size_bytes, n, net)
    return wire, collective_latency_s(kind, n, net)


_SIZE_BANDS = ("< 16 MiB", "16-256 MiB", "> 256 MiB")


def _size_band(size_bytes: float) -> str:
    mib = size_bytes / 2**20
    return _SIZE_BANDS[0] if mib < 16 else _SIZE_BANDS[1] if mib <= 256 else _SIZE_BANDS[2]


def print_collectives() -> None:
    """alpha + n*beta against published nccl-tests timings (validation_collectives.csv), then the
    median signed error per source, node count, network and message-size band."""
    from importlib import resources

    from gpuwise.base.datafiles import commented_csv
    from gpuwise.estimate.throughput import network_for

    text = (
        resources.files("gpuwise.estimate")
        .joinpath("data/validation_collectives.csv")
        .read_text("utf-8")
    )
    print(
        "\nCOLLECTIVES vs nccl-tests (validation only; error = gpuwise / measured - 1, "
        "- = gpuwise too fast; alpha = latency share of gpuwise's time):"
        f"\n  {'source':13s} {'GPU':9s} {'nodes':>5s} {'GPUs':>4s} {'collective':14s} {'MiB':>6s} "
        f"{'measured us':>11s} {'gpuwise us':>10s} {'alpha':>6s} {'error':>7s}"
    )
    groups: dict[str, dict[str, list[float]]] = {
        "source": {},
        "nodes": {},
        "net": {},
        "size": {},
        "cell": {},
    }
    for r in commented_csv(text):
        n, size, gpn = int(r["gpus"]), float(r["bytes"]), int(r["gpus_per_node"])
        net = network_for(find_gpu(r["gpu"]), gpn, float(r["inter_node_gbps"]))
        wire, alpha = nccl_tests_seconds(r["collective"], size, n, net)
        pred, meas = (wire + alpha) * 1e6, float(r["time_us"])
        err, nodes = pred / meas - 1, math.ceil(n / gpn)
        print(
            f"  {r['source_id']:13s} {r['gpu']:9s} {nodes:5d} {n:4d} {r['collective']:14s} "
            f"{size / 2**20:6.0f} {meas:11.0f} {pred:10.0f} {alpha * 1e6 / pred:6.0%} {err:+7.0%}"
        )
        gbps = f"{float(r['inter_node_gbps']):g}" if nodes > 1 else "one node"
        for key, value in (("source", r["source_id"]), ("nodes", str(nodes)), ("net", gbps)):
            groups[key].setdefault(value, []).append(err)
        groups["size"].setdefault(_size_band(size), []).append(err)
        groups["cell"].setdefault(f"{gbps} | {_size_band(size)}", []).append(err)
    ordered = {
        "source": list(groups["source"]),
        "nodes": sorted(groups["nodes"], key=int),
        "net": sorted(groups["net"], key=lambda v: float(v) if v[0].isdigit() else 0.0),
        "size": [b for b in _SIZE_BANDS if b in groups["size"]],
    }
    ordered["cell"] = [
        f"{g} | {b}" for g in ordered["net"] for b in _SIZE_BANDS if f"{g} | {b}" in groups["cell"]
    ]
    titles = {
        "source": "source",
        "nodes": "nodes",
        "net": "Gbit/s per node",
        "size": "message size",
        "cell": "Gbit/s per node | message size",
    }
    for key, title in titles.items():
        print(f"  median signed error by {title}:")
        for value in ordered[key]:
            errs = groups[key][value]
            print(f"    {value:24s} {len(errs):3d} rows  {statistics.median(errs):+5.0%}")


def print_scaling_series() -> None:
    """Published series (validation_scaling.csv) relative to their first row: the shape of the
    model along sequence length and context parallelism, whatever the absolute speed."""
    import shlex
    from importlib import resources

    from gpuwise.base.datafiles import commented_csv
    from gpuwise.cli.estimate import estimate_argv

    text = (
        resources.files("gpuwise.estimate")
        .joinpath("data/validation_scaling.csv")
        .read_text("utf-8")
    )
    print(
        "\nSERIES, relative to their first row (validation only; ratios, not absolute speed):\n"
        f"  {'series':11s} {'row':46s} {'measured':>9s} {'gpuwise':>8s} {'error':>7s}"
    )
    first: dict[str, tuple[float, float]] = {}
    for r in commented_csv(text):
        est = estimate_argv([*shlex.split(r["options"]), "--gpu", r["gpu"], "--gpus", r["gpus"]])
        ours, theirs = est.tokens_per_second / est.gpus, float(r["tokens_per_s_per_gpu"])
        base = first.setdefault(r["series"], (ours, theirs))
        wl = est.workload
        label = f"{wl.model.name} cp{wl.context_parallel} s{wl.seq_len} tp{wl.tensor_parallel} pp{wl.pipeline_parallel}"
        rel_ours, rel_theirs = ours / base[0], theirs / base[1]
        print(
            f"  {r['series']:11s} {label:46s} {rel_theirs:9.3f} {rel_ours:8.3f} "
            f"{rel_ours / rel_theirs - 1:+7.0%}"
        )


def print_dp_series() -> None:
    """Data-parallel weak scaling (validation_dp_scaling.csv): per-GPU throughput relative to the
    first row of each series as the GPU count grows with the per-GPU work fixed, measured and
    gpuwise (the shipped fit, each row through the CLI's argument path)."""
    from gpuwise.estimate.measured import default_efficiency, estimate_with

    runs, same, _ = cli_runs("validation_dp_scaling.csv")
    eff = default_efficiency()
    print(
        "\nDATA-PARALLEL SCALING SERIES (validation only; validation_dp_scaling.csv, llm-foundry's FSDP "
        f"tables; {same}/{len(runs)} built by the CLI\n  as the loader builds them): tokens/s per GPU "
        "relative to the series' first row; error = gpuwise ratio / measured ratio - 1"
        f"\n  {'series':20s} {'GPUs':>5s} {'network':>9s} {'measured':>9s} {'gpuwise':>8s} {'error':>7s}"
    )
    first: dict[str, tuple[float, float]] = {}
    errors: list[float] = []
    for r in runs:
        est = estimate_with(r, eff)
        ours = est.tokens_per_second / est.gpus
        later = r.source_id in first
        base = first.setdefault(r.source_id, (ours, r.value))
        rel_ours, rel_theirs = ours / base[0], r.value / base[1]
        if later:
            errors.append(rel_ours / rel_theirs - 1)
        net = f"{r.inter_node_gbit_s:,.0f}" if r.inter_node_gbit_s else "unstated"
        print(
            f"  {r.source_id:20s} {r.gpus:5d} {net:>9s} {rel_theirs:9.3f} {rel_ours:8.3f} "
            f"{rel_ours / rel_theirs - 1:+7.1%}"
        )
    inside = sum(abs(e) <= 0.20 for e in errors)
    print(
        f"  {len(errors)} rows past a series' first: within 20% {inside}/{len(errors)}; signed median "
        f"{statistics.median(errors):+.1%}, largest {max(errors, key=abs):+.1%} (+ = gpuwise loses less "
        "per GPU than the runs did)"
    )


def print_finetune_validation() -> None:
    """QLoRA's dequantisation against LitGPT's measured QLoRA - LoRA time per iteration (the
    validation-only file; nothing is fitted to it), and QLoRA / LoRA by sequence length."""
    from importlib import resources

    from gpuwise.base.datafiles import commented_csv
    from gpuwise.estimate import estimate_workload, workload_from_options

    text = (
        resources.files("gpuwise.estimate")
        .joinpath("data/validation_finetune.csv")
        .read_text("utf-8")
    )
    rows = list(commented_csv(text))
    print(
        "\nQLORA DEQUANTISATION vs LitGPT (validation only; A100-40GB, micro-batch 1, no recompute):"
        f"\n  {'model':12s} {'quant':11s} {'measured extra ms/iter':>22s} {'gpuwise':>8s} {'error':>7s}"
    )
    for model in sorted({r["model"] for r in rows}):
        lora = next(r for r in rows if r["model"] == model and r["task"] == "lora")
        for q in (r for r in rows if r["model"] == model and r["task"] == "qlora"):
            measured = (
                float(q["minutes_per_1k_iterations"]) - float(lora["minutes_per_1k_iterations"])
            ) * 60.0
            wl = workload_from_options(
                model=model, task="qlora", micro_batch="1", seq_len="512", grad_ckpt="none"
            )
            est = estimate_workload(wl, "A100", 1, calibration=None, suggest=False)
            pred = est.step_parts["dequant_s"] * est.step_parts["framework_factor"] * 1000
            print(
                f"  {model:12s} {q['quantization']:11s} {measured:22.0f} {pred:8.0f} "
                f"{pred / measured - 1:+7.0%}"
            )
    print("  QLoRA / LoRA step time by sequence length (llama-2-7b, A100-80GB, full recompute):")
    for seq in (512, 1024, 4096, 16384):
        lora_wl = workload_from_options(
            model="llama-2-7b", task="lora", seq_len=str(seq), grad_ckpt="full", samples="100"
        )
        a = estimate_workload(lora_wl, "A100-80GB", 1, calibration=None, suggest=False)
        b = estimate_workload(
            lora_wl.with_changes(task="qlora"), "A100-80GB", 1, calibration=None, suggest=False
        )
        print(f"    seq {seq:6d}: x{b.step_time_s / a.step_time_s:.2f}")


def print_large_dp(rows: list[tuple[MeasuredRun, float, float]]) -> None:
    """Per-GPU throughput of a 7B on A100s over 400 Gbit/s from 8 to 1,024 GPUs (prediction only:
    no published series at 400 Gbit/s is in the project's data): FSDP full sharding and hybrid sharding, at
    micro-batch 2 x 4,096 tokens and 1 x 2,048 (less compute to hide the per-block gathers); then
    the measured rows that are large data-parallel runs on 400 Gbit/s, leave-one-stack-out."""
    from gpuwise.estimate import estimate_workload, workload_from_options

    print(
        "\nLARGE DATA-PARALLEL: llama-2-7b, A100-80GB, 400 Gbit/s per node, ZeRO-3, no recompute, global "
        "batch 1,024 sequences\n  (2,048 from 1,024 GPUs) — prediction only, no measured series at 400 "
        "Gbit/s in the project's data; tokens/s per GPU (exposed communication per step)"
        f"\n  {'GPUs':>5s} {'FSDP mb2 s4096':>20s} {'HSDP mb2 s4096':>20s} {'FSDP mb1 s2048':>20s} "
        f"{'HSDP mb1 s2048':>20s}"
    )
    for n in (8, 16, 64, 128, 256, 512, 1024):
        cells = []
        for mb, seq in (("2", "4096"), ("1", "2048")):
            for extra in ({}, {"shard_within_node": "on"}):
                wl = workload_from_options(
                    model="llama-2-7b",
                    zero="3",
                    micro_batch=mb,
                    seq_len=seq,
                    grad_ckpt="none",
                    global_batch="2048" if n >= 1024 else "1024",
                    **extra,
                )
                est = estimate_workload(
                    wl, "A100-80GB", n, inter_node_gbit_s=400.0, calibration=None, suggest=False
                )
                cells.append(f"{est.tokens_per_second / n:8,.0f} ({est.comm_time_s:5.2f}s)")
        print(f"  {n:5d} " + " ".join(f"{c:>20s}" for c in cells))
    anchors = [
        (r, res)
        for r, res, _ in rows
        if r.gpus >= 64
        and r.workload.tensor_parallel == r.workload.pipeline_parallel == 1
        and r.inter_node_gbit_s == 400.0
    ]
    print(
        "  measured data-parallel runs on >= 64 GPUs over a stated 400 Gbit/s in the fitted set "
        "(leave-one-stack-out; + = gpuwise too fast):"
    )
    for r, res in anchors:
        print(
            f"    {r.source_id:10s} {r.gpu:10s} x{r.gpus:<5d} {r.label:52s} {r.value:7,.0f} tok/s "
            f"gpuwise {math.exp(res) - 1:+6.1%}"
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
    _, same, example = cli_runs()
    print(
        f"Measured through the CLI: each row parsed as `gpuwise estimate` arguments; {same}/{len(rows)} "
        "build exactly the library loader's workload.\n  e.g. " + example + "\n"
    )
    print(
        f"THROUGHPUT SET: {len(rows)} measured configurations, {len({r.stack for r, _, _ in rows})} stacks, "
        f"{len({r.gpu for r, _, _ in rows})} GPU models (leave-one-STACK-out: each stack's rows predicted "
        "by a fit that never saw that stack, with --stack as the row ran)\n"
    )
    if args.rows:
        for r, res, rule in rows:
            print(
                f"  {r.stack:16s} {r.gpu:10s} {r.gpus:5d} {r.label:52s} meas {r.value:9.0f} "
                f"gpuwise {math.exp(res) - 1:+7.1%} rule40 {math.exp(rule) - 1:+7.1%}"
            )
        print()
    print_table(rows)
    inside = sum(abs(res) <= held_out_width(rows, r) for r, res, _ in rows)
    print(
        f"\np10-p90 range holds the measured value: {inside}/{len(rows)} = {inside / len(rows):.0%} (goal 70-90%)"
    )
    per_gpu_coverage(rows)

    verdicts: dict[str, list[str]] = collections.defaultdict(list)
    for r, _, _ in rows:
        est = estimate_with(r, UNIT_EFFICIENCY)
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

    run_res = print_gpu_hours()
    print_meta_405b()
    print_outside_check()
    print_scaling_series()
    print_dp_series()
    print_collectives()
    print_finetune_validation()
    print_large_dp(rows)

    if args.ablation:
        ablation(rows)

    if args.write_residuals:
        path = (
            Path(__file__).resolve().parents[1] / "src/gpuwise/estimate/data/estimate_residuals.csv"
        )
        lines = [
            "# Leave-one-stack-out residuals of gpuwise's time estimates, written by",
            "# `python benchmarks/estimate_accuracy.py --write-residuals` (do not edit by hand). The p10-p90 range",
            "# is symmetric in log space: log_p10 = -w, log_p90 = +w, w = 80th percentile of |log(measured time /",
            "# predicted time)| over the leave-one-stack-out predictions. Estimate.wall_hours_p10/p90 = wall_hours",
            "# × exp(log_p10/log_p90). throughput: the per-step set; pretraining-run: whole published runs;",
            "# throughput:<generation>: the 80th percentile of that GPU generation's rows (5 or more), never",
            "# narrower than throughput (a new stack's error is not smaller than the spread between stacks);",
            "# throughput-thin-gpu: GPUs with fewer than 5 measured rows get w = the 90th percentile (wider);",
            "# throughput-known-stack: --stack names a stack with measured rows: w = the 80th percentile of its",
            "# rows' errors when each row is left out of the fit (its stack's other rows stay in);",
            "# class:<workload class>: a class (5 rows or more) whose rows, each left out of the fit, err more",
            "# than throughput's w: w = their 80th percentile; its estimates get the wider of this and the above.",
            "class,rows,log_p10,log_p90",
        ]
        pooled = [abs(x) for v in by_class.values() for x in v]
        w = _q(pooled, 0.8)
        lines.append(f"throughput,{len(pooled)},{-w:.4f},{w:.4f}")
        w90 = _q(pooled, 0.9)
        lines.append(f"throughput-thin-gpu,{len(pooled)},{-w90:.4f},{w90:.4f}")
        row_out = row_out_residuals()
        known = [x for _, x, measured in row_out if measured]
        wk = _q(known, 0.8)
        lines.append(f"throughput-known-stack,{len(known)},{-wk:.4f},{wk:.4f}")
        by_arch: dict[str, list[float]] = collections.defaultdict(list)
        for r, x, _ in rows:
            by_arch[find_gpu(r.gpu).architecture].append(abs(x))
        for arch, xs in sorted(by_arch.items()):
            if len(xs) >= THIN_GPU_ROWS:
                wa = max(_q(xs, 0.8), w)
                lines.append(f"throughput:{arch},{len(xs)},{-wa:.4f},{wa:.4f}")
        by_klass: dict[str, list[float]] = collections.defaultdict(list)
        for r, x, _ in row_out:
            by_klass[workload_class(r.workload)].append(x)
        for klass, xs in sorted(by_klass.items()):
            wc = _q(xs, 0.8)
            if len(xs) >= THIN_GPU_ROWS and wc > w:
                lines.append(f"class:{klass},{len(xs)},{-wc:.4f},{wc:.4f}")
        wr = _q([abs(x) for x in run_res], 0.8)
        lines.append(f"pretraining-run,{len(run_res)},{-wr:.4f},{wr:.4f}")
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"\nwrote {path.name}")


if __name__ == "__main__":
    main()
