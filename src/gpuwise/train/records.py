"""Run records: every attempt of a run leaves one JSON beside its checkpoints.

``<checkpoint dir>/gpuwise-runs/<run id>-attempt<NNN>.json`` (:data:`~gpuwise.base.recipe.
RUNS_FOLDER`), a :class:`~gpuwise.base.recipe.RunRecord`, written by rank 0 only, atomically
(local disk: temporary name and rename; object stores: one PUT) through the checkpoint storage
(:class:`~gpuwise.train.Storage`: local, S3, GCS). It is written when the attempt starts
(``outcome: "running"``) and again when it ends, so an attempt killed without a chance to write
keeps its start. ``gpuwise run`` names the run (``GPUWISE_RUN_ID``) and counts attempts
(``GPUWISE_ATTEMPT``); a name already taken moves to the next free attempt number, so attempts
never overwrite each other.

Timing: the attempt's first :data:`DEFAULT_WARMUP_STEPS` optimizer steps (``GPUWISE_PILOT_WARMUP``)
are warm-up and not timed; each later step is the wall time from the end of the previous step to
the end of this one (data loading, forward, backward, optimizer and any checkpoint stall). The
record holds their median, tokens per second per GPU (tokens per step ÷ median step time ÷ GPUs),
peak GPU memory (``torch.cuda.max_memory_allocated``/``max_memory_reserved``, the busiest rank;
None without CUDA), checkpoint stall, notices, steps lost, GPU-hours and dollars.

A pilot (``gpuwise run --pilot N``, ``GPUWISE_PILOT_STEPS``) stops after warm-up + N steps of the
attempt, commits a checkpoint of its last step (a later run resumes from it: give another
checkpoint dir to start afresh) and writes ``outcome: "pilot"``.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import secrets
import statistics
import time
from typing import Any, get_args

from gpuwise.base import settings
from gpuwise.base.recipe import (
    RUNS_FOLDER,
    CapacityType,
    PlanFile,
    RunRecord,
)
from gpuwise.errors import GpuwiseError, StorageError
from gpuwise.train.storage import Storage

log = logging.getLogger(__name__)

DEFAULT_WARMUP_STEPS = 2
"""Optimizer steps of an attempt that are not timed (``GPUWISE_PILOT_WARMUP`` overrides)."""
RECORD_AFTER_NOTICE_S = 2.0
"""How long the end of a preempted attempt waits for its record on remote storage."""


def new_run_id(now: dt.datetime | None = None) -> str:
    """``run-<UTC time>-<6 hex>``: sortable by start, unique without coordination."""
    stamp = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    return f"run-{stamp}-{secrets.token_hex(3)}"


def job_run_id() -> str:
    """The run's id: ``GPUWISE_RUN_ID``; else SkyPilot's task id (the same for every recovery of
    a managed job, so a recovered job's records continue its attempts); else a new one."""
    given = settings.text("GPUWISE_RUN_ID")
    if given:
        return given
    task = settings.text("SKYPILOT_TASK_ID")
    if task:
        return re.sub(r"[^A-Za-z0-9._-]+", "-", task.strip()).strip("-.") or new_run_id()
    return new_run_id()


def record_name(run_id: str, attempt: int) -> str:
    """The record's file name in :data:`RUNS_FOLDER`."""
    return f"{run_id}-attempt{attempt:03d}.json"


def plan_name(plan_id: str) -> str:
    """The file name of the plan a run ran, kept in :data:`RUNS_FOLDER` beside its records, so
    the records and the figures they are judged against travel together (``report --runs``,
    ``calibrate --from-runs`` find it by its ``.plan.json`` ending)."""
    return f"{plan_id}.plan.json"


def _utc(wall: float) -> str:
    return dt.datetime.fromtimestamp(wall, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class RunLog:
    """Times one attempt's steps and writes its record (rank 0); made by ``resilient()``."""

    def __init__(
        self,
        storage: Storage,
        *,
        rank: int,
        world_size: int,
        nodes: int,
        plan: PlanFile | None,
    ) -> None:
        self.storage, self.rank, self.world_size, self.nodes = storage, rank, world_size, nodes
        self.plan = plan
        self.run_id = job_run_id()
        self.attempt = settings.count("GPUWISE_ATTEMPT", 0)
        self.pilot_steps = settings.count("GPUWISE_PILOT_STEPS", 0) or None
        self.warmup = settings.count("GPUWISE_PILOT_WARMUP", DEFAULT_WARMUP_STEPS)
        self.step_start = 0
        self.steps = 0
        """Optimizer steps in this attempt."""
        self.durations: list[float] = []
        """Seconds of each optimizer step of this attempt after warm-up."""
        self.tokens: list[int] = []
        """Tokens this rank reported for each timed step (``run.step(loss, tokens=...)``)."""
        self._pending_tokens = 0
        self.stall_s = 0.0
        self._wall_start = time.time()
        self._last = time.monotonic()

    # -- during the attempt ----------------------------------------------------------------------

    def begin(self, step: int) -> None:
        """The attempt starts (after the restore) at ``step``: rank 0 writes a running record."""
        self.step_start, self._wall_start, self._last = step, time.time(), time.monotonic()
        if self.rank != 0:
            return
        taken = self._taken()
        while record_name(self.run_id, self.attempt) in taken:
            self.attempt += 1
        if self.plan is not None and plan_name(self.plan.plan_id) not in taken:
            self._put(plan_name(self.plan.plan_id), self.plan.to_json().encode(), "plan file")
        self.write(self.record(outcome="running", step=step))

    def add_tokens(self, tokens: int) -> None:
        self._pending_tokens += tokens

    def stepped(self, stall_s: float = 0.0) -> None:
        """One optimizer step ended; ``stall_s``: seconds training waited for checkpoints so far
        in this attempt (the end's final save, after training, does not count)."""
        self.stall_s = stall_s
        now = time.monotonic()
        self.steps += 1
        if self.steps > self.warmup:
            self.durations.append(now - self._last)
            self.tokens.append(self._pending_tokens)
        self._pending_tokens = 0
        self._last = now

    @property
    def pilot_save_due(self) -> bool:
        """The optimizer step ending now is a pilot's last: it saves, to measure the stall."""
        return self.pilot_steps is not None and self.steps + 1 == self.warmup + self.pilot_steps

    @property
    def pilot_over(self) -> bool:
        """A pilot measured its steps: the loop ends."""
        return self.pilot_steps is not None and self.steps >= self.warmup + self.pilot_steps

    # -- the record ------------------------------------------------------------------------------

    def record(
        self,
        *,
        outcome: str,
        step: int,
        ended: bool = False,
        committed: int | None = None,
        micro_batch: int | None = None,
        accumulation: int | None = None,
        dp_size: int = 1,
        mismatches: tuple[str, ...] = (),
        gpu: str | None = None,
        notices: int = 0,
        preempted: bool = False,
        peak: tuple[float | None, float | None] = (None, None),
    ) -> RunRecord:
        """The record of this attempt so far (``ended``: as it ends)."""
        recipe = self.plan.recipe if self.plan is not None else None
        global_batch = (
            micro_batch * accumulation * dp_size
            if micro_batch is not None and accumulation is not None
            else None
        )
        seq_len = recipe.seq_len if recipe is not None else None
        reported = sum(self.tokens) / len(self.tokens) * dp_size if any(self.tokens) else None
        per_step = (
            round(reported)
            if reported
            else (global_batch * seq_len if global_batch and seq_len else None)
        )
        step_s = statistics.median(self.durations) if self.durations else None
        tps = per_step / step_s / self.world_size if per_step and step_s else None
        end_wall = time.time()
        hours = (end_wall - self._wall_start) / 3600.0
        gpu_hours = hours * self.world_size
        gpu_price = self._gpu_price()
        lost = max(step - committed, 0) if committed is not None and outcome != "done" else 0
        return RunRecord(
            run_id=self.run_id,
            attempt=self.attempt,
            started=_utc(self._wall_start),
            ended=_utc(end_wall) if ended else None,
            outcome=outcome,
            plan_id=self.plan.plan_id if self.plan is not None else None,
            pilot=self.pilot_steps is not None,
            plan_mismatch=mismatches,
            gpu=gpu,
            world_size=self.world_size,
            nodes=self.nodes,
            gpus_per_node=max(self.world_size // max(self.nodes, 1), 1),
            instance_type=self._where("GPUWISE_INSTANCE_TYPE", "instance_type"),
            cloud=self._where("GPUWISE_CLOUD", "cloud"),
            region=self._where("GPUWISE_REGION", "region"),
            capacity_type=self._capacity(),
            micro_batch=micro_batch,
            accumulation=accumulation,
            global_batch=global_batch,
            seq_len=seq_len,
            step_start=self.step_start,
            step_end=step,
            steps_measured=len(self.durations),
            warmup_steps=min(self.warmup, self.steps),
            tokens_per_step=per_step,
            tokens_per_s_per_gpu=tps,
            step_s=step_s,
            peak_memory_gib=peak[0],
            peak_reserved_gib=peak[1],
            checkpoint_stall_s=self.stall_s,
            notices=notices,
            preemptions=1 if preempted else 0,
            restarts=1 if self.attempt > 0 else 0,
            steps_lost=lost if ended else 0,
            gpu_hours=gpu_hours,
            price_usd_per_hour=gpu_price * self.world_size if gpu_price is not None else None,
            cost_usd=gpu_price * gpu_hours if gpu_price is not None else None,
        )

    def _where(self, name: str, field: str) -> str | None:
        """This machine's setting, else the plan's; None (unknown) without either. ``none``
        (as in ``GPUWISE_CLOUD=none``) means known not to be one."""
        value = settings.text(name)
        if value is not None:
            return None if value.strip().lower() == "none" else value.strip()
        recipe = self.plan.recipe if self.plan is not None else None
        got = getattr(recipe, field, None) if recipe is not None else None
        return str(got) if got else None

    def _capacity(self) -> CapacityType:
        value = (settings.text("GPUWISE_CAPACITY_TYPE") or "").strip().lower()
        known: tuple[CapacityType, ...] = get_args(CapacityType)
        for kind in known:
            if value == kind:
                return kind
        if self.plan is not None:
            return self.plan.recipe.capacity_type
        return "unknown"

    def _gpu_price(self) -> float | None:
        """Dollars per GPU-hour: ``GPUWISE_GPU_PRICE_USD_PER_HOUR``, else the plan's price ÷ its GPUs."""
        if settings.text("GPUWISE_GPU_PRICE_USD_PER_HOUR") is not None:
            return settings.number("GPUWISE_GPU_PRICE_USD_PER_HOUR", 0.0, positive=False)
        if self.plan is None:
            return None
        return self.plan.expected.price_usd_per_hour / max(self.plan.recipe.world_size, 1)

    # -- storage ---------------------------------------------------------------------------------

    def _taken(self) -> set[str]:
        try:
            return set(self.storage.list_names(self.storage.join(RUNS_FOLDER)))
        except StorageError as err:
            log.warning("cannot list the run records: %s", err)
            return set()

    def write(self, record: RunRecord, timeout_s: float | None = None) -> None:
        """Rank 0: replace this attempt's record atomically; a storage failure is logged, never
        raised (a record must not stop training). ``timeout_s``: wait at most that long (the
        write goes on in a daemon thread that does not keep the process alive), for the end of
        a preempted attempt, whose deadline a hung object store must not pass."""
        if self.rank != 0:
            return
        if timeout_s is not None:
            import threading

            writer = threading.Thread(target=self.write, args=(record,), daemon=True)
            writer.start()
            writer.join(timeout_s)
            if writer.is_alive():
                log.warning("the run record was not written within %.0f s: left", timeout_s)
            return
        self._put(
            record_name(record.run_id, record.attempt), record.to_json().encode(), "run record"
        )

    def _put(self, name: str, data: bytes, what: str) -> None:
        try:
            self.storage.put_durable(self.storage.join(RUNS_FOLDER, name), data)
        except StorageError as err:
            log.warning("the %s was not written: %s", what, err)


def peak_memory_gib(
    device_type: str, world_size: int, collective: bool
) -> tuple[float, float] | None:
    """(allocated, reserved) peak GPU memory in GiB, the largest over ranks when ``collective``
    (every rank must call it then); None without CUDA."""
    if device_type != "cuda":
        return None
    from gpuwise.train._torch import torch

    if not torch.cuda.is_available():
        return None
    values = [float(torch.cuda.max_memory_allocated()), float(torch.cuda.max_memory_reserved())]
    if collective and world_size > 1:
        t = torch.tensor(values, dtype=torch.float64, device="cuda")
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        values = [float(v) for v in t.tolist()]
    return values[0] / 2**30, values[1] / 2**30


def _gpu_model(device_name: str | None) -> str | None:
    """gpuwise's name of torch's device (``NVIDIA H100 80GB HBM3`` → ``H100``), else the name."""
    if device_name is None:
        return None
    from gpuwise.errors import HardwareError
    from gpuwise.hardware import find_gpu

    try:
        return find_gpu(device_name).name
    except HardwareError:
        return device_name


OUTCOMES = {"preempted": "preempted", "done": "done", "pilot": "pilot"}
"""How an attempt's ranks exited (progress file) → the record's outcome (anything else: failed)."""


def end_record(log_: RunLog, run: Any, exc: BaseException | None, reason: str) -> RunRecord | None:
    """The final record of ``run`` (a :class:`~gpuwise.train.Run`) that ended with ``reason`` (its
    progress file's exit), written by rank 0. Every rank calls it: without an exception the peak
    memory is reduced over the ranks."""
    outcome = OUTCOMES.get(reason, "failed")
    applied = run.applied
    notice = run.watcher.notice if run.watcher is not None else None
    peak = peak_memory_gib(run.device_type, run.world_size, collective=exc is None)
    try:
        record = log_.record(
            outcome=outcome,
            step=run.global_step,
            ended=True,
            committed=run.committed_step,
            micro_batch=applied.micro_batch if applied is not None else run.loader_batch,
            accumulation=run.grad_accum,
            dp_size=run.dp_size,
            mismatches=applied.mismatches if applied is not None else (),
            gpu=_gpu_model(run.gpu_name),
            notices=1 if notice is not None else 0,
            preempted=run.preempted,
            peak=peak if peak is not None else (None, None),
        )
    except GpuwiseError as err:  # e.g. a bad price variable: the training's end is not changed
        log.warning("the run record was not written: %s", err)
        return None
    remote_after_notice = run.preempted and not log_.storage.is_local
    log_.write(record, timeout_s=RECORD_AFTER_NOTICE_S if remote_after_notice else None)
    return record
