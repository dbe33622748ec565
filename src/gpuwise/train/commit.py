"""The checkpoint commit protocol: layout, marker, checksums, retention. Runs in any process.

Layout under the root::

    step-000000120/state.pt.zst      the shard(s): torch.save of the state, optionally zstd
    step-000000120/COMMIT.json       the commit marker, written last: step, sha256 and size
                                     of every shard, compression, format version

A folder counts only once ``COMMIT.json`` exists and every checksum in it matches (torchtitan's
``.metadata`` rule). Local files are streamed to a temporary name (the checksum taken on the
way, the file never whole in memory), fsynced and renamed; object stores
get one PUT per object, shards first and the marker last. Re-saving a step first deletes its
marker, so a half-rewritten folder is never taken for a committed one. Pruning deletes the
marker first for the same reason.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal, cast

from gpuwise.errors import CheckpointError, StorageError
from gpuwise.train.storage import Storage

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
MARKER = "COMMIT.json"
_STEP_DIR = re.compile(r"^step-(\d{9})$")

Compression = Literal["none", "zstd"]


def step_dir(step: int) -> str:
    return f"step-{step:09d}"


@dataclass(frozen=True)
class WriteReport:
    """What one committed save cost."""

    step: int
    """Training step of the checkpoint."""
    path: str
    """Folder of the checkpoint."""
    bytes_written: int
    """Size of the shards after compression."""
    serialize_s: float
    """Seconds spent in torch.save (+ compression); a local file is streamed to its temporary
    name meanwhile, so this includes writing it (not its fsync)."""
    write_s: float
    """Seconds spent making the shard durable and writing the marker (includes fsync)."""
    pruned_steps: tuple[int, ...]
    """Older checkpoints deleted by retention after this commit."""


@dataclass(frozen=True)
class Retention:
    """Which committed checkpoints to keep: the last ``keep_last`` plus every ``keep_every``-th."""

    keep_last: int = 2
    """Newest checkpoints kept; at least 2 (the newest may still be in flight elsewhere)."""
    keep_every: int | None = None
    """Also keep steps that are a multiple of this, forever; None keeps none extra."""

    def __post_init__(self) -> None:
        if self.keep_last < 2:
            raise CheckpointError(
                f"keep_last={self.keep_last} is too small",
                hint="keep at least 2 checkpoints: the newest may be half-written",
            )
        if self.keep_every is not None and self.keep_every < 1:
            raise CheckpointError(
                f"keep_every={self.keep_every} must be a positive step count",
                hint="pass None or a positive integer",
            )

    def to_delete(self, committed_steps: Iterable[int]) -> list[int]:
        steps = sorted(set(committed_steps), reverse=True)
        keep = set(steps[: self.keep_last])
        if self.keep_every:
            keep |= {s for s in steps if s % self.keep_every == 0}
        return sorted(s for s in steps if s not in keep)


def serialize(state: Any, compress: Compression) -> bytes | memoryview:
    """The whole checkpoint file in memory (object stores, which take one PUT per object)."""
    from gpuwise.train._torch import torch

    buf = io.BytesIO()
    torch.save(state, buf)
    data: bytes | memoryview = buf.getbuffer()  # no copy of a GB-sized state
    if compress == "zstd":
        import zstandard

        data = zstandard.ZstdCompressor(level=3).compress(data)
    return data


class HashingFile:
    """A write-only stream over ``raw`` that takes the sha256 and size of what passes through:
    ``torch.save`` streams a checkpoint file through it, so the checksum costs no second pass
    and the file is never held in memory (torch hands over each tensor's bytes as a view)."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.sha256 = hashlib.sha256()
        self.nbytes = 0

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.sha256.update(view)
        self.raw.write(view)
        self.nbytes += view.nbytes
        return view.nbytes

    def flush(self) -> None:
        self.raw.flush()


def serialize_into(state: Any, compress: Compression, out: BinaryIO) -> tuple[str, int]:
    """``torch.save`` of ``state`` streamed into ``out`` (zstd-compressed on the way when asked);
    the sha256 (hex) and size of the bytes written to ``out``."""
    from gpuwise.train._torch import torch

    hashing = HashingFile(out)
    stream = cast(BinaryIO, hashing)  # write and flush are all torch.save and zstd use
    if compress == "zstd":
        import zstandard

        with zstandard.ZstdCompressor(level=3).stream_writer(stream, closefd=False) as z:
            torch.save(state, z)
    else:
        torch.save(state, stream)
    hashing.flush()
    return hashing.sha256.hexdigest(), hashing.nbytes


def deserialize(data: bytes, compress: str, weights_only: bool) -> Any:
    from gpuwise.train._torch import torch

    if compress == "zstd":
        import zstandard

        # a streamed frame does not record its size, which decompress() needs: stream it back
        data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=weights_only)


def write_checkpoint(
    storage: Storage,
    step: int,
    state: Any,
    *,
    compress: Compression = "none",
    meta: dict[str, Any] | None = None,
    retention: Retention | None = None,
    before_marker: Callable[[], None] | None = None,
) -> WriteReport:
    """Serialize ``state`` and commit it as ``step``; then apply ``retention``.

    ``before_marker``: a test hook run between the shard and the marker (a rehearsal of slow
    storage, so crash tests can land in that window)."""
    t0 = time.perf_counter()
    folder = storage.join(step_dir(step))
    shard = "state.pt" + (".zst" if compress == "zstd" else "")
    storage.makedirs(folder)
    storage.remove(
        f"{folder}/{MARKER}"
    )  # an older commit of this step must not vouch for new bytes
    if storage.is_local:  # streamed to a temporary file, hashed on the way: never all in memory
        with storage.open_durable(f"{folder}/{shard}") as out:
            sha256, nbytes = serialize_into(state, compress, out)
            t1 = time.perf_counter()
    else:  # object-store clients want the object's bytes
        data = bytes(serialize(state, compress))
        t1 = time.perf_counter()
        sha256, nbytes = hashlib.sha256(data).hexdigest(), len(data)
        storage.put_durable(f"{folder}/{shard}", data)
        del data
    if before_marker is not None:
        before_marker()
    marker = {
        "format": FORMAT_VERSION,
        "layout": "file",
        "step": step,
        "compression": compress,
        "created_unix": time.time(),
        "files": {shard: {"sha256": sha256, "bytes": nbytes}},
        "meta": meta or {},
    }
    storage.put_durable(f"{folder}/{MARKER}", json.dumps(marker, sort_keys=True).encode())
    t2 = time.perf_counter()
    pruned: tuple[int, ...] = ()
    if retention is not None:
        pruned = prune(storage, retention)  # never raises: a failed prune does not fail the commit
    return WriteReport(step, folder, nbytes, t1 - t0, t2 - t1, pruned)


def listed_steps(storage: Storage) -> list[int]:
    """Every ``step-N`` folder under the root, committed or not, newest first."""
    steps = []
    for name in storage.list_dirs():
        m = _STEP_DIR.match(name)
        if m:
            steps.append(int(m.group(1)))
    return sorted(steps, reverse=True)


def read_marker(storage: Storage, step: int) -> dict[str, Any] | None:
    path = f"{storage.join(step_dir(step))}/{MARKER}"
    if not storage.exists(path):
        return None
    try:
        marker = json.loads(storage.get(path))
    except (ValueError, StorageError):
        return None
    if (
        not isinstance(marker, dict)
        or marker.get("step") != step
        or not isinstance(marker.get("files"), dict)
    ):
        return None
    return marker


def committed_steps(storage: Storage) -> list[int]:
    """Steps whose marker exists and parses (checksums are verified at load), newest first."""
    return [s for s in listed_steps(storage) if read_marker(storage, s) is not None]


def read_checkpoint(
    storage: Storage, step: int, *, weights_only: bool = True
) -> tuple[Any, dict[str, Any]]:
    """Load one checkpoint after checking its marker and every checksum; raise if any fails."""
    marker = read_marker(storage, step)
    if marker is None:
        raise CheckpointError(
            f"{step_dir(step)} has no valid commit marker",
            hint="it was never finished; an older checkpoint is used instead",
        )
    folder = storage.join(step_dir(step))
    if marker.get("layout", "file") != "file":
        raise CheckpointError(
            f"{step_dir(step)} is a sharded (DCP) checkpoint",
            hint="load it through Checkpointer.restore",
        )
    ((shard, info),) = marker["files"].items()
    data = storage.get(f"{folder}/{shard}")
    if len(data) != info["bytes"] or hashlib.sha256(data).hexdigest() != info["sha256"]:
        raise CheckpointError(
            f"{step_dir(step)}/{shard} does not match its checksum",
            hint="the file is damaged; an older checkpoint is used instead",
        )
    try:
        state = deserialize(data, marker.get("compression", "none"), weights_only)
    except Exception as exc:
        raise CheckpointError(
            f"{step_dir(step)}/{shard} cannot be loaded: {exc}",
            hint="pass weights_only=False only for checkpoints you trust",
        ) from exc
    return state, marker


def intact(storage: Storage, step: int, marker: dict[str, Any] | None = None) -> bool:
    """Marker valid and every file it lists present with its recorded size (a cheap check:
    sizes, not checksums; the checksums are verified when a checkpoint is loaded)."""
    marker = marker if marker is not None else read_marker(storage, step)
    if marker is None:
        return False
    folder = storage.join(step_dir(step))
    try:
        return all(
            storage.size(f"{folder}/{name}") == int(info.get("bytes", -1))
            for name, info in marker["files"].items()
        )
    except (StorageError, TypeError, ValueError, AttributeError):
        return False


def prune(storage: Storage, retention: Retention) -> tuple[int, ...]:
    """Delete checkpoints outside ``retention``; never fails (a failed prune is logged and the
    next commit tries again — the checkpoint just committed stays committed).

    Retention counts only *intact* checkpoints (:func:`intact`): a damaged one must not take the
    place of a good one, or saving would prune the only checkpoint that still loads. Damaged and
    unfinished folders older than the newest intact one are deleted; newer ones are left (a later
    save rewrites them)."""
    try:
        return _prune(storage, retention)
    except StorageError as exc:
        log.warning("could not prune old checkpoints: %s", exc.message)
        return ()


def _prune(storage: Storage, retention: Retention) -> tuple[int, ...]:
    listed = listed_steps(storage)
    good = [s for s in listed if intact(storage, s)]
    doomed = retention.to_delete(good)
    newest = good[0] if good else None
    stale = [s for s in listed if s not in good and newest is not None and s < newest]
    removed = []
    for step in [*doomed, *stale]:
        folder = storage.join(step_dir(step))
        try:
            storage.remove(
                f"{folder}/{MARKER}"
            )  # marker first: a half-deleted folder is never valid
            storage.remove_tree(folder)
        except StorageError as exc:  # pruning never fails a commit; the next one tries again
            log.warning("could not prune %s: %s", step_dir(step), exc.message)
            continue
        if step in doomed:
            removed.append(step)
    return tuple(sorted(removed))
