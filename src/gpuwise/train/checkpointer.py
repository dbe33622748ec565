"""``Checkpointer``: atomic, asynchronous, retention-managed checkpoints on any fsspec storage.

::

    ckpt = Checkpointer("s3://bucket/run1", keep_last=3, keep_every=1000, compress="zstd")
    restored = ckpt.restore(model=model, optimizer=opt, scheduler=sched, sampler=sampler)
    ...
    ckpt.save(step, model=model, optimizer=opt, scheduler=sched, sampler=sampler)  # returns fast
    ...
    ckpt.close()  # waits for the last write

How the bytes get written is a write strategy (:mod:`gpuwise.train.writers`), chosen once; the
checkpointer builds the state and restores, whatever the strategy. At most one write is in
flight; a failed write is raised as :class:`CheckpointWriteError` on the next call, never
dropped. ``memory://`` is written in the calling process (a writer process cannot see this
process's memory).

Two layouts, chosen by the number of processes:

- **one process**: one ``state.pt`` per step, written by a background writer thread (streamed
  from one host buffer, as DCP's ``async_save`` does; ``async_mode="process"``: a writer
  process instead). Right for one process: nothing to shard.
- **more than one process** (DDP, FSDP1, FSDP2, FSDP2 + TP): ``torch.distributed.checkpoint``,
  every rank writes its own shards, our ``COMMIT.json`` last, written by rank 0 off the calling
  thread (:mod:`gpuwise.train.sharded`). Every rank calls ``save``/``commit``/``wait``/``close``/
  ``restore`` at the same step (they are collective). A sharded checkpoint loads on any number
  of processes, one included (DCP reshards).

``restore`` lets rank 0 pick the newest valid step and broadcasts it, so every rank loads the same one.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal

from gpuwise.errors import CheckpointError, InputError
from gpuwise.train._torch import rank_and_world as _dist
from gpuwise.train._torch import torch
from gpuwise.train.commit import (
    Compression,
    Retention,
    WriteReport,
    committed_steps,
    listed_steps,
    read_checkpoint,
    read_marker,
    step_dir,
)
from gpuwise.train.rng import capture_rng, restore_rng
from gpuwise.train.sharded import (
    TELL_WAIT_S,
    AsyncMode,
    ShardedWriter,
    app_state,
    is_dcp,
    load_app_state,
    read_train_state,
    verify,
)
from gpuwise.train.snapshot import detach_shared
from gpuwise.train.storage import Storage
from gpuwise.train.writers import (
    InlineWriter,
    ProcessWriter,
    SaveRequest,
    ThreadWriter,
    WriteHooks,
    WriteStrategy,
)

log = logging.getLogger(__name__)

STATE_FORMAT = 1


class CheckpointWriteError(CheckpointError):
    """A background write failed; raised on the call after the failure."""


@dataclass(frozen=True)
class Progress:
    """Where training stands; saved with every checkpoint."""

    step: int
    """Optimizer steps done."""
    epoch: int = 0
    """Current epoch."""
    batch_in_epoch: int = 0
    """Micro-batches of the current epoch already consumed."""
    tokens_seen: int = 0
    """Tokens (or samples) consumed so far."""
    samples_in_epoch: int = -1
    """Samples of the current epoch consumed by *all* ranks together (what a different world
    size resumes from); -1 when unknown (older checkpoints: ``batch_in_epoch`` is used)."""


@dataclass(frozen=True)
class SaveStats:
    """What one ``save`` call cost the training loop."""

    step: int
    """Step saved (or skipped)."""
    stall_s: float
    """Seconds the caller was blocked."""
    mode: Literal["async", "sync", "skipped"]
    """``skipped``: a write was still in flight and ``if_busy='skip'`` was asked."""


@dataclass(frozen=True)
class Restored:
    """The checkpoint a ``restore`` applied."""

    step: int
    """Step of the checkpoint."""
    progress: Progress
    """Position in training."""
    extras: dict[str, Any]
    """User extras saved with it."""
    path: str
    """Folder it came from."""
    skipped: tuple[str, ...]
    """Newer folders that were not valid, with the reason (empty when the newest was fine)."""


def _unwrap(model: Any) -> Any:
    return getattr(model, "module", model)


class Checkpointer:
    """Atomic, asynchronous checkpoints with retention. See the module docstring.

    ``hooks``: test and rehearsal hooks (:class:`~gpuwise.train.writers.WriteHooks`)."""

    def __init__(
        self,
        url: str | os.PathLike[str],
        *,
        storage_options: dict[str, Any] | None = None,
        keep_last: int = 2,
        keep_every: int | None = None,
        compress: Compression = "none",
        async_write: bool = True,
        weights_only: bool = True,
        writer_start: Literal["fork", "exec"] | None = None,
        async_mode: AsyncMode | None = None,
        hooks: WriteHooks | None = None,
    ) -> None:
        if compress not in ("none", "zstd"):
            raise InputError(f"unknown compression {compress!r}", hint="use 'none' or 'zstd'")
        self.storage = Storage(str(url), dict(storage_options or {}))
        self.retention = Retention(keep_last, keep_every)
        self.compress: Compression = compress
        self.async_write = async_write and self.storage.shared_across_processes
        if async_mode is None and writer_start is not None and async_write:
            async_mode = "process"  # a writer start method only means something for a process
        self.async_mode: AsyncMode = async_mode or ("thread" if async_write else "sync")
        """``thread`` (default: DCP async_save when sharded, else a writer thread), ``process``
        (opt-in: DCP's process saver when sharded, else the writer process), ``sync``."""
        if self.async_mode not in ("thread", "process", "sync"):
            raise InputError(
                f"unknown async_mode {async_mode!r}", hint="use 'thread', 'process' or 'sync'"
            )
        self.weights_only = weights_only
        self.writer_start = writer_start or ("fork" if sys.platform.startswith("linux") else "exec")
        if self.writer_start not in ("fork", "exec"):
            raise InputError(f"unknown writer_start {writer_start!r}", hint="use 'fork' or 'exec'")
        self.hooks = hooks or WriteHooks()
        self._writer: WriteStrategy | None = None
        self._restored_step: int | None = None

    @property
    def writer(self) -> WriteStrategy:
        """The write strategy, chosen once, at first use (torch.distributed may start after the
        checkpointer is made): sharded with more than one process, else a writer thread (a
        writer process with ``async_mode="process"``; inline writes for ``async_write=False``
        and ``memory://``)."""
        if self._writer is None:
            w: WriteStrategy
            if _dist()[1] > 1:
                sharded = ShardedWriter(self.storage, self.retention, self.async_mode, self.hooks)
                sharded.committed_step = self._restored_step
                w = sharded
            elif self.async_write and self.async_mode == "process":
                w = ProcessWriter(
                    self.storage, self.retention, self.compress, self.hooks, self.writer_start
                )
            elif self.async_write and self.async_mode == "thread":
                w = ThreadWriter(self.storage, self.retention, self.compress, self.hooks)
            else:
                w = InlineWriter(self.storage, self.retention, self.compress, self.hooks)
            self._writer = w
        return self._writer

    @property
    def last_report(self) -> WriteReport | None:
        """The newest committed write (None before the first)."""
        return self._writer.last_report if self._writer is not None else None

    @property
    def committed_step(self) -> int | None:
        """Newest step known committed by this checkpointer (or restored from). Sharded: rank 0
        learns it from its marker thread, the other ranks at the next seal."""
        w = self._writer
        if isinstance(w, ShardedWriter):
            w.poll()
            return _newest(w.committed_step, self._restored_step)
        if w is not None:
            w.poll()  # collect a finished background write (never raises, never waits)
        report = w.last_report if w is not None else None
        return _newest(report.step if report else None, self._restored_step)

    @property
    def sealed_step(self) -> int | None:
        """Newest step whose data every rank wrote (its marker may be on its way); for a
        one-file layout the newest committed step."""
        w = self._writer
        if isinstance(w, ShardedWriter):
            return _newest(w.sealed_step, self.committed_step)
        return self.committed_step

    # -- context manager -----------------------------------------------------------------------

    def start_writer(self) -> None:
        """Start the background writer now (``resilient`` does, before any thread exists)."""
        self.writer.start()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is not None and isinstance(self._writer, ShardedWriter):
            # leaving on an error that other ranks may not share: a collective could wait forever;
            # the error in flight is the one to report, a late marker only goes to the log
            try:
                self._writer.close_alone(TELL_WAIT_S)
            except CheckpointError as err:
                log.error("%s (while leaving on %s)", err.message, type(exc).__name__)
            return
        self.close()

    # -- saving --------------------------------------------------------------------------------

    def write_done(self) -> bool:
        """This rank's part of the write in flight (if any) has finished; no collective."""
        return self._writer is None or self._writer.write_done()

    @property
    def in_flight(self) -> int | None:
        """Step of the write in flight, if any (after collecting a finished one)."""
        return self._writer.in_flight() if self._writer is not None else None

    def commit(self) -> None:
        """Collective under torch.distributed: seal the sharded write in flight (waits for this
        rank's files); rank 0 writes the marker in the background. Elsewhere: collect a finished
        write. Raises :class:`CheckpointWriteError` on every rank when any rank's write failed."""
        w = self._writer
        try:
            if isinstance(w, ShardedWriter):
                w.seal()
            elif w is not None:
                w.poll()
        except CheckpointError as exc:
            raise CheckpointWriteError(exc.message, hint=exc.hint) from exc

    def build_state(
        self,
        progress: Progress,
        *,
        model: Any = None,
        optimizer: Any = None,
        scheduler: Any = None,
        scaler: Any = None,
        sampler: Any = None,
        extras: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The dict that is saved: state dicts, progress, RNG of every rank, extras."""
        _, world = _dist()
        _check_extras(extras or {}, self.weights_only)
        rng = capture_rng()
        if world > 1:
            gathered: list[Any] = [None] * world
            torch.distributed.all_gather_object(gathered, rng)
            rngs = gathered
        else:
            rngs = [rng]
        state: dict[str, Any] = {
            "format": STATE_FORMAT,
            "progress": asdict(progress),
            "rng": rngs,
            "extras": dict(extras or {}),
        }
        for name, obj in (
            ("model", _unwrap(model) if model is not None else None),
            ("optimizer", optimizer),
            ("scheduler", scheduler),
            ("scaler", scaler),
            ("sampler", sampler),
        ):
            if obj is not None:
                state[name] = obj.state_dict()
        return state

    def save(
        self,
        progress: Progress | int,
        *,
        model: Any = None,
        optimizer: Any = None,
        scheduler: Any = None,
        scaler: Any = None,
        sampler: Any = None,
        extras: dict[str, Any] | None = None,
        state: dict[str, Any] | None = None,
        if_busy: Literal["wait", "skip"] = "wait",
        block: bool = False,
        timeout_s: float | None = None,
    ) -> SaveStats:
        """Save a checkpoint of ``progress.step``. Call on every rank under torch.distributed.

        ``state`` replaces the built state when given (one-file layout, advanced use).
        ``if_busy='skip'`` returns at once when a write is still in flight; ``block=True`` waits
        until it is committed (at most ``timeout_s``). Raises :class:`CheckpointWriteError` when
        the previous write failed (or, with ``block``, this one)."""
        t0 = time.perf_counter()
        if isinstance(progress, int):
            progress = Progress(progress)
        w = self.writer
        try:
            if w.in_flight() is not None:
                if if_busy == "skip":
                    return SaveStats(progress.step, time.perf_counter() - t0, "skipped")
                w.wait(None)  # sharded: collective; raises when the previous write failed
            if w.sharded:
                train_state = self.build_state(
                    progress,
                    scheduler=scheduler,
                    scaler=scaler,
                    sampler=sampler,
                    extras=extras,
                )
                app = app_state(_unwrap_ddp(model), optimizer) if model is not None else {}
                request = SaveRequest(
                    progress.step, train_state, {"progress": train_state["progress"]}, app
                )
            else:
                if state is None:
                    state = self.build_state(
                        progress,
                        model=model,
                        optimizer=optimizer,
                        scheduler=scheduler,
                        scaler=scaler,
                        sampler=sampler,
                        extras=extras,
                    )
                meta = {"progress": state.get("progress", {"step": progress.step})}
                request = SaveRequest(progress.step, state, meta)
            mode = w.save(request)
            stall = time.perf_counter() - t0
            if block or (mode == "sync" and w.sharded):
                w.wait(timeout_s)
        except CheckpointError as exc:
            if isinstance(exc, CheckpointWriteError):
                raise
            raise CheckpointWriteError(exc.message, hint=exc.hint) from exc
        return SaveStats(progress.step, stall, mode)

    def poll(self) -> WriteReport | None:
        """Collect a finished background write without waiting; None when nothing finished."""
        return self._writer.poll() if self._writer is not None else None

    def wait(self, timeout_s: float | None = None) -> WriteReport | None:
        """Block until the write in flight is committed (or failed: then raise). Collective
        under torch.distributed."""
        if self._writer is None:
            return None
        try:
            return self._writer.wait(timeout_s)
        except CheckpointError as exc:
            raise CheckpointWriteError(exc.message, hint=exc.hint) from exc

    def close(self, timeout_s: float | None = None) -> None:
        """Wait (up to ``timeout_s``; None: no limit) for the write in flight and stop the
        writer. Raises a pending failure. Collective under torch.distributed."""
        if self._writer is None:
            return
        try:
            self._writer.close(timeout_s)
        except CheckpointError as exc:
            raise CheckpointWriteError(exc.message, hint=exc.hint) from exc

    def abandon(self) -> int | None:
        """Stop waiting for the write in flight, if any (a notice copy was committed on local
        disk and the main storage may hang): returns the step left unfinished. No collective;
        a writer process mid-write is killed (the folder it leaves is never committed)."""
        return self._writer.abandon() if self._writer is not None else None

    # -- loading -------------------------------------------------------------------------------

    def committed_steps(self) -> list[int]:
        """Steps with a commit marker, newest first (checksums are checked when loading)."""
        return committed_steps(self.storage)

    def load_latest(self) -> tuple[dict[str, Any], str, tuple[str, ...]] | None:
        """The newest checkpoint whose marker and checksums are valid: (state, folder, skipped).

        For a sharded (DCP) checkpoint ``state`` is its train state (progress, RNG, extras ...)
        with ``"layout": "dcp"``; the model and optimizer shards are loaded by :meth:`restore`.
        Every newer folder that fails is logged with the reason and skipped. When folders exist
        but none loads, raise instead of silently starting from scratch."""
        skipped: list[str] = []
        for step in listed_steps(self.storage):
            try:
                marker = read_marker(self.storage, step)
                if is_dcp(marker):
                    assert marker is not None
                    verify(self.storage, step, marker)
                    state: dict[str, Any] = dict(
                        read_train_state(self.storage, step, self.weights_only)
                    )
                    state["layout"] = "dcp"
                else:
                    state, _ = read_checkpoint(self.storage, step, weights_only=self.weights_only)
            except CheckpointError as exc:
                skipped.append(f"{step_dir(step)}: {exc.message}")
                log.warning(
                    "skipping checkpoint %s: %s; falling back to the previous one",
                    step_dir(step),
                    exc.message,
                )
                continue
            return detach_shared(state), self.storage.join(step_dir(step)), tuple(skipped)
        if any("cannot be loaded" in s for s in skipped):
            raise CheckpointError(
                f"no checkpoint under {self.storage.url} can be loaded ({skipped[0]})",
                hint="fix what the message names (or pass weights_only=False for files "
                "you trust); starting from scratch would silently lose the run",
            )
        return None

    def restore(
        self,
        *,
        model: Any = None,
        optimizer: Any = None,
        scheduler: Any = None,
        scaler: Any = None,
        sampler: Any = None,
        restore_rng_state: bool = True,
    ) -> Restored | None:
        """Load the newest valid checkpoint into the given objects; None when there is none.

        Collective under torch.distributed. A sharded checkpoint loads on any world size."""
        rank, world = _dist()
        found = self.load_latest() if rank == 0 or world == 1 else None
        if world > 1:
            box = [(found[1].rsplit("/", 1)[-1], found[0].get("layout", "file")) if found else None]
            torch.distributed.broadcast_object_list(box, src=0)
            if box[0] is None:
                return None
            name, layout = box[0]
            step = int(name.split("-")[1])
            if rank != 0:
                if layout == "dcp":
                    state = dict(
                        read_train_state(self.storage, step, self.weights_only), layout="dcp"
                    )
                else:
                    state, _ = read_checkpoint(self.storage, step, weights_only=self.weights_only)
                found = (detach_shared(state), self.storage.join(name), ())
        if found is None:
            return None
        state, path, skipped = found
        step = int(path.rsplit("-", 1)[-1])
        if state.get("layout") == "dcp":
            if model is not None:
                load_app_state(self.storage, step, _unwrap_ddp(model), optimizer)
            objects: tuple[tuple[str, Any], ...] = (
                ("scheduler", scheduler),
                ("scaler", scaler),
                ("sampler", sampler),
            )
        else:
            objects = (
                ("model", _unwrap(model) if model is not None else None),
                ("optimizer", optimizer),
                ("scheduler", scheduler),
                ("scaler", scaler),
                ("sampler", sampler),
            )
        for name, obj in objects:
            if obj is None:
                continue
            if name not in state:
                raise CheckpointError(
                    f"{path} has no {name} state",
                    hint=f"save the {name} too, or do not pass it to restore",
                )
            obj.load_state_dict(state[name])
        if restore_rng_state:
            rngs = state["rng"]
            restore_rng(
                rngs[rank % len(rngs)]
            )  # another world size: rank r takes saved rank r mod N
        p = state["progress"]
        progress = Progress(
            int(p["step"]),
            int(p["epoch"]),
            int(p["batch_in_epoch"]),
            int(p["tokens_seen"]),
            int(p.get("samples_in_epoch", -1)),
        )
        if skipped:
            log.warning(
                "resumed from %s after skipping %d invalid newer checkpoint(s)", path, len(skipped)
            )
        self._restored_step = progress.step
        if isinstance(self._writer, ShardedWriter):
            self._writer.committed_step = _newest(self._writer.committed_step, progress.step)
        return Restored(progress.step, progress, dict(state.get("extras", {})), path, skipped)


def _newest(*steps: int | None) -> int | None:
    known = [s for s in steps if s is not None and s >= 0]
    return max(known) if known else None


def _unwrap_ddp(model: Any) -> Any:
    """DDP's inner module (get_state_dict handles DDP too, but FSDP1 also has ``.module``)."""
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return model.module
    return model


def _check_extras(extras: dict[str, Any], weights_only: bool) -> None:
    """Refuse, at save time and by name, extras that a ``weights_only`` load would refuse: every
    checkpoint would be unloadable and the run would restart from scratch."""
    if not weights_only or not extras:
        return
    import io

    for key, value in extras.items():
        buf = io.BytesIO()
        try:
            torch.save(value, buf)
            buf.seek(0)
            torch.load(buf, weights_only=True)
        except Exception as exc:
            raise CheckpointError(
                f"extras[{key!r}] ({type(value).__name__}) cannot be loaded back with "
                f"weights_only=True: {str(exc).splitlines()[0]}",
                hint="store plain Python values or tensors (e.g. float(x) for a NumPy scalar)",
            ) from exc
