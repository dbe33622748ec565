"""``gpuwise run``: launch a training command through torchrun and restart it until it finishes.

Each attempt runs ``python -m torch.distributed.run --standalone --nproc-per-node N
--max-restarts 0 <script> ...`` (torchrun's own restarts cannot tell a preemption from a crash, so
the restarts are ours). The workers' :func:`~gpuwise.train.resilient` writes a small progress
file per rank into ``GPUWISE_RUN_DIR`` (step reached, step committed, how it exited), which
tells a preemption from a crash and how much work a restart lost. Without those files the exit
code decides (only visible without torchrun: ``--no-torchrun``).

Exit codes (:mod:`gpuwise.train.exitcodes`): 0 finished; 75 preempted — this machine is going
away or the preemption budget ran out (SkyPilot: ``recover_on_exit_codes: [75]``); 76 the
command kept failing and ``--max-restarts`` ran out; 2 bad usage.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from gpuwise.errors import InputError, MissingExtraError
from gpuwise.train.exitcodes import EXIT_OK, EXIT_PREEMPTED, EXIT_RESTARTS_EXHAUSTED

log = logging.getLogger(__name__)

Outcome = Literal["done", "preempted", "crashed", "stopped"]


@dataclass(frozen=True)
class LaunchSpec:
    """What ``gpuwise run`` runs and how often it may restart it."""

    command: tuple[str, ...]
    """The training command, e.g. ``("python", "train.py", "--lr", "3e-4")``."""
    nproc_per_node: int = 1
    """Worker processes (GPUs) on this machine."""
    max_restarts: int = 3
    """Restarts after crashes (non-preemption failures) before giving up with exit code 76."""
    max_preemptions: int = 10
    """Restarts after preemption exits before handing over with exit code 75."""
    torchrun: bool = True
    """Launch through torchrun; False runs the command as is (one process)."""
    restart_delay_s: float = 1.0
    """Pause before a restart."""

    def __post_init__(self) -> None:
        if not self.command:
            raise InputError("no command to run", hint="put it after --, e.g. gpuwise run -- python train.py")
        if shutil.which(self.command[0]) is None:  # restarting a typo would only fail N more times
            raise InputError(f"command not found: {self.command[0]!r}",
                             hint="check the spelling and PATH, or give the program's full path")
        if self.nproc_per_node < 1:
            raise InputError(f"--nproc-per-node {self.nproc_per_node} must be at least 1", hint="e.g. 8 on an 8-GPU machine")
        if self.max_restarts < 0 or self.max_preemptions < 0:
            raise InputError("--max-restarts and --max-preemptions must be 0 or more", hint="e.g. 3")
        if not (self.restart_delay_s >= 0 and self.restart_delay_s < 3600):
            raise InputError(f"restart delay {self.restart_delay_s} s is not usable", hint="e.g. 1")


@dataclass(frozen=True)
class AttemptResult:
    """One launch of the command."""

    number: int
    """1 for the first launch."""
    exit_code: int
    """Exit code of torchrun (or of the command)."""
    outcome: Outcome
    """done, preempted, crashed, or stopped (we were signalled)."""
    resumed_from: int | None
    """Step the attempt resumed from (None: from scratch or unknown)."""
    step_reached: int | None
    """Last step any rank reported."""
    committed_step: int | None
    """Newest step known committed when it ended."""
    lost_steps: int | None
    """Steps done after the last commit: work a restart redoes."""
    wall_s: float
    """How long it ran."""


@dataclass(frozen=True)
class LaunchResult:
    """What ``gpuwise run`` did."""

    exit_code: int
    """0, 75 or 76 (module docstring)."""
    attempts: tuple[AttemptResult, ...]
    """Every launch, in order."""

    @property
    def restarts(self) -> int:
        return len(self.attempts) - 1

    @property
    def lost_steps(self) -> int:
        return sum(a.lost_steps or 0 for a in self.attempts)


def build_argv(spec: LaunchSpec) -> list[str]:
    """The argv of one attempt."""
    cmd = list(spec.command)
    if not spec.torchrun:
        return cmd
    if importlib.util.find_spec("torch") is None:
        raise MissingExtraError("torch", "train")
    run = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={spec.nproc_per_node}", "--max-restarts=0"]
    if os.path.basename(cmd[0]).startswith("python"):
        rest = cmd[1:]
        if not rest:
            raise InputError("`python` without a script", hint="gpuwise run -- python train.py ...")
        if rest[0] == "-m":
            return [*run, "-m", *rest[1:]]
        return [*run, *rest]
    return [*run, "--no-python", *cmd]


def _read_progress(run_dir: str) -> list[dict[str, Any]]:
    docs = []
    for path in sorted(glob.glob(os.path.join(run_dir, "progress-rank*.json"))):
        with contextlib.suppress(OSError, ValueError), open(path) as f:
            docs.append(json.load(f))
    return docs


def _classify(code: int, progress: list[dict[str, Any]], signalled: bool) -> Outcome:
    if signalled:
        return "stopped"
    exits = {p.get("exit") for p in progress}
    if "preempted" in exits or code == EXIT_PREEMPTED:
        return "preempted"
    if code == 0:
        return "done"
    return "crashed"


def launch(spec: LaunchSpec, *, say: Callable[[str], None] | None = None,
           env: dict[str, str] | None = None, stdout: int | None = None) -> LaunchResult:
    """Run ``spec`` until it finishes or runs out of restarts; see the module docstring.

    ``stdout``: a file descriptor for the command's output (``--json`` sends it to stderr)."""
    say = say or (lambda text: log.info("%s", text))
    argv = build_argv(spec)
    attempts: list[AttemptResult] = []
    crashes = preemptions = 0
    received: list[int] = []
    proc: subprocess.Popen[bytes] | None = None

    def on_signal(signum: int, frame: Any) -> None:
        received.append(signum)
        if proc is not None and proc.poll() is None:  # torchrun forwards it to the workers
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    try:
        with tempfile.TemporaryDirectory(prefix="gpuwise-run-") as run_dir:
            child_env = {**os.environ, **(env or {}), "GPUWISE_RUN_DIR": run_dir}
            while True:
                for path in glob.glob(os.path.join(run_dir, "progress-rank*.json")):
                    os.remove(path)
                number = len(attempts) + 1
                say(f"attempt {number}: {' '.join(argv)}")
                started = time.monotonic()
                proc = subprocess.Popen(argv, env=child_env, stdout=stdout)
                while True:
                    try:
                        code = proc.wait()
                        break
                    except KeyboardInterrupt:  # our handler already forwarded SIGTERM
                        continue
                progress = _read_progress(run_dir)
                outcome = _classify(code, progress, bool(received))
                steps = [p["step"] for p in progress if isinstance(p.get("step"), int)]
                commits = [p["committed_step"] for p in progress if isinstance(p.get("committed_step"), int)]
                resumed = [p["resumed_from"] for p in progress if isinstance(p.get("resumed_from"), int)]
                reached = max(steps) if steps else None
                committed = min(commits) if commits else None
                lost = (reached - (committed or 0)) if reached is not None and outcome != "done" else None
                result = AttemptResult(number, code, outcome, min(resumed) if resumed else None, reached,
                                       committed, lost, time.monotonic() - started)
                attempts.append(result)
                lost_text = f"; {lost} step(s) lost (reached {reached}, committed {committed})" if lost is not None else ""
                say(f"attempt {number} {outcome} (exit code {code}) after {result.wall_s:.1f} s{lost_text}")
                if outcome == "done":
                    return LaunchResult(EXIT_OK, tuple(attempts))
                if outcome == "stopped":
                    say(f"stop signal received: exiting with {EXIT_PREEMPTED} so the scheduler can recover the job")
                    return LaunchResult(EXIT_PREEMPTED, tuple(attempts))
                if outcome == "preempted":
                    preemptions += 1
                    if preemptions > spec.max_preemptions:
                        say(f"{preemptions} preemptions: handing over with exit code {EXIT_PREEMPTED}")
                        return LaunchResult(EXIT_PREEMPTED, tuple(attempts))
                    say(f"restarting after preemption ({preemptions}/{spec.max_preemptions})")
                else:
                    crashes += 1
                    if crashes > spec.max_restarts:
                        say(f"the command failed {crashes} time(s): giving up with exit code {EXIT_RESTARTS_EXHAUSTED}")
                        return LaunchResult(EXIT_RESTARTS_EXHAUSTED, tuple(attempts))
                    say(f"restarting after a failure ({crashes}/{spec.max_restarts})")
                time.sleep(spec.restart_delay_s)
                if received:
                    return LaunchResult(EXIT_PREEMPTED, tuple(attempts))
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
