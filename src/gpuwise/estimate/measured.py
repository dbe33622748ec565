"""The measured runs the step-time model is checked against, and what is fitted to them.

``data/measured_throughput.csv`` holds per-step throughputs measured by framework benchmark
tables, papers and vendor reports (one source per ``source_id``); ``data/measured_models.csv`` the
shapes they ran. :func:`load_measured_runs` turns each row into a :class:`Workload` on a GPU setup.

Two things are fitted to them, nothing else:

- the **framework factor** (:class:`EfficiencyModel`): measured step time ÷ the named parts of
  :mod:`.steptime`, averaged in log space per workload class (shrunk toward the overall mean), and
  one **attention factor** (what the FlashAttention efficiency figures miss; each row's kernel
  generation is data, the ``attention`` column);
- the **whole-run efficiency** of published pretraining runs (``data/published_runs.csv``):
  reported GPU-hours ÷ the hours the step-time and failure models give, geometric mean;
- the **p10–p90 error bars**: ± the 80th percentile of the absolute leave-one-source-out log errors
  (per-step set, and whole published runs), written by ``benchmarks/estimate_accuracy.py
  --write-residuals`` to ``data/estimate_residuals.csv`` (cross-validated, not tuned on the rows
  they cover).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import TYPE_CHECKING

from gpuwise.base.datafiles import commented_csv
from gpuwise.estimate.model import ModelConfig, get_preset
from gpuwise.estimate.workload import RECOMPUTE_SEARCH, Workload

if TYPE_CHECKING:
    from gpuwise.estimate.estimator import Estimate
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
_ZERO = {"fsdp": 3, "ddp": 0, "megatron": 1}


@dataclass(frozen=True)
class MeasuredRun:
    """One row of ``measured_throughput.csv`` as a workload on a GPU setup."""

    source_id: str
    """Independent source (the leave-one-source-out fold)."""
    gpu: str
    gpus: int
    workload: Workload
    value: float
    """Measured tokens/s/GPU (``unit == "tok"``) or images/s/GPU (``"img"``)."""
    unit: str
    source: str
    label: str
    """Short description for tables."""

    def per_gpu(self, tokens_per_second: float, samples_per_second: float) -> float:
        """The estimate's figure in this row's unit, per GPU."""
        return (tokens_per_second if self.unit == "tok" else samples_per_second) / self.gpus


@functools.lru_cache(maxsize=1)
def _models() -> dict[str, tuple[ModelConfig, bool]]:
    text = (
        resources.files("gpuwise.estimate").joinpath("data/measured_models.csv").read_text("utf-8")
    )
    out: dict[str, tuple[ModelConfig, bool]] = {}
    for r in commented_csv(text):
        if r["preset"]:
            out[r["name"]] = (get_preset(r["preset"]), False)
            continue
        m = ModelConfig(
            name=r["name"],
            arch="decoder",
            hidden=int(r["hidden"]),
            layers=int(r["layers"]),
            heads=int(r["heads"]),
            kv_heads=int(r["kv_heads"] or 0),
            intermediate=int(r["intermediate"]),
            vocab=int(r["vocab"]),
            gated_mlp=r["gated_mlp"] == "true",
            tied_embeddings=r["tied"] == "true",
            learned_positions=r["learned_positions"] == "true",
            norm=r["norm"],  # type: ignore[arg-type]
            bias=False,
            source=r["source"],
        )
        out[r["name"]] = (m, r["learned_positions"] == "true")
    return out


# Recompute a source leaves unstated: the least of RECOMPUTE_SEARCH (the planner's search order)
# under which the configuration fits, as the planner would choose; the run worked, so one of them
# must have.


def _least_recompute_that_fits(wl: Workload, gpu: str, gpus: int) -> Workload:
    from gpuwise.estimate.estimator import estimate_workload

    candidate = wl
    for mode in RECOMPUTE_SEARCH:
        candidate = replace(wl, grad_ckpt=mode)
        est = estimate_workload(
            candidate, gpu, gpus, calibration=None, suggest=False, efficiency=UNIT_EFFICIENCY
        )
        if est.memory.fits:
            return candidate
    return candidate  # none fits: the least memory (the benchmark then reports it)


@functools.lru_cache(maxsize=1)
def load_measured_runs() -> tuple[MeasuredRun, ...]:
    text = (
        resources.files("gpuwise.estimate")
        .joinpath("data/measured_throughput.csv")
        .read_text("utf-8")
    )
    models = _models()
    runs = []
    for r in commented_csv(text):
        model, learned = models[r["model"]]
        seq = int(r["seq_len"])
        if learned:  # MPT benchmark configs size the position table to the sequence
            model = replace(model, max_positions=seq)
        task = _TASKS[r["task"]]
        kw: dict[str, object] = {}
        if model.is_transformer:
            if task == "inference":
                kw.update(prompt_len=seq, output_len=1)
            else:
                kw["seq_len"] = seq
        wl = Workload(
            model=model,
            task=task,  # type: ignore[arg-type]
            precision=_PRECISIONS[r["precision"]],  # type: ignore[arg-type]
            micro_batch=int(r["micro_batch"] or 1),
            zero=_ZERO[r["parallelism"]],
            global_batch=int(r["global_batch"]) if r["global_batch"] else None,
            grad_ckpt=("none" if r["recompute"] == "unstated" else r["recompute"]),  # type: ignore[arg-type]
            # (unstated: resolved below to the least recompute that fits)
            tensor_parallel=int(r["tp"]),
            pipeline_parallel=int(r["pp"]),
            fused_kernels=r["fused"] == "true",
            flash_attention_version=1 if r["attention"] == "flash1" else 2,
            sequence_parallel=r["parallelism"] == "megatron" and int(r["tp"]) > 1,
            **kw,  # type: ignore[arg-type]
        )
        if r["recompute"] == "unstated":
            wl = _least_recompute_that_fits(wl, r["gpu"], int(r["gpus"]))
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
            )
        )
    return tuple(runs)


def workload_class(wl: Workload) -> str:
    """``transformer-train``, ``transformer-infer``, ``cnn-train`` or ``cnn-infer``."""
    kind = "transformer" if wl.model.is_transformer else "cnn"
    return f"{kind}-{'train' if wl.is_training else 'infer'}"


@dataclass(frozen=True)
class EfficiencyModel:
    """Framework factors (measured ÷ named-parts step time) and error bars per workload class."""

    by_class: dict[str, tuple[float, int]] = field(default_factory=dict)
    """class → (shrunk mean log factor, rows)."""
    overall: float = 0.0
    """Mean log factor over all rows."""
    rows: int = 0
    """Measured rows fitted."""
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    """class → (p10, p90) multipliers of a predicted time (cross-validated residual quantiles)."""
    attention_factor: float = 1.0
    """Multiplies the FlashAttention-2-based attention time (one figure for all GPUs)."""
    run_efficiency: float = 1.0
    """Whole pretraining runs: share of the failure-model goodput that published runs reached
    (evaluation, checkpoint stalls, slower stacks than the benchmark tables); 1.0 = not fitted."""
    whole_run_gpu_hours: float | None = None
    """Stepping GPU-hours from which a pretraining job counts as a whole run (None: the estimator's
    ``WHOLE_RUN_GPU_HOURS``). The published runs are whole runs by definition, so
    :func:`run_gpu_hours` sets 0: their prediction must not jump by ``1 / run_efficiency`` when a
    refit moves a run's stepping estimate across the threshold."""

    def factor(self, gpu: str, klass: str) -> tuple[float, str]:
        """(factor, where it comes from)."""
        if not self.rows:
            return 1.0, "none fitted"
        if klass in self.by_class:
            lf, n = self.by_class[klass]
            return math.exp(lf), f"fitted to {n} measured {klass} runs"
        return math.exp(
            self.overall
        ), f"no measured {klass} run: mean of all {self.rows} measured runs"

    def interval(self, klass: str) -> tuple[float, float] | None:
        """(p10, p90) multipliers of a predicted time for ``klass`` (``pretraining-run`` or a
        workload class; every workload class uses the ``throughput`` range)."""
        return self.intervals.get(klass) or self.intervals.get("throughput")


UNIT_EFFICIENCY = EfficiencyModel()
"""No framework factor (1.0) and no error bars: the named parts alone."""


def _estimate(
    run: MeasuredRun, efficiency: EfficiencyModel, inter_node_gbit_s: float | None = None
) -> Estimate:
    from gpuwise.estimate.estimator import estimate_workload

    kw = {} if inter_node_gbit_s is None else {"inter_node_gbit_s": inter_node_gbit_s}
    return estimate_workload(
        run.workload,
        run.gpu,
        run.gpus,
        calibration=None,
        suggest=False,
        efficiency=efficiency,
        **kw,  # type: ignore[arg-type]
    )


def log_residual(
    run: MeasuredRun, efficiency: EfficiencyModel, *, inter_node_gbit_s: float | None = None
) -> float:
    """log(measured step time ÷ predicted step time) = log(predicted ÷ measured throughput)."""
    est = _estimate(run, efficiency, inter_node_gbit_s)
    return math.log(run.per_gpu(est.tokens_per_second, est.samples_per_second) / run.value)


@dataclass(frozen=True)
class _Row:
    gpu: str
    klass: str
    target: float
    """Measured step time with the estimate's comm, bubble and optimizer taken off."""
    other: float
    attention: float


def _row(run: MeasuredRun) -> _Row | None:
    est = _estimate(run, UNIT_EFFICIENCY)
    per = run.per_gpu(est.tokens_per_second, est.samples_per_second)
    measured_step = est.step_time_s * per / run.value
    klass = workload_class(run.workload)
    p = est.step_parts
    if not p:  # inference: the whole step scales
        return _Row(run.gpu, klass, measured_step, est.step_time_s, 0.0)
    compute = (
        p["matmul_s"] + p["memory_bound_s"] + p["recompute_s"] + p["dequant_s"] + p["attention_s"]
    )
    bubble = (est.step_time_s - est.comm_time_s) / (compute + p["optimizer_s"])
    target = (measured_step - est.comm_time_s) / bubble - p["optimizer_s"]
    if target <= 0:
        return None
    return _Row(run.gpu, klass, target, compute - p["attention_s"], p["attention_s"])


def _fit_factors(rows: list[_Row], c: float) -> tuple[float, dict[str, tuple[float, int]], float]:
    logs = [(r.klass, math.log(r.target / (r.other + c * r.attention))) for r in rows]
    overall = sum(v for _, v in logs) / len(logs)
    by_class: dict[str, tuple[float, int]] = {}
    sse = 0.0
    for klass in sorted({k for k, _ in logs}):
        vals = [v for k, v in logs if k == klass]
        mean = (sum(vals) + SHRINK_ROWS * overall) / (len(vals) + SHRINK_ROWS)
        by_class[klass] = (mean, len(vals))
        sse += sum((v - mean) ** 2 for v in vals)
    return overall, by_class, sse


def fit_efficiency(
    runs: tuple[MeasuredRun, ...] | list[MeasuredRun],
    intervals: dict[str, tuple[float, float]] | None = None,
    run_efficiency: float = 1.0,
) -> EfficiencyModel:
    """Fit the framework factors and the attention factor to ``runs``.

    Per workload class, the framework factor is the log-mean of measured ÷ predicted compute time,
    shrunk toward the overall mean by :data:`SHRINK_ROWS` pseudo-rows. It is one figure for all
    GPUs: what differs between GPUs (peaks, achievable matmul fraction, bandwidth) is in the named
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
        if best is None or fit[2] < best[1][2]:
            best = (c, fit)
    assert best is not None
    c, (overall, by_class, _) = best
    return EfficiencyModel(
        by_class=by_class,
        overall=overall,
        rows=len(rows),
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
    """(GPU-hours, goodput) gpuwise predicts for a published pretraining run."""
    from gpuwise.estimate.estimator import estimate_workload

    wl = Workload(model=run.model, task="pretrain", tokens=run.tokens, seq_len=run.seq_len, zero=3)
    est = estimate_workload(
        wl,
        run.gpu,
        run.gpus or RUN_DEFAULT_GPUS,
        calibration=None,
        suggest=False,
        efficiency=replace(efficiency, whole_run_gpu_hours=0.0),
        inter_node_gbit_s=RUN_INTER_NODE_GBIT_S,
    )
    assert est.gpu_hours is not None
    return est.gpu_hours, est.goodput


def fit_run_efficiency(runs: list[PublishedRun], efficiency: EfficiencyModel) -> float:
    """Geometric mean of (predicted ÷ reported GPU-hours) with ``efficiency``'s run efficiency at 1."""
    if not runs:
        return 1.0
    unit = replace(efficiency, run_efficiency=1.0)
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


@functools.lru_cache(maxsize=1)
def default_efficiency() -> EfficiencyModel:
    """Fitted to every bundled measured run, with the cross-validated error bars."""
    from gpuwise.estimate.throughput import load_published_runs

    eff = fit_efficiency(load_measured_runs(), residual_intervals())
    return replace(eff, run_efficiency=fit_run_efficiency(load_published_runs(), eff))
