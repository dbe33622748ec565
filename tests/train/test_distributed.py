"""Several processes (gloo, CPU): FSDP2 sharded checkpoints through DCP, resharding on resume,
kills and SIGTERMs under ``gpuwise run``, two "nodes" on loopback, the DDP end-of-run deadlock.

Slow (torch starts in every worker); the big kill counts live in benchmarks/train_fsdp_chaos.py."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gpuwise.train.chaos import loopback_node_command, run_with_kills
from tests.train.conftest import NO_CLOUD_ENV, tiny_command, tiny_digest, tiny_losses

pytestmark = pytest.mark.slow

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "train_tiny.py")
ENV = NO_CLOUD_ENV
TINY = ["--hidden", "64", "--batch", "16"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(nproc: int, *args: str, timeout: int = 400) -> subprocess.CompletedProcess[str]:
    cmd = tiny_command(nproc, *TINY, *args)
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=timeout)
    assert r.returncode == 0, r.stderr[-4000:]
    return r


def _digest(text: str, kind: str = "digest") -> str:
    found = tiny_digest(text, kind)
    assert found, text[-2000:]
    return found


def test_fsdp2_shards_are_written_by_every_rank_and_committed_last(tmp_path: Path) -> None:
    ckpt = tmp_path / "ck"
    _run(2, "--fsdp", "--steps", "4", "--every", "2", "--checkpoint-dir", str(ckpt))
    folder = ckpt / "step-000000004"
    marker = json.loads((folder / "COMMIT.json").read_text())
    assert marker["layout"] == "dcp" and marker["world_size"] == 2
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata", "train_state.pt"} <= set(marker["files"])
    assert all(len(info["sha256"]) == 64 for info in marker["files"].values())


def test_fsdp2_resume_after_sigkills_and_sigterms_equals_an_uninterrupted_run(
    tmp_path: Path,
) -> None:
    args = ["--fsdp", "--steps", "400", "--every", "3"]
    ref = _run(2, *args, "--checkpoint-dir", str(tmp_path / "ref"))
    ckpt = str(tmp_path / "run")
    command = tiny_command(2, *TINY)
    report = run_with_kills(
        [*args, "--checkpoint-dir", ckpt],
        checkpoint_dir=ckpt,
        kills=3,
        command=command,
        # short delays so the three stops land before the run ends on a fast or idle machine;
        # the first two wait for a half-written checkpoint, so they hit mid-write under any load
        min_delay_s=2.0,
        max_delay_s=5.0,
        aim_mid_write=2,
        seed=3,
        sigterm_share=0.34,
        env={"GPUWISE_CLOUD": "none"},
        timeout_s=900,
    )
    assert report.kills == 3
    assert report.mid_write_kills >= 1
    assert report.losses == tiny_losses(ref.stdout), (
        report.attempts,
        [o[-400:] for o in report.outputs],
    )
    assert report.replay_mismatches == ()
    assert report.digest == _digest(ref.stdout)  # gathered full model + optimizer state


@pytest.mark.parametrize(
    ("saved", "resumed"),
    [
        (4, 2),  # the case: a spot loss halves the job
        (2, 1),  # down to one process (DCP reshards into a plain module)
    ],
)
def test_a_checkpoint_saved_on_n_ranks_restores_the_same_state_on_fewer(
    saved: int, resumed: int, tmp_path: Path
) -> None:
    ckpt = str(tmp_path / "ck")
    first = _run(saved, "--fsdp", "--steps", "4", "--every", "2", "--checkpoint-dir", ckpt)
    again = _run(resumed, "--fsdp", "--steps", "4", "--every", "2", "--checkpoint-dir", ckpt)
    assert "resumed 4" in again.stdout
    assert _digest(again.stdout, "restored-digest") == _digest(first.stdout)


def test_ddp_sync_writes_end_without_deadlock_when_the_last_step_is_a_save_step(
    tmp_path: Path,
) -> None:
    """Bug: rank 0 knew step 6 committed, rank 1 did not and waited alone in a gather."""
    r = _run(
        2,
        "--sync",
        "--steps",
        "6",
        "--every",
        "3",
        "--checkpoint-dir",
        str(tmp_path / "ck"),
        timeout=300,
    )
    assert "loss 6 " in r.stdout and _digest(r.stdout)


@pytest.mark.parametrize("layout", ["ddp", "fsdp"])
def test_every_rank_leaves_knowing_the_last_step_is_committed(tmp_path: Path, layout: str) -> None:
    """Bug: the last step was a periodic save, sealed in the loop; at the end only rank 0 waited
    for its marker, so the other ranks reported an older committed step. When a worker then died
    in torch's teardown, ``gpuwise run`` took the finished training for a crash and restarted it,
    alone, into a rendezvous the other node had left (CI: the two-node loopback tests hung)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cmd = [
        *(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"),
        # slow steps: the step-3 write ends before step 6, so step 6 is a periodic save the loop
        # seals (a write still running at step 6 makes the end a blocking save, which hid the bug)
        *(EXAMPLE, *TINY, "--steps", "6", "--every", "3", "--step-delay", "0.3"),
        *("--checkpoint-dir", str(tmp_path / "ck")),
        *(["--fsdp"] if layout == "fsdp" else []),
    ]
    env = {**ENV, "GPUWISE_RUN_DIR": str(run_dir)}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    # torch's own teardown sometimes aborts a finished rank ("terminate called without an active
    # exception", exit -6) after training and the progress file are done; `gpuwise run` reads the
    # progress files for exactly that reason (tests/train/test_launcher_rules.py), and so does this
    # test: what it checks is what every rank reported, not how torch's teardown went
    teardown_abort = "terminate called without an active exception" in r.stderr
    assert r.returncode == 0 or teardown_abort, r.stderr[-4000:]
    reports = [json.loads(p.read_text()) for p in sorted(run_dir.glob("progress-rank*.json"))]
    assert [(p["rank"], p["exit"], p["step"], p["committed_step"]) for p in reports] == [
        (0, "done", 6, 6),
        (1, "done", 6, 6),
    ]
    assert (tmp_path / "ck" / "step-000000006" / "COMMIT.json").is_file()


def _workers_of(proc: subprocess.Popen[str]) -> list[psutil.Process]:
    """The training processes (train_tiny.py) under one ``gpuwise run``."""
    return [
        p
        for p in psutil.Process(proc.pid).children(recursive=True)
        if any(EXAMPLE in part for part in p.cmdline())
    ]


def _kill_tree(proc: subprocess.Popen[str]) -> None:
    """Kill ``proc`` and everything under it (torchrun, its workers) and reap it, so nothing
    outlives the test."""
    with contextlib.suppress(psutil.NoSuchProcess):
        for child in psutil.Process(proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
    if proc.poll() is None:
        proc.kill()


@pytest.mark.timeout(1100)  # a reference run, then two "nodes" and a restart, on 2 shared cores
@pytest.mark.parametrize(
    "per_node",
    [
        1,  # 2 nodes x 1 process
        2,  # 2 nodes x 2 processes (the shape; 4 workers)
    ],
)
def test_two_nodes_on_loopback_restart_together_after_one_node_is_lost(
    per_node: int, tmp_path: Path
) -> None:
    args = ["--fsdp", "--steps", "40", "--every", "2"]
    ref = _run(2 * per_node, *args, "--checkpoint-dir", str(tmp_path / "ref"))
    ckpt = tmp_path / "run"
    port = _free_port()
    nodes: list[subprocess.Popen[str]] = []
    logs: list[tuple[Path, Path]] = []
    for rank in (0, 1):
        cmd = loopback_node_command(
            rank,
            port,
            per_node,
            [
                sys.executable,
                EXAMPLE,
                *TINY,
                *args,
                # 40 steps take a few seconds: without a pause per step a loaded machine can run
                # the whole job before the kill lands, and node 1 then restarts alone (node 0 is
                # done)
                "--step-delay",
                "0.25",
                "--checkpoint-dir",
                str(ckpt),
            ],
        )
        # output to files, not pipes: a node whose pipe is full while the test waits on the other
        # node blocks in a write, never reaches torchrun's exit barrier, and the other node waits
        # there for 300 s (a loaded machine's restarts print enough tracebacks to fill 64 KiB)
        logs.append((tmp_path / f"node{rank}.out", tmp_path / f"node{rank}.err"))
        with open(logs[-1][0], "w") as out, open(logs[-1][1], "w") as err:
            nodes.append(subprocess.Popen(cmd, env=ENV, stdout=out, stderr=err, text=True))
    try:
        deadline = time.monotonic() + 300
        while not list(ckpt.glob("step-*/COMMIT.json")):  # training is under way on both nodes
            assert time.monotonic() < deadline and all(n.poll() is None for n in nodes)
            time.sleep(0.2)
        lost = _workers_of(nodes[1])
        assert lost
        for p in lost:  # node 1's machine goes away (its gpuwise run stands for the replacement)
            p.send_signal(signal.SIGKILL)
        try:
            for n in nodes:
                n.wait(timeout=max(1.0, deadline + 300 - time.monotonic()))
        except subprocess.TimeoutExpired:
            tails = [e.read_text()[-3000:] for _, e in logs]
            pytest.fail(f"the restart did not finish; node 0:\n{tails[0]}\nnode 1:\n{tails[1]}")
    finally:
        for n in nodes:
            _kill_tree(n)
            n.wait()
    outs = [(o.read_text(), e.read_text()) for o, e in logs]
    failed = [(i, n.returncode, e) for i, (n, (_, e)) in enumerate(zip(nodes, outs, strict=True))]
    # the node that failed first in the message: a CI log keeps only so much of it
    failed.sort(key=lambda f: f[1] == 0)
    assert all(code == 0 for _, code, _ in failed), "\n".join(
        f"node {i} (exit {code}) stderr:\n{e[-2500:]}" for i, code, e in failed
    )
    for i, (_, err) in enumerate(outs):
        # node 0's workers lost their peer: a preemption of the job, not a crash of node 0;
        # node 1's workers were killed (no progress file): its attempt counts as a crash
        first = "peer-lost" if i == 0 else "crashed"
        assert re.search(rf"attempt 1 {first}", err) and re.search(r"attempt \d+ done", err), err[
            -3000:
        ]
    assert "restarting after a lost peer" in outs[0][1]
    out = (
        outs[0][0] + outs[1][0]
    )  # global rank 0 prints; the rendezvous decides which node holds it
    assert re.search(r"^resumed \d+$", out, re.M)  # the restart resumed from a committed step
    # a worker that ended without its digest line: its node's stderr says why
    assert tiny_digest(out), "\n".join(
        f"node {i} stderr:\n{e[-2500:]}" for i, (_, e) in enumerate(outs)
    )
    assert _digest(out) == _digest(ref.stdout)
    assert tiny_losses(out).items() <= tiny_losses(ref.stdout).items()


def test_a_damaged_shard_of_one_rank_falls_back_to_the_previous_sharded_checkpoint(
    tmp_path: Path,
) -> None:
    ckpt = tmp_path / "ck"
    _run(2, "--fsdp", "--steps", "4", "--every", "2", "--checkpoint-dir", str(ckpt))
    shard = ckpt / "step-000000004" / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # rank 1's file rots after the commit
    shard.write_bytes(bytes(data))
    again = _run(2, "--fsdp", "--steps", "4", "--every", "2", "--checkpoint-dir", str(ckpt))
    assert "resumed 2" in again.stdout
    assert "__1_0.distcp does not match its checksum" in again.stderr
