"""What an exported job reads back: the settings the plan searched, from ``GPUWISE_*`` variables.

The SkyPilot task (``envs``) and the Kubernetes manifests (``env``) set one variable per setting of
the winning option (:data:`gpuwise.planner.export.SETTINGS_ENV`). A training script reads them with
:func:`job_settings` and applies them itself (its own flags, its FSDP/ZeRO config)::

    from gpuwise.planner import job_settings

    s = job_settings()            # all None outside an exported job
    micro_batch = s.micro_batch or 4
    accumulation = s.accumulation or 1

``examples/train_tiny.py``-style scripts that take flags can instead be given them in ``--run``
(``--micro-batch "$GPUWISE_MICRO_BATCH"``): the export passes the command as written, so the
launcher's shell expands the variables. Pure standard library: safe to import in the job.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from gpuwise.base import settings
from gpuwise.errors import InputError


@dataclass(frozen=True)
class JobSettings:
    """The plan's settings for this job; None where the export did not set one."""

    checkpoint_dir: str | None
    """``GPUWISE_CHECKPOINT_DIR``: where checkpoints go (the mounted bucket or volume)."""
    zero: int | None
    """``GPUWISE_ZERO``: ZeRO stage (0 = DDP, 3 = FSDP full shard)."""
    recompute: str | None
    """``GPUWISE_RECOMPUTE``: none, selective or full activation recomputation."""
    micro_batch: int | None
    """``GPUWISE_MICRO_BATCH``: sequences per GPU per forward/backward pass."""
    accumulation: int | None
    """``GPUWISE_ACCUMULATION``: micro-batches per optimizer step on each data-parallel rank."""
    global_batch: int | None
    """``GPUWISE_GLOBAL_BATCH``: sequences per optimizer step (micro × accumulation × data parallel)."""
    data_parallel: int | None
    """``GPUWISE_DATA_PARALLEL``: model replicas the plan assumed."""
    tensor_parallel: int | None
    """``GPUWISE_TENSOR_PARALLEL``: GPUs one model copy is split over."""
    text: str | None
    """``GPUWISE_SETTINGS``: the settings in words, as the plan printed them."""


def _int(env: Mapping[str, str], name: str) -> int | None:
    raw = (settings.text(name, env) or "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InputError(
            f"{name}={raw!r} is not a whole number",
            hint=f"unset {name} or set it to the value the plan exported",
        ) from None
    if value < 0:
        raise InputError(f"{name}={raw!r} is negative", hint=f"unset {name} or give a value ≥ 0")
    return value


def job_settings(environ: Mapping[str, str] | None = None) -> JobSettings:
    """The exported settings from ``environ`` (default ``os.environ``); InputError names a bad one."""
    env = os.environ if environ is None else environ
    return JobSettings(
        checkpoint_dir=settings.text("GPUWISE_CHECKPOINT_DIR", env),
        zero=_int(env, "GPUWISE_ZERO"),
        recompute=settings.text("GPUWISE_RECOMPUTE", env),
        micro_batch=_int(env, "GPUWISE_MICRO_BATCH"),
        accumulation=_int(env, "GPUWISE_ACCUMULATION"),
        global_batch=_int(env, "GPUWISE_GLOBAL_BATCH"),
        data_parallel=_int(env, "GPUWISE_DATA_PARALLEL"),
        tensor_parallel=_int(env, "GPUWISE_TENSOR_PARALLEL"),
        text=settings.text("GPUWISE_SETTINGS", env),
    )
