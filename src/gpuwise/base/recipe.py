"""One schema across the loop: what a plan promises, what a run measured.

``gpuwise plan --save plan.json`` writes a :class:`PlanFile`: the chosen option's whole
:class:`Recipe` (model, task, batch layout, parallelism, precision, where it runs) and the figures
it :class:`Expected` (throughput, step time, memory, hours, dollars, each with its p10–p90 band).
Every ``--export`` ships that file into the job. ``gpuwise run --plan`` and
``gpuwise.train.plan_recipe()`` read it back; each attempt of a run leaves a :class:`RunRecord`
beside its checkpoints; ``gpuwise report --runs`` puts the two side by side and ``gpuwise
calibrate --from-runs`` turns records into the next plan's calibration.

The types live in the base layer so training code reads them without importing the planner, and
the plan file, the run record and the report cannot drift apart. Pure standard library.

Files are parsed by :func:`parse_plan_file` / :func:`parse_run_record`, which check every field's
type and name the file and field when one is wrong (a hand-edited or truncated file is refused,
not half-read). Unknown fields are ignored, so a newer gpuwise's files stay readable.
"""

from __future__ import annotations

import hashlib
import json
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from gpuwise.errors import InputError

PLAN_SCHEMA = "gpuwise.plan/1"
"""The ``schema`` value of a plan file this gpuwise writes and reads."""
RUN_SCHEMA = "gpuwise.run/1"
"""The ``schema`` value of a run record this gpuwise writes and reads."""
RUNS_FOLDER = "gpuwise-runs"
"""The folder under a run's checkpoint directory that holds its run records, one JSON per attempt."""

CapacityType = Literal["on-demand", "spot", "reserved", "unknown"]


@dataclass(frozen=True)
class Band:
    """A figure with the estimator's range around it."""

    expected: float
    """The central estimate."""
    p10: float | None = None
    """Optimistic end (10th percentile); None when the estimator gives no range."""
    p90: float | None = None
    """Pessimistic end (90th percentile); None when the estimator gives no range."""

    def holds(self, actual: float) -> bool | None:
        """Whether ``actual`` lies in [p10, p90] (either order); None without a range."""
        if self.p10 is None or self.p90 is None:
            return None
        low, high = sorted((self.p10, self.p90))
        return low <= actual <= high

    def error(self, actual: float) -> float | None:
        """Signed relative error of the estimate: (expected − actual) / actual; + = optimistic
        for a speed figure, pessimistic for a time or cost figure. None when ``actual`` is 0."""
        return None if actual == 0 else (self.expected - actual) / actual


@dataclass(frozen=True)
class Recipe:
    """How the job runs: everything a training script needs to run exactly what was priced."""

    model: str
    """The model's name: a preset (``llama-3.1-8b``) or the name given to a config.json."""
    task: str
    """pretrain, finetune, lora, qlora or inference."""
    seq_len: int | None
    """Tokens per sequence (None where the task has none, e.g. an image model)."""
    tokens: float | None
    """Training tokens of the whole run (None when the run is sized in samples)."""
    steps: int | None
    """Optimizer steps of the whole run: tokens ÷ (global_batch × seq_len), rounded up."""
    global_batch: int | None
    """Sequences per optimizer step = micro_batch × accumulation × data_parallel."""
    micro_batch: int
    """Sequences per GPU per forward/backward pass."""
    accumulation: int
    """Micro-batches per optimizer step on each data-parallel rank."""
    data_parallel: int
    """Model replicas (world_size ÷ tensor × pipeline × context parallel)."""
    zero: int
    """ZeRO stage: 0 = DDP, 1/2 = sharded optimizer (and gradients), 3 = FSDP full shard."""
    tensor_parallel: int
    pipeline_parallel: int
    context_parallel: int
    expert_parallel: int
    recompute: str
    """Activation recomputation: none, selective or full."""
    precision: str
    """Compute precision (bf16, fp16, fp8, fp32)."""
    master_weights: str
    """Precision of the optimizer's copy of the weights."""
    optimizer: str
    lora_rank: int | None
    """LoRA/QLoRA adapter rank; None for other tasks."""
    lora_targets: str | None
    """Which layers get adapters; None for other tasks."""
    world_size: int
    """GPUs in the whole job = nodes × gpus_per_node."""
    gpus_per_node: int
    nodes: int
    gpu: str
    """The GPU model as gpuwise names it (``H100``, ``A100-80GB``)."""
    instance_type: str | None
    cloud: str | None
    region: str | None
    capacity_type: CapacityType
    """How the plan priced the nodes: on-demand, spot or reserved."""
    settings_text: str = ""
    """The settings in words, as the plan printed them."""
    model_config: Mapping[str, Any] | None = None
    """The model's architecture as the planner read it (preset figures or config.json contents)."""

    @property
    def sharding(self) -> str:
        """``ddp``, ``zero-1``, ``zero-2`` or ``fsdp-full-shard``: the data-parallel mode in words."""
        return {0: "ddp", 1: "zero-1", 2: "zero-2"}.get(self.zero, "fsdp-full-shard")

    @property
    def tokens_per_step(self) -> int | None:
        """Tokens one optimizer step trains on (None without a sequence length or batch)."""
        if self.global_batch is None or self.seq_len is None:
            return None
        return self.global_batch * self.seq_len


@dataclass(frozen=True)
class Expected:
    """What the plan expects the job to measure."""

    tokens_per_s_per_gpu: Band | None
    """Training tokens per second per GPU (None for a model with no token figure)."""
    step_s: Band
    """Seconds per optimizer step."""
    peak_memory_gib_per_gpu: float
    """Peak memory the estimator expects on each GPU, GiB."""
    memory_capacity_gib: float
    """Usable memory of one GPU as the plan counted it, GiB."""
    hours: Band
    """Wall-clock hours of the whole run, start-up and expected interruptions included."""
    cost_usd: Band
    """Dollars for the whole run at the planned price."""
    price_usd_per_hour: float
    """Price of all nodes together, the plan's capacity type."""
    failure_free_hours: float
    """Hours without interruptions and checkpoints."""
    startup_hours: float = 0.0
    """Provisioning, image and weight downloads and start-up, included in :attr:`hours` and
    :attr:`cost_usd`. A run's own clock starts after them, so plan-vs-actual leaves them out."""


@dataclass(frozen=True)
class PlanFile:
    """A plan as a job runs it: the recipe, what it expects, and where the figures came from."""

    plan_id: str
    """Stable id of the recipe and its figures (same plan → same id); labels runs and metrics."""
    recipe: Recipe
    expected: Expected
    created: str
    """When the plan was made, ISO 8601 UTC."""
    gpuwise_version: str
    catalog_as_of: str | None = None
    """The oldest price date behind the chosen option, as the catalog says."""
    calibration: str | None = None
    """The calibration the estimate used, in words (None: the bundled model, uncalibrated)."""
    calibration_runs: tuple[str, ...] = ()
    """Run ids whose measurements the calibration rests on (``calibrate --from-runs``)."""
    notes: tuple[str, ...] = ()
    """What the plan assumed that the job should know (defaults, placeholders)."""
    schema: str = PLAN_SCHEMA

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = _plain(asdict(self))
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"


@dataclass(frozen=True)
class RunRecord:
    """One attempt of one run, as it happened; written beside the checkpoints when it ends."""

    run_id: str
    """The run (all attempts of one job share it)."""
    attempt: int
    """0 for the first start, +1 for each restart."""
    started: str
    """ISO 8601 UTC."""
    ended: str | None
    """ISO 8601 UTC; None while the attempt is still running."""
    outcome: str
    """done, pilot, preempted (exit 75), failed, or running."""
    plan_id: str | None = None
    pilot: bool = False
    """True when the attempt was a pilot (``gpuwise run --pilot N``)."""
    plan_mismatch: tuple[str, ...] = ()
    """What differed from the plan and was allowed (``--allow-plan-mismatch``)."""
    gpu: str | None = None
    """The GPU torch ran on, by gpuwise's name where it knows the model (``H100``), else torch's
    device name; None without CUDA (the plan's ``recipe.gpu`` is what was planned)."""
    world_size: int = 1
    """Processes (GPUs) of the attempt."""
    nodes: int = 1
    gpus_per_node: int = 1
    instance_type: str | None = None
    """``GPUWISE_INSTANCE_TYPE``, else the plan's; None: unknown."""
    cloud: str | None = None
    """``GPUWISE_CLOUD``, else the plan's; None: unknown (or ``GPUWISE_CLOUD=none``)."""
    region: str | None = None
    """``GPUWISE_REGION``, else the plan's; None: unknown."""
    capacity_type: CapacityType = "unknown"
    """``GPUWISE_CAPACITY_TYPE``, else the plan's."""
    micro_batch: int | None = None
    """Sequences per GPU per pass as run (the loader's batch size)."""
    accumulation: int | None = None
    """Micro-batches per optimizer step per replica as run."""
    global_batch: int | None = None
    """micro_batch × accumulation × data-parallel replicas, as run."""
    seq_len: int | None = None
    """The plan's sequence length (None without a plan)."""
    step_start: int = 0
    """The step the attempt resumed from (0 for a fresh start)."""
    step_end: int = 0
    """The last step the attempt finished."""
    steps_measured: int = 0
    """Optimizer steps timed (after warm-up) for the throughput figures."""
    warmup_steps: int = 0
    """The attempt's first optimizer steps, not timed (start-up, first allocations, first save)."""
    tokens_per_step: int | None = None
    """Tokens one optimizer step trained on, all replicas together: reported by the script
    (``run.step(loss, tokens=...)``), else the plan's global batch × sequence length."""
    tokens_per_s_per_gpu: float | None = None
    step_s: float | None = None
    """Median seconds per optimizer step after warm-up."""
    peak_memory_gib: float | None = None
    """Peak GPU memory allocated by torch on the busiest rank, GiB (None without CUDA)."""
    peak_reserved_gib: float | None = None
    """Peak GPU memory reserved by torch's allocator on the busiest rank, GiB (None without CUDA)."""
    checkpoint_stall_s: float = 0.0
    """Seconds training waited for checkpoints in this attempt."""
    notices: int = 0
    """Preemption notices seen (cloud metadata or signal)."""
    preemptions: int = 0
    """Times this attempt ended by preemption (0 or 1)."""
    restarts: int = 0
    """1 when ``gpuwise run`` started this attempt as a restart of a crashed or preempted one,
    else 0: a run's restarts are the sum over its records."""
    steps_lost: int = 0
    """Steps trained but not checkpointed when the attempt ended."""
    gpu_hours: float = 0.0
    """Wall-clock hours of the attempt × the GPUs (ranks) it ran on."""
    price_usd_per_hour: float | None = None
    """Price of all nodes together (plan's, or the one the node reports)."""
    cost_usd: float | None = None
    """GPU-hours × the price of one GPU-hour (None without a price)."""
    schema: str = RUN_SCHEMA

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = _plain(asdict(self))
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"


def plan_id_for(recipe: Recipe, expected: Expected) -> str:
    """``plan-`` and 12 hex digits of the recipe's and the figures' canonical JSON."""
    doc = json.dumps(
        _plain({"recipe": asdict(recipe), "expected": asdict(expected)}), sort_keys=True
    )
    return "plan-" + hashlib.sha256(doc.encode()).hexdigest()[:12]


# -- reading ---------------------------------------------------------------------------------

T = TypeVar("T")


def parse_plan_file(text: str | bytes, source: str = "plan file") -> PlanFile:
    """The plan file in ``text``; InputError names the file and the field that is wrong."""
    doc = _load_json(text, source)
    _check_schema(doc, PLAN_SCHEMA, source, "gpuwise plan ... --save plan.json")
    return _build(PlanFile, doc, source)


def parse_run_record(text: str | bytes, source: str = "run record") -> RunRecord:
    """The run record in ``text``; InputError names the file and the field that is wrong."""
    doc = _load_json(text, source)
    _check_schema(doc, RUN_SCHEMA, source, "let `gpuwise run` write it; do not edit it by hand")
    return _build(RunRecord, doc, source)


def load_plan_file(path: str | Path) -> PlanFile:
    """Read and parse a local plan file (InputError when it is missing or unreadable)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise InputError(
            f"no plan file at {p}", hint="write one with `gpuwise plan ... --save plan.json`"
        ) from None
    except IsADirectoryError:
        raise InputError(
            f"{p} is a folder, not a plan file", hint="give the plan.json file"
        ) from None
    except OSError as exc:
        raise InputError(f"cannot read {p}: {exc.strerror}", hint="check the path") from None
    return parse_plan_file(raw, str(p))


def _load_json(text: str | bytes, source: str) -> Mapping[str, Any]:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise InputError(
                f"{source} is not UTF-8 text", hint="give the JSON file gpuwise wrote"
            ) from None
    text = text.removeprefix("\ufeff")
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{source} is not valid JSON (line {exc.lineno}: {exc.msg})",
            hint="give the JSON file gpuwise wrote, unedited",
        ) from None
    except ValueError as exc:  # NaN / Infinity
        raise InputError(f"{source}: {exc}", hint="numbers must be finite") from None
    if not isinstance(doc, dict):
        raise InputError(f"{source} is not a JSON object", hint="give the JSON file gpuwise wrote")
    return doc


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number gpuwise accepts")


def _check_schema(doc: Mapping[str, Any], want: str, source: str, fix: str) -> None:
    got = doc.get("schema")
    if got != want:
        raise InputError(
            f"{source} has schema {got!r}, not {want!r}",
            hint=f"give a file this gpuwise wrote ({fix})",
        )


def _build(cls: type[T], doc: Any, where: str) -> T:
    if not isinstance(doc, Mapping):
        raise InputError(f"{where} is not an object", hint="give the JSON file gpuwise wrote")
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name not in doc:
            if f.default is MISSING and f.default_factory is MISSING:
                raise InputError(
                    f"{where}: field {f.name!r} is missing", hint="give the JSON file gpuwise wrote"
                )
            continue
        values[f.name] = _value(hints[f.name], doc[f.name], f"{where}: {f.name}")
    return cls(**values)


def _value(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _value(inner[0], value, where)
    if origin is Literal:
        if value not in args:
            raise InputError(
                f"{where} is {value!r}", hint=f"use one of {', '.join(map(str, args))}"
            )
        return value
    if isinstance(tp, type) and is_dataclass(tp):
        return _build(tp, value, where)
    if tp is bool:
        if not isinstance(value, bool):
            raise InputError(f"{where} is {value!r}, not true/false", hint="give true or false")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(
                f"{where} is {value!r}, not a whole number", hint="give a whole number"
            )
        return value
    if tp is float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise InputError(f"{where} is {value!r}, not a number", hint="give a finite number")
        return float(value)
    if tp is str:
        if not isinstance(value, str) or "\x00" in value:
            raise InputError(f"{where} is {value!r}, not text", hint="give a string")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise InputError(f"{where} is {value!r}, not a list", hint="give a JSON list")
        return tuple(_value(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is Mapping or tp is Mapping:
        if not isinstance(value, dict):
            raise InputError(f"{where} is {value!r}, not an object", hint="give a JSON object")
        return value
    raise TypeError(f"recipe schema: no reader for {tp!r}")  # a bug in this module, not input


def _plain(obj: Any) -> Any:
    """Tuples → lists and non-finite floats → None, so the JSON is strict (no NaN)."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
