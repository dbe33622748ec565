"""The measured runs the step-time model is checked against, and what is fitted to them.

``data/measured_throughput.csv`` holds per-step throughputs measured by framework benchmark
tables, papers and vendor reports (one source per ``source_id``); ``data/measured_models.csv`` the
shapes they ran. :func:`load_measured_runs` turns each row into a :class:`Workload` on a GPU setup.

Two things are fitted to them, nothing else:

- the **framework factor** (:class:`~gpuwise.estimate.efficiency.EfficiencyModel`): measured
  step time ÷ the named parts of :mod:`.steptime`, averaged in log space per workload class (shrunk
  toward the overall mean), and one **attention factor** (what the FlashAttention efficiency
  figures miss; each row's kernel generation is data, the ``attention`` column);
- the **whole-run efficiency** of published pretraining runs (``data/published_runs.csv``):
  reported GPU-hours ÷ the hours the step-time and failure models give for the run as it ran
  (its published layout and kernels, ``options``), geometric mean over the runs that publish them;
- the **p10–p90 error bars**: ± the 80th percentile of the absolute leave-one-stack-out log errors
  (per-step set, and whole published runs), written by ``benchmarks/estimate_accuracy.py
  --write-residuals`` to ``data/estimate_residuals.csv`` (cross-validated, not tuned on the rows
  they cover).
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass, replace
from importlib import resources
from typing import TYPE_CHECKING

from gpuwise.base.datafiles import commented_csv
from gpuwise.estimate.efficiency import UNIT_EFFICIENCY, EfficiencyModel, workload_class
from gpuwise.estimate.estimator import compute_estimate
from gpuwise.estimate.model import ModelConfig
from gpuwise.estimate.workload import STACKS, Workload

if TYPE_CHECKING:
    from gpuwise.estimate.result import Estimate
    from gpuwise.estimate.throughput import PublishedRun

# Pseudo-rows a GPU's (or class's) mean is shrunk toward its parent with.
SHRINK_ROWS = 2.0
_TASKS = {
    "pretrain": "pretrain",
    "sft": "finetune",
    "lora": "lora",
    "qlora": "qlora",
    "infer": "inference",
}
_PRECISIONS = {"tf32": "fp32", "fp32": "fp32", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8"}
_ZERO = {"fsdp": 3, "hsdp": 3, "zero2": 2, "ddp": 0, "megatron": 1}


@dataclass(frozen=True)
class MeasuredRun:
    """One row of ``measured_throughput.csv`` as a workload on a GPU setup."""

    source_id: str
    """Independent source."""
    gpu: str
    gpus: int
    workload: Workload
    value: float
    """Measured tokens/s/GPU (``unit == "tok"``) or images/s/GPU (``"img"``)."""
    unit: str
    source: str
    label: str
    """Short description for tables."""
    options: tuple[tuple[str, str], ...] = ()
    """The row's workload options as typed on the command line (:func:`measured_options`)."""
    model: str = ""
    """The row's model name (a preset, or a name :func:`measured_model_config` writes a config for)."""
    gpus_per_node: int | None = None
    """GPUs per node when the row's setup says (None: the estimator's default)."""
    inter_node_gbit_s: float | None = None
    """Network per node when the row's setup says (None: the estimator's default for the GPU)."""
    stack: str = "unknown"
    """The stack that ran the row (the leave-one-stack-out fold; ``--stack`` where it is one of
    :data:`~gpuwise.estimate.workload.STACKS`, else ``unknown``)."""

    def per_gpu(self, tokens_per_second: float, samples_per_second: float) -> float:
        """The estimate's figure in this row's unit, per GPU."""
        return (tokens_per_second if self.unit == "tok" else samples_per_second) / self.gpus


@functools.lru_cache(maxsize=1)
def _model_rows() -> dict[str, dict[str, str]]:
    text = (
        resources.files("gpuwise.estimate").joinpath("data/measured_models.csv").read_text("utf-8")
    )
    return {r["name"]: r for r in commented_csv(text)}


def measured_model_config(name: str, seq_len: int) -> dict[str, object] | None:
    """The Hugging Face ``config.json`` of a measured model that is not a gpuwise preset (None for a
    preset): what a person would give ``--model``. MPT rows are llm-foundry ``mpt`` configs (learned
    positions sized to the sequence, as its benchmark configs do), Llama-shaped rows ``llama``
    configs, GPT-3 a ``gpt2`` config."""
    r = _model_rows()[name]
    if r["preset"]:
        return None
    h, inter = int(r["hidden"]), int(r["intermediate"])
    shape: dict[str, object] = {
        "num_attention_heads" if not name.startswith("mpt") else "n_heads": int(r["heads"]),
        "vocab_size": int(r["vocab"]),
        "tie_word_embeddings": r["tied"] == "true",
    }
    if name.startswith("mpt"):  # llm-foundry MPTConfig keys
        return {
            "model_type": "mpt",
            "d_model": h,
            "n_layers": int(r["layers"]),
            "expansion_ratio": inter // h,
            "max_seq_len": seq_len,
            "learned_pos_emb": r["learned_positions"] == "true",
            "no_bias": True,
            **shape,
        }
    if r["norm"] == "layernorm":  # GPT-3: the GPT-2 architecture (Brown et al. 2020, Sec. 2.1)
        return {
            "model_type": "gpt2",
            "n_embd": h,
            "n_layer": int(r["layers"]),
            "n_inner": inter,
            "n_positions": seq_len,
            "resid_pdrop": 0.0,
            **shape,
        }
    return {
        "model_type": "llama",
        "hidden_size": h,
        "num_hidden_layers": int(r["layers"]),
        "num_key_value_heads": int(r["kv_heads"] or r["heads"]),
        "intermediate_size": inter,
        "max_position_embeddings": max(seq_len, 4096),
        "hidden_act": "silu",
        **shape,
    }


def _row_model(name: str, seq_len: int) -> str | ModelConfig:
    """A measured row's ``model`` option: the preset's name, or its config.json read as --model reads it."""
    from gpuwise.estimate.hf_config import config_from_dict

    cfg = measured_model_config(name, seq_len)
    if cfg is None:
        return _model_rows()[name]["preset"]
    return config_from_dict(dict(cfg), name)


def measured_options(r: dict[str, str]) -> dict[str, str]:
    """The workload options (as typed on the command line) of one ``measured_throughput.csv`` row,
    without ``model``. Unstated recompute is ``auto``: the least that fits or is tight, as it ran."""
    task = _TASKS[r["task"]]
    opts = {
        "task": task,
        "precision": _PRECISIONS[r["precision"]],
        "micro_batch": r["micro_batch"] or "1",
        "zero": str(_ZERO[r["parallelism"]]),
        "grad_ckpt": "auto" if r["recompute"] == "unstated" else r["recompute"],
        "tensor_parallel": r["tp"],
        "pipeline_parallel": r["pp"],
        "virtual_pipeline": r["vp"] or "1",
        "context_parallel": r["cp"] or "1",
        "expert_parallel": r["ep"] or "1",
        "fused_kernels": "on" if r["fused"] == "true" else "off",
        "sequence_parallel": "on" if r["parallelism"] == "megatron" else "off",
        "stack": r["stack"] if r["stack"] in STACKS else "unknown",
        "fp8_recipe": r.get("fp8_recipe") or "auto",
    }
    if r["parallelism"] == "hsdp":
        opts["shard_within_node"] = "on"
    if r["attention"] in ("flash1", "flash2", "flash3"):
        opts["attention_kernel"] = r["attention"]
    if r["global_batch"]:
        opts["global_batch"] = r["global_batch"]
    if task == "inference":
        opts.update(prompt_len=r["seq_len"], output_len="1")
    elif r["model"] != "resnet-50":
        opts["seq_len"] = r["seq_len"]
    return opts


@functools.lru_cache(maxsize=2)
def load_measured_runs(
    name: str = "measured_throughput.csv",
) -> tuple[MeasuredRun, ...]:
    """Every row of ``data/<name>`` (``measured_throughput.csv``, the fitted rows, or
    ``validation_throughput.csv``, rows nothing is fitted to) as a workload built from its options
    (:func:`measured_options`) by the library's request path, :func:`workload_from_options` — the
    path the CLI takes (``benchmarks/estimate_accuracy.py`` checks that the CLI builds the same).
    Optional ``gpus_per_node`` and ``inter_node_gbps`` columns give the row's setup."""
    from gpuwise.estimate.workload import workload_from_options

    text = resources.files("gpuwise.estimate").joinpath(f"data/{name}").read_text("utf-8")
    runs = []
    for r in commented_csv(text):
        seq = int(r["seq_len"])
        opts = measured_options(r)
        wl = workload_from_options(model=_row_model(r["model"], seq), **opts)
        label = f"{r['model']} {r['task']} s{seq} mb{r['micro_batch'] or '?'} {r['precision']} {r['recompute']}"
        runs.append(
            MeasuredRun(
                source_id=r["source_id"],
                gpu=r["gpu"],
                gpus=int(r["gpus"]),
                workload=wl,
                value=float(r["value"]),
                unit=r["unit"],
                source=r["source"],
                label=label,
                options=tuple(opts.items()),
                model=r["model"],
                gpus_per_node=int(r["gpus_per_node"]) if r.get("gpus_per_node") else None,
                inter_node_gbit_s=float(r["inter_node_gbps"]) if r.get("inter_node_gbps") else None,
                stack=r["stack"],
            )
        )
    return tuple(runs)


def estimate_with(
    run: MeasuredRun, efficiency: EfficiencyModel, inter_node_gbit_s: float | None = None
) -> Estimate:
    """The estimate of one measured row on its own setup (GPUs per node and network when given)."""
    return compute_estimate(
        run.workload,
        run.gpu,
        run.gpus,
        gpus_per_node=run.gpus_per_node,
        inter_node_gbit_s=inter_node_gbit_s
        if inter_node_gbit_s is not None
        else run.inter_node_gbit_s,
        calibration=None,
        efficiency=efficiency,
    )


def log_residual(
    run: MeasuredRun, efficiency: EfficiencyModel, *, inter_node_gbit_s: float | None = None
) -> float:
    """log(measured step time ÷ predicted step time) = log(predicted ÷ measured throughput)."""
    est = estimate_with(run, efficiency, inter_node_gbit_s)
    return math.log(run.per_gpu(est.tokens_per_second, est.samples_per_second) / run.value)


@dataclass(frozen=True)
class _Row:
    gpu: str
    klass: str
    stack: str
    target: float
    """Measured step time with the estimate's comm, bubble and optimizer taken off."""
    other: float
    attention: float


def _row(run: MeasuredRun) -> _Row | None:
    est = estimate_with(run, UNIT_EFFICIENCY)
    per = run.per_gpu(est.tokens_per_second, est.samples_per_second)
    measured_step = est.step_time_s * per / run.value
    klass = workload_class(run.workload)
    p = est.step_parts
    if not p:  # inference: the whole step scales
        return _Row(run.gpu, klass, run.stack, measured_step, est.step_time_s, 0.0)
    compute = (
        p["matmul_s"] + p["memory_bound_s"] + p["recompute_s"] + p["dequant_s"] + p["attention_s"]
    )
    bubble = (est.step_time_s - est.comm_time_s) / (compute + p["optimizer_s"])
    target = (measured_step - est.comm_time_s) / bubble - p["optimizer_s"]
    if target <= 0:
        return None
    return _Row(run.gpu, klass, run.stack, target, compute - p["attention_s"], p["attention_s"])


_Fit = tuple[float, dict[str, tuple[float, int]], dict[str, dict[str, tuple[float, int]]], float]


def _fit_factors(rows: list[_Row], c: float) -> _Fit:
    """(overall, central by class, by stack and class, in-sample squared error) for attention factor
    ``c``. The central factor weighs every stack once: the stacks with many rows (NeMo, llm-foundry)
    must not make the estimate for a stack nobody measured."""
    logs = [(r.klass, r.stack, math.log(r.target / (r.other + c * r.attention))) for r in rows]
    overall = sum(v for _, _, v in logs) / len(logs)
    by_class: dict[str, tuple[float, int]] = {}
    by_stack: dict[str, dict[str, tuple[float, int]]] = {}
    sse = 0.0
    for klass in sorted({k for k, _, _ in logs}):
        stacks = sorted({st for k, st, _ in logs if k == klass})
        means = {st: [v for k, s2, v in logs if k == klass and s2 == st] for st in stacks}
        # each stack's mean shrunk toward the overall one by its row count, then every stack once
        per_stack = [
            (sum(v) + SHRINK_ROWS * overall) / (len(v) + SHRINK_ROWS) for v in means.values()
        ]
        central = sum(per_stack) / len(per_stack)
        n = sum(len(v) for v in means.values())
        by_class[klass] = (central, n)
        for st, vals in means.items():
            mean = (sum(vals) + SHRINK_ROWS * central) / (len(vals) + SHRINK_ROWS)
            by_stack.setdefault(st, {})[klass] = (mean, len(vals))
            sse += sum((v - mean) ** 2 for v in vals)
    return overall, by_class, by_stack, sse


def fit_efficiency(
    runs: tuple[MeasuredRun, ...] | list[MeasuredRun],
    intervals: dict[str, tuple[float, float]] | None = None,
    run_efficiency: float = 1.0,
) -> EfficiencyModel:
    """Fit the framework factors and the attention factor to ``runs``.

    Per workload class, the central framework factor is the mean over stacks of each stack's
    log-mean of measured ÷ predicted compute time, shrunk toward the overall mean by
    :data:`SHRINK_ROWS` pseudo-rows (every stack counted once); each measured stack also gets its
    own, shrunk toward the central one by :data:`SHRINK_ROWS` pseudo-rows. It is one figure for all GPUs: what differs between GPUs (peaks, achievable matmul fraction, bandwidth) is in the named
    parts. (Per-GPU factors were tried and did worse leaving each source out: they learn the
    source's stack, not the GPU.) The attention factor (one for all GPUs) is the grid value in
    0.5–4 that leaves the smallest squared log residual.
    """
    rows = [x for r in runs if (x := _row(r)) is not None]
    if not rows:
        return EfficiencyModel(intervals=dict(intervals or {}), run_efficiency=run_efficiency)
    best = None
    for i in range(41):
        c = 0.5 * 8 ** (i / 40)
        fit = _fit_factors(rows, c)
        if best is None or fit[3] < best[1][3]:
            best = (c, fit)
    assert best is not None
    c, (overall, by_class, by_stack, _) = best
    from gpuwise.hardware import find_gpu

    gpu_rows: dict[str, int] = {}
    archs: dict[str, dict[str, set[str]]] = {}
    for r in rows:
        gpu_rows[r.gpu] = gpu_rows.get(r.gpu, 0) + 1
        arch = find_gpu(r.gpu).architecture or r.gpu
        archs.setdefault(r.stack, {}).setdefault(r.klass, set()).add(arch)
    return EfficiencyModel(
        by_class=by_class,
        by_stack=by_stack,
        overall=overall,
        rows=len(rows),
        gpu_rows=gpu_rows,
        stack_architectures={
            st: {k: tuple(sorted(a)) for k, a in by.items()} for st, by in archs.items()
        },
        intervals=dict(intervals or {}),
        attention_factor=c,
        run_efficiency=run_efficiency,
    )


# How published pretraining runs are estimated (their parallelism and batch are not all published):
# FSDP, micro-batch 1, no recompute; the cluster network of Meta's Llama 2 clusters, 200 Gbit/s per GPU
# = 1,600 Gbit/s per 8-GPU node (Llama 2 paper, arXiv:2307.09288, Sec. 2.2.1); LLaMA's 2,048 GPUs
# when a run does not say (Touvron et al. 2023, Sec. 2.4).
RUN_INTER_NODE_GBIT_S = 1600.0
RUN_DEFAULT_GPUS = 2048


def run_gpu_hours(run: PublishedRun, efficiency: EfficiencyModel) -> tuple[float, float]:
    """(GPU-hours, goodput) gpuwise predicts for a published pretraining run, with the stack its
    source states (``run.options``) and the defaults elsewhere; a run that states no ZeRO stage gets
    the fastest that fits of FSDP full sharding, hybrid sharding within a node and ZeRO-1, and a
    pipelined run that does not publish its interleaving the fastest of V = 1, 2, 4, 8 chunks per GPU,
    and one that states model parallelism but not its degree the fastest tensor-parallel degree of
    1, 2, 4, 8 (its team tuned what it does not publish; the benchmark prints the range over V)."""
    from gpuwise.estimate.workload import workload_from_options

    stated = dict(run.options)
    layouts: list[dict[str, str]] = (
        [{}]
        if "zero" in stated
        else [{"zero": "3"}, {"zero": "3", "shard_within_node": "on"}, {"zero": "1"}]
    )
    if stated.get("sequence_parallel") == "on" and "tensor_parallel" not in stated:
        # model parallelism stated, its degree not: the fastest that fits
        degrees = [t for t in (1, 2, 4, 8) if run.model.heads % t == 0]
        layouts = [{**lay, "tensor_parallel": str(t)} for lay in layouts for t in degrees]
    pp = int(stated.get("pipeline_parallel", "1"))
    if (
        pp > 1 and "virtual_pipeline" not in stated
    ):  # interleaving not published: the finest that fits
        chunks = [v for v in (1, 2, 4, 8) if pp * v <= run.model.total_layers + 2]
        layouts = [{**lay, "virtual_pipeline": str(v)} for lay in layouts for v in chunks]
    found: list[tuple[bool, float, float]] = []  # (does not fit, GPU-hours, goodput)
    for layout in layouts:
        wl = workload_from_options(
            model=run.model,
            task="pretrain",
            tokens=run.tokens,
            seq_len=str(run.seq_len),
            **{**layout, **stated},
        )
        est = compute_estimate(
            wl,
            run.gpu,
            run.gpus or RUN_DEFAULT_GPUS,
            calibration=None,
            efficiency=replace(efficiency, whole_run_gpu_hours=0.0),
            inter_node_gbit_s=RUN_INTER_NODE_GBIT_S,
        )
        # the run ran: its hours even where gpuwise's memory model says "does not fit" (and so
        # prints none); among unpublished layouts, one that fits is preferred
        hours = run.tokens / est.tokens_per_second / 3600 / est.goodput * est.gpus
        found.append((est.memory.verdict == "does not fit", hours, est.goodput))
    _, hours, gp = min(found)
    return hours, gp


def fit_run_efficiency(runs: list[PublishedRun], efficiency: EfficiencyModel) -> float:
    """Geometric mean of (predicted ÷ reported GPU-hours) with ``efficiency``'s run efficiency at 1,
    over the runs whose stack is published (``options``; all of them when none is)."""
    if not runs:
        return 1.0
    unit = replace(efficiency, run_efficiency=1.0)
    # a run whose source states nothing of its stack is estimated with the defaults, so its ratio
    # measures how far the defaults are from that run, not what the run lost beyond its steps
    runs = [r for r in runs if r.options] or runs
    logs = [math.log(run_gpu_hours(r, unit)[0] / r.gpu_hours) for r in runs]
    return min(1.0, math.exp(sum(logs) / len(logs)))


@functools.lru_cache(maxsize=1)
def residual_intervals() -> dict[str, tuple[float, float]]:
    """class → (p10, p90) time multipliers from ``data/estimate_residuals.csv`` (empty if absent)."""
    try:
        text = (
            resources.files("gpuwise.estimate")
            .joinpath("data/estimate_residuals.csv")
            .read_text("utf-8")
        )
    except FileNotFoundError:
        return {}
    return {
        r["class"]: (math.exp(float(r["log_p10"])), math.exp(float(r["log_p90"])))
        for r in commented_csv(text)
    }


@dataclass(frozen=True)
class InferenceRun:
    """One row of ``measured_inference.csv`` as a workload on ``tp`` GPUs."""

    source_id: str
    gpu: str
    gpus: int
    workload: Workload
    metric: str
    """``out_tok_s`` (generated tokens/s, all sequences) or ``ttft_ms``."""
    value: float
    options: tuple[tuple[str, str], ...]
    """The row's options as typed on the command line."""

    def predicted(self, est: Estimate) -> float:
        """The estimate's figure in this row's metric."""
        assert est.inference is not None
        if self.metric == "ttft_ms":
            return est.inference.time_to_first_token_s * 1000
        return est.samples_per_second * self.workload.output_len

    def passes(self) -> int:
        """Forward passes the measured figure spans: prefill, plus one per generated token."""
        return 1 if self.metric == "ttft_ms" else 1 + self.workload.output_len


@functools.lru_cache(maxsize=1)
def load_inference_runs() -> tuple[InferenceRun, ...]:
    """``measured_inference.csv`` rows, each built from its options by :func:`workload_from_options`."""
    from gpuwise.estimate.workload import workload_from_options

    text = (
        resources.files("gpuwise.estimate")
        .joinpath("data/measured_inference.csv")
        .read_text("utf-8")
    )
    out = []
    for r in commented_csv(text):
        opts = {
            "model": r["model"],
            "task": "inference",
            "precision": r["precision"],
            "micro_batch": r["batch"],
            "prompt_len": r["input_len"],
            "output_len": r["output_len"],
            "tensor_parallel": r["tp"],
        }
        wl = workload_from_options(**opts)
        out.append(
            InferenceRun(
                r["source_id"],
                r["gpu"],
                int(r["tp"]),
                wl,
                r["metric"],
                float(r["value"]),
                tuple(opts.items()),
            )
        )
    return tuple(out)


def fit_layer_overhead(
    runs: list[InferenceRun] | tuple[InferenceRun, ...], efficiency: EfficiencyModel
) -> float:
    """Seconds per layer per forward pass: the median over ``runs`` of (measured time − the roofline
    estimate's time) ÷ (layers × forward passes), at least 0. Measured time: batch × output ÷
    tokens/s for throughput rows, the latency itself for first-token rows."""
    base = replace(efficiency, layer_overhead_s=0.0)
    per_layer = []
    for run in runs:
        est = compute_estimate(run.workload, run.gpu, run.gpus, calibration=None, efficiency=base)
        pred = run.predicted(est)
        if run.metric == "ttft_ms":
            gap = (run.value - pred) / 1000
        else:
            work = run.workload.micro_batch * run.workload.output_len
            gap = work / run.value - work / pred
        per_layer.append(gap / (run.workload.model.total_layers * run.passes()))
    return max(0.0, statistics.median(per_layer)) if per_layer else 0.0


@functools.lru_cache(maxsize=1)
def default_efficiency() -> EfficiencyModel:
    """Fitted to every bundled measured run, with the cross-validated error bars."""
    from gpuwise.estimate.throughput import load_published_runs

    eff = fit_efficiency(load_measured_runs(), residual_intervals())
    eff = replace(eff, run_efficiency=fit_run_efficiency(load_published_runs(), eff))
    return replace(eff, layer_overhead_s=fit_layer_overhead(load_inference_runs(), eff))
