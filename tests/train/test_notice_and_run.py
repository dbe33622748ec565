"""A notice from the fake metadata server → checkpoint committed within the window → exit 75 →
``gpuwise run`` restarts through torchrun and the run completes with the uninterrupted digest.
Also ``gpuwise run``'s restart rules and exit codes, and the storage outage."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
import torch

from gpuwise.train import FakeMetadataServer, resilient
from gpuwise.train.chaos import reference_run
from gpuwise.train.commit import MARKER, read_checkpoint

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_tiny.py"

FLAKY = """
import os, sys
path = sys.argv[1]
codes = [int(c) for c in sys.argv[2].split(",")]
n = int(open(path).read()) if os.path.exists(path) else 0
open(path, "w").write(str(n + 1))
sys.exit(codes[min(n, len(codes) - 1)])
"""


def _preempt_then_withdraw(md: FakeMetadataServer) -> None:
    """A GCP notice, withdrawn as soon as one worker has read it (the ranks all-reduce the stop
    flag, so one is enough): the workers act on it, and the attempt ends with the notice gone,
    as on the replacement machine of a rehearsal (a notice still up means no restart)."""
    md.preempt(notice_s=30, clear_after_reads=1)


@pytest.mark.parametrize(
    ("codes", "flags", "exit_code", "attempts"),
    [
        ("0", [], 0, 1),  # fine the first time
        ("75,1,0", [], 0, 3),  # preempted, crashed, then done
        ("1,1,1,1", ["--max-restarts", "2"], 76, 3),  # crashes exhaust --max-restarts
        ("75,75,75", ["--max-preemptions", "1"], 75, 2),  # preemptions hand over with 75 (SkyPilot)
        ("2,0", [], 2, 1),  # a usage error (exit 2) is not retried
        ("1,2,0", [], 2, 2),  # ... also after a transient crash
    ],
)
def test_run_restart_rules_and_exit_codes(
    codes: str, flags: list[str], exit_code: int, attempts: int, tmp_path: Path
) -> None:
    script = tmp_path / "flaky.py"
    script.write_text(FLAKY)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuwise",
            "run",
            "--no-torchrun",
            "--restart-delay",
            "0s",
            "--json",
            *flags,
            "--",
            sys.executable,
            str(script),
            str(tmp_path / "n"),
            codes,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == exit_code, r.stderr
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == exit_code and len(doc["attempts"]) == attempts
    assert [a["number"] for a in doc["attempts"]] == list(range(1, attempts + 1))


CLOSED = """
import os, sys
path = sys.argv[1]
n = int(open(path).read()) if os.path.exists(path) else 0
open(path, "w").write(str(n + 1))
if n < int(sys.argv[2]):  # what gpuwise.train._torchrun does on RendezvousClosedError
    open(os.path.join(os.environ["GPUWISE_RUN_DIR"], "rendezvous-closed"), "w").write("closed")
    sys.exit(1)
sys.exit(0)
"""


def test_a_closed_rendezvous_is_joined_again_without_counting_a_failure(tmp_path: Path) -> None:
    """Several nodes: a replacement node's new attempt can find the rendezvous still closed while
    the survivors end the previous attempt. That must not spend --max-restarts (it used to, in
    seconds, and the node gave up with 76 while the others were still shutting down)."""
    script = tmp_path / "closed.py"
    script.write_text(CLOSED)
    base = [sys.executable, "-m", "gpuwise", "run", "--no-torchrun", "--restart-delay", "0s"]
    cmd = [*base, "--max-restarts", "0", "--json", "--"]
    r = subprocess.run(
        [*cmd, sys.executable, str(script), str(tmp_path / "n"), "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [a["outcome"] for a in doc["attempts"]] == [
        "rendezvous-closed",
        "rendezvous-closed",
        "done",
    ]
    assert "not counted as a failure" in r.stderr


@pytest.mark.parametrize(
    "args",
    [
        [],  # no command
        ["--nproc-per-node", "0", "--", "python", "x.py"],
        ["--max-restarts", "-1", "--", "python", "x.py"],
        ["--restart-delay", "nan", "--", "python", "x.py"],
        ["--restart-delay", "30", "--", "python", "x.py"],  # a duration needs its unit
        ["--", "/nonexistent/train-cmd"],  # not found: refused up front, not restarted N times
        ["--", "python", "/nonexistent/train.py"],  # script not found: same
        ["--", "python", "-u"],  # an interpreter flag but no script
        ["--nnodes", "2", "--", "python", "-m", "json.tool"],  # several nodes need an endpoint
        [
            "--nnodes",
            "2",
            "--node-rank",
            "2",
            "--rdzv-endpoint",
            "127.0.0.1",
            "--",
            "python",
            "-m",
            "json.tool",
        ],
    ],
)
def test_run_bad_input_is_one_line_exit_2(args: list[str], cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("run", *args)
    assert r.code == 2
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr


@pytest.mark.slow
def test_notice_commits_within_window_then_run_restarts_and_completes(
    tiny: ModuleType, tmp_path: Path
) -> None:
    args = ["--steps", "300", "--every", "50"]
    ref = reference_run(
        [*args, "--checkpoint-dir", str(tmp_path / "ref")],
        target=tiny.main,
        env={"GPUWISE_CLOUD": "none"},
    )
    ckpt = tmp_path / "ckpt"
    with FakeMetadataServer() as md:
        env = {
            **os.environ,
            "GPUWISE_METADATA_URL": md.url,
            "GPUWISE_CLOUD": "gcp",
            "GPUWISE_POLL_INTERVAL_S": "0.2",
        }
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuwise",
                "run",
                "--restart-delay",
                "0s",
                "--",
                sys.executable,
                str(EXAMPLE),
                *args,
                "--checkpoint-dir",
                str(ckpt),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        while not (ckpt.is_dir() and any(ckpt.glob("step-*"))):  # training is under way
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        # withdrawn before the attempt ends: the "replacement machine" has no notice (a notice
        # still up when the attempt ends means this machine is going: gpuwise run exits 75)
        _preempt_then_withdraw(md)
        notified = time.time()
        out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    first = re.search(
        r"attempt 1 preempted \(exit code \d+\) after [\d.]+ s; 0 step\(s\) lost "
        r"\(reached (\d+), committed (\d+)\)",
        err,
    )
    assert first, err[-3000:]
    reached = int(first.group(1))
    assert re.search(r"attempt \d+ done", err)
    assert f"resumed {reached}" in out
    # the notice's checkpoint was committed inside the 30 s window
    marker = ckpt / f"step-{reached:09d}" / MARKER
    if marker.exists():  # retention may have pruned it by now; then the log line is the evidence
        assert marker.stat().st_mtime - notified < 30
    assert out.strip().splitlines()[-1] == f"digest {ref.digest}"


@pytest.mark.slow
def test_storage_outage_mid_training_keeps_training_and_last_good_checkpoint(s3, caplog) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 64)
    with resilient(
        model,
        opt,
        checkpoint_dir="s3://ckpt/outage",
        storage_options=s3.options,
        max_steps=40,
        every_steps=5,
        watcher=False,
    ) as run:
        for _ in range(40):
            if run.global_step == 12:
                run.checkpointer.wait()
                good = run.checkpointer.committed_steps()[0]
                assert good in run.checkpointer.committed_steps()
                s3.stop()  # the S3 endpoint goes away mid-run
            if run.global_step == 32:
                s3.start()
                state, _ = read_checkpoint(
                    run.checkpointer.storage, good
                )  # the last good one, intact
                assert state["progress"]["step"] == good
            if 12 <= run.global_step < 32:
                time.sleep(0.15)  # steps take time: the outage lasts ~3 s of wall clock
            run.step(model(x).pow(2).mean())
    assert run.global_step == 40  # training went on through the outage
    assert good in (5, 10)  # a periodic save is skipped while the previous one is still in flight
    assert any("was not written" in e for e in run.save_errors)  # and the failure was reported
    assert "checkpoint write failed" in caplog.text
    from gpuwise.train import Checkpointer

    ck = Checkpointer("s3://ckpt/outage", storage_options=s3.options)
    steps = ck.committed_steps()
    failed = {
        int(m) for e in run.save_errors for m in re.findall(r"step-(\d{9}) was not written", e)
    }
    assert failed and failed <= {15, 20, 25, 30}
    assert steps[0] == 40 and not failed & set(
        steps
    )  # a reported failure never left a commit behind
    latest = ck.load_latest()
    assert latest is not None and latest[0]["progress"]["step"] == 40


@pytest.mark.slow
def test_ddp_two_gloo_ranks_agree_on_the_notice_step_and_resume_exactly(tmp_path: Path) -> None:
    """Two ranks (gloo, CPU) under ``gpuwise run --nproc-per-node 2``: the notice is all-reduced, so
    both stop at the same step; rank 0 writes; the restart ends with the uninterrupted digest."""
    args = ["--steps", "120", "--every", "10", "--hidden", "128"]
    base = [
        sys.executable,
        "-m",
        "gpuwise",
        "run",
        "--nproc-per-node",
        "2",
        "--restart-delay",
        "0s",
        "--",
        sys.executable,
        str(EXAMPLE),
        *args,
    ]
    ref = subprocess.run(
        [*base, "--checkpoint-dir", str(tmp_path / "ref")],
        capture_output=True,
        text=True,
        env={**os.environ, "GPUWISE_CLOUD": "none"},
        timeout=180,
    )
    assert ref.returncode == 0, ref.stderr[-3000:]
    ckpt = tmp_path / "run"
    with FakeMetadataServer() as md:
        env = {
            **os.environ,
            "GPUWISE_METADATA_URL": md.url,
            "GPUWISE_CLOUD": "gcp",
            "GPUWISE_POLL_INTERVAL_S": "0.2",
        }
        proc = subprocess.Popen(
            [*base, "--checkpoint-dir", str(ckpt)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        while not (ckpt.is_dir() and any(ckpt.glob("step-*"))):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        _preempt_then_withdraw(md)  # withdrawn before the attempt ends
        out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    assert re.search(r"attempt 1 preempted .* 0 step\(s\) lost", err), err[-3000:]
    assert out.strip().splitlines()[-1] == ref.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, {}),  # nothing: one machine
        (
            {
                "SKYPILOT_NUM_NODES": "2",
                "SKYPILOT_NODE_RANK": "1",
                "SKYPILOT_NODE_IPS": "10.0.0.5\n10.0.0.6\n",
                "SKYPILOT_NUM_GPUS_PER_NODE": "8",
            },
            {"nnodes": 2, "node_rank": 1, "rdzv_endpoint": "10.0.0.5:29500", "nproc_per_node": 8},
        ),  # first IP hosts
        (
            {
                "PET_NNODES": "3",
                "PET_NODE_RANK": "2",
                "PET_NPROC_PER_NODE": "4",
                "MASTER_ADDR": "job-master-0",
                "MASTER_PORT": "23456",
            },
            {
                "nnodes": 3,
                "node_rank": 2,
                "rdzv_endpoint": "job-master-0:23456",
                "nproc_per_node": 4,
            },
        ),  # PyTorchJob
        (
            {"MASTER_ADDR": "m", "WORLD_SIZE": "2", "RANK": "1"},
            {"nnodes": 2, "node_rank": 1, "rdzv_endpoint": "m:29500"},
        ),  # WORLD_SIZE/RANK count nodes
    ],
)
def test_multi_node_settings_from_skypilot_and_pytorchjob(
    env: dict[str, str], expected: dict[str, object]
) -> None:
    from gpuwise.train.launcher import from_environment

    assert from_environment(env) == expected


def test_multi_node_argv_uses_c10d_with_node_0_as_host(tmp_path: Path) -> None:
    from gpuwise.train.launch_spec import LaunchSpec
    from gpuwise.train.launcher import build_argv

    script = tmp_path / "train.py"
    script.write_text("")
    argv = build_argv(
        LaunchSpec(("python", str(script)), nnodes=2, node_rank=1, rdzv_endpoint="10.0.0.5")
    )
    assert "--standalone" not in argv
    assert {
        "--nnodes=2",
        "--node-rank=1",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=10.0.0.5:29500",
        "--rdzv-conf=is_host=false",
    } <= set(argv)
