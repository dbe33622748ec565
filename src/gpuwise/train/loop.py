"""``resilient(...)``: a small loop API that keeps the user's own loop. Not a framework.

::

    with gpuwise.train.resilient(model, opt, checkpoint_dir="s3://b/run", max_steps=10_000,
                                 precision="bf16", grad_accum=4) as run:
        for batch in run.batches(loader):
            with run.autocast():
                loss = model(batch)
            run.step(loss)

On entry it restores the newest valid checkpoint (model, optimizer, scheduler, GradScaler, RNG,
data position) and starts a :class:`PreemptionWatcher`. ``run.step`` does backward (scaled for
fp16), gradient accumulation, the optimizer/scheduler step and decides whether to save: every
``every_steps`` steps, every ``every_minutes`` minutes, or — by default — at the Young/Daly
interval from the measured save stall (``interval.py``), with a first save right after the first
step (a kill without notice early on must not lose everything); and at once on a notice. After a
preemption notice it commits a checkpoint and the loop ends. The code after the ``with`` block
(eval, cleanup) still runs. Under ``gpuwise run`` the process then ends as the script ends: the
launcher reads the preemption from the rank's progress file. Without it, the process exits with
:data:`EXIT_PREEMPTED` (75) when the interpreter shuts down, after every exit handler ran
(``exit_on_preemption="at_exit"``, the default; ``True`` exits at the end of the block, ``False``
leaves it to ``sys.exit(run.exit_code)``). Importing this module registers nothing.

Under ``torch.distributed`` every rank takes the same decisions at the same step: one small
``all_reduce`` per optimizer step carries "stop", "notice", "time to save" and "my shard write is
still running"; a sharded write is sealed (collectively: files and checksums, no storage I/O) at
the first step where every rank's write is done, and rank 0 writes its marker in the background.
The data position is kept per data-parallel replica (``dp_rank``/``dp_size`` or ``mesh``).

A notice save is bounded by the grace period (``GPUWISE_GRACE_PERIOD_S`` or the cloud's deadline):
with remote storage it goes to fast local disk first (``local_dir``), then uploads while time is
left; the process exits before the deadline whatever the storage does.

Under ``gpuwise run --plan`` the plan is applied or the job refused before its first step
(:mod:`.recipe_apply`); every attempt leaves a run record beside the checkpoints (:mod:`.records`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, Literal

from gpuwise.base import settings
from gpuwise.base.recipe import Recipe
from gpuwise.base.signatures import signature_of
from gpuwise.errors import InputError
from gpuwise.train._torch import torch
from gpuwise.train.checkpointer import Checkpointer, CheckpointWriteError, Progress
from gpuwise.train.commit import Compression
from gpuwise.train.dataparallel import data_parallel
from gpuwise.train.exitcodes import EXIT_PREEMPTED
from gpuwise.train.interval import DEFAULT_MAX_INTERVAL_S, DEFAULT_MTBF_HOURS, checkpoint_interval_s
from gpuwise.train.preemption import PreemptionWatcher
from gpuwise.train.progress import write_progress
from gpuwise.train.recipe_apply import (
    PlanMismatchError,
    check_micro_batch,
    local_gpu_name,
    mismatch_allowed,
    plan_for_run,
    record_refusal,
)
from gpuwise.train.records import RunLog, end_record
from gpuwise.train.runlock import RunLock
from gpuwise.train.sampler import ResumableSampler, install_worker_seeding
from gpuwise.train.sharded import AsyncMode
from gpuwise.train.writers import WriteHooks

log = logging.getLogger(__name__)

Precision = Literal["fp32", "bf16", "fp16"]
EXIT_MARGIN_S = 8.0
"""Seconds of a notice window kept for exiting after the notice save (at least)."""
_INITIAL_STALL_GUESS_S = 1.0  # until the first save is measured; replaced by the measured EMA


class Run:
    """State of one resilient run; made by :func:`resilient`."""

    def __init__(
        self,
        model: Any,
        optimizer: Any,
        *,
        checkpoint_dir: str | os.PathLike[str],
        max_steps: int,
        scheduler: Any = None,
        precision: Precision = "fp32",
        grad_accum: int | None = None,
        every_steps: int | None = None,
        every_minutes: float | None = None,
        mtbf_hours: float = DEFAULT_MTBF_HOURS,
        max_interval_s: float = DEFAULT_MAX_INTERVAL_S,
        keep_last: int = 2,
        keep_every: int | None = None,
        compress: Compression = "none",
        async_write: bool = True,
        async_mode: AsyncMode | None = None,
        storage_options: dict[str, Any] | None = None,
        watcher: PreemptionWatcher | bool = True,
        activation_checkpointing: tuple[type, ...] = (),
        clip_grad_norm: float | None = None,
        tokens_per_batch: int = 0,
        exit_on_preemption: bool | Literal["at_exit"] = "at_exit",
        extras: dict[str, Any] | None = None,
        local_dir: str | os.PathLike[str] | None = None,
        dp_rank: int | None = None,
        dp_size: int | None = None,
        mesh: Any = None,
        checkpoint_hooks: WriteHooks | None = None,
    ) -> None:
        if max_steps < 1:
            raise InputError(
                f"max_steps={max_steps} must be at least 1",
                hint="pass the number of optimizer steps",
            )
        if grad_accum is not None and grad_accum < 1:
            raise InputError(
                f"grad_accum={grad_accum} must be at least 1", hint="1 means no accumulation"
            )
        if precision not in ("fp32", "bf16", "fp16"):
            raise InputError(f"unknown precision {precision!r}", hint="use fp32, bf16 or fp16")
        if every_steps is not None and every_steps < 1:
            raise InputError(
                f"every_steps={every_steps} must be positive", hint="or leave it unset"
            )
        if every_minutes is not None and not every_minutes > 0:
            raise InputError(
                f"every_minutes={every_minutes} must be positive", hint="or leave it unset"
            )
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.max_steps, self.precision, self.grad_accum = max_steps, precision, grad_accum or 1
        self.every_steps, self.every_minutes = every_steps, every_minutes
        self.mtbf_hours, self.max_interval_s = mtbf_hours, max_interval_s
        self.clip_grad_norm, self.tokens_per_batch = clip_grad_norm, tokens_per_batch
        self.exit_on_preemption = exit_on_preemption
        self.extras = dict(extras or {})
        self.device_type = _device_type(model)
        self.scaler = torch.amp.GradScaler(self.device_type) if precision == "fp16" else None
        self.checkpointer = Checkpointer(
            checkpoint_dir,
            storage_options=storage_options,
            keep_last=keep_last,
            keep_every=keep_every,
            compress=compress,
            async_write=async_write,
            async_mode=async_mode,
            hooks=checkpoint_hooks,
        )
        self.local_checkpointer = _local_checkpointer(
            self.checkpointer, local_dir, keep_last, compress
        )
        self.watcher = (
            watcher
            if isinstance(watcher, PreemptionWatcher)
            else (PreemptionWatcher() if watcher else None)
        )
        self._own_watcher = watcher is True
        rank, world = _dist()
        self.rank, self.world_size = rank, world
        self.dp_rank, self.dp_size = data_parallel(dp_rank, dp_size, mesh, rank, world)
        """This rank's data-parallel replica and the number of replicas: ranks of one replica
        (tensor, pipeline or context parallel peers) consume the same samples."""
        nodes = max(world // int(os.environ.get("LOCAL_WORLD_SIZE", world) or 1), 1)
        self.nodes = nodes
        self.gpu_name = local_gpu_name(self.device_type)
        self.applied = plan_for_run(  # a job unlike its plan is refused here, before any step
            world_size=world, dp_size=self.dp_size, grad_accum=grad_accum, gpu_name=self.gpu_name
        )
        """The plan this job runs (``gpuwise run --plan``), as applied; None without a plan."""
        if self.applied is not None:
            self.grad_accum = self.applied.accumulation
        self.loader_batch: int | None = None
        self.runlog = RunLog(
            self.checkpointer.storage, rank=rank, world_size=world, nodes=nodes,
            plan=self.applied.plan if self.applied is not None else None,
        )  # fmt: skip
        self.global_step = 0
        self.epoch = 0
        self.batch_in_epoch = 0
        self.samples_in_epoch = 0  # global: all ranks together
        self.tokens_seen = 0
        self.micro = 0
        self.resumed_from: int | None = None
        self.committed_step: int | None = None
        self.preempted = False
        self.save_errors: list[str] = []
        self.stalls_s: list[float] = []
        self._stall_ema_s: float | None = None
        self._last_save = time.monotonic()
        self._sampler: ResumableSampler | None = None
        self._run_dir = settings.text("GPUWISE_RUN_DIR")
        self._last_progress_write = 0.0
        self._saves = 0
        self._lock: RunLock | None = None
        for module in model.modules():
            if activation_checkpointing and isinstance(module, activation_checkpointing):
                module.forward = functools.partial(_checkpointed, module.forward)  # type: ignore[attr-defined]

    # -- lifecycle -----------------------------------------------------------------------------

    def open(self) -> Run:
        self._lock = _take_lock(self.checkpointer, self.rank, self.world_size)
        self.checkpointer.start_writer()  # forked before the watcher thread exists
        restored = self._restore()
        if restored is not None:
            p = restored.progress
            self.global_step, self.epoch, self.batch_in_epoch, self.tokens_seen = (
                p.step,
                p.epoch,
                p.batch_in_epoch,
                p.tokens_seen,
            )
            self.samples_in_epoch = p.samples_in_epoch
            self.resumed_from = self.committed_step = p.step
            self.extras.update(restored.extras)
            log.info("resumed from %s (step %d)", restored.path, p.step)
        if self.watcher is not None and self._own_watcher:
            self.watcher.start()
        self._last_save = time.monotonic()
        self.runlog.begin(self.global_step)
        self._write_progress(force=True)
        return self

    def _restore(self) -> Any:
        """The newest checkpoint of the main storage or of the local notice copy, whichever is newer."""
        kw = {
            "model": self.model,
            "optimizer": self.optimizer,
            "scheduler": self.scheduler,
            "scaler": self.scaler,
        }
        local = self.local_checkpointer
        if local is not None:
            steps = local.committed_steps()
            remote = self.checkpointer.committed_steps() if self.rank == 0 else []
            newer = [max(steps or [-1]) > max(remote or [-1])]
            if self.world_size > 1:
                torch.distributed.broadcast_object_list(newer, src=0)
            if newer[0]:
                restored = local.restore(**kw)
                if restored is not None:
                    log.warning(
                        "resumed from the local notice copy %s (newer than the main storage)",
                        restored.path,
                    )
                    return restored
        return self.checkpointer.restore(**kw)

    @property
    def recipe(self) -> Recipe | None:
        """The plan's :class:`~gpuwise.base.recipe.Recipe` (None outside a planned job)."""
        return self.applied.recipe if self.applied is not None else None

    @property
    def micro_batch(self) -> int | None:
        """The planned micro-batch: build the data loader with ``batch_size=run.micro_batch``."""
        return self.applied.micro_batch if self.applied is not None else None

    @property
    def accumulation(self) -> int:
        """Micro-batches per optimizer step on this replica (the plan's, or ``grad_accum``)."""
        return self.grad_accum

    @property
    def exit_code(self) -> int:
        """75 after a preemption (a checkpoint was committed), else 0."""
        return EXIT_PREEMPTED if self.preempted else 0

    def close(self, exc: BaseException | None = None) -> None:
        try:
            if exc is not None or (self.preempted and self.local_checkpointer is not None):
                # after an error no collective may run (a peer may be gone); after a notice the
                # copy is committed on local disk and the main storage may hang: never wait for
                # it past the deadline (nor let a hung write keep the process alive)
                left = self.checkpointer.abandon()
                if left is not None and self.preempted:
                    log.warning(
                        "the write of step %d to %s did not finish before the deadline: left "
                        "unfinished (the local notice copy of step %s is committed)",
                        left,
                        self.checkpointer.storage.url,
                        self.committed_step,
                    )
                    _exit_hard_at_shutdown(EXIT_PREEMPTED)
                if self.local_checkpointer is not None:
                    self.local_checkpointer.abandon()
            else:
                if exc is None and self.world_size > 1 and self.checkpointer.in_flight is not None:
                    self._commit()  # the last periodic save may be this very step: no second write
                if (
                    exc is None
                    and not self.preempted
                    and (self.global_step >= self.max_steps or self.runlog.pilot_over)
                    and self.checkpointer.sealed_step != self.global_step
                ):
                    self._save("final", block=True)
                self.checkpointer.close()
                self._update_committed()
        except CheckpointWriteError as err:
            self.save_errors.append(err.message)
            log.error("%s", err)
        finally:
            if self.watcher is not None and self._own_watcher:
                self.watcher.stop()
            if self._lock is not None:
                self._lock.release()
            if self.preempted:
                reason = "preempted"
            elif exc is None and self.global_step >= self.max_steps:
                reason = "done"
            elif exc is None and self.runlog.pilot_over:
                reason = "pilot"
            else:
                reason = "peer-lost" if _peer_lost(exc) else "stopped"
            self._write_progress(force=True, exit_reason=reason)
            end_record(self.runlog, self, exc, reason)

    @property
    def done(self) -> bool:
        return self.global_step >= self.max_steps or self.preempted or self.runlog.pilot_over

    # -- the loop ------------------------------------------------------------------------------

    def batches(self, loader: Iterable[Any]) -> Iterator[Any]:
        """Yield batches across epochs, from the restored position, until ``max_steps`` or a stop."""
        sampler = _resumable_sampler(loader)
        batch_size = self.loader_batch = _batch_size(loader)
        if self.applied is not None:
            self.applied = check_micro_batch(self.applied, batch_size, mismatch_allowed())
        self._sampler = sampler
        if sampler is not None and sampler.num_replicas != self.dp_size:
            raise InputError(
                f"the ResumableSampler deals to {sampler.num_replicas} replica(s) but the run has "
                f"{self.dp_size} data-parallel replica(s)",
                hint="give the sampler rank=dp_rank, num_replicas=dp_size, and the same to "
                "resilient(dp_rank=..., dp_size=...) or resilient(mesh=...)",
            )
        while not self.done:
            skip = 0
            if self.samples_in_epoch < 0:  # a checkpoint from before global positions
                self.samples_in_epoch = self.batch_in_epoch * batch_size * self.dp_size
            else:  # per-replica batches from the global position (another DP degree resumes here)
                self.batch_in_epoch = self.samples_in_epoch // (batch_size * self.dp_size)
            if sampler is not None:
                sampler.set_position(self.epoch, self.samples_in_epoch)
                install_worker_seeding(loader)  # augmentations in workers resume exactly
            elif self.batch_in_epoch:
                log.warning(
                    "the loader has no ResumableSampler: replaying %d batches to reach the saved "
                    "position (use gpuwise.train.ResumableSampler to resume in O(1))",
                    self.batch_in_epoch,
                )
                skip = self.batch_in_epoch
            produced = False
            # a DataLoader iterator draws its base seed from the global torch RNG; a resumed run
            # creates one where the uninterrupted run did not, so creation must not move the RNG
            rng = torch.get_rng_state()
            iterator = iter(loader)
            torch.set_rng_state(rng)
            for batch in iterator:
                if skip:
                    skip -= 1
                    continue
                produced = True
                self.batch_in_epoch += (
                    1  # counted before the step, so a save at this step includes it
                )
                self.samples_in_epoch += batch_size * self.dp_size
                yield batch
                if self.done:
                    return
            if not produced and self.batch_in_epoch == 0:
                raise InputError(
                    "the data loader yielded no batches", hint="check the dataset and batch size"
                )
            self.epoch += 1
            self.batch_in_epoch = 0
            self.samples_in_epoch = 0

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Autocast for the chosen precision (a no-op for fp32)."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(device_type=self.device_type, dtype=dtype)

    def step(self, loss: Any, tokens: int | None = None) -> bool:
        """Backward of ``loss``; every ``grad_accum`` calls an optimizer step. True after a step.

        ``tokens``: tokens in this micro-batch on this rank (default ``tokens_per_batch``); the
        run record's throughput uses them (else the plan's global batch × sequence length)."""
        scaled = loss / self.grad_accum if self.grad_accum > 1 else loss
        if self.scaler is not None:
            self.scaler.scale(scaled).backward()
        else:
            scaled.backward()
        self.micro += 1
        self.tokens_seen += self.tokens_per_batch if tokens is None else tokens
        self.runlog.add_tokens(self.tokens_per_batch if tokens is None else tokens)
        if self.micro % self.grad_accum:
            return False
        if self.clip_grad_norm is not None:
            if self.scaler is not None:
                self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_grad_norm)
        stepped = True
        if self.scaler is not None:
            scale = self.scaler.get_scale()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            stepped = self.scaler.get_scale() >= scale  # a lower scale: inf/NaN grads, step skipped
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.scheduler is not None and stepped:
            self.scheduler.step()
        self.global_step += 1
        self._after_step()
        self.runlog.stepped(sum(self.stalls_s))
        return True

    # -- saving --------------------------------------------------------------------------------

    @property
    def interval_s(self) -> float:
        """Seconds between time-based saves: every_minutes, else Young/Daly from the measured stall."""
        if self.every_minutes is not None:
            return self.every_minutes * 60.0
        report = self.checkpointer.last_report
        write_s = report.serialize_s + report.write_s if report else 0.0
        stall = self._stall_ema_s if self._stall_ema_s is not None else _INITIAL_STALL_GUESS_S
        return checkpoint_interval_s(
            stall,
            mtbf_hours=self.mtbf_hours,
            nodes=self.nodes,
            write_s=write_s,
            max_interval_s=self.max_interval_s,
        )

    def _after_step(self) -> None:
        w = self.watcher
        stop = bool(w and w.should_stop())
        notice = bool(w and w.save_requested())
        by_steps = self.every_steps is not None and self.global_step % self.every_steps == 0
        by_steps = by_steps or self.runlog.pilot_save_due  # a pilot measures one save's stall
        use_time = self.every_minutes is not None or self.every_steps is None
        first = use_time and self.committed_step is None and self._saves == 0  # a first save early
        by_time = use_time and (first or time.monotonic() - self._last_save >= self.interval_s)
        writing = False
        if self.world_size > 1:  # every rank takes the same decision at the same step
            writing = not self.checkpointer.write_done()
            device = (
                "cuda" if torch.distributed.get_backend() == "nccl" else "cpu"
            )  # NCCL reduces GPU tensors
            flags = torch.tensor([stop, notice, by_time, writing], dtype=torch.int32, device=device)
            torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX)
            stop, notice, by_time, writing = (bool(x) for x in flags.tolist())
            if self.checkpointer.in_flight is not None and not writing:
                self._commit()  # every rank's shards are written: seal (collective, no storage I/O)
        if stop:
            log.warning("preemption notice: saving step %d and stopping", self.global_step)
            self._notice_save()
            self.preempted = True
        elif notice:
            self._save("notice", block=False)
            if w is not None:
                w.mark_saved()
        elif by_steps or by_time:
            if writing:  # the previous save is still being written: skip this one (all ranks)
                return self._write_progress()
            self._save("periodic", block=False)
        self._write_progress()

    def _commit(self) -> None:
        try:
            self.checkpointer.commit()
        except CheckpointWriteError as err:
            self.save_errors.append(err.message)
            log.error("checkpoint write failed: %s", err)
        self._update_committed()

    def _update_committed(self) -> None:
        known = self.checkpointer.committed_step
        if known is not None:
            self.committed_step = max(self.committed_step or 0, known)

    def _deadline_s(self) -> float:
        """Seconds left to the machine's end (the notice's deadline, else the grace period)."""
        notice = self.watcher.notice if self.watcher is not None else None
        left = notice.seconds_left if notice is not None else None
        if left is None:
            left = settings.number("GPUWISE_GRACE_PERIOD_S", 30.0)
        return max(left, 0.0)

    def _notice_save(self) -> None:
        """Commit this step before the deadline: to fast local disk first when the storage is
        remote. Nothing here waits on the main storage: a write to it still in flight is left
        to finish in the background (or not: the local copy is newer)."""
        left = self._deadline_s()
        # keep a margin for exiting (process teardown, torchrun, gpuwise run): 20 % of what is
        # left, at least EXIT_MARGIN_S
        deadline = time.monotonic() + max(left - max(0.2 * left, EXIT_MARGIN_S), 1.0)
        local = self.local_checkpointer
        if local is None:
            self._save("notice", block=True, timeout_s=max(deadline - time.monotonic(), 1.0))
            if self.world_size > 1:  # nobody exits before the commit (torchrun kills the rest)
                torch.distributed.barrier()
            return
        target = self.checkpointer
        self.checkpointer = local  # the notice save goes to local disk, synchronously
        try:
            self._save("notice", block=True, timeout_s=max(deadline - time.monotonic(), 1.0))
        finally:
            self.checkpointer = target
        from gpuwise.train.upload import upload_committed

        uploaded = upload_committed(
            local.storage,
            target.storage,
            self.global_step,
            deadline=deadline,
            rank=self.rank,
            world_size=self.world_size,
        )
        log.warning(
            "notice save of step %d committed on local disk %s; upload %s",
            self.global_step,
            local.storage.url,
            "finished" if uploaded else "did not finish before the deadline",
        )
        if self.world_size > 1:
            torch.distributed.barrier()

    def _save(self, why: str, block: bool, timeout_s: float | None = None) -> None:
        try:
            stats = self.checkpointer.save(
                Progress(
                    self.global_step,
                    self.epoch,
                    self.batch_in_epoch,
                    self.tokens_seen,
                    self.samples_in_epoch,
                ),
                model=self.model,
                optimizer=self.optimizer,
                scheduler=self.scheduler,
                scaler=self.scaler,
                sampler=self._sampler,
                extras=self.extras,
                if_busy="skip" if why == "periodic" else "wait",
                block=block,
                timeout_s=timeout_s,
            )
        except CheckpointWriteError as err:  # the previous write failed: report it, keep training
            self.save_errors.append(err.message)
            log.error("checkpoint write failed: %s", err)
            return
        self._saves += 1
        if stats.mode == "skipped":
            return
        self._last_save = time.monotonic()
        self.stalls_s.append(stats.stall_s)
        if stats.mode == "async" and not block:
            self._stall_ema_s = (
                stats.stall_s
                if self._stall_ema_s is None
                else 0.7 * self._stall_ema_s + 0.3 * stats.stall_s
            )
        if block or (stats.mode == "sync" and self.world_size == 1):
            self.committed_step = self.global_step
        self._update_committed()

    def _write_progress(self, force: bool = False, exit_reason: str | None = None) -> None:
        """For ``gpuwise run``: how far this rank got (to report the work lost on a restart)."""
        if self._run_dir is None:
            return
        now = time.monotonic()
        if not force and now - self._last_progress_write < 0.5:
            return
        self._last_progress_write = now
        self._update_committed()  # collects a finished write; a failure is raised on the next save
        notice = self.watcher.notice if self.watcher is not None else None
        write_progress(
            self._run_dir,
            rank=self.rank,
            step=self.global_step,
            committed_step=self.committed_step,
            resumed_from=self.resumed_from,
            exit_reason=exit_reason,
            save_errors=self.save_errors[-3:],
            notice=notice.source if notice is not None and notice.kind == "preemption" else None,
            deadline_unix=notice.deadline_unix if notice is not None else None,
        )


@signature_of(Run)  # typed with Run's options: mypy flags a misspelt keyword
@contextlib.contextmanager
def resilient(model: Any, optimizer: Any, **kwargs: Any) -> Iterator[Run]:
    """Restore, train, save on time and on notice; see :class:`Run` for the options."""
    try:
        run = Run(model, optimizer, **kwargs).open()
    except PlanMismatchError as err:
        record_refusal(err)
        raise
    try:
        yield run
    except BaseException as exc:
        run.close(exc)
        if isinstance(exc, PlanMismatchError):
            record_refusal(exc)
        raise
    run.close()
    if run.preempted and run.exit_on_preemption == "at_exit":
        if settings.text("GPUWISE_RUN_DIR"):  # gpuwise run reads it from the progress file
            log.warning(
                "preempted after committing step %s: gpuwise run restarts or hands over",
                run.committed_step,
            )
            return
        log.warning(
            "preempted after committing step %s: the process exits with code %d once it ends",
            run.committed_step,
            EXIT_PREEMPTED,
        )
        _exit_at_shutdown(EXIT_PREEMPTED)
    elif run.preempted and run.exit_on_preemption:
        log.warning(
            "exiting with code %d (preempted) after committing step %s",
            EXIT_PREEMPTED,
            run.committed_step,
        )
        sys.exit(EXIT_PREEMPTED)


_exit_code: int | None = None


def _exit_at_shutdown(code: int) -> None:
    """After a preemption without ``gpuwise run``: the process exits with ``code`` once the
    user's code after the ``with`` block ran. Registered then, never at import; the handler runs
    every other exit handler first (those registered before it too), then ``os._exit`` (the only
    way an exit handler can set the exit status)."""
    global _exit_code
    if _exit_code is None:
        atexit.register(_exit_with_code)
    _exit_code = code


def _exit_with_code() -> None:
    if _exit_code is None or sys.exc_info()[0] is not None:
        return
    atexit.unregister(_exit_with_code)
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()  # every other handler, once (the list is cleared after)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    logging.shutdown()
    os._exit(_exit_code)


def _checkpointed(forward: Any, *args: Any, **kwargs: Any) -> Any:
    from torch.utils.checkpoint import checkpoint

    if not torch.is_grad_enabled():
        return forward(*args, **kwargs)
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)


def _resumable_sampler(loader: Any) -> ResumableSampler | None:
    for candidate in (
        getattr(loader, "sampler", None),
        getattr(getattr(loader, "batch_sampler", None), "sampler", None),
    ):
        if isinstance(candidate, ResumableSampler):
            return candidate
    return None


def _batch_size(loader: Any) -> int:
    """Samples per batch, also when the loader was given a ``BatchSampler`` (its batch_size is None)."""
    size = getattr(loader, "batch_size", None) or getattr(
        getattr(loader, "batch_sampler", None), "batch_size", None
    )
    return int(size or 1)


_PEER_LOST = (
    "Connection closed by peer",  # gloo
    "Connection reset by peer",
    "Broken pipe",
    "remote process exited or there was a network error",  # NCCL
    "NCCL communicator was aborted",
)


def _peer_lost(exc: BaseException | None) -> bool:
    """A collective failed because another rank (or its node) went away: ``gpuwise run`` treats
    it as a preemption of the job, not a crash of the program."""
    while exc is not None:
        dist_error = getattr(torch.distributed, "DistNetworkError", ())
        if (dist_error and isinstance(exc, dist_error)) or any(
            text in str(exc) for text in _PEER_LOST
        ):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _exit_hard_at_shutdown(code: int) -> None:
    """Exit with ``code`` at interpreter shutdown *before* Python joins non-daemon threads.

    A DCP write to a hung object store runs in a non-daemon thread (DCP's ThreadPoolExecutor),
    which the interpreter would join forever after a preemption. ``threading``'s own shutdown
    hooks run before that join (and before ``atexit``)."""
    global _exit_code
    _exit_code = code
    import threading

    register = getattr(threading, "_register_atexit", None)
    if register is None:  # pragma: no cover - CPython has had it since 3.9
        return
    with contextlib.suppress(RuntimeError):
        register(_exit_with_code)


def _take_lock(checkpointer: Checkpointer, rank: int, world_size: int) -> RunLock | None:
    """Rank 0 locks a local checkpoint folder (:mod:`.runlock`); every rank raises the same
    :class:`InputError` when another live run holds it (collective under torch.distributed)."""
    storage = checkpointer.storage
    lock: RunLock | None = None
    refused: list[tuple[str, str] | None] = [None]
    if rank == 0 and storage.is_local:
        lock = RunLock(storage.root)
        try:
            lock.acquire()
        except InputError as exc:
            lock, refused[0] = None, (exc.message, exc.hint)
    if world_size > 1:
        torch.distributed.broadcast_object_list(refused, src=0)
    if refused[0] is not None:
        message, hint = refused[0]
        raise InputError(message, hint=hint)
    return lock


def _local_checkpointer(
    main: Checkpointer,
    local_dir: str | os.PathLike[str] | None,
    keep_last: int,
    compress: Compression,
) -> Checkpointer | None:
    """Fast local disk for notice saves when the main storage is remote: ``local_dir``, else
    ``GPUWISE_LOCAL_CHECKPOINT_DIR``, else a folder per checkpoint URL in the temp folder.
    None for local storage (it is the fast disk already)."""
    if main.storage.is_local:
        return None
    import hashlib
    import tempfile

    folder = (
        local_dir
        or settings.text("GPUWISE_LOCAL_CHECKPOINT_DIR")
        or os.path.join(
            tempfile.gettempdir(),
            "gpuwise-notice-" + hashlib.sha256(main.storage.url.encode()).hexdigest()[:12],
        )
    )
    return Checkpointer(folder, keep_last=keep_last, compress=compress, async_write=False)


def _device_type(model: Any) -> str:
    for p in model.parameters():
        return str(p.device.type)
    return "cpu"


def _dist() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1
