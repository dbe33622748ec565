"""Hugging Face Trainer: notice-triggered save and stop (see :mod:`gpuwise.train.integrations`).

In a planned job (``gpuwise run --plan``) the callback applies at the Trainer's start what the
Trainer still reads later: ``gradient_accumulation_steps`` (the accumulation that keeps the
planned global batch on this world size) and activation checkpointing (when the plan recomputes
and the model supports it). The per-device batch size and precision are fixed when the Trainer is
made: :func:`plan_training_args` applies them to the arguments beforehand; whatever still
differs, and the rest of the recipe (sharding, parallelism, LoRA ...), is named in one WARNING.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from gpuwise.errors import MissingExtraError
from gpuwise.train.integrations import _Watching
from gpuwise.train.plan import job_plan
from gpuwise.train.plan_frameworks import FrameworkPlan, framework_plan, warn_not_applied
from gpuwise.train.preemption import PreemptionWatcher

log = logging.getLogger(__name__)

try:
    from transformers import TrainerCallback as _HFCallback
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingExtraError("transformers", "hf") from exc


class HFPreemptionCallback(_HFCallback, _Watching):
    """On a notice: ``control.should_save`` (the Trainer writes ``checkpoint-N`` as usual) and
    ``control.should_training_stop``. An AWS rebalance recommendation only asks for a save."""

    def __init__(self, watcher: PreemptionWatcher | None = None) -> None:
        super().__init__()
        self._init_watcher(watcher)

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        plan = job_plan()
        if plan is not None:
            _apply_plan(framework_plan(plan, int(args.world_size)), args, kwargs.get("model"))

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._start()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.watcher.should_stop() and not self.preempted:
            control.should_save = True
            control.should_training_stop = True
            self.preempted = True
        elif self.watcher.save_requested():
            control.should_save = True
            self.watcher.mark_saved()
        else:
            self._progress(int(state.global_step))
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._progress(
            int(state.global_step),
            "preempted" if self.preempted else None,
            committed=int(state.global_step),
        )

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._stop()
        self._progress(int(state.global_step), "preempted" if self.preempted else "done")


def plan_training_args(args: Any) -> Any:
    """``args`` (``TrainingArguments``) with the plan's per-device batch size, accumulation,
    precision and activation checkpointing; ``args`` itself outside a planned job."""
    plan = job_plan()
    if plan is None:
        return args
    fp = framework_plan(plan, int(args.world_size))
    changes: dict[str, Any] = {
        "per_device_train_batch_size": fp.micro_batch,
        "gradient_accumulation_steps": fp.accumulation,
    }
    if fp.precision in ("bf16", "fp16", "fp32"):
        changes.update(bf16=fp.precision == "bf16", fp16=fp.precision == "fp16")
    if fp.gradient_checkpointing:
        changes[_checkpointing_field(args)] = True
    return dataclasses.replace(args, **changes)


def _checkpointing_field(args: Any) -> str:
    """transformers 5 calls it ``activation_checkpointing``, 4 ``gradient_checkpointing``."""
    return (
        "activation_checkpointing"
        if hasattr(args, "activation_checkpointing")
        else ("gradient_checkpointing")
    )


def _apply_plan(fp: FrameworkPlan, args: Any, model: Any) -> None:
    """What the Trainer still reads after its start, set on ``args``; the rest named."""
    differs: list[str] = []
    if args.gradient_accumulation_steps != fp.accumulation:
        args.gradient_accumulation_steps = fp.accumulation
    field = _checkpointing_field(args)
    if fp.gradient_checkpointing and not getattr(args, field):
        if hasattr(model, "activation_checkpointing_enable") or hasattr(
            model, "gradient_checkpointing_enable"
        ):
            setattr(args, field, True)
        else:
            differs.append(f"activation checkpointing ({type(model).__name__} has no switch)")
    if args.per_device_train_batch_size != fp.micro_batch:
        differs.append(
            f"per_device_train_batch_size={fp.micro_batch}, the Trainer runs "
            f"{args.per_device_train_batch_size} (use plan_training_args(args))"
        )
    running = "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32"
    if running != fp.precision:
        differs.append(f"precision {fp.precision}, the Trainer runs {running}")
    log.info(
        "gpuwise: plan %s applied: gradient_accumulation_steps=%d",
        fp.plan_id,
        fp.accumulation,
    )
    warn_not_applied(fp, "Hugging Face", differs)
