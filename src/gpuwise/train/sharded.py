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
is complete and intact. The commit is collective — every rank calls :meth:`ShardedWriter.commit`
at the same step (``resilient`` does it at the first step boundary where every rank's write is
done; a direct ``Checkpointer`` user does it at the next ``save``/``wait``/``close``).

Async: ``dcp.async_save`` with a background *thread* and DCP's staging copy (the loop pays only
for the copy). DCP's process-based saver (``AsyncCheckpointerType.PROCESS``) hung in our tests
on torch 2.13 CPU/gloo (the save never completed within 3 minutes), so it is opt-in
(``async_mode="process"``), not the default.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

from gpuwise.errors import CheckpointError, StorageError
from gpuwise.train._torch import torch
from gpuwise.train.commit import (
    FORMAT_VERSION,
    MARKER,
    Retention,
    WriteReport,
    prune,
    read_marker,
    step_dir,
)
from gpuwise.train.storage import Storage, storage_errors

log = logging.getLogger(__name__)

AsyncMode = Literal["thread", "process", "sync"]
TRAIN_STATE = "train_state.pt"


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
    """sha256 and size of the files this rank is responsible for in ``folder``."""
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


class ShardedWriter:
    """One rank's side of DCP saves with our commit; at most one save in flight."""

    def __init__(self, storage: Storage, retention: Retention, async_mode: AsyncMode) -> None:
        self.storage = storage
        self.retention = retention
        self.async_mode = async_mode
        self.pending: _Pending | None = None
        self.last_report: WriteReport | None = None
        self.committed_step: int | None = None
        self._group: Any = None

    def _process_group(self) -> Any:
        """A gloo group of its own for DCP: an async save finishes with collectives in its
        background thread, which must never interleave with the loop's on the default group."""
        if self._group is None:
            self._group = _dist().new_group(backend="gloo")
        return self._group

    # -- save ----------------------------------------------------------------------------------

    def start(
        self, step: int, state: dict[str, Any], train_state: dict[str, Any], meta: dict[str, Any]
    ) -> None:
        """Begin writing ``step`` (collective). Returns once the state is staged (async) or written."""
        from torch.distributed.checkpoint.state_dict_saver import async_save, save

        dist = _dist()
        rank = dist.get_rank()
        folder = self.storage.join(step_dir(step))
        early_error: str | None = None
        if rank == 0:  # an older attempt at this step must not vouch for new bytes, nor leave files
            try:
                with storage_errors(f"clearing {folder}"):
                    self.storage.remove(f"{folder}/{MARKER}")
                    self.storage.remove_tree(folder)
                self.storage.makedirs(folder)
            except (
                StorageError
            ) as exc:  # still take part in the collective save; fail at the commit
                early_error = exc.message
        small = b""
        if rank == 0:  # serialized now (small), written durably in the background with the shards
            buf = io.BytesIO()
            torch.save(train_state, buf)
            small = buf.getvalue()
        # No barrier needed before writing: DCP's planning is a collective that waits for rank 0,
        # which enters it only after clearing the folder, so no rank writes into it before then.
        group = self._process_group()
        pending = _Pending(
            step, folder, time.perf_counter(), None, threading.Event(), meta=meta, error=early_error
        )
        writer = _writer(self.storage, folder)

        def hash_own(fut: Any = None) -> None:
            try:
                if fut is not None:
                    fut.result()
                if rank == 0:
                    self.storage.put_durable(f"{folder}/{TRAIN_STATE}", small)
                slow = float(os.environ.get("GPUWISE_CKPT_SLOW_WRITE_S", "0") or 0)
                if slow > 0:  # rehearsal knob: widen the window between shards and marker
                    time.sleep(slow)
                pending.files = rank_files(self.storage, folder, rank)
            except BaseException as exc:  # reported at the commit, on every rank
                pending.error = (
                    pending.error or f"{type(exc).__name__}: {getattr(exc, 'message', None) or exc}"
                )
            finally:
                pending.hashed.set()

        if self.async_mode == "sync":
            try:
                save(state, storage_writer=writer, process_group=group)
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
            result = async_save(
                state, storage_writer=writer, async_checkpointer_type=kind, process_group=group
            )
            future = getattr(result, "upload_completion", result)
            pending.future = future
            if isinstance(future, concurrent.futures.Future):
                future.add_done_callback(hash_own)
            else:  # pragma: no cover - other future types
                threading.Thread(target=hash_own, args=(future,), daemon=True).start()
        self.pending = pending

    def locally_done(self) -> bool:
        return self.pending is None or self.pending.hashed.is_set()

    def commit(self, timeout_s: float | None = None) -> WriteReport | None:
        """Collective: wait for this rank's write, gather every rank's files, rank 0 commits.

        Returns the report on success; raises :class:`CheckpointError` (on every rank) when any
        rank's write or the marker failed. None when nothing was pending."""
        p = self.pending
        if p is None:
            return None
        if not p.hashed.wait(timeout_s):
            p.error = (
                p.error
                or f"the write of {step_dir(p.step)} did not finish within {timeout_s:.0f} s"
            )
        dist = _dist()
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, (p.error, p.files))
        self.pending = None
        errors = [f"rank {r}: {e}" for r, (e, _) in enumerate(gathered) if e]
        outcome: list[Any] = [None]
        if dist.get_rank() == 0:
            if errors:
                outcome[0] = ("error", "; ".join(errors))
            else:
                outcome[0] = self._write_marker(p, [f for _, f in gathered])
        dist.broadcast_object_list(outcome, src=0)
        kind, payload = outcome[0]
        if kind == "error":
            raise CheckpointError(
                f"checkpoint {step_dir(p.step)} was not committed: {payload}",
                hint="check the storage (space, credentials, network); "
                "the previous committed checkpoint is still valid",
            )
        self.last_report = payload
        self.committed_step = p.step
        return payload  # type: ignore[no-any-return]

    def _write_marker(
        self, p: _Pending, per_rank: list[dict[str, dict[str, Any]]]
    ) -> tuple[str, Any]:
        files: dict[str, dict[str, Any]] = {}
        for f in per_rank:
            files.update(f or {})
        if ".metadata" not in files:
            return "error", "DCP's .metadata is missing"
        marker = {
            "format": FORMAT_VERSION,
            "layout": "dcp",
            "step": p.step,
            "compression": "none",
            "created_unix": time.time(),
            "files": files,
            "meta": p.meta or {},
            "world_size": len(per_rank),
        }
        try:
            self.storage.put_durable(
                f"{p.folder}/{MARKER}", json.dumps(marker, sort_keys=True).encode()
            )
        except StorageError as exc:
            return "error", exc.message
        t = time.perf_counter() - p.started
        pruned = prune(self.storage, self.retention)
        return "ok", WriteReport(
            p.step, p.folder, sum(int(i["bytes"]) for i in files.values()), 0.0, t, pruned
        )


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
