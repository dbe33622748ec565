"""One-process saves at DCP's memory cost: the file streamed to disk while it is hashed, and
written by a thread (the writer process only when asked)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from gpuwise.errors import StorageError
from gpuwise.train import Checkpointer, Progress
from gpuwise.train import commit as commit_mod
from gpuwise.train import writers as writers_mod
from gpuwise.train.commit import MARKER, deserialize, read_checkpoint, step_dir, write_checkpoint
from gpuwise.train.storage import Storage
from gpuwise.train.writers import InlineWriter, ProcessWriter, ThreadWriter, WriteHooks


def _state() -> dict[str, Any]:
    torch.manual_seed(0)
    return {
        "w": torch.randn(64, 32),
        "ids": torch.arange(7),
        "half": torch.randn(3, 2).to(torch.bfloat16),
        "mask": torch.tensor([True, False, True]),
        "empty": torch.empty(0, 4),
        "note": "hi",
    }


def _equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype
        if isinstance(a[k], torch.Tensor)
        else a[k] == b[k]
        for k in a
    )


@pytest.mark.parametrize("compress", ["none", "zstd"])
def test_a_local_shard_is_streamed_and_its_checksum_is_the_files(
    compress: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No whole-file buffer on local disk (``serialize`` builds one: it must not be called);
    the checksum taken on the way is that of the file as it lies on disk."""

    def whole_file(*args: Any, **kwargs: Any) -> bytes:
        raise AssertionError("the whole file was built in memory")

    monkeypatch.setattr(commit_mod, "serialize", whole_file)
    storage = Storage(str(tmp_path / "ck"))
    report = write_checkpoint(storage, 5, _state(), compress=compress)  # type: ignore[arg-type]
    folder = tmp_path / "ck" / step_dir(5)
    marker = json.loads((folder / MARKER).read_text())
    ((name, info),) = marker["files"].items()
    data = (folder / name).read_bytes()
    assert info == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    assert report.bytes_written == len(data)
    assert [p.name for p in folder.iterdir() if p.name.endswith(".tmp")] == []
    state, _ = read_checkpoint(storage, 5)
    assert _equal(state, _state())


def test_a_checkpoint_compressed_in_one_piece_still_loads() -> None:
    """Files written before streaming hold one zstd frame that records its size."""
    import zstandard

    buf = io.BytesIO()
    torch.save(_state(), buf)
    old = zstandard.ZstdCompressor(level=3).compress(buf.getvalue())
    assert _equal(deserialize(old, "zstd", weights_only=True), _state())


def test_a_stream_that_fails_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    target = tmp_path / "state.pt"
    target.write_bytes(b"committed before")
    with (
        pytest.raises(RuntimeError, match="pickling failed"),
        storage.open_durable(str(target)) as out,
    ):
        out.write(b"half a file")
        raise RuntimeError("pickling failed")
    with (
        pytest.raises(StorageError, match="No space left"),
        storage.open_durable(str(target)) as out,
    ):
        out.write(b"half a file")
        raise OSError(28, "No space left on device")
    assert os.listdir(tmp_path) == ["state.pt"]
    assert target.read_bytes() == b"committed before"
    with storage.open_durable(str(target)) as out:
        out.write(b"new")
    assert os.listdir(tmp_path) == ["state.pt"] and target.read_bytes() == b"new"


def test_object_stores_cannot_be_streamed_to() -> None:
    with (
        pytest.raises(StorageError, match="put_durable"),
        Storage("s3://b/r").open_durable("b/r/x"),
    ):
        pass


@pytest.mark.parametrize(
    ("kwargs", "kind"),
    [
        ({}, ThreadWriter),
        ({"async_mode": "thread"}, ThreadWriter),
        ({"async_mode": "process"}, ProcessWriter),
        ({"writer_start": "exec"}, ProcessWriter),  # a start method means a process
        ({"async_write": False}, InlineWriter),
    ],
)
def test_one_process_writes_in_a_thread_unless_asked(
    kwargs: dict[str, Any], kind: type, tmp_path: Path
) -> None:
    assert type(Checkpointer(tmp_path, **kwargs).writer) is kind


def _held(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Make the writer thread wait for the returned event before it writes anything."""
    go = threading.Event()
    real = writers_mod.write_checkpoint

    def held(*args: Any, **kwargs: Any) -> Any:
        assert go.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(writers_mod, "write_checkpoint", held)
    return go


def test_the_writer_thread_writes_the_state_as_it_was_at_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop may change its tensors the moment ``save`` returns: the thread writes the
    copy taken then, every dtype intact; no writer process, no shared-memory file."""
    import psutil

    go = _held(monkeypatch)
    state = _state()
    expected = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in state.items()}
    with Checkpointer(tmp_path / "ck") as ck:
        assert ck.save(Progress(1), state=state).mode == "async"
        state["w"].add_(1.0)  # training goes on while the write has not started
        state["ids"].zero_()
        assert ck.in_flight == 1
        assert ck.save(Progress(2), state=state, if_busy="skip").mode == "skipped"
        assert psutil.Process().children() == []
        assert not [
            n for n in os.listdir("/dev/shm") if n.startswith(f"gpuwise-snap-{os.getpid()}-")
        ]
        go.set()
        report = ck.wait()
        assert report is not None and report.step == 1 and ck.committed_step == 1
    back, _ = read_checkpoint(Storage(str(tmp_path / "ck")), 1)
    assert _equal(back, expected)


def test_a_failed_thread_write_is_raised_on_the_next_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuwise.train import CheckpointWriteError

    root = tmp_path / "ck"
    with Checkpointer(root) as ck:
        (root / step_dir(2)).parent.mkdir(parents=True)
        (root / step_dir(2)).write_text("a file where the folder should be")
        assert ck.save(Progress(2), state=_state()).mode == "async"
        with pytest.raises(CheckpointWriteError, match="step-000000002 was not written"):
            ck.wait()
        assert ck.save(Progress(3), state=_state(), block=True).mode == "async"
        assert ck.committed_steps() == [3]


def test_abandon_leaves_the_thread_write_uncommitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    go = _held(monkeypatch)
    ck = Checkpointer(tmp_path / "ck", hooks=WriteHooks())
    ck.save(Progress(4), state=_state())
    assert ck.abandon() == 4
    assert ck.in_flight is None and ck.committed_steps() == []
    go.set()  # let the thread end (its write may still commit: the process would be exiting)


def test_freed_tensor_memory_is_handed_back_to_the_os() -> None:
    """What a save frees (staging, DCP's write path) must leave RSS: glibc keeps freed
    tensor-sized heap blocks resident once its mmap threshold has risen."""
    from gpuwise.train.snapshot import _malloc_trim, return_free_heap

    if _malloc_trim() is None or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        pytest.skip("no glibc malloc_trim here, or a fixed mmap threshold (nothing to hand back)")

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    first = torch.ones(2**19)
    del first  # a freed mmapped block raises glibc's mmap threshold
    blocks = [torch.ones(2**19) for _ in range(64)]  # 2 MiB each, now from the heap
    above = torch.ones(2**19)  # keeps them below the top of the heap (no automatic trim)
    del blocks
    before = rss()
    return_free_heap()
    assert before - rss() >= 64 * 2**20  # at least half of the 128 MiB freed
    del above
