"""``Checkpointer``: atomic, asynchronous, retention-managed checkpoints on any fsspec storage.

::

    ckpt = Checkpointer("s3://bucket/run1", keep_last=3, keep_every=1000, compress="zstd")
    restored = ckpt.restore(model=model, optimizer=opt, scheduler=sched, sampler=sampler)
    ...
    ckpt.save(step, model=model, optimizer=opt, scheduler=sched, sampler=sampler)  # returns fast
    ...
    ckpt.close()  # waits for the last write

A save copies the state into a shared host buffer (the only time the loop is blocked) and hands
it to a background writer *process*; at most one write is in flight. A failed write is raised as
:class:`CheckpointWriteError` on the next call, never dropped. ``memory://`` is written in the
calling process (a writer process cannot see this process's memory).

Two layouts, chosen by the number of processes:

- **one process**: one ``state.pt`` per step, written by the background writer process (above).
  Right for one process: nothing to shard, and a forked writer keeps the GIL free.
- **more than one process** (DDP, FSDP1, FSDP2, FSDP2 + TP): ``torch.distributed.checkpoint``,
  every rank writes its own shards, our ``COMMIT.json`` last (:mod:`gpuwise.train.sharded`). Every
  rank calls ``save``/``wait``/``close``/``restore`` at the same step (they are collective). A
  sharded checkpoint loads on any number of processes, one included (DCP reshards).

``restore`` lets rank 0 pick the newest valid step and broadcasts it, so every rank loads the same one.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal

from gpuwise.errors import CheckpointError, InputError
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
    write_checkpoint,
)
from gpuwise.train.rng import capture_rng, restore_rng
from gpuwise.train.sharded import (
    AsyncMode,
    ShardedWriter,
    is_dcp,
    load_app_state,
    read_train_state,
    verify,
)
from gpuwise.train.snapshot import SharedSnapshot, detach_shared, flatten
from gpuwise.train.storage import Storage

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


def _dist() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class Checkpointer:
    """Atomic, asynchronous checkpoints with retention. See the module docstring."""

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
    ) -> None:
        if compress not in ("none", "zstd"):
            raise InputError(f"unknown compression {compress!r}", hint="use 'none' or 'zstd'")
        self.storage = Storage(str(url), dict(storage_options or {}))
        self.retention = Retention(keep_last, keep_every)
        self.compress: Compression = compress
        self.async_write = async_write and self.storage.shared_across_processes
        self.async_mode: AsyncMode = async_mode or ("thread" if async_write else "sync")
        """Sharded saves: ``thread`` (DCP async_save, default), ``process`` (opt-in), ``sync``."""
        if self.async_mode not in ("thread", "process", "sync"):
            raise InputError(
                f"unknown async_mode {async_mode!r}", hint="use 'thread', 'process' or 'sync'"
            )
        self._sharded: ShardedWriter | None = None
        self.weights_only = weights_only
        self.writer_start = writer_start or ("fork" if sys.platform.startswith("linux") else "exec")
        if self.writer_start not in ("fork", "exec"):
            raise InputError(f"unknown writer_start {writer_start!r}", hint="use 'fork' or 'exec'")
        self.last_report: WriteReport | None = None
        self._snapshot = SharedSnapshot()
        self._proc: Any = None
        self._forked = False
        self._results: Any = None
        self._pending: tuple[int, int] | None = None  # (job id, step)
        self._failed: str | None = None  # a failed write's message, raised on the next call
        self._next_id = 0

    # -- context manager -----------------------------------------------------------------------

    def start_writer(self) -> None:
        """Start the background writer now (``resilient`` does, before any thread exists)."""
        if (
            self.async_write and _dist()[1] == 1
        ):  # more than one process: DCP writes, no writer process
            self._ensure_writer()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- saving --------------------------------------------------------------------------------

    @property
    def sharded(self) -> ShardedWriter | None:
        """The DCP writer when more than one process trains (else None: single-file layout)."""
        if self._sharded is None and _dist()[1] > 1:
            self._sharded = ShardedWriter(self.storage, self.retention, self.async_mode)
        return self._sharded

    def sharded_write_done(self) -> bool:
        """This rank's sharded write (if any) has finished; no collective (see ``commit``)."""
        sw = self.sharded
        return sw is None or sw.locally_done()

    @property
    def sharded_pending(self) -> int | None:
        sw = self.sharded
        return sw.pending.step if sw is not None and sw.pending is not None else None

    def commit(self, timeout_s: float | None = None) -> WriteReport | None:
        """Collective under torch.distributed: commit the sharded write in flight (waits for it).
        Raises :class:`CheckpointWriteError` on every rank when any rank's write failed."""
        sw = self.sharded
        if sw is None:
            return self.wait(timeout_s)
        try:
            report = sw.commit(timeout_s)
        except CheckpointError as exc:
            raise CheckpointWriteError(exc.message, hint=exc.hint) from exc
        if report is not None:
            self.last_report = report
        return report

    @property
    def in_flight(self) -> int | None:
        """Step of the write in flight, if any (after collecting a finished one)."""
        self.poll()
        return self._pending[1] if self._pending else None

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
    ) -> SaveStats:
        """Save a checkpoint of ``progress.step``. Call on every rank under torch.distributed.

        ``state`` replaces the built state when given (advanced use). ``if_busy='skip'`` returns
        at once when a write is still in flight; ``block=True`` waits until it is committed.
        Raises :class:`CheckpointWriteError` when the previous background write failed.
        """
        t0 = time.perf_counter()
        if isinstance(progress, int):
            progress = Progress(progress)
        if self.sharded is not None:
            return self._save_sharded(
                progress,
                t0,
                model=model,
                optimizer=optimizer,
                scheduler=scheduler,
                scaler=scaler,
                sampler=sampler,
                extras=extras,
                block=block,
            )
        if self._pending is not None:
            self.poll()
            if self._pending is not None:
                if if_busy == "skip":
                    return SaveStats(progress.step, time.perf_counter() - t0, "skipped")
                self.wait()
        self._raise_failed()
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
        rank, _ = _dist()
        if rank != 0:
            return SaveStats(progress.step, time.perf_counter() - t0, "async")
        meta = {"progress": state.get("progress", {"step": progress.step})}
        if not self.async_write:
            self.last_report = write_checkpoint(
                self.storage,
                progress.step,
                state,
                compress=self.compress,
                meta=meta,
                retention=self.retention,
            )
            return SaveStats(progress.step, time.perf_counter() - t0, "sync")
        skeleton, tensors = flatten(state)
        self._ensure_writer()
        fresh = self._snapshot.copy_in(tensors)
        if fresh:
            self._send(
                {
                    "kind": "map",
                    "id": -1,
                    "path": self._snapshot.path,
                    "nbytes": self._snapshot.nbytes,
                }
            )
        job = {
            "kind": "write",
            "id": self._next_id,
            "step": progress.step,
            "skeleton": skeleton,
            "path": self._snapshot.path,
            "layout": self._snapshot.layout,
            "storage": self.storage,
            "compress": self.compress,
            "meta": meta,
            "retention": self.retention,
        }
        self._send(job)
        self._pending = (self._next_id, progress.step)
        self._next_id += 1
        stats = SaveStats(progress.step, time.perf_counter() - t0, "async")
        if block:
            self.wait()
        return stats

    def _save_sharded(
        self,
        progress: Progress,
        t0: float,
        *,
        model: Any,
        optimizer: Any,
        scheduler: Any,
        scaler: Any,
        sampler: Any,
        extras: dict[str, Any] | None,
        block: bool,
    ) -> SaveStats:
        from gpuwise.train.sharded import app_state

        sw = self.sharded
        assert sw is not None
        if sw.pending is not None:
            self.commit()  # raises CheckpointWriteError when the previous write failed
        train_state = self.build_state(
            progress,
            model=None,
            optimizer=None,
            scheduler=scheduler,
            scaler=scaler,
            sampler=sampler,
            extras=extras,
        )
        state = app_state(_unwrap_ddp(model), optimizer) if model is not None else {}
        sw.start(progress.step, state, train_state, {"progress": train_state["progress"]})
        mode: Literal["async", "sync"] = "sync" if self.async_mode == "sync" else "async"
        stall = time.perf_counter() - t0
        if block or mode == "sync":
            self.commit()
        return SaveStats(progress.step, stall, mode)

    def _send(self, job: dict[str, Any]) -> None:
        from gpuwise.train._writer import send

        try:
            send(self._proc.stdin, job)
        except (BrokenPipeError, OSError) as exc:
            raise CheckpointWriteError(
                f"the checkpoint writer process is gone ({exc})",
                hint="see the log above for why it exited; the next save starts a new one",
            ) from exc

    def _ensure_writer(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        if self._proc is not None:  # it died (killed, OOM): start a fresh one, remap the buffer
            log.warning(
                "the checkpoint writer process exited (code %s); starting a new one",
                self._proc.returncode,
            )
            self._snapshot.release()
        import subprocess
        import threading

        import gpuwise
        from gpuwise.train._writer import ForkedWriter
        from gpuwise.train.snapshot import remove_stale_buffers

        remove_stale_buffers()
        if self.compress == "zstd":
            import zstandard  # noqa: F401  (imported before a fork, never inside the child)
        if self.writer_start == "fork" and not self._forked:
            self._forked = True
            self._proc = ForkedWriter()
        else:  # a replacement after a crash is exec'd: threads may be running now
            src = os.path.dirname(os.path.dirname(os.path.abspath(gpuwise.__file__)))
            env = dict(
                os.environ,
                PYTHONPATH=os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p),
            )
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "gpuwise.train._writer", str(os.getpid())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
            )
        self._results = queue.Queue()
        proc, results, snapshot = self._proc, self._results, self._snapshot

        def read_results() -> None:
            from gpuwise.train._writer import receive

            while True:
                try:
                    kind, job_id, payload = receive(proc.stdout)
                except (EOFError, OSError, ValueError):
                    results.put(("dead", -1, None))
                    return
                if kind == "mapped":
                    snapshot.unlink()
                elif kind != "ready":
                    results.put((kind, job_id, payload))

        threading.Thread(target=read_results, name="gpuwise-ckpt-results", daemon=True).start()

    def poll(self) -> WriteReport | None:
        """Collect a finished background write without waiting; None when nothing finished."""
        return self._collect(timeout_s=0.0)

    def wait(self, timeout_s: float | None = None) -> WriteReport | None:
        """Block until the write in flight is committed (or failed: then raise)."""
        if self._sharded is not None:
            return self.commit(timeout_s)
        report = self._collect(timeout_s=timeout_s if timeout_s is not None else float("inf"))
        self._raise_failed()
        return report

    def _collect(self, timeout_s: float) -> WriteReport | None:
        if self._pending is None:
            return None
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if timeout_s > 0:
                    kind, job_id, payload = self._results.get(
                        timeout=min(0.5, max(deadline - time.monotonic(), 0.001))
                    )
                else:
                    kind, job_id, payload = self._results.get_nowait()
            except queue.Empty:
                if time.monotonic() >= deadline:
                    return None
                continue
            step = self._pending[1]
            if kind == "dead":
                self._pending = None
                self._failed = f"the writer process died (exit code {self._proc.poll()}) while writing step {step}"
                return None
            if job_id != self._pending[0]:
                continue
            self._pending = None
            if kind == "ok":
                self.last_report = payload
                return payload  # type: ignore[no-any-return]
            self._failed = f"checkpoint {step_dir(step)} was not written: {payload}"
            return None

    def _raise_failed(self) -> None:
        if self._failed is not None:
            message, self._failed = self._failed, None
            raise CheckpointWriteError(
                message,
                hint="check the storage (space, credentials, network); "
                "the previous committed checkpoint is still valid",
            )

    def close(self) -> None:
        """Wait for the write in flight and stop the writer process. Raises a pending failure."""
        if self._sharded is not None and self._sharded.pending is not None:
            self.commit()
        try:
            if self._pending is not None:
                self._collect(timeout_s=float("inf"))
        finally:
            if self._proc is not None:
                try:
                    self._proc.stdin.close()
                    self._proc.wait(timeout=10)
                except Exception:
                    self._proc.kill()
                    self._proc.wait()
                finally:
                    self._proc.stdout.close()
                    self._proc = None
            self._snapshot.release()
        self._raise_failed()

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
        if self._sharded is not None:
            self._sharded.committed_step = progress.step
        return Restored(progress.step, progress, dict(state.get("extras", {})), path, skipped)


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
