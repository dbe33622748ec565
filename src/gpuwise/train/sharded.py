"""Sharded checkpoints through ``torch.distributed.checkpoint`` (DCP): every rank writes its shards.

Used whenever more than one process trains (DDP, FSDP1, FSDP2 ``fully_shard``, FSDP2 + TP): the
model and optimizer state come from ``get_state_dict`` (DTensor shards for FSDP2, one copy of
replicated tensors for DDP: DCP's planner de-duplicates them), and go back through
``set_state_dict`` — so a checkpoint saved on 4 ranks loads on 2, 3 or 1 (DCP reshards).

Layout of one step folder::

    step-000000120/.metadata         DCP's index, written by the coordinator (rank 0)
    step-000000120/__0_0.distcp ...  one file per rank (its shards)
    step-000000120/train_state.pt    progress, every rank's RNG, scheduler, sampler, extras (rank 0)
    step-000000120/COMMIT.json       our marker, written last by rank 0 once every rank reported
                                     its files written and their sha256 (``layout: "dcp"``)

The commit protocol stays ours: DCP's ``.metadata`` alone does not say that every rank's file
is complete and intact. Sealing is collective — every rank calls :meth:`ShardedWriter.seal` at
the same step (``resilient`` does it at the first step boundary where every rank's write is
done; a direct ``Checkpointer`` user at the next ``save``/``commit``/``wait``/``close``) and
reports its files with their sha256, taken while the bytes were written (nothing is read back).
Rank 0 then writes the marker and prunes in a background thread (:class:`MarkerCommitter`):
nothing on the training thread waits on the storage, and a failed marker is retried.

Async: ``dcp.async_save`` with a background *thread* and DCP's staging copy (the loop pays only
for the copy). DCP's process-based saver (``AsyncCheckpointerType.PROCESS``) hung in our tests
on torch 2.13 CPU/gloo (the save never completed within 3 minutes), so it is opt-in
(``async_mode="process"``), not the default.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import gc
import hashlib
import io
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from gpuwise.errors import CheckpointError, StorageError
from gpuwise.train._torch import settle_gloo_at_exit, torch
from gpuwise.train.commit import (
    FORMAT_VERSION,
    MARKER,
    Retention,
    WriteReport,
    prune,
    read_marker,
    step_dir,
)
from gpuwise.train.snapshot import return_free_heap
from gpuwise.train.storage import Storage
from gpuwise.train.writers import SaveRequest, WriteHooks

log = logging.getLogger(__name__)

AsyncMode = Literal["thread", "process", "sync"]
TRAIN_STATE = "train_state.pt"


def _newer(known: int | None, step: int | None) -> int | None:
    """The newer of two committed steps, None meaning "none yet" (step 0 is a step)."""
    steps = [s for s in (known, step) if s is not None]
    return max(steps) if steps else None


def _dist() -> Any:
    return torch.distributed


def app_state(model: Any, optimizer: Any) -> dict[str, Any]:
    """Model (and optimizer) state for DCP: sharded as the model is (DTensor / ShardedTensor)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    if optimizer is None:
        return {"model": get_model_state_dict(model)}
    msd, osd = get_state_dict(model, optimizer)
    return {"model": msd, "optim": osd}


def apply_app_state(model: Any, optimizer: Any, state: dict[str, Any]) -> None:
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

    if optimizer is None:
        set_model_state_dict(model, state["model"])
    else:
        set_state_dict(
            model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )


def _writer(storage: Storage, folder: str) -> Any:
    if storage.is_local:
        from torch.distributed.checkpoint.filesystem import FileSystemWriter

        return FileSystemWriter(folder, sync_files=True, thread_count=1)
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

    return FsspecWriter(storage.url_of(folder), sync_files=True, thread_count=1, **storage.options)


def _reader(storage: Storage, folder: str) -> Any:
    if storage.is_local:
        from torch.distributed.checkpoint.filesystem import FileSystemReader

        return FileSystemReader(folder)
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

    return FsspecReader(storage.url_of(folder), **storage.options)


def rank_files(storage: Storage, folder: str, rank: int) -> dict[str, dict[str, Any]]:
    """sha256 and size of the files this rank is responsible for in ``folder``, read back.

    Only a fallback: normally the checksums are taken while the bytes are written
    (:class:`_HashingFs`), so a save reads nothing back."""
    names = [
        n
        for n in storage.list_names(folder)
        if n.startswith(f"__{rank}_") and n.endswith(".distcp")
    ]
    if rank == 0:
        names += [n for n in (".metadata", TRAIN_STATE) if n in storage.list_names(folder)]
    out = {}
    for name in sorted(set(names)):
        data = storage.get(f"{folder}/{name}")
        out[name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    return out


class _HashingStream:
    """A write stream that hashes what passes through it. A seek (never seen from DCP's
    writer in torch 2.13) makes the checksum unknown; the file is then read back instead."""

    def __init__(self, raw: Any, on_close: Any) -> None:
        self._raw, self._on_close = raw, on_close
        self._hash = hashlib.sha256()
        self._bytes = 0
        self._valid = True

    def write(self, data: Any) -> int:
        n = self._raw.write(data)
        view = memoryview(data).cast("B")
        self._hash.update(view[: n if isinstance(n, int) else len(view)])
        self._bytes += n if isinstance(n, int) else len(view)
        return n if isinstance(n, int) else len(view)

    def seek(self, *args: Any) -> Any:
        self._valid = False
        return self._raw.seek(*args)

    def finish(self) -> None:
        self._on_close(self._hash.hexdigest() if self._valid else None, self._bytes)

    def __getattr__(self, name: str) -> Any:  # tell, flush, fileno, writable ...
        return getattr(self._raw, name)


class _HashingFs:
    """Wraps a DCP writer's ``fs``: every file it writes is hashed on the way (name -> sha256,
    bytes), renames (``.metadata.tmp`` -> ``.metadata``) carry the checksum along."""

    def __init__(self, fs: Any) -> None:
        self._fs = fs
        self._lock = threading.Lock()
        self.files: dict[str, dict[str, Any] | None] = {}

    @contextlib.contextmanager
    def create_stream(self, path: Any, mode: str) -> Iterator[Any]:
        with self._fs.create_stream(path, mode) as raw:
            if "w" not in mode:
                yield raw
                return
            name = os.fspath(path).replace("\\", "/").rsplit("/", 1)[-1]

            def done(sha: str | None, nbytes: int) -> None:
                with self._lock:
                    self.files[name] = None if sha is None else {"sha256": sha, "bytes": nbytes}

            stream = _HashingStream(raw, done)
            yield stream
            stream.finish()

    def rename(self, path: Any, new_path: Any) -> None:
        self._fs.rename(path, new_path)
        old = os.fspath(path).replace("\\", "/").rsplit("/", 1)[-1]
        new = os.fspath(new_path).replace("\\", "/").rsplit("/", 1)[-1]
        with self._lock:
            if old in self.files:
                self.files[new] = self.files.pop(old)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)


@dataclass
class _Pending:
    step: int
    folder: str
    started: float
    future: Any  # concurrent.futures.Future or None for sync
    hashed: threading.Event
    files: dict[str, dict[str, Any]] | None = None
    error: str | None = None
    meta: dict[str, Any] | None = None


@dataclass(frozen=True)
class _Seal:
    """Every rank's shards of ``step`` are written: what rank 0's marker thread commits."""

    step: int
    folder: str
    files: dict[str, dict[str, Any]]
    meta: dict[str, Any]
    world_size: int
    started: float


class MarkerCommitter:
    """Rank 0: writes ``COMMIT.json`` and prunes in a daemon thread, never on the training
    thread. A failure is logged and retried (backoff up to :data:`RETRY_MAX_S`) while training
    goes on; a newer sealed step replaces an older one not yet committed (its files are all
    written, so committing the newer one is what matters)."""

    RETRY_FIRST_S = 1.0
    RETRY_MAX_S = 30.0

    def __init__(self, storage: Storage, retention: Retention) -> None:
        self.storage, self.retention = storage, retention
        self.confirmed_step: int | None = None
        self.last_report: WriteReport | None = None
        self.last_error: str | None = None
        self._cond = threading.Condition()
        self._want: _Seal | None = None
        self._busy: _Seal | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def submit(self, seal: _Seal) -> None:
        with self._cond:
            self._want = seal
            self._cond.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="gpuwise-ckpt-commit", daemon=True
                )
                self._thread.start()

    def wait(self, step: int, timeout_s: float | None) -> bool:
        """True once ``step`` (or a newer one) is committed; False at the timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while self.confirmed_step is None or self.confirmed_step < step:
                if self._closed and self._want is None and self._busy is None:
                    return False  # stopped: nothing more will be written
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left if left is None else min(left, 1.0))
            return True

    def idle(self) -> bool:
        with self._cond:
            return self._want is None and self._busy is None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._want is None and not self._closed:
                    self._cond.wait()
                if self._want is None:
                    return
                seal, self._want, self._busy = self._want, None, self._want
            delay = self.RETRY_FIRST_S
            while True:
                error = self._commit(seal)
                with self._cond:
                    if error is None or self._want is not None or self._closed:
                        self._busy = None
                        self._cond.notify_all()
                        break
                    log.warning(
                        "checkpoint %s: the commit marker was not written (%s); retrying in "
                        "%.0f s while training goes on",
                        step_dir(seal.step),
                        error,
                        delay,
                    )
                    self._cond.wait(delay)
                    delay = min(delay * 2, self.RETRY_MAX_S)
                    if self._want is not None or self._closed:
                        self._busy = None
                        self._cond.notify_all()
                        break

    def _commit(self, seal: _Seal) -> str | None:
        marker = {
            "format": FORMAT_VERSION,
            "layout": "dcp",
            "step": seal.step,
            "compression": "none",
            "created_unix": time.time(),
            "files": seal.files,
            "meta": seal.meta,
            "world_size": seal.world_size,
        }
        try:
            self.storage.put_durable(
                f"{seal.folder}/{MARKER}", json.dumps(marker, sort_keys=True).encode()
            )
        except StorageError as exc:
            self.last_error = exc.message
            return exc.message
        t = time.perf_counter() - seal.started
        report = WriteReport(
            seal.step, seal.folder, sum(int(i["bytes"]) for i in seal.files.values()), 0.0, t, ()
        )
        with self._cond:
            self.confirmed_step = _newer(self.confirmed_step, seal.step)
            self.last_report = report
            self.last_error = None
            self._cond.notify_all()
        pruned = prune(self.storage, self.retention)  # never raises
        if pruned:
            with self._cond:
                if self.last_report is report:
                    self.last_report = dataclasses.replace(report, pruned_steps=pruned)
        return None


def _unmarked(step: int, why: str) -> CheckpointError:
    return CheckpointError(
        f"checkpoint {step_dir(step)}: the commit marker was not written: {why}",
        hint="the shards are written; the marker is retried in the background while the process "
        "lives, and the previous committed checkpoint is still valid (check the storage)",
    )


TELL_WAIT_S = 60.0
"""How long ``close`` holds every rank in a collective while rank 0 waits for the last marker
(well inside NCCL's 10-minute watchdog; a slower store leaves only rank 0 waiting)."""


class ShardedWriter:
    """One rank's side of DCP saves; at most one save in flight. Implements
    :class:`~gpuwise.train.writers.WriteStrategy`.

    ``seal`` is the collective step (every rank reports its files and checksums, nothing else);
    rank 0's :class:`MarkerCommitter` writes the marker and prunes in the background. So no rank
    waits on the storage inside the training loop: a hung or slow object store delays the
    commit, not the step."""

    sharded = True

    def __init__(
        self,
        storage: Storage,
        retention: Retention,
        async_mode: AsyncMode,
        hooks: WriteHooks | None = None,
    ) -> None:
        self.storage = storage
        self.retention = retention
        self.async_mode = async_mode
        self.hooks = hooks or WriteHooks()
        self.pending: _Pending | None = None
        self.sealed_step: int | None = None
        """Newest step whose files every rank wrote (its marker may still be on its way)."""
        self.committed_step: int | None = None
        """Newest step known committed: rank 0's marker thread, told to the others at a seal."""
        self._abandoned = False
        self._told_step: int | None = None
        """Newest sealed step whose outcome rank 0 broadcast (the same on every rank, unlike
        ``committed_step``, which rank 0 learns first): what ``close`` has left to tell."""
        self._marker = MarkerCommitter(storage, retention)
        self._group: Any = None
        self._stager: Any = None
        settle_gloo_at_exit()  # the writes' collectives run on gloo (a group of their own)

    @property
    def last_report(self) -> WriteReport | None:
        return self._marker.last_report

    def _staging(self) -> Any:
        """One stager for every save, caching its host copy of the state: the copy is
        allocated (and page-faulted) once, not at every save. Safe because at most one write is
        in flight: the next save stages only after the previous one finished reading it."""
        if self._stager is None:
            self._stager = _cached_stager()
        return self._stager

    def _process_group(self) -> Any:
        """A gloo group of its own for DCP: an async save finishes with collectives in its
        background thread, which must never interleave with the loop's on the default group."""
        if self._group is None:
            self._group = _dist().new_group(backend="gloo")
        return self._group

    # -- WriteStrategy ---------------------------------------------------------------------------

    def start(self) -> None:
        return None

    def in_flight(self) -> int | None:
        return self.pending.step if self.pending is not None else None

    def write_done(self) -> bool:
        return self.pending is None or self.pending.hashed.is_set()

    def poll(self) -> WriteReport | None:
        if _dist().is_initialized() and _dist().get_rank() == 0:
            self.committed_step = _newer(self.committed_step, self._marker.confirmed_step)
        return self._marker.last_report

    def save(self, request: SaveRequest) -> Literal["async", "sync"]:
        """Begin writing ``request.step`` (collective). Returns once the state is staged (async)
        or written (sync); nothing here touches the storage on the calling thread."""
        from torch.distributed.checkpoint.state_dict_saver import async_save, save

        dist = _dist()
        rank = dist.get_rank()
        step = request.step
        folder = self.storage.join(step_dir(step))
        # No clearing of an older attempt's folder (that would be storage I/O on the training
        # thread): DCP overwrites every file of this attempt, files only an older attempt wrote
        # are not listed in the new marker, and an older marker cannot vouch for new bytes
        # (its checksums no longer match, so it fails verification until the new one replaces it).
        small = b""
        if rank == 0:  # serialized now (small), written durably in the background with the shards
            buf = io.BytesIO()
            torch.save(request.train_state, buf)
            small = buf.getvalue()
        group = self._process_group()
        pending = _Pending(
            step, folder, time.perf_counter(), None, threading.Event(), meta=request.meta
        )
        writer = _writer(self.storage, folder)
        hashing = _HashingFs(writer.fs)
        writer.fs = hashing
        before_marker = self.hooks.before_marker

        def hash_own(fut: Any = None) -> None:
            try:
                if fut is not None:
                    fut.result()
                files: dict[str, dict[str, Any] | None] = dict(hashing.files)
                if rank == 0:
                    self.storage.put_durable(f"{folder}/{TRAIN_STATE}", small)
                    files[TRAIN_STATE] = {
                        "sha256": hashlib.sha256(small).hexdigest(),
                        "bytes": len(small),
                    }
                if before_marker is not None:
                    before_marker()
                if any(v is None for v in files.values()):  # a writer that seeked: read back
                    files = {k: v for k, v in rank_files(self.storage, folder, rank).items()}
                pending.files = {k: v for k, v in files.items() if v is not None}
            except BaseException as exc:  # reported at the seal, on every rank
                pending.error = (
                    pending.error or f"{type(exc).__name__}: {getattr(exc, 'message', None) or exc}"
                )
            finally:
                return_free_heap()  # what the write freed (before the next save allocates)
                pending.hashed.set()

        if self.async_mode == "sync":
            try:
                save(request.app_state, storage_writer=writer, process_group=group)
            except Exception as exc:
                pending.error = f"{type(exc).__name__}: {exc}"
                pending.hashed.set()
            else:
                hash_own()
        else:
            from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

            kind = (
                AsyncCheckpointerType.PROCESS
                if self.async_mode == "process"
                else AsyncCheckpointerType.THREAD
            )
            return_free_heap()  # room for the staging copy: freed blocks back to the OS first
            result = async_save(
                request.app_state,
                storage_writer=writer,
                async_checkpointer_type=kind,
                process_group=group,
                async_stager=self._staging(),
            )
            return_free_heap()  # what the staging freed
            future = getattr(result, "upload_completion", result)
            pending.future = future
            if isinstance(future, concurrent.futures.Future):
                future.add_done_callback(hash_own)
            else:  # pragma: no cover - other future types
                threading.Thread(target=hash_own, args=(future,), daemon=True).start()
        self.pending = pending
        return "sync" if self.async_mode == "sync" else "async"

    def seal(self, timeout_s: float | None = None) -> int | None:
        """Collective: wait for this rank's write, gather every rank's files; rank 0 hands the
        marker to its background thread. Returns the sealed step (None: nothing pending).
        Raises :class:`CheckpointError` on every rank when any rank's write failed."""
        p = self.pending
        dist = _dist()
        rank = dist.get_rank()
        confirmed = self._marker.confirmed_step if rank == 0 else None
        if p is None:
            return None
        if not p.hashed.wait(timeout_s):
            p.error = (
                p.error
                or f"the write of {step_dir(p.step)} did not finish within {timeout_s:.0f} s"
            )
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, (p.error, p.files, confirmed))
        self.pending = None
        known = gathered[0][2]
        if known is not None:
            self.committed_step = _newer(self.committed_step, known)
        errors = [f"rank {r}: {e}" for r, (e, _, _) in enumerate(gathered) if e]
        files: dict[str, dict[str, Any]] = {}
        for _, f, _ in gathered:
            files.update(f or {})
        if not errors and ".metadata" not in files:
            errors.append("DCP's .metadata is missing")
        if errors:
            raise CheckpointError(
                f"checkpoint {step_dir(p.step)} was not committed: {'; '.join(errors)}",
                hint="check the storage (space, credentials, network); "
                "the previous committed checkpoint is still valid",
            )
        self.sealed_step = p.step
        if rank == 0:
            self._marker.submit(
                _Seal(p.step, p.folder, files, p.meta or {}, len(gathered), p.started)
            )
        return p.step

    def wait(self, timeout_s: float | None) -> WriteReport | None:
        """Collective: seal the write in flight and wait (rank 0, up to ``timeout_s``) for its
        marker; every rank learns whether it was committed. Raises CheckpointError if not."""
        step, outcome = self._tell(timeout_s)
        if step is None:
            return None
        if outcome is not None:
            raise _unmarked(step, outcome[1])
        return self._marker.last_report

    def _tell(
        self, timeout_s: float | None, marker_s: float | None = None
    ) -> tuple[int | None, tuple[bool, str] | None]:
        """Collective: seal (waiting up to ``timeout_s`` for this rank's write), rank 0 waits for
        the marker of the step sealed last (up to what is left of ``timeout_s``, at most
        ``marker_s``), every rank learns the outcome: (step, None) committed, (step, (late, why))
        not (``late``: no answer yet, no error), (None, None) nothing sealed."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        step = self.seal(timeout_s)
        if step is None:  # sealed earlier (e.g. by the loop): its marker may still be on its way
            step = self.sealed_step
        if step is None:
            return None, None
        dist = _dist()
        told: list[Any] = [None]
        if dist.get_rank() == 0:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            if marker_s is not None:
                left = marker_s if left is None else min(left, marker_s)
            if not self._marker.wait(step, left):
                error = self._marker.last_error
                told[0] = (error is None, error or f"no answer within {left or 0:.0f} s")
        dist.broadcast_object_list(told, src=0)
        self._told_step = step
        if told[0] is None:
            self.committed_step = _newer(self.committed_step, step)
        return step, told[0]

    def close(self, timeout_s: float | None) -> None:
        """Collective when a write is in flight or sealed but not yet told: seal it and wait for
        its marker; every rank learns the outcome, so each leaves knowing the last committed step
        (a rank that exits believing an older one makes ``gpuwise run`` count the finished
        training as crashed). The others wait for rank 0 at most :data:`TELL_WAIT_S` (a
        collective held longer would trip NCCL's watchdog): when the marker is late, they leave
        with the step before and rank 0 waits on alone (up to ``timeout_s``). Then stop the
        marker thread. No collective after :meth:`abandon`."""
        try:
            if not self._abandoned and (
                self.pending is not None
                or (self.sealed_step is not None and self.sealed_step != self._told_step)
            ):
                start = time.monotonic()
                step, outcome = self._tell(timeout_s, marker_s=TELL_WAIT_S)
                if outcome is not None and step is not None:
                    late, why = outcome
                    rank0 = _dist().get_rank() == 0
                    left = None if timeout_s is None else timeout_s - (time.monotonic() - start)
                    if not late or (rank0 and not self._marker.wait(step, left)):
                        raise _unmarked(step, self._marker.last_error or why)
        finally:
            self._marker.close()

    def close_alone(self, timeout_s: float | None) -> None:
        """No collective (an error is on its way out and another rank may not be here): a write in
        flight stays unsealed, never committed; rank 0 waits (up to ``timeout_s``) for the marker
        of the step sealed last, then stops its marker thread."""
        self.pending = None
        try:
            if (
                not self._abandoned
                and _dist().get_rank() == 0
                and self.sealed_step is not None
                and not self._marker.wait(self.sealed_step, timeout_s)
            ):
                raise _unmarked(self.sealed_step, self._marker.last_error or "no answer")
        finally:
            self._marker.close()

    def abandon(self) -> int | None:
        """Give up on what is in flight without waiting (a notice copy was committed elsewhere);
        the step left unfinished, if any. No collective."""
        left = self.pending.step if self.pending is not None and not self.write_done() else None
        if left is None and not self._marker.idle():
            left = self.sealed_step
        self.pending = None
        self._abandoned = True
        self._marker.close()
        return left


def _cached_stager() -> Any:
    """DCP's ``BlockingAsyncStager`` with its cache, pinned only where there is a GPU (its own
    cached path pins unconditionally, which fails on a machine without one)."""
    from torch.distributed._state_dict_utils import _copy_state_dict
    from torch.distributed.checkpoint.staging import BlockingAsyncStager

    class CachedStager(BlockingAsyncStager):
        def stage(self, state_dict: Any) -> Any:
            if self.state_dict_cache is not None:
                try:
                    return _copy_state_dict(state_dict, self.state_dict_cache)
                except Exception:  # the state changed shape (e.g. optimizer state appeared)
                    self.state_dict_cache = None
                    gc.collect()
            return_free_heap()  # the old cache's pages, before the new one is allocated
            self.state_dict_cache = host_cache(state_dict, pin_memory=torch.cuda.is_available())
            return _copy_state_dict(state_dict, self.state_dict_cache)

    return CachedStager(cache_staged_state_dict=True)


def host_cache(state_dict: Any, pin_memory: bool) -> Any:
    """A state dict shaped like ``state_dict`` whose tensors are new, empty host tensors (a
    DTensor keeps its spec around a host local tensor): the staging copy's destination.

    DCP's ``_create_cpu_state_dict`` builds each DTensor's entry from a full copy of it (a deep
    copy on the CPU, ``.to("cpu")`` from a GPU), whose local tensor it then replaces. Those
    copies are freed only by the cycle collector, so building the cache of a rank's whole
    state could briefly hold up to twice its share (measured: up to 1.54x extra RSS on 4 FSDP2
    ranks at the first save). Here nothing is copied. A ShardedTensor (FSDP1) state falls back
    to DCP's function."""
    from torch.distributed._shard.sharded_tensor.api import ShardedTensor
    from torch.distributed._state_dict_utils import _create_cpu_state_dict
    from torch.distributed.tensor import DTensor

    def empty(t: Any) -> Any:
        if t.dim() == 0:
            return torch.tensor(0, dtype=t.dtype)
        out = torch.empty(tuple(t.size()), dtype=t.dtype)
        return out.pin_memory() if pin_memory and out.numel() else out

    def build(obj: Any) -> Any:
        if isinstance(obj, ShardedTensor):
            raise _Fallback
        if isinstance(obj, DTensor):
            if obj.dim() == 0:
                return obj
            return DTensor(empty(obj._local_tensor), obj._spec, requires_grad=False)  # type: ignore[no-untyped-call]
        if isinstance(obj, torch.Tensor):
            return empty(obj)
        if isinstance(obj, dict):
            return {k: build(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            items = [build(v) for v in obj]
            return tuple(items) if isinstance(obj, tuple) else items
        return obj  # int, float, str, bytes, None: kept as DCP keeps them

    try:
        return build(state_dict)
    except _Fallback:
        return _create_cpu_state_dict(state_dict, pin_memory=pin_memory)


class _Fallback(Exception):
    """A value :func:`host_cache` leaves to DCP's own function."""


def verify(storage: Storage, step: int, marker: dict[str, Any]) -> None:
    """Check every file of a DCP checkpoint against its marker; raise CheckpointError if any fails."""
    folder = storage.join(step_dir(step))
    if ".metadata" not in marker["files"] or TRAIN_STATE not in marker["files"]:
        raise CheckpointError(
            f"{step_dir(step)}'s marker lists no .metadata or {TRAIN_STATE}",
            hint="it was written by another tool; an older checkpoint is used instead",
        )
    for name, info in marker["files"].items():
        try:
            data = storage.get(f"{folder}/{name}")
        except StorageError as exc:
            raise CheckpointError(
                f"{step_dir(step)}/{name} cannot be read: {exc.message}",
                hint="the file is missing; an older checkpoint is used instead",
            ) from exc
        if len(data) != info["bytes"] or hashlib.sha256(data).hexdigest() != info["sha256"]:
            raise CheckpointError(
                f"{step_dir(step)}/{name} does not match its checksum",
                hint="the file is damaged; an older checkpoint is used instead",
            )


def read_train_state(storage: Storage, step: int, weights_only: bool) -> dict[str, Any]:
    data = storage.get(f"{storage.join(step_dir(step))}/{TRAIN_STATE}")
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=weights_only)
    except Exception as exc:
        raise CheckpointError(
            f"{step_dir(step)}/{TRAIN_STATE} cannot be loaded: {exc}",
            hint="pass weights_only=False only for checkpoints you trust",
        ) from exc
    if not isinstance(state, dict):
        raise CheckpointError(
            f"{step_dir(step)}/{TRAIN_STATE} is not a dict",
            hint="an older checkpoint is used instead",
        )
    return state


def load_app_state(storage: Storage, step: int, model: Any, optimizer: Any) -> None:
    """Load model/optimizer shards of ``step`` into the (possibly differently sharded) model."""
    from torch.distributed.checkpoint.state_dict_loader import load

    state = app_state(model, optimizer)
    folder = storage.join(step_dir(step))
    no_dist = not (torch.distributed.is_available() and torch.distributed.is_initialized())
    load(state, storage_reader=_reader(storage, folder), no_dist=no_dist)
    apply_app_state(model, optimizer, state)


def is_dcp(marker: dict[str, Any] | None) -> bool:
    return bool(marker) and marker.get("layout") == "dcp"  # type: ignore[union-attr]


__all__ = [
    "ShardedWriter",
    "app_state",
    "apply_app_state",
    "is_dcp",
    "load_app_state",
    "read_marker",
    "read_train_state",
    "verify",
]
