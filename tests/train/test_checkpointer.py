"""Checkpointer: round trips on every storage, the commit protocol, fallback, retention, errors."""

from __future__ import annotations

import json
import logging
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gpuwise.errors import CheckpointError, InputError
from gpuwise.train import Checkpointer, CheckpointWriteError, Progress, Retention
from gpuwise.train.commit import MARKER, step_dir


def _model() -> tuple[torch.nn.Module, torch.optim.Optimizer, Any, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(3):
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    return model, opt, sched, scaler


def _fresh() -> tuple[torch.nn.Module, torch.optim.Optimizer, Any, Any]:
    torch.manual_seed(123)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return (
        model,
        opt,
        torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5),
        torch.amp.GradScaler("cpu"),
    )


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(
        torch.equal(x, y)
        for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


@pytest.mark.parametrize(
    ("where", "async_write", "compress"),
    [
        # the default: background writer process (slow: it starts one)
        pytest.param("local", True, "none", marks=pytest.mark.slow),
        # synchronous, compressed (slow: zstd over the whole state, 3-14 s)
        pytest.param("local", False, "zstd", marks=pytest.mark.slow),
        ("memory", True, "none"),  # memory:// is always written in-process
        # real S3 API (moto on loopback), object-store commit order (slow: starts the server)
        pytest.param("s3", True, "zstd", marks=pytest.mark.slow),
    ],
)
def test_round_trip_restores_everything(
    where: str, async_write: bool, compress: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    opts: dict[str, Any] = {}
    if where == "local":
        url = str(tmp_path / "ck")
    elif where == "memory":
        url = f"memory://rt-{os.getpid()}-{random.random()}"
    else:
        s3 = request.getfixturevalue("s3")
        url, opts = "s3://ckpt/run", s3.options
    model, opt, sched, scaler = _model()
    random.seed(7)
    np.random.seed(7)
    torch.manual_seed(7)
    with Checkpointer(url, storage_options=opts, async_write=async_write, compress=compress) as ck:  # type: ignore[arg-type]
        ck.save(
            Progress(3, epoch=1, batch_in_epoch=5, tokens_seen=99),
            model=model,
            optimizer=opt,
            scheduler=sched,
            scaler=scaler,
            extras={"note": "hi", "losses": [1.5, 0.5]},
            block=True,
        )
        expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
        m2, o2, s2, sc2 = _fresh()
        restored = ck.restore(model=m2, optimizer=o2, scheduler=s2, scaler=sc2)
    assert restored is not None and restored.step == 3
    assert restored.progress == Progress(3, 1, 5, 99)
    assert restored.extras == {"note": "hi", "losses": [1.5, 0.5]}
    assert restored.skipped == ()
    assert _same(model, m2)
    assert sched.state_dict() == s2.state_dict()
    assert sc2.state_dict() == scaler.state_dict()
    for group_a, group_b in zip(opt.state.values(), o2.state.values(), strict=True):
        assert all(torch.equal(group_a[k], group_b[k]) for k in group_a)
    # Python, NumPy and torch generators continue exactly where they were at the save
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected


def test_nothing_to_restore_returns_none(tmp_path: Path) -> None:
    with Checkpointer(tmp_path / "empty") as ck:
        assert ck.restore(model=torch.nn.Linear(2, 2)) is None


@pytest.mark.parametrize(
    "damage",
    [
        "no-marker",  # killed between shard and marker
        "bad-checksum",  # shard changed after the commit (bit rot, partial overwrite)
        "truncated-shard",  # shard cut short
        "garbage-marker",  # marker half-written by a non-atomic store
    ],
)
def test_damaged_newest_falls_back_to_previous_and_says_so(
    damage: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model, *_ = _model()
    root = tmp_path / "ck"
    with Checkpointer(root, async_write=False) as ck:
        ck.save(1, model=model)
        with torch.no_grad():
            model[0].weight.add_(1.0)
        ck.save(2, model=model)
    newest = root / step_dir(2)
    shard = newest / "state.pt"
    if damage == "no-marker":
        (newest / MARKER).unlink()
    elif damage == "bad-checksum":
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    elif damage == "truncated-shard":
        shard.write_bytes(shard.read_bytes()[:100])
    else:
        (newest / MARKER).write_text('{"step": 2, "fil')
    m2 = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    with caplog.at_level(logging.WARNING), Checkpointer(root) as ck:
        restored = ck.restore(model=m2)
    assert restored is not None and restored.step == 1
    assert len(restored.skipped) == 1 and "step-000000002" in restored.skipped[0]
    assert "falling back" in caplog.text
    assert not torch.equal(
        m2[0].weight, model[0].weight
    )  # the damaged, newer weights were not used


class Custom:
    """An arbitrary pickled object: what weights_only=True refuses to unpickle."""


@pytest.mark.parametrize(
    "value",
    [
        Custom(),  # an arbitrary pickled object
        np.float64(0.5),  # a NumPy scalar: the silent restart-from-scratch of the bug report
    ],
)
def test_extras_that_weights_only_refuses_fail_at_save_by_name(
    value: object, tmp_path: Path
) -> None:
    with (
        Checkpointer(tmp_path / "ck", async_write=False) as ck,
        pytest.raises(CheckpointError, match=r"extras\['obj'\]"),
    ):
        ck.save(1, model=torch.nn.Linear(2, 2), extras={"obj": value})
    assert Checkpointer(tmp_path / "ck").committed_steps() == []


def test_weights_only_refuses_pickled_objects_loudly(tmp_path: Path) -> None:
    trusting = Checkpointer(tmp_path / "ck", async_write=False, weights_only=False)
    trusting.save(1, model=torch.nn.Linear(2, 2), extras={"obj": Custom()})
    found = trusting.load_latest()
    assert found is not None and isinstance(found[0]["extras"]["obj"], Custom)
    with pytest.raises(CheckpointError, match="can be loaded"):  # never a silent start from scratch
        Checkpointer(tmp_path / "ck").load_latest()


@pytest.mark.parametrize(
    ("keep_last", "keep_every", "steps", "kept"),
    [
        (2, None, [1, 2, 3, 4, 5], [4, 5]),  # the last two
        (3, None, [1, 2, 3, 4, 5], [3, 4, 5]),  # the last three
        (2, 2, [1, 2, 3, 4, 5], [2, 4, 5]),  # plus every 2nd forever
        (2, 10, [5, 10, 15, 20, 25], [10, 20, 25]),  # milestones survive
    ],
)
def test_retention(
    keep_last: int, keep_every: int | None, steps: list[int], kept: list[int], tmp_path: Path
) -> None:
    with Checkpointer(tmp_path / "ck", keep_last=keep_last, keep_every=keep_every) as ck:
        for s in steps:
            ck.save(s, model=torch.nn.Linear(2, 2), block=True)
        assert sorted(ck.committed_steps()) == kept
    assert sorted(os.listdir(tmp_path / "ck")) == [step_dir(s) for s in kept]


def test_keep_last_below_two_is_refused() -> None:
    with pytest.raises(CheckpointError, match="keep at least 2"):
        Retention(keep_last=1)


def test_bad_compression_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="zstd"):
        Checkpointer(tmp_path, compress="lz4")  # type: ignore[arg-type]


def test_write_error_surfaces_on_next_call_and_previous_stays_valid(tmp_path: Path) -> None:
    root = tmp_path / "ck"
    model = torch.nn.Linear(4, 4)
    ck = Checkpointer(root)
    ck.save(1, model=model, block=True)
    (root / step_dir(2)).write_text("a file where the folder should be")  # the next write must fail
    stats = ck.save(2, model=model)  # returns at once: the failure is not known yet
    assert stats.mode == "async"
    with pytest.raises(CheckpointWriteError, match="step-000000002 was not written"):
        ck.save(3, model=model)
    assert ck.committed_steps() == [1]
    assert ck.save(3, model=model, block=True).step == 3  # and it keeps working afterwards
    ck.close()
    assert Checkpointer(root).load_latest() is not None


def test_marker_lists_checksums_and_is_written_last(tmp_path: Path) -> None:
    with Checkpointer(tmp_path / "ck", compress="zstd") as ck:
        ck.save(Progress(7, epoch=2), model=torch.nn.Linear(3, 3), block=True)
    folder = tmp_path / "ck" / step_dir(7)
    marker = json.loads((folder / MARKER).read_text())
    assert marker["step"] == 7 and marker["compression"] == "zstd"
    ((name, info),) = marker["files"].items()
    assert name == "state.pt.zst" and info["bytes"] == (folder / name).stat().st_size
    assert (folder / MARKER).stat().st_mtime_ns >= (folder / name).stat().st_mtime_ns
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"gpuwise-snap-{os.getpid()}-")]


def test_retention_counts_only_intact_checkpoints(tmp_path: Path) -> None:
    """Bug: save 10-30, damage 30, save 40 pruned 20 (30 counted as kept); damage 40 → nothing left."""
    model, *_ = _model()
    root = tmp_path / "ck"
    with Checkpointer(root, async_write=False, keep_last=2) as ck:
        for step in (10, 20, 30):
            ck.save(step, model=model)
        shard = root / step_dir(30) / "state.pt"
        shard.write_bytes(shard.read_bytes()[:100])  # damaged after its commit
        ck.save(40, model=model)
    assert sorted(int(p.name.split("-")[1]) for p in root.iterdir()) == [
        20,
        40,
    ]  # 30 pruned, 20 kept
    shard = root / step_dir(40) / "state.pt"
    shard.write_bytes(shard.read_bytes()[:100])
    restored = Checkpointer(root).restore(model=model)
    assert restored is not None and restored.step == 20


def test_a_failed_prune_does_not_fail_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from gpuwise.errors import StorageError
    from gpuwise.train.storage import Storage

    model, *_ = _model()
    root = tmp_path / "ck"
    with Checkpointer(root, async_write=False) as ck:
        ck.save(1, model=model)
        ck.save(2, model=model)

        def refuse(self: Storage) -> list[str]:
            raise StorageError("listing refused", hint="")

        monkeypatch.setattr(Storage, "list_dirs", refuse)  # listing fails only for the prune
        with caplog.at_level(logging.WARNING):
            ck.save(3, model=model)
        monkeypatch.undo()
        assert ck.last_report is not None and ck.last_report.step == 3
        assert "could not prune" in caplog.text
    assert Checkpointer(root).committed_steps() == [3, 2, 1]


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
def test_checksums_taken_while_dcp_writes_equal_the_files_read_back(tmp_path: Path) -> None:
    """A sharded save hashes the bytes on their way out (nothing is read back); the checksums
    must be those of the files as written, the renamed ``.metadata`` included."""
    import hashlib

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.filesystem import FileSystemWriter

    from gpuwise.train.sharded import _HashingFs

    writer = FileSystemWriter(str(tmp_path), sync_files=True, thread_count=1)
    hashing = _HashingFs(writer.fs)
    writer.fs = hashing
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.Linear(16, 4))
    dcp.save({"model": model.state_dict()}, storage_writer=writer, no_dist=True)
    on_disk = {
        p.name: {"sha256": hashlib.sha256(p.read_bytes()).hexdigest(), "bytes": p.stat().st_size}
        for p in tmp_path.iterdir()
    }
    assert ".metadata" in hashing.files and any(n.endswith(".distcp") for n in hashing.files)
    assert hashing.files == on_disk


class _Rank:
    """torch.distributed as one rank of two; ``told`` is what rank 0 broadcasts."""

    def __init__(self, rank: int, told: object = None) -> None:
        self.rank, self.told, self.collectives = rank, told, 0

    def get_rank(self) -> int:
        return self.rank

    def broadcast_object_list(self, objs: list[object], src: int) -> None:
        self.collectives += 1
        if self.rank != src:
            objs[0] = self.told


def _sealed_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dist: _Rank) -> Any:
    from gpuwise.train import sharded
    from gpuwise.train.storage import Storage

    monkeypatch.setattr(sharded, "_dist", lambda: dist)
    writer = sharded.ShardedWriter(Storage(str(tmp_path)), Retention(2, None), "sync")
    writer.sealed_step, writer.committed_step = 6, 3  # step 6 sealed, its marker on its way
    return writer


def test_close_tells_every_rank_the_final_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dist = _Rank(1, told=None)  # rank 0 saw the marker
    writer = _sealed_writer(tmp_path, monkeypatch, dist)
    writer.close(None)
    assert writer.committed_step == 6 and dist.collectives == 1


def test_a_late_marker_lets_the_other_ranks_leave_and_rank_0_wait_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow store must not hold every rank in a collective (NCCL's watchdog would end them):
    after rank 0's bounded wait, the others leave with the step before, without an error."""
    from gpuwise.errors import CheckpointError

    late = (True, "no answer within 60 s")
    other = _sealed_writer(tmp_path, monkeypatch, _Rank(1, told=late))
    other.close(None)
    assert other.committed_step == 3
    monkeypatch.setattr("gpuwise.train.sharded.TELL_WAIT_S", 0.05)
    rank0 = _sealed_writer(tmp_path, monkeypatch, _Rank(0))
    with pytest.raises(CheckpointError, match="step-000000006"):
        rank0.close(0.2)  # the marker never comes: rank 0 says so, after waiting alone
    failed = _sealed_writer(tmp_path, monkeypatch, _Rank(1, told=(False, "AccessDenied")))
    with pytest.raises(CheckpointError, match="AccessDenied"):
        failed.close(None)  # an error (not lateness) is every rank's


def test_close_after_abandon_runs_no_collective(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for rank in (0, 1):
        dist = _Rank(rank)
        writer = _sealed_writer(tmp_path, monkeypatch, dist)
        writer.abandon()
        writer.close(None)  # would wait forever for a marker nobody writes
        writer.close_alone(None)
        assert dist.collectives == 0


@pytest.mark.parametrize("rank", [0, 1])
def test_leaving_a_with_block_on_an_error_runs_no_collective(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rank: int
) -> None:
    """An error on one rank must not start a collective the other ranks never join (they hang or
    pair it with their own next collective); without the error, close() tells every rank."""
    for error, collectives in ((True, 0), (False, 1)):
        dist = _Rank(rank)
        ck = Checkpointer(tmp_path)
        ck._writer = _sealed_writer(tmp_path, monkeypatch, dist)
        ck._writer._marker.confirmed_step = 6  # rank 0's marker already written
        if error:
            with pytest.raises(RuntimeError, match="boom"), ck:
                raise RuntimeError("boom")
        else:
            with ck:
                pass
        assert dist.collectives == collectives


@pytest.mark.slow  # starts a fresh interpreter for the writer
def test_exec_writer_commits_tensors_of_several_dtypes_from_the_shared_buffer(
    tmp_path: Path,
) -> None:
    """The exec'd writer's answers reach the trainer (they once pickled as ``__main__``
    classes, so its results thread died and the save never completed), and the writer
    serializes straight from the shared buffer: float, bfloat16, int64, bool and empty
    tensors, one buffer, each back with its dtype, shape and values."""
    model, opt, _, _ = _model()
    extras = {
        "ids": torch.arange(7),
        "mask": torch.tensor([True, False, True]),
        "half": torch.randn(3, 2).to(torch.bfloat16),
        "empty": torch.empty(0, 4),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
    }
    with Checkpointer(tmp_path / "ck", writer_start="exec") as ck:
        ck.save(3, model=model, optimizer=opt, extras=extras, block=True, timeout_s=120)
        assert ck.committed_step == 3
        m2, o2, _, _ = _fresh()
        restored = ck.restore(model=m2, optimizer=o2)
    assert restored is not None and restored.step == 3
    assert _same(model, m2)
    for name, t in extras.items():
        back = restored.extras[name]
        assert back.dtype == t.dtype and back.shape == t.shape and torch.equal(back, t), name
