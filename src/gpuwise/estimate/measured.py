"""The measured runs the step-time model is checked against, and what is fitted to them.

``data/measured_throughput.csv`` holds per-step throughputs measured by framework benchmark
tables, papers and vendor reports (one source per ``source_id``); ``data/measured_models.csv`` the
shapes they ran. :func:`load_measured_runs` turns each row into a :class:`Workload` on a GPU setup.

Two things are fitted to them, nothing else:

- the **framework factor** (:class:`EfficiencyModel`): measured step time ÷ the named parts of
  :mod:`.steptime`, averaged in log space per GPU and workload class, shrunk toward the class mean
  and the class mean toward the overall mean (a GPU with few rows borrows from the rest);
- the **p10–p90 error bars**: quantiles of the leave-one-source-out residuals per workload class,
  written by ``benchmarks/estimate_accuracy.py --write-residuals`` to
  ``data/estimate_residuals.csv`` (cross-validated, so they are not tuned on the rows they cover).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from importlib import resources

from gpuwise.datafiles import commented_csv
from gpuwise.estimate.model import ModelConfig, get_preset
from gpuwise.estimate.workload import Workload

# Pseudo-rows a GPU's (or class's) mean is shrunk toward its parent with.
SHRINK_ROWS = 2.0
_TASKS = {"pretrain": "pretrain", "sft": "finetune", "lora": "lora", "qlora": "qlora", "infer": "inference"}
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
    text = resources.files("gpuwise.estimate").joinpath("data/measured_models.csv").read_text("utf-8")
    out: dict[str, tuple[ModelConfig, bool]] = {}
    for r in commented_csv(text):
        if r["preset"]:
            out[r["name"]] = (get_preset(r["preset"]), False)
            continue
        m = ModelConfig(name=r["name"], arch="decoder", hidden=int(r["hidden"]), layers=int(r["layers"]),
                        heads=int(r["heads"]), kv_heads=int(r["kv_heads"] or 0), intermediate=int(r["intermediate"]),
                        vocab=int(r["vocab"]), gated_mlp=r["gated_mlp"] == "true", tied_embeddings=r["tied"] == "true",
                        learned_positions=r["learned_positions"] == "true", norm=r["norm"],  # type: ignore[arg-type]
                        bias=False, source=r["source"])
        out[r["name"]] = (m, r["learned_positions"] == "true")
    return out


@functools.lru_cache(maxsize=1)
def load_measured_runs() -> tuple[MeasuredRun, ...]:
    text = resources.files("gpuwise.estimate").joinpath("data/measured_throughput.csv").read_text("utf-8")
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
        wl = Workload(model=model, task=task,  # type: ignore[arg-type]
                      precision=_PRECISIONS[r["precision"]],  # type: ignore[arg-type]
                      micro_batch=int(r["micro_batch"] or 1), zero=_ZERO[r["parallelism"]],
                      global_batch=int(r["global_batch"]) if r["global_batch"] else None,
                      grad_ckpt=("none" if r["recompute"] == "unstated" else r["recompute"]),  # type: ignore[arg-type]
                      tensor_parallel=int(r["tp"]), pipeline_parallel=int(r["pp"]),
                      fused_kernels=r["fused"] == "true",
                      sequence_parallel=r["parallelism"] == "megatron" and int(r["tp"]) > 1, **kw)  # type: ignore[arg-type]
        label = f"{r['model']} {r['task']} s{seq} mb{r['micro_batch'] or '?'} {r['precision']} {r['recompute']}"
        runs.append(MeasuredRun(source_id=r["source_id"], gpu=r["gpu"], gpus=int(r["gpus"]), workload=wl,
                                value=float(r["value"]), unit=r["unit"], source=r["source"], label=label))
    return tuple(runs)


def workload_class(wl: Workload) -> str:
    """``transformer-train``, ``transformer-infer``, ``cnn-train`` or ``cnn-infer``."""
    kind = "transformer" if wl.model.is_transformer else "cnn"
    return f"{kind}-{'train' if wl.is_training else 'infer'}"


@dataclass(frozen=True)
class EfficiencyModel:
    """Framework factors (measured ÷ named-parts step time) and error bars per workload class."""

    by_gpu: dict[tuple[str, str], tuple[float, int]] = field(default_factory=dict)
    """(GPU, class) → (shrunk mean log factor, rows)."""
    by_class: dict[str, tuple[float, int]] = field(default_factory=dict)
    """class → (shrunk mean log factor, rows)."""
    overall: float = 0.0
    """Mean log factor over all rows."""
    rows: int = 0
    """Measured rows fitted."""
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    """class → (p10, p90) multipliers of a predicted time (cross-validated residual quantiles)."""

    def factor(self, gpu: str, klass: str) -> tuple[float, str]:
        """(factor, where it comes from)."""
        if not self.rows:
            return 1.0, "none fitted"
        if (gpu, klass) in self.by_gpu:
            lf, n = self.by_gpu[(gpu, klass)]
            return math.exp(lf), f"fitted to {n} measured {klass} runs on {gpu} (of {self.rows})"
        if klass in self.by_class:
            lf, n = self.by_class[klass]
            return math.exp(lf), f"no measured {klass} run on {gpu}: mean of {n} {klass} runs on other GPUs"
        return math.exp(self.overall), f"no measured {klass} run: mean of all {self.rows} measured runs"

    def interval(self, klass: str) -> tuple[float, float] | None:
        return self.intervals.get(klass)


UNIT_EFFICIENCY = EfficiencyModel()
"""No framework factor (1.0) and no error bars: the named parts alone."""


def log_residual(run: MeasuredRun, efficiency: EfficiencyModel, *, inter_node_gbit_s: float | None = None) -> float:
    """log(measured step time ÷ predicted step time) = log(predicted ÷ measured throughput)."""
    from gpuwise.estimate.estimator import estimate_workload

    kw = {} if inter_node_gbit_s is None else {"inter_node_gbit_s": inter_node_gbit_s}
    est = estimate_workload(run.workload, run.gpu, run.gpus, calibration=None, suggest=False,
                            efficiency=efficiency, **kw)  # type: ignore[arg-type]
    return math.log(run.per_gpu(est.tokens_per_second, est.samples_per_second) / run.value)


def fit_efficiency(runs: tuple[MeasuredRun, ...] | list[MeasuredRun],
                   intervals: dict[str, tuple[float, float]] | None = None) -> EfficiencyModel:
    """Fit the framework factors to ``runs`` (log-mean per GPU and class, shrunk toward the parents)."""
    logs = [(r.gpu, workload_class(r.workload), log_residual(r, UNIT_EFFICIENCY)) for r in runs]
    if not logs:
        return EfficiencyModel(intervals=dict(intervals or {}))
    overall = sum(v for _, _, v in logs) / len(logs)
    by_class: dict[str, tuple[float, int]] = {}
    for klass in sorted({c for _, c, _ in logs}):
        vals = [v for _, c, v in logs if c == klass]
        by_class[klass] = ((sum(vals) + SHRINK_ROWS * overall) / (len(vals) + SHRINK_ROWS), len(vals))
    by_gpu: dict[tuple[str, str], tuple[float, int]] = {}
    for key in sorted({(g, c) for g, c, _ in logs}):
        vals = [v for g, c, v in logs if (g, c) == key]
        parent = by_class[key[1]][0]
        by_gpu[key] = ((sum(vals) + SHRINK_ROWS * parent) / (len(vals) + SHRINK_ROWS), len(vals))
    return EfficiencyModel(by_gpu=by_gpu, by_class=by_class, overall=overall, rows=len(logs),
                           intervals=dict(intervals or {}))


@functools.lru_cache(maxsize=1)
def residual_intervals() -> dict[str, tuple[float, float]]:
    """class → (p10, p90) time multipliers from ``data/estimate_residuals.csv`` (empty if absent)."""
    try:
        text = resources.files("gpuwise.estimate").joinpath("data/estimate_residuals.csv").read_text("utf-8")
    except FileNotFoundError:
        return {}
    return {r["class"]: (math.exp(float(r["log_p10"])), math.exp(float(r["log_p90"]))) for r in commented_csv(text)}


@functools.lru_cache(maxsize=1)
def default_efficiency() -> EfficiencyModel:
    """Fitted to every bundled measured run, with the cross-validated error bars."""
    return fit_efficiency(load_measured_runs(), residual_intervals())
