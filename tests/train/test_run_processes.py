"""``gpuwise run`` and the processes it starts, as on a shared box: command lines pass through
with their interpreter and its flags, a gpuwise usage error in a worker ends the run with 2, the
launcher owns its workers (SIGKILL of it leaves none), a checkpoint folder serves one live run at
a time, two single-node jobs run side by side, and importing gpuwise.train changes nothing."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from gpuwise.train.commandline import split_python, worker_command
from gpuwise.train.launch_spec import LaunchSpec
from gpuwise.train.launcher import build_argv
from tests.train.conftest import NO_CLOUD_ENV

GPUWISE_RUN = [sys.executable, "-m", "gpuwise", "run", "--restart-delay", "0s"]

SHOW = textwrap.dedent(
    """
    import json, os, sys
    out = os.path.join(sys.argv[1], "rank%s.json" % os.environ.get("RANK", "0"))
    with open(out, "w") as f:
        json.dump({"prefix": sys.prefix, "argv": sys.argv, "path0": sys.path[0],
                   "dev": sys.flags.dev_mode, "optimize": sys.flags.optimize,
                   "unbuffered": sys.stdout.write_through, "name": __name__}, f)
    """
)


# -- fast: how a command line is read ---------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "flags", "target", "args"),
    [
        (["python", "-u", "t.py", "-x"], ("-u",), ("t.py",), ("-x",)),
        (["python", "-X", "dev", "-O", "t.py"], ("-X", "dev", "-O"), ("t.py",), ()),
        (["python3", "-Xdev", "-uc", "pass", "a"], ("-Xdev", "-u"), ("-c", "pass"), ("a",)),
        (["python", "-mjson.tool", "f"], (), ("-m", "json.tool"), ("f",)),
        (["/v/bin/python", "-W", "error", "--", "t.py", "--"], ("-W", "error"), ("t.py",), ("--",)),
        (["python", "-u"], ("-u",), (), ()),
    ],
)
def test_python_command_lines_are_read_as_the_interpreter_reads_them(
    command: list[str], flags: tuple[str, ...], target: tuple[str, ...], args: tuple[str, ...]
) -> None:
    found = split_python(command)
    assert found is not None
    assert (found.interpreter, found.flags, found.target, found.args) == (
        command[0],
        flags,
        target,
        args,
    )


def test_every_rank_runs_the_commands_own_interpreter_and_flags(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("")
    argv = build_argv(LaunchSpec(("python", "-u", "-X", "dev", str(script), "--lr", "3")))
    tail = argv[argv.index("--no-python") + 1 :]
    assert tail[:4] == ["python", "-u", "-X", "dev"]
    assert tail[4].endswith("_worker.py") and tail[5:] == [str(script), "--lr", "3"]
    assert worker_command(["bash", "x.sh"])[-3:] == ["--exec", "bash", "x.sh"]


def test_one_node_always_takes_a_free_rendezvous_port(tmp_path: Path) -> None:
    """SkyPilot's one-node environment names an endpoint (port 29500): two jobs on one box
    collided on it."""
    script = tmp_path / "t.py"
    script.write_text("")
    argv = build_argv(LaunchSpec(("python", str(script)), rdzv_endpoint="127.0.0.1:29500"))
    assert "--standalone" in argv and not any(a.startswith("--rdzv-endpoint") for a in argv)


@pytest.mark.parametrize(
    "command", [["python", "-u"], ["python", "-"], ["python", "-m"], ["python", "-X", "dev"]]
)
def test_a_python_command_without_a_script_is_refused_up_front(command: list[str], cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("run", "--", *command)
    assert r.code == 2 and r.stderr.startswith("error: ") and "names no script" in r.stderr


@pytest.mark.slow  # torch starts in a subprocess
def test_importing_gpuwise_train_changes_no_process_level_behaviour(tmp_path: Path) -> None:
    """An exit handler registered before the import runs, and the exit status is the script's
    (the import used to register an os._exit hook)."""
    code = textwrap.dedent(
        f"""
        import atexit, signal, sys
        atexit.register(lambda: open({str(tmp_path / "ran")!r}, "w").write("yes"))
        handlers = [signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)]
        import logging, numpy, torch, torch.distributed  # their own handlers are theirs
        before = atexit._ncallbacks()
        import gpuwise.train, gpuwise.train.loop, gpuwise.train.launcher
        assert atexit._ncallbacks() == before, (before, atexit._ncallbacks())
        assert handlers == [signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)]
        sys.exit(3)
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, r.stderr
    assert (tmp_path / "ran").read_text() == "yes"


PREEMPTED = textwrap.dedent(
    """
    import atexit, sys, torch
    atexit.register(lambda: open(sys.argv[2], "w").write("yes"))  # before gpuwise is imported
    from gpuwise.train import PreemptionWatcher, resilient
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watcher = PreemptionWatcher(cloud="none", signals=())
    with resilient(model, opt, checkpoint_dir=sys.argv[1], max_steps=50, watcher=watcher) as run:
        for step in range(50):
            run.step(model(torch.ones(2, 4)).sum())
            if step == 2:
                watcher.trigger("manual")
            if run.done:
                break
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("under_run", [False, True])
def test_after_a_preemption_every_exit_handler_runs(under_run: bool, tmp_path: Path) -> None:
    """Without gpuwise run: exit 75 after every handler ran (also one registered before gpuwise
    was imported); under it: the launcher reads the progress file, the script ends as it ends."""
    script = tmp_path / "p.py"
    script.write_text(PREEMPTED)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = {k: v for k, v in NO_CLOUD_ENV.items() if k != "GPUWISE_RUN_DIR"}
    if under_run:
        env["GPUWISE_RUN_DIR"] = str(run_dir)
    r = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "ck"), str(tmp_path / "ran")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == (0 if under_run else 75), r.stderr[-2000:]
    assert (tmp_path / "ran").read_text() == "yes"
    if under_run:
        progress = json.loads((run_dir / "progress-rank0.json").read_text())
        assert progress["exit"] == "preempted"


# -- slow: real processes under gpuwise run --------------------------------------------------


@pytest.mark.slow
def test_interpreter_flags_pass_through_to_every_rank(tmp_path: Path) -> None:
    script = tmp_path / "show.py"
    script.write_text(SHOW)
    r = subprocess.run(
        [
            *(*GPUWISE_RUN, "--nproc-per-node", "2", "--"),
            *("python", "-u", "-X", "dev", "-O", str(script), str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        env=NO_CLOUD_ENV,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    for rank in (0, 1):
        doc = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert doc["dev"] and doc["optimize"] == 1 and doc["unbuffered"]
        assert doc["argv"] == [str(script), str(tmp_path)] and doc["name"] == "__main__"
        assert doc["path0"] == str(tmp_path)  # as `python show.py` sets it


@pytest.mark.slow
def test_another_virtual_environments_python_runs_the_script(tmp_path: Path) -> None:
    venv = tmp_path / "other"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    script = tmp_path / "show.py"
    script.write_text(SHOW)
    for launcher in (["--nproc-per-node", "1"], ["--no-torchrun"]):
        (tmp_path / "rank0.json").unlink(missing_ok=True)
        r = subprocess.run(
            [
                *GPUWISE_RUN,
                *launcher,
                "--",
                str(venv / "bin" / "python"),
                str(script),
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            env=NO_CLOUD_ENV,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        doc = json.loads((tmp_path / "rank0.json").read_text())
        assert doc["prefix"] == str(venv), launcher


USAGE = textwrap.dedent(
    """
    import os, sys, time
    import torch
    from gpuwise.train import resilient
    n = os.path.join(sys.argv[1], "attempts")
    open(n, "a").write("x")
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if os.environ.get("RANK", "0") == "0":
        with resilient(model, opt, checkpoint_dir=sys.argv[1], max_steps=0):
            pass
    time.sleep(120)  # the other rank: stopped by torchrun, not waited for
    """
)


@pytest.mark.slow
def test_a_usage_error_in_one_worker_ends_the_run_with_2_and_its_message(tmp_path: Path) -> None:
    script = tmp_path / "u.py"
    script.write_text(USAGE)
    r = subprocess.run(
        [
            *GPUWISE_RUN,
            "--nproc-per-node",
            "2",
            "--json",
            "--",
            "python",
            str(script),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=NO_CLOUD_ENV,
        timeout=300,
    )
    assert r.returncode == 2, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert [a["outcome"] for a in doc["attempts"]] == ["usage"]
    assert (tmp_path / "attempts").read_text() == "xx"  # 2 ranks, one attempt
    assert "usage error: max_steps=0 must be at least 1" in r.stderr
    assert "Traceback" not in r.stderr


SLEEPER = textwrap.dedent(
    """
    import os, sys, time
    open(os.path.join(sys.argv[1], "pid%s" % os.environ.get("RANK", "0")), "w").write(str(os.getpid()))
    while True:
        time.sleep(0.2)
        open(os.path.join(sys.argv[1], "alive%s" % os.environ.get("RANK", "0")), "a").write(".")
    """
)


def _wait_for(paths: list[Path], proc: subprocess.Popen[bytes], timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() and p.read_text() for p in paths):
        assert proc.poll() is None, f"exited with {proc.returncode}"
        assert time.monotonic() < deadline, "the workers did not start"
        time.sleep(0.1)


def _gone(pid: int, timeout: float = 60) -> bool:
    """True once ``pid`` no longer runs (a zombie awaiting its reaper counts as gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
@pytest.mark.parametrize("torchrun", [True, False])
def test_after_sigkill_of_gpuwise_run_no_worker_survives(torchrun: bool, tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text(SLEEPER)
    mode = ["--nproc-per-node", "2"] if torchrun else ["--no-torchrun"]
    proc = subprocess.Popen(
        [*GPUWISE_RUN, *mode, "--", "python", str(script), str(tmp_path)],
        env=NO_CLOUD_ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own group: the test kills only gpuwise run's own pid
    )
    ranks = (0, 1) if torchrun else (0,)
    pids: list[int] = []
    try:
        _wait_for([tmp_path / f"pid{r}" for r in ranks], proc)
        pids = [int((tmp_path / f"pid{r}").read_text()) for r in ranks]
        tree = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        os.kill(proc.pid, signal.SIGKILL)  # only the launcher, not its group
        proc.wait(timeout=30)
        assert all(_gone(pid) for pid in [*pids, *tree]), "a process of the run survived"
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


LOCKED = textwrap.dedent(
    """
    import os, sys, time
    import torch
    from gpuwise.train import resilient
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with resilient(model, opt, checkpoint_dir=sys.argv[1], max_steps=10**9, watcher=False) as run:
        open(sys.argv[2], "w").write(str(os.getpid()))
        while not run.done:
            run.step(model(torch.ones(2, 4)).sum())
            time.sleep(0.05)
    """
)


@pytest.mark.slow
def test_a_checkpoint_folder_serves_one_live_run_and_a_dead_ones_lock_is_taken_over(
    tmp_path: Path,
) -> None:
    script = tmp_path / "l.py"
    script.write_text(LOCKED)
    ckpt = tmp_path / "ck"
    first = subprocess.Popen(
        [*GPUWISE_RUN, "--", "python", str(script), str(ckpt), str(tmp_path / "first")],
        env=NO_CLOUD_ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_for([tmp_path / "first"], first)
        second = subprocess.run(
            [*GPUWISE_RUN, "--", "python", str(script), str(ckpt), str(tmp_path / "second")],
            capture_output=True,
            text=True,
            env=NO_CLOUD_ENV,
            timeout=300,
        )
        assert second.returncode == 2, second.stderr[-3000:]
        assert "is in use by another run" in second.stderr
        assert not (tmp_path / "second").exists()
        worker = int((tmp_path / "first").read_text())
        os.kill(first.pid, signal.SIGKILL)  # the launcher dies; its worker with it
        first.wait(timeout=30)
        assert _gone(worker)
        assert json.loads((ckpt / ".gpuwise-run.lock").read_text())["pid"] == worker  # stale
        third = subprocess.Popen(
            [*GPUWISE_RUN, "--", "python", str(script), str(ckpt), str(tmp_path / "third")],
            env=NO_CLOUD_ENV,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            _wait_for([tmp_path / "third"], third)  # took the stale lock over and trains
        finally:
            os.killpg(third.pid, signal.SIGKILL)
            third.wait(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)


TWO_JOBS = textwrap.dedent(
    """
    import os, sys, time
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    here, other = sys.argv[1], sys.argv[2]
    t = torch.ones(1)
    dist.all_reduce(t)
    open(os.path.join(here, "up%d" % dist.get_rank()), "w").write(os.environ["MASTER_PORT"])
    while not all(os.path.exists(os.path.join(other, "up%d" % r)) for r in (0, 1)):
        time.sleep(0.1)  # both jobs are up at the same time
    dist.all_reduce(t)
    assert t.item() == 4
    dist.destroy_process_group()
    """
)


@pytest.mark.slow
def test_two_single_node_jobs_on_one_box_both_run(tmp_path: Path) -> None:
    script = tmp_path / "j.py"
    script.write_text(TWO_JOBS)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    # SkyPilot's one-node environment names node 0's address: it must not pin a port
    env = {**NO_CLOUD_ENV, "SKYPILOT_NUM_NODES": "1", "SKYPILOT_NODE_IPS": "127.0.0.1"}
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = []
    for (x, y), log in zip(((a, b), (b, a)), logs, strict=True):
        with open(log, "w") as f:  # files, not pipes: the jobs wait for each other
            procs.append(
                subprocess.Popen(
                    [
                        *(*GPUWISE_RUN, "--nproc-per-node", "2", "--"),
                        *("python", str(script), str(x), str(y)),
                    ],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=f,
                    start_new_session=True,
                )
            )
    try:
        for p in procs:
            p.wait(timeout=400)
        errs = [log.read_text() for log in logs]
        assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for e in errs]
        assert all("attempt 2" not in e for e in errs)
        assert (a / "up0").read_text() != (b / "up0").read_text()  # two rendezvous ports
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)


def test_the_run_lock_refuses_a_live_holder_and_takes_over_a_dead_ones(tmp_path: Path) -> None:
    """Record locks belong to processes: a child process holds it, this one is refused; once
    the child is gone its file is stale and taken over."""
    from gpuwise.errors import InputError
    from gpuwise.train.runlock import LOCK_FILE, RunLock

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from gpuwise.train.runlock import RunLock; "
            "RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(InputError, match="in use by another run"):
            RunLock(str(tmp_path)).acquire(orphan_wait_s=0)
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    lock = RunLock(str(tmp_path))
    lock.acquire(orphan_wait_s=0)  # the holder died: its file is stale
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    lock.release()
