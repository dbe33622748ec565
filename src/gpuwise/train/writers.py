"""How a checkpoint gets written: one writer per strategy behind one interface.

:class:`~gpuwise.train.checkpointer.Checkpointer` builds the state and hands it to a
:class:`WriteStrategy`; it never asks which one it holds. The strategies:

- :class:`InlineWriter`: one ``state.pt`` written in the calling thread (``async_write=False``,
  and ``memory://``, which a writer process could not see).
- :class:`ThreadWriter`: one ``state.pt`` written by a background *thread* (the default for one
  process, as DCP's ``async_save``); the loop pays only for a copy into a host buffer.
- :class:`ProcessWriter`: one ``state.pt`` written by a background writer *process*
  (:mod:`gpuwise.train._writer`, ``async_mode="process"``); the loop pays only for a copy into
  a shared buffer.
- :class:`~gpuwise.train.sharded.ShardedWriter`: more than one process trains; every rank writes
  its shards through ``torch.distributed.checkpoint`` and rank 0 commits off the training thread.

What does not live here: the layout and the commit protocol (:mod:`.commit`), building the state
(the checkpointer), restoring.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from gpuwise.errors import CheckpointError
from gpuwise.train.commit import Compression, Retention, WriteReport, step_dir, write_checkpoint
from gpuwise.train.snapshot import SharedSnapshot, flatten
from gpuwise.train.storage import Storage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WriteHooks:
    """Test and rehearsal hooks, passed in (never read from the environment)."""

    before_marker: Callable[[], None] | None = None
    """Run after a checkpoint's data files are written and before its marker (or, sharded,
    before the rank reports its files written): a rehearsal of slow storage, so a crash test can
    land in that window. A writer process receives it pickled: pass a picklable callable,
    e.g. ``functools.partial(time.sleep, 0.05)``."""


@dataclass(frozen=True)
class SaveRequest:
    """One save, as the checkpointer built it."""

    step: int
    """Training step."""
    train_state: dict[str, Any]
    """Progress, RNG, scheduler, sampler, extras; for a one-file layout also model and optimizer."""
    meta: dict[str, Any]
    """Small metadata copied into the marker."""
    app_state: dict[str, Any] = field(default_factory=dict)
    """Sharded layout only: model and optimizer state for DCP (empty otherwise)."""


class WriteStrategy(Protocol):
    """What every writer offers the checkpointer. ``Collective`` methods are called on every rank
    at the same step under torch.distributed (the sharded writer); the others are local."""

    sharded: bool
    """True when the model and optimizer go to DCP shards (``SaveRequest.app_state``)."""

    @property
    def last_report(self) -> WriteReport | None:
        """The newest committed write."""

    def start(self) -> None:
        """Start background workers now (before any thread exists, for a clean fork)."""

    def in_flight(self) -> int | None:
        """Step of the write still running, if any (after collecting a finished one)."""

    def write_done(self) -> bool:
        """This rank's part of the write in flight is done (no collective, no waiting)."""

    def save(self, request: SaveRequest) -> Literal["async", "sync"]:
        """Begin (async) or do (sync) the write. Collective for the sharded writer."""

    def wait(self, timeout_s: float | None) -> WriteReport | None:
        """Finish the write in flight. Collective for the sharded writer. Raises
        :class:`CheckpointError` when it failed."""

    def poll(self) -> WriteReport | None:
        """Collect a finished write without waiting; never raises."""

    def close(self, timeout_s: float | None) -> None:
        """Wait (up to ``timeout_s``, None: no limit) for what is in flight and stop workers."""

    def abandon(self) -> int | None:
        """Stop at once without waiting for what is in flight (a notice copy was committed
        elsewhere and this storage may hang); the step left unfinished, if any. No collective."""


class _OneFileWriter:
    """What the one-``state.pt`` writers share: where and how they write, the last report, and a
    failed background write kept to be raised on the next call (never dropped)."""

    sharded = False

    def __init__(
        self, storage: Storage, retention: Retention, compress: Compression, hooks: WriteHooks
    ) -> None:
        self.storage, self.retention, self.compress, self.hooks = (
            storage,
            retention,
            compress,
            hooks,
        )
        self.last_report: WriteReport | None = None
        self._failed: str | None = None

    def in_flight(self) -> int | None:
        return None

    def write_done(self) -> bool:
        return self.in_flight() is None

    def _raise_failed(self) -> None:
        if self._failed is not None:
            message, self._failed = self._failed, None
            raise CheckpointError(
                message,
                hint="check the storage (space, credentials, network); "
                "the previous committed checkpoint is still valid",
            )


class InlineWriter(_OneFileWriter):
    """One ``state.pt`` per step, written in the calling thread."""

    def start(self) -> None:
        return None

    def save(self, request: SaveRequest) -> Literal["async", "sync"]:
        if _rank() != 0:
            return "sync"
        self.last_report = write_checkpoint(
            self.storage,
            request.step,
            request.train_state,
            compress=self.compress,
            meta=request.meta,
            retention=self.retention,
            before_marker=self.hooks.before_marker,
        )
        return "sync"

    def wait(self, timeout_s: float | None) -> WriteReport | None:
        return None

    def poll(self) -> WriteReport | None:
        return None

    def close(self, timeout_s: float | None) -> None:
        return None

    def abandon(self) -> int | None:
        return None


class ThreadWriter(_OneFileWriter):
    """One ``state.pt`` per step, written by a background thread; at most one write in flight.

    The state's tensors are copied into one reusable host buffer (the only time the loop is
    blocked); the thread streams ``torch.save`` from that buffer to a temporary file, hashing
    it on the way, then commits. Extra host memory: the buffer, once (a writer process would
    map it too, and a forked one counts the trainer's pages again). The GIL: the thread's
    bulk work (file writes, sha256, zstd) runs with the GIL released; what holds it is
    pickling the small non-tensor part and torch.save's per-tensor bookkeeping. A failed write
    is raised on the next call, never dropped."""

    def __init__(
        self, storage: Storage, retention: Retention, compress: Compression, hooks: WriteHooks
    ) -> None:
        super().__init__(storage, retention, compress, hooks)
        self._snapshot = SharedSnapshot(in_process=True)
        self._thread: threading.Thread | None = None
        self._step: int | None = None  # the step in flight
        self._outcome: tuple[str, Any] | None = None  # ("ok", report) or ("error", message)

    def start(self) -> None:
        return None

    def in_flight(self) -> int | None:
        self._collect(0.0)
        return self._step

    def save(self, request: SaveRequest) -> Literal["async", "sync"]:
        self._raise_failed()
        if _rank() != 0:
            return "async"
        skeleton, tensors = flatten(request.train_state)
        self._snapshot.copy_in(tensors)
        del tensors
        self._step, self._outcome = request.step, None
        self._thread = threading.Thread(
            target=self._write,
            args=(request, skeleton, self._snapshot.memory, self._snapshot.layout),
            name="gpuwise-ckpt-writer",
            daemon=True,  # a hung store must not keep the process alive at exit
        )
        self._thread.start()
        return "async"

    def _write(self, request: SaveRequest, skeleton: Any, memory: Any, layout: Any) -> None:
        from gpuwise.train._writer import tensors_in
        from gpuwise.train.snapshot import unflatten

        try:
            state = unflatten(skeleton, tensors_in(memory, layout))
            self._outcome = (
                "ok",
                write_checkpoint(
                    self.storage,
                    request.step,
                    state,
                    compress=self.compress,
                    meta=request.meta,
                    retention=self.retention,
                    before_marker=self.hooks.before_marker,
                ),
            )
        except BaseException as exc:  # reported to the trainer on its next call
            detail = getattr(exc, "message", None) or str(exc)
            self._outcome = ("error", f"{type(exc).__name__}: {detail}")

    def wait(self, timeout_s: float | None) -> WriteReport | None:
        report = self._collect(timeout_s)
        self._raise_failed()
        return report

    def poll(self) -> WriteReport | None:
        return self._collect(0.0)

    def close(self, timeout_s: float | None) -> None:
        try:
            self._collect(timeout_s)
        finally:
            if self._step is None:
                self._snapshot.release()
        self._raise_failed()

    def abandon(self) -> int | None:
        left = self.in_flight()
        # mid-write on a store that may hang: leave the daemon thread; its folder has no marker
        # until it finishes, and the process is about to exit
        self._step, self._thread = None, None
        return left

    def _collect(self, timeout_s: float | None) -> WriteReport | None:
        thread, step = self._thread, self._step
        if thread is None or step is None:
            return None
        thread.join(timeout_s)
        if thread.is_alive():
            return None
        outcome = self._outcome
        self._thread, self._step, self._outcome = None, None, None
        if outcome is not None and outcome[0] == "ok":
            self.last_report = outcome[1]
            return outcome[1]  # type: ignore[no-any-return]
        message = outcome[1] if outcome is not None else "the writer thread ended without a result"
        self._failed = f"checkpoint {step_dir(step)} was not written: {message}"
        return None


class ProcessWriter(_OneFileWriter):
    """One ``state.pt`` per step, written by a background writer process; at most one write in
    flight. The state is copied into a shared host buffer (the only time the loop is blocked);
    a failed write is raised on the next call, never dropped."""

    def __init__(
        self,
        storage: Storage,
        retention: Retention,
        compress: Compression,
        hooks: WriteHooks,
        start_method: Literal["fork", "exec"],
    ) -> None:
        super().__init__(storage, retention, compress, hooks)
        self.start_method = start_method
        self._snapshot = SharedSnapshot()
        self._proc: Any = None
        self._forked = False
        self._results: queue.Queue[Any] = queue.Queue()
        self._pending: tuple[int, int] | None = None  # (job id, step)
        self._next_id = 0

    def start(self) -> None:
        self._ensure_writer()

    def in_flight(self) -> int | None:
        self._collect(0.0)
        return self._pending[1] if self._pending else None

    def save(self, request: SaveRequest) -> Literal["async", "sync"]:
        from gpuwise.train._writer import MapBuffer, WriteJob

        self._raise_failed()
        if _rank() != 0:
            return "async"
        skeleton, tensors = flatten(request.train_state)
        self._ensure_writer()
        fresh = self._snapshot.copy_in(tensors)
        path = self._snapshot.path
        assert path is not None  # copy_in made the buffer
        if fresh:
            self._send(MapBuffer(path, self._snapshot.nbytes))
        self._send(
            WriteJob(
                id=self._next_id,
                step=request.step,
                skeleton=skeleton,
                path=path,
                layout=self._snapshot.layout,
                storage=self.storage,
                compress=self.compress,
                meta=request.meta,
                retention=self.retention,
                before_marker=self.hooks.before_marker,
            )
        )
        self._pending = (self._next_id, request.step)
        self._next_id += 1
        return "async"

    def wait(self, timeout_s: float | None) -> WriteReport | None:
        report = self._collect(float("inf") if timeout_s is None else timeout_s)
        self._raise_failed()
        return report

    def poll(self) -> WriteReport | None:
        return self._collect(0.0)

    def close(self, timeout_s: float | None) -> None:
        try:
            if self._pending is not None:
                self._collect(float("inf") if timeout_s is None else timeout_s)
        finally:
            self._end_writer(kill=False)
            self._snapshot.release()
        self._raise_failed()

    def abandon(self) -> int | None:
        left = self.in_flight()
        # mid-write on a store that may hang: do not wait for it
        self._end_writer(kill=left is not None)
        self._snapshot.release()
        self._pending = None
        return left

    def _end_writer(self, kill: bool) -> None:
        """Close the writer process's input and reap it (killed first when ``kill``, or when it
        does not end within 10 s)."""
        proc = self._proc
        if proc is None:
            return
        if kill:
            proc.kill()
        try:
            proc.stdin.close()
            proc.wait(timeout=10)
        except Exception:
            proc.kill()
            proc.wait()
        finally:
            proc.stdout.close()
            self._proc = None

    # -- the writer process ---------------------------------------------------------------------

    def _send(self, message: Any) -> None:
        from gpuwise.train._writer import send

        try:
            send(self._proc.stdin, message)
        except (BrokenPipeError, OSError) as exc:
            raise CheckpointError(
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

        from gpuwise.train._writer import ForkedWriter
        from gpuwise.train.snapshot import remove_stale_buffers

        remove_stale_buffers()
        if self.compress == "zstd":
            import zstandard  # noqa: F401  (imported before a fork, never inside the child)
        if self.start_method == "fork" and not self._forked:
            self._forked = True
            self._proc = ForkedWriter()
        else:  # a replacement after a crash is exec'd: threads may be running now
            package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # gpuwise/
            src = os.path.dirname(package)
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
        threading.Thread(
            target=_read_results,
            args=(self._proc, self._results, self._snapshot),
            name="gpuwise-ckpt-results",
            daemon=True,
        ).start()

    def _collect(self, timeout_s: float) -> WriteReport | None:
        if self._pending is None:
            return None
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if timeout_s > 0:
                    result = self._results.get(
                        timeout=min(0.5, max(deadline - time.monotonic(), 0.001))
                    )
                else:
                    result = self._results.get_nowait()
            except queue.Empty:
                if time.monotonic() >= deadline:
                    return None
                continue
            step = self._pending[1]
            if result is None:  # the reader saw the pipe close: the process died
                self._pending = None
                self._failed = f"the writer process died (exit code {self._proc.poll()}) while writing step {step}"
                return None
            if result.job_id != self._pending[0]:
                continue
            self._pending = None
            if result.kind == "ok":
                self.last_report = result.payload
                return result.payload  # type: ignore[no-any-return]
            self._failed = f"checkpoint {step_dir(step)} was not written: {result.payload}"
            return None


def _read_results(proc: Any, results: queue.Queue[Any], snapshot: SharedSnapshot) -> None:
    """The writer's answers, onto ``results``; ``None`` once the pipe closes (the writer died)."""
    from gpuwise.train._writer import receive

    while True:
        try:
            result = receive(proc.stdout)
        except (EOFError, OSError, ValueError):
            results.put(None)
            return
        if result.kind == "mapped":
            snapshot.unlink()
        elif result.kind != "ready":
            results.put(result)


def _rank() -> int:
    from gpuwise.train._torch import rank_and_world

    return rank_and_world()[0]


__all__ = [
    "InlineWriter",
    "ProcessWriter",
    "SaveRequest",
    "ThreadWriter",
    "WriteHooks",
    "WriteStrategy",
]
