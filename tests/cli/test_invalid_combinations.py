"""Invalid values and combinations of ``run``'s and ``plan``'s own flags are refused in one place
(``LaunchSpec.validate``, ``PlanFlags.validate``): one line naming the flag and the fix, exit 2,
before anything runs or is planned (issue 36)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from gpuwise.train.launcher import from_environment

_EP = "10.0.0.1:29500"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        # combinations
        (["--nnodes", "2"], "--nnodes 2 needs a rendezvous endpoint"),
        (["--node-rank", "1"], "--node-rank 1 is not a machine of --nnodes 1"),
        (
            ["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", _EP],
            "--node-rank 2 is not a machine of --nnodes 2",
        ),
        (["--node-rank", "-1"], "--node-rank -1 is not a machine of --nnodes 1"),
        # a port out of range was an internal error (OverflowError) on node 0
        (
            ["--nnodes", "2", "--rdzv-endpoint", "10.0.0.1:99999"],
            "rendezvous endpoint '10.0.0.1:99999' has no usable port",
        ),
        (
            ["--nnodes", "2", "--rdzv-endpoint", "node0:http"],
            "rendezvous endpoint 'node0:http' has no usable port",
        ),
        # values
        (["--nnodes", "0"], "--nnodes 0 must be at least 1"),
        (["--nproc-per-node", "0"], "--nproc-per-node 0 must be at least 1"),
        (["--max-restarts", "-1"], "--max-restarts -1 must be 0 or more"),
        (["--max-preemptions", "-2"], "--max-preemptions -2 must be 0 or more"),
        (["--pilot", "0"], "--pilot 0 must be at least 1"),
        (["--pilot", "5", "--pilot-warmup", "-1"], "--pilot-warmup -1 must be 0 or more"),
        (["--restart-delay", "2h"], "restart delay 7200.0 s is not usable"),
        # a misspelt flag reached the launcher as the command ("command not found")
        (["--nproc-per-nod", "2"], "no such option: --nproc-per-nod"),
    ],
)
def test_run_refuses(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str], message: str
) -> None:
    for key in ("SKYPILOT_NUM_NODES", "PET_NNODES", "MASTER_ADDR", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    assert from_environment() == {}  # the flags alone decide
    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    r = cli("run", *flags, "--", sys.executable, script)
    assert r.code == 2, r.stderr
    assert r.stderr.startswith(f"error: {message} — To fix: "), r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert not marker.exists()


_WORKLOAD = ["--model", "llama-3-8b", "--task", "finetune", "--tokens", "1M"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--calibration", "cal.json", "--no-calibration"],
            "--calibration and --no-calibration contradict each other",
        ),
        (["--runs", "runs/"], "--runs is read by --spot-mtbf auto"),
        (["--runs", "runs/", "--spot-mtbf", "72h"], "--runs is read by --spot-mtbf auto"),
        (["--spot-mtbf", "auto"], "--spot-mtbf auto needs run history"),
        (["--export", "helm"], "unknown --export 'helm'"),
        (["--limit", "-1"], "--limit must be ≥ 0, got -1"),
        (["--skypilot-candidates", "cheapest"], "unknown --skypilot-candidates 'cheapest'"),
    ],
)
def test_plan_refuses(cli: Any, tmp_path: Path, flags: list[str], message: str) -> None:
    r = cli("plan", *_WORKLOAD, *flags, "--workdir", tmp_path)
    assert r.code == 2, r.stderr
    assert r.stderr.startswith(f"error: {message}"), r.stderr
    assert " — To fix: " in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert r.stdout == ""
