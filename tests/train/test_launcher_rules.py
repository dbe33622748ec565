"""``gpuwise run`` trusts the cloud: a notice that stays up ends the job with 75 inside the
window, without a restart; a lost peer of a multi-node job is a preemption, not a crash; node 0's
busy rendezvous port is a usage error; a rendezvous wait says what it waits for."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpuwise.train import FakeMetadataServer
from gpuwise.train.launcher import _classify, _describe, _exit_after_done, _read_failures
from tests.train.conftest import NO_CLOUD_ENV, tiny_command

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_tiny.py"


def _p(exit_reason: str | None, notice: str | None = None) -> dict[str, Any]:
    return {"exit": exit_reason, "step": 3, "committed_step": 2, "notice": notice}


@pytest.mark.parametrize(
    ("code", "progress", "nnodes", "outcome"),
    [
        (1, [_p("peer-lost"), _p("peer-lost")], 2, "peer-lost"),  # another node went away
        (1, [_p("peer-lost"), _p("stopped")], 2, "crashed"),  # a rank here failed by itself
        (1, [_p("peer-lost"), _p("peer-lost")], 1, "crashed"),  # one machine: a local crash
        (1, [_p("preempted", "gcp"), _p("peer-lost")], 2, "preempted"),  # the notice wins
        (75, [], 2, "preempted"),  # the exit code alone (no progress files)
        (1, [], 2, "crashed"),
    ],
)
def test_outcome_of_an_attempt(
    code: int, progress: list[dict[str, Any]], nnodes: int, outcome: str
) -> None:
    assert _classify(code, progress, signalled=False, nnodes=nnodes) == outcome


def _done(step: int = 4, committed: int | None = 4) -> dict[str, Any]:
    return {"exit": "done", "step": step, "committed_step": committed}


@pytest.mark.parametrize(
    ("progress", "failures", "nnodes", "outcome"),
    [
        ([_done(), _done()], {0: -6}, 2, "done-then-crashed"),  # teardown abort after the loop
        ([_done(), _done()], {0: -11}, 1, "done-then-crashed"),
        ([_done(), _done()], {1: 3}, 2, "failed-after-done"),  # code after the loop, peers done
        ([_done(), _done()], {0: -6, 1: -15}, 2, "done-then-crashed"),  # 1: torchrun's SIGTERM
        ([_done(), _done()], {1: 3, 0: -15}, 2, "failed-after-done"),
        ([_done(), _done()], {1: 3}, 1, "crashed"),  # one machine: a retry reruns what follows
        ([_done(4, 2), _done(4, None)], {0: -6}, 2, "crashed"),  # step 4 is not committed
        ([_done(4, 4), _done(4, 2)], {0: -6}, 2, "done-then-crashed"),  # rank 1 read it late
        ([_done()], {0: -6}, 2, "crashed"),  # one of the two local ranks did not report
        ([_done(), _p("stopped")], {0: -6}, 2, "crashed"),
        ([_done(), _done()], {0: -6, 1: 3}, 2, "failed-after-done"),  # rank 1 failed by itself
        ([_done(), _done()], {0: -6, 1: 3}, 1, "crashed"),
        ([_done(), _done()], None, 2, "failed-after-done"),  # no report: torchrun's code 1
    ],
)
def test_workers_that_fail_after_finishing_do_not_redo_the_training(
    progress: list[dict[str, Any]], failures: dict[int, int] | None, nnodes: int, outcome: str
) -> None:
    got = _classify(1, progress, signalled=False, nnodes=nnodes, failures=failures, nproc=2)
    assert got == outcome


def test_torchrun_killed_after_the_workers_finished_is_done() -> None:
    progress = [_done(), _done()]
    got = _classify(-9, progress, signalled=False, nnodes=2, failures=None, nproc=2)
    assert got == "done-then-crashed"
    assert _describe(None, -9) == "torchrun died of SIGKILL"


def test_what_a_failure_after_the_loop_says_and_exits_with(tmp_path: Path) -> None:
    path = tmp_path / "failures.json"
    path.write_text(json.dumps({"first": 1, "exitcodes": {"0": -15, "1": 3}}))
    failures = _read_failures(str(path))
    assert list(failures or {}) == [1, 0]  # the first failure first
    assert _describe(failures, 1) == "local rank 1 exited with 3 (torchrun then stopped 1 other)"
    assert _exit_after_done(failures, 1) == 3  # torchrun's 1 hides the worker's own code
    assert _exit_after_done({0: -6}, 1) == 1 and _exit_after_done(None, 300) == 1
    both = {0: -6, 1: 3, 2: -15, 3: -15}
    assert _describe(both, 1) == (
        "local rank 0 died of SIGABRT, local rank 1 exited with 3 (torchrun then stopped 2 others)"
    )
    path.write_text(json.dumps({"exitcodes": {"0": -6}}))  # no "first": the codes still count
    assert _read_failures(str(path)) == {0: -6}
    for bad in ("{", "[]", '{"exitcodes": "x"}', '{"exitcodes": {}}'):
        path.write_text(bad)
        assert _read_failures(str(path)) is None, bad
    assert _read_failures(str(tmp_path / "absent.json")) is None


@pytest.mark.slow
def test_a_teardown_abort_after_the_last_commit_ends_the_run_as_done(tmp_path: Path) -> None:
    """Rank 0 aborts after the loop finished and committed (as torch's teardown sometimes does):
    one attempt, exit 0, and a line that says which rank died of what. Before, a restart."""
    cmd = tiny_command(2, "--hidden", "64", "--batch", "16", "--fsdp", "--steps", "4")
    cmd += ["--every", "2", "--checkpoint-dir", str(tmp_path / "ck"), "--abort-at-exit", "0"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=NO_CLOUD_ENV, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "attempt 1 done-then-crashed" in r.stderr and "attempt 2" not in r.stderr
    assert "finished and committed step 4, then local rank 0 died of SIGABRT" in r.stderr
    assert "the training is done and not redone" in r.stderr
    assert "attempt 1 done-then-crashed (exit code 1)" in r.stderr
    assert (tmp_path / "ck" / "step-000000004" / "COMMIT.json").exists()


def test_a_busy_rendezvous_port_on_node_0_is_a_usage_error(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "train.py"
    script.write_text("print('never run')\n")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        r = cli(
            "run",
            "--nnodes",
            "2",
            "--node-rank",
            "0",
            "--rdzv-endpoint",
            f"127.0.0.1:{port}",
            "--",
            sys.executable,
            str(script),
        )
    assert r.code == 2
    assert r.stderr.startswith("error: ") and f"rendezvous port {port} is in use" in r.stderr
    assert "Traceback" not in r.stderr and "attempt 1" not in r.stderr


@pytest.mark.slow
def test_an_aws_notice_that_stays_up_ends_the_job_with_75_without_a_restart(
    tmp_path: Path,
) -> None:
    with FakeMetadataServer() as md:
        env = {
            **os.environ,
            "GPUWISE_CLOUD": "aws",
            "GPUWISE_METADATA_URL": md.url,
            "GPUWISE_POLL_INTERVAL_S": "0.5",
        }
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuwise",
                "run",
                "--json",
                "--restart-delay",
                "0s",
                "--",
                sys.executable,
                str(EXAMPLE),
                "--steps",
                "100000",
                "--every",
                "50",
                "--step-delay",
                "0.01",
                "--checkpoint-dir",
                str(tmp_path / "ck"),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 120
            while not (tmp_path / "ck").is_dir():  # training is under way
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.1)
            md.preempt(notice_s=120)  # AWS: instance-action stays up until the end
            noticed = time.monotonic()
            out, err = proc.communicate(timeout=180)
            waited_s = time.monotonic() - noticed
            print(f"\naws notice: exit {proc.returncode} {waited_s:.1f} s after the notice")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 75, err[-3000:]
    assert waited_s < 120
    doc = json.loads(out)
    assert [a["outcome"] for a in doc["attempts"]] == ["preempted"]  # no restart
    assert "aws preemption notice is still up" in err


@pytest.mark.slow
def test_a_rendezvous_wait_says_what_it_waits_for(tmp_path: Path) -> None:
    """Node 1 of 2 whose node 0 never comes: a line per interval, not 600 s of silence."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    script = tmp_path / "train.py"
    script.write_text("print('never run')\n")
    code = (
        "import sys\n"
        "from gpuwise.train.launch_spec import LaunchSpec\n"
        "from gpuwise.train.launcher import launch\n"
        f"spec = LaunchSpec(command=(sys.executable, {str(script)!r}), nnodes=2, node_rank=1,\n"
        f"                  rdzv_endpoint='127.0.0.1:{port}')\n"
        "launch(spec, say=lambda t: print(t, flush=True), rendezvous_log_s=1.0)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # its own process group: torchrun included, ended together
    )
    try:
        assert proc.stdout is not None
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "for the rendezvous at" in line:
                break
        assert any(
            f"rendezvous at 127.0.0.1:{port} (job 'gpuwise', 2 nodes, this is node 1)" in ln
            for ln in lines
        ), lines
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
