"""The background writer: a separate process that serializes and commits snapshots.

A process, not a thread: a writer thread fights the training loop for the GIL (PyTorch blog
2025-04-30, "6x faster async checkpointing": 700 → 320 tokens/s during thread-based saves).

On Linux it is forked from the training process (milliseconds: torch is already imported; the
child only runs CPU code with one thread, like a DataLoader worker); elsewhere, or with
``writer_start="exec"``, it is ``python -m gpuwise.train._writer`` (never ``multiprocessing``
spawn, which would re-import the user's training script). The snapshot buffer is a file in ``/dev/shm`` that both
processes map; a job on the pipe is only the buffer's path, the layout and the small non-tensor
part of the state. The writer dies with its parent (``PR_SET_PDEATHSIG`` on Linux, and EOF on
its stdin), so a killed run never leaves a writer that races the restarted one.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal


@dataclass(frozen=True)
class MapBuffer:
    """Parent -> writer: map the shared snapshot buffer now (the parent then unlinks its file)."""

    path: str
    """The buffer's file in ``/dev/shm``."""
    nbytes: int
    """Its size."""


@dataclass(frozen=True)
class WriteJob:
    """Parent -> writer: serialize the snapshot now in the buffer and commit it as ``step``."""

    id: int
    """Job number; the result carries it back."""
    step: int
    """Training step of the checkpoint."""
    skeleton: Any
    """The state with every tensor replaced by its index in ``layout`` (:mod:`.snapshot`)."""
    path: str
    """The mapped buffer holding the tensors."""
    layout: Any
    """Where each tensor lies in the buffer."""
    storage: Any
    """The :class:`~gpuwise.train.storage.Storage` to write to."""
    compress: str
    """``none`` or ``zstd``."""
    meta: dict[str, Any]
    """Small metadata copied into the marker."""
    retention: Any
    """The :class:`~gpuwise.train.commit.Retention` applied after the commit."""
    before_marker: Callable[[], None] | None = None
    """Test hook run between the shard and the marker (must pickle, e.g. a ``functools.partial``)."""


@dataclass(frozen=True)
class WriterResult:
    """Writer -> parent: what became of one message."""

    kind: Literal["ready", "mapped", "ok", "error"]
    """``ready`` once at start; ``mapped`` after a :class:`MapBuffer`; ``ok``/``error`` per job."""
    job_id: int
    """The job's ``id`` (-1 for ``ready``/``mapped``)."""
    payload: Any = None
    """``ok``: the :class:`~gpuwise.train.commit.WriteReport`; ``error``: the message."""


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def send(stream: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(len(data).to_bytes(8, "little") + data)
    stream.flush()


def receive(stream: BinaryIO) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError
    n = int.from_bytes(head, "little")
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return pickle.loads(data)


def map_buffer(path: str, nbytes: int) -> Any:
    """Map the shared snapshot buffer (read-write, shared: the same pages as the parent's)."""
    import mmap

    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, max(nbytes, 1), mmap.MAP_SHARED)
    finally:
        os.close(fd)


def tensors_in(buffer: Any, layout: tuple[Any, ...]) -> list[Any]:
    """One tensor per slot of ``layout``, each with a storage of its own over the mapped
    ``buffer`` (no copy: torch.save refuses views of one storage with several dtypes, and a
    copy would cost this process the whole state once more). The parent copies the next
    snapshot in only after this write has finished."""
    from gpuwise.train._torch import torch

    out = []
    for s in layout:
        if s.nbytes == 0:  # an empty slot may share its offset with the next one
            out.append(torch.empty(s.shape, dtype=s.dtype))
            continue
        itemsize = torch.empty((), dtype=s.dtype).element_size()
        flat = torch.frombuffer(
            buffer, dtype=s.dtype, count=s.nbytes // itemsize, offset=s.offset_bytes
        )
        out.append(flat.view(s.shape))
    return out


def serve(jobs: BinaryIO, results: BinaryIO, parent: int) -> None:
    """The writer loop: read jobs until EOF or ``None``, answer each with ok/error."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    if os.getppid() != parent:
        return
    from gpuwise.train.commit import write_checkpoint
    from gpuwise.train.snapshot import unflatten

    buffers: dict[str, Any] = {}
    send(results, WriterResult("ready", -1))
    while True:
        try:
            job = receive(jobs)
        except EOFError:
            return
        if job is None:
            return
        job_id = job.id if isinstance(job, WriteJob) else -1
        try:
            if isinstance(job, MapBuffer):  # map the buffer now, so the parent may unlink its file
                buffers = {job.path: map_buffer(job.path, job.nbytes)}
                send(results, WriterResult("mapped", -1))
                continue
            if not isinstance(job, WriteJob):
                raise TypeError(f"unknown message {type(job).__name__}")
            tensors = tensors_in(buffers[job.path], job.layout)
            state = unflatten(job.skeleton, tensors)
            del tensors
            report = write_checkpoint(
                job.storage,
                job.step,
                state,
                compress=job.compress,  # type: ignore[arg-type]
                meta=job.meta,
                retention=job.retention,
                before_marker=job.before_marker,
            )
            send(results, WriterResult("ok", job_id, report))
        except BaseException as exc:  # reported to the trainer on its next call
            detail = getattr(exc, "message", None) or str(exc)
            send(results, WriterResult("error", job_id, f"{type(exc).__name__}: {detail}"))


def _close_inherited_fds(keep: tuple[int, ...]) -> None:
    """Like ``subprocess``'s close_fds: a forked writer must not hold the parent's sockets
    (a listening socket kept open by the child would keep accepting into a dead backlog)."""
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


class ForkedWriter:
    """A writer forked from the training process: starts in milliseconds (torch is already
    imported) instead of the ~2 s of a fresh interpreter. Same surface as ``subprocess.Popen``."""

    def __init__(self) -> None:
        jobs_r, jobs_w = os.pipe()
        res_r, res_w = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # child: never return into the caller's code
            code = 0
            try:
                os.close(jobs_w)
                os.close(res_r)
                _close_inherited_fds(keep=(jobs_r, res_w))
                from gpuwise.train._torch import torch

                torch.set_num_threads(1)
                serve(os.fdopen(jobs_r, "rb"), os.fdopen(res_w, "wb"), parent)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(jobs_r)
        os.close(res_w)
        self.pid = pid
        self.stdin: BinaryIO = os.fdopen(jobs_w, "wb")
        self.stdout: BinaryIO = os.fdopen(res_r, "rb")
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"writer {self.pid} still running")
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


def main() -> None:
    parent = int(sys.argv[1]) if len(sys.argv) > 1 else os.getppid()
    jobs, results = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but results goes to the pipe
    serve(jobs, results, parent)


if __name__ == "__main__":
    # run the module's copy imported under its own name, so the results it pickles name
    # ``gpuwise.train._writer.WriterResult``, not ``__main__.WriterResult`` (which the
    # training process cannot unpickle: its results thread died and wait() never returned)
    from gpuwise.train._writer import main as _main

    _main()
