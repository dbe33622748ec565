"""``gpuwise run``: launch a training command through torchrun and restart it until it finishes.

Each attempt runs torchrun (through :mod:`gpuwise.train._torchrun`, which keeps the workers' exit
code) with ``--max-restarts 0``: torchrun's own restarts cannot tell a preemption from a crash, so
the restarts are ours. One machine: ``--standalone``. Several (``nnodes > 1``): c10d rendezvous
at ``rdzv_endpoint`` (default port 29500) with ``--nnodes``/``--node-rank``; node 0 hosts the
rendezvous store. When a node is lost, the survivors' workers fail in their next collective,
their torchrun exits, and every node's ``gpuwise run`` starts a new attempt that meets the others
again at the rendezvous: the whole job restarts from the last committed step.
Multi-node settings come from the flags, else SkyPilot's ``SKYPILOT_NUM_NODES``,
``SKYPILOT_NODE_RANK``, ``SKYPILOT_NODE_IPS`` (first line: rendezvous host),
``SKYPILOT_NUM_GPUS_PER_NODE``, else a Kubeflow PyTorchJob's ``PET_NNODES``, ``PET_NODE_RANK``,
``PET_NPROC_PER_NODE``, ``MASTER_ADDR``, ``MASTER_PORT`` (``WORLD_SIZE``/``RANK`` as node count
and index) — :func:`from_environment`.

A node whose new attempt finds the rendezvous still closed (the survivors' torchrun is ending
the previous attempt) joins again after the restart delay without counting a failure, for up to
:data:`RENDEZVOUS_CLOSED_WAIT_S`; otherwise a replacement node would spend ``--max-restarts`` in
seconds and give up while the others were still shutting down.

Failures that cannot change on retry stop at once, not after ``--max-restarts`` attempts: the
script does not exist, ``python -c`` (torchrun needs a script file), and an attempt whose workers
all exit with code 2 (the usage-error code of argparse, click and gpuwise) or one of whose
workers reported ``exit: "usage"`` (it refused to run, e.g. unlike its plan: its line is
repeated) — ``gpuwise run`` then exits 2 too; on node 0 of a multi-node job, a rendezvous port
already in use (exit 2 before the first attempt). Every other failure (signals, 1, OOM) may be transient and is retried. With
several nodes, an attempt whose workers all failed because a peer went away (``exit:
"peer-lost"``) counts as a preemption (``--max-preemptions``), not a crash: spot node losses do
not end in 76. While a multi-node attempt waits in the rendezvous, a line every 30 s says for
what.

Workers that fail after every local rank ended its training loop with its last step committed
did not lose training: killed by a signal (a crash in the framework's teardown, such as "terminate
called without an active exception"), the attempt counts as done; exiting with a code on a
multi-node job, ``gpuwise run`` exits with that code and does not restart: the other nodes are
done, and a restarted node would wait for them at the rendezvous until the join timeout.

The cloud's notice is trusted: after an attempt that did not finish, ``gpuwise run`` asks the
metadata server once; when a preemption notice for this machine is still up (AWS keeps
``instance-action`` up until the end, GCP ``preempted``), it does not restart but exits 75 at
once, inside the notice window, so the scheduler recovers the job on another machine. The workers' :func:`~gpuwise.train.resilient` writes a small progress
file per rank into ``GPUWISE_RUN_DIR`` (step reached, step committed, how it exited), which
tells a preemption from a crash and how much work a restart lost. Without those files the exit
code decides (only visible without torchrun: ``--no-torchrun``).

Exit codes (:mod:`gpuwise.train.exitcodes`): 0 finished; 75 preempted — this machine is going
away or the preemption budget ran out (SkyPilot: ``recover_on_exit_codes: [75]``); 76 the
command kept failing and ``--max-restarts`` ran out; 2 bad usage (ours or the script's); on a
multi-node job, the workers' own code when they failed after finishing (above).
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from gpuwise.errors import InputError, MissingExtraError
from gpuwise.train._torchrun import FAILURES_FILE, RENDEZVOUS_CLOSED_MARKER
from gpuwise.train._worker import PARENT_ENV, USAGE_ERROR_FILE
from gpuwise.train.commandline import worker_command
from gpuwise.train.exitcodes import EXIT_OK, EXIT_PREEMPTED, EXIT_RESTARTS_EXHAUSTED, EXIT_USAGE
from gpuwise.train.launch_spec import LaunchSpec
from gpuwise.train.records import job_run_id

log = logging.getLogger(__name__)

Outcome = Literal[
    "done",
    "done-then-crashed",
    "failed-after-done",
    "preempted",
    "peer-lost",
    "crashed",
    "stopped",
    "usage",
    "rendezvous-closed",
]
DEFAULT_RDZV_PORT = 29500
# How long a node keeps joining a rendezvous that the other nodes have closed (they are still
# ending the previous attempt) before it counts as a failure: torchrun's default rendezvous join
# timeout (`--rdzv-conf join_timeout`, 600 s).
RENDEZVOUS_CLOSED_WAIT_S = 600.0
RENDEZVOUS_LOG_S = 30.0
"""While an attempt of a multi-node job has no worker yet (it waits in the rendezvous), a line
says what it waits for this often."""
FINISHED_OUTCOMES = ("done", "done-then-crashed", "failed-after-done")
"""Attempts whose training loop ended with its last step committed: no step was lost."""
STOPPED_BY_TORCHRUN = (-signal.SIGTERM, -signal.SIGKILL)
"""Exit codes of workers that torchrun stopped because another one failed."""
NOT_RETRIED_EXIT_CODES = (EXIT_USAGE,)
"""Worker exit codes that a retry cannot change (module docstring)."""


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
    notice: str | None = None
    """Source of the preemption notice a worker saw (``aws``, ``signal:SIGTERM`` ...), else None."""
    error: str | None = None
    """Why a worker refused to run (``outcome: "usage"``: e.g. the job differs from its plan)."""


@dataclass(frozen=True)
class LaunchResult:
    """What ``gpuwise run`` did."""

    exit_code: int
    """0, 75, 76 or 2, or the workers' own code after ``failed-after-done`` (module docstring)."""
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
        return worker_command(cmd)
    if importlib.util.find_spec("torch") is None:
        raise MissingExtraError("torch", "train")
    run = [
        sys.executable,
        "-m",
        "gpuwise.train._torchrun",
        f"--nproc-per-node={spec.nproc_per_node}",
        "--max-restarts=0",
    ]
    if spec.nnodes == 1:  # a free port for the rendezvous: two jobs on one machine both run
        run.append("--standalone")
    else:
        endpoint = spec.rdzv_endpoint or f"127.0.0.1:{DEFAULT_RDZV_PORT}"
        if ":" not in endpoint:
            endpoint = f"{endpoint}:{DEFAULT_RDZV_PORT}"
        run += [
            f"--nnodes={spec.nnodes}",
            f"--node-rank={spec.node_rank}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}",
            f"--rdzv-id={spec.rdzv_id}",
            f"--rdzv-conf=is_host={'true' if spec.node_rank == 0 else 'false'}",
        ]
    return [*run, "--no-python", *worker_command(cmd)]


def _read_progress(run_dir: str) -> list[dict[str, Any]]:
    docs = []
    for path in sorted(glob.glob(os.path.join(run_dir, "progress-rank*.json"))):
        with contextlib.suppress(OSError, ValueError), open(path) as f:
            docs.append(json.load(f))
    return docs


def _finished(progress: list[dict[str, Any]], nproc: int) -> bool:
    """Every local rank reported the end of its training loop (``exit: "done"``) and the last
    step is committed: the training is over and saved, whatever the processes did after. A commit
    is global, so the rank that knows the newest one is right (the others may not have read the
    marker yet)."""
    if not (len(progress) >= nproc > 0 and all(p.get("exit") == "done" for p in progress)):
        return False
    steps, commits = _ints(progress, "step"), _ints(progress, "committed_step")
    return len(steps) == len(progress) and bool(commits) and max(commits) >= max(steps)


def _ints(progress: list[dict[str, Any]], key: str) -> list[int]:
    """The integer values of ``key`` in the ranks' progress files (a rank may not have one)."""
    return [v for p in progress if isinstance(v := p.get(key), int)]


def _classify(
    code: int,
    progress: list[dict[str, Any]],
    signalled: bool,
    rendezvous_closed: bool = False,
    nnodes: int = 1,
    failures: dict[int, int] | None = None,
    nproc: int = 1,
) -> Outcome:
    """``rendezvous_closed``: the attempt left the marker of :mod:`._torchrun` (no worker ran).
    ``failures``: local rank → exit code of the workers that failed (negative: a signal), the
    first failure first (the others may be torchrun stopping the rest).

    A lost peer (``exit: "peer-lost"`` on every rank here that reported) is a preemption of the
    job only with several nodes: on one machine the peer was a local process, and its end a crash.
    Workers that failed after every local rank finished and committed its last step: killed by a
    signal, the training is done (a crash in the framework's teardown, e.g. "terminate called
    without an active exception"); with an exit code on several nodes, ``failed-after-done`` (the
    other nodes are done: a restart would wait for them at the rendezvous forever)."""
    if signalled:
        return "stopped"
    exits = {p.get("exit") for p in progress}
    if "usage" in exits:  # a worker refused to run (e.g. unlike its plan): a retry cannot help
        return "usage"
    if "preempted" in exits or code == EXIT_PREEMPTED:
        return "preempted"
    if nnodes > 1 and exits == {"peer-lost"}:  # another node went away mid-collective:
        return "peer-lost"  # the job lost a machine, this program did not crash
    if code == 0:
        return "done"
    if _finished(progress, nproc):
        # no failures file: torchrun's own code (negative: torchrun itself was killed)
        first, *rest = list(failures.values()) if failures else [code]
        if first < 0 and all(c in STOPPED_BY_TORCHRUN for c in rest):
            return "done-then-crashed"
        if nnodes > 1:
            return "failed-after-done"
    if code in NOT_RETRIED_EXIT_CODES:
        return "usage"
    if rendezvous_closed and not progress:
        return "rendezvous-closed"
    return "crashed"


def _notice_and_error(progress: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """The first notice source and the first refusal line the workers reported."""
    notices = [str(p["notice"]) for p in progress if p.get("notice")]
    errors = [str(p["error"]) for p in progress if p.get("exit") == "usage" and p.get("error")]
    return (notices[0] if notices else None), (errors[0] if errors else None)


def _read_failures(path: str) -> dict[int, int] | None:
    """Local rank → exit code from the ``failures.json`` of :mod:`._torchrun`, the rank that failed
    first first (None: absent or unreadable)."""
    try:
        with open(path) as f:
            doc = json.load(f)
        codes = {int(k): int(v) for k, v in doc["exitcodes"].items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    try:
        first = int(doc["first"])
    except (ValueError, TypeError, KeyError):
        return codes or None
    if first not in codes:
        return codes or None
    return {first: codes.pop(first), **codes}


def _read_usage_error(path: str) -> str | None:
    """The line a worker's gpuwise usage error left (:mod:`._worker`), None when there is none."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return text.removeprefix("error: ") or None


def _what(code: int) -> str:
    if code >= 0:
        return f"exited with {code}"
    try:
        return f"died of {signal.Signals(-code).name}"
    except ValueError:
        return f"died of signal {-code}"


def _describe(failures: dict[int, int] | None, code: int) -> str:
    """``local rank 0 died of SIGABRT (torchrun then stopped 1 other)``: the first failure first,
    then the others that were not torchrun stopping the rest."""
    if not failures:
        return f"torchrun {_what(code)}" if code < 0 else "a worker failed"
    (rank, first), *rest = failures.items()
    parts = [f"local rank {rank} {_what(first)}"]
    parts += [f"local rank {r} {_what(c)}" for r, c in rest if c not in STOPPED_BY_TORCHRUN]
    stopped = sum(c in STOPPED_BY_TORCHRUN for _, c in rest)
    tail = (
        f" (torchrun then stopped {stopped} other{'s' if stopped > 1 else ''})" if stopped else ""
    )
    return ", ".join(parts) + tail


def _exit_after_done(failures: dict[int, int] | None, code: int) -> int:
    """The exit code of a ``failed-after-done`` attempt: the first worker's own code (torchrun's
    exit code is 1 whenever the others had to be stopped), else torchrun's, else 1."""
    first = next(iter(failures.values())) if failures else code
    return first if 0 < first < 256 else code if 0 < code < 256 else 1


def from_environment(env: dict[str, str] | None = None) -> dict[str, Any]:
    """Multi-node settings from SkyPilot's or a PyTorchJob's environment (module docstring):
    ``nnodes``, ``node_rank``, ``rdzv_endpoint``, ``nproc_per_node`` — only the keys found."""
    e = dict(os.environ if env is None else env)
    out: dict[str, Any] = {}

    def number(key: str) -> int | None:
        text = e.get(key, "").strip()
        if not text:
            return None
        try:
            return int(text)
        except ValueError as exc:
            raise InputError(
                f"{key}={text!r} is not a whole number", hint=f"fix or unset {key}"
            ) from exc

    if e.get("SKYPILOT_NUM_NODES"):
        out["nnodes"] = number("SKYPILOT_NUM_NODES")
        if (r := number("SKYPILOT_NODE_RANK")) is not None:
            out["node_rank"] = r
        ips = [line.strip() for line in e.get("SKYPILOT_NODE_IPS", "").splitlines() if line.strip()]
        if ips:
            out["rdzv_endpoint"] = f"{ips[0]}:{DEFAULT_RDZV_PORT}"
        if (g := number("SKYPILOT_NUM_GPUS_PER_NODE")) is not None and g > 0:
            out["nproc_per_node"] = g
    elif e.get("PET_NNODES") or e.get("MASTER_ADDR"):
        nnodes = number("PET_NNODES")
        out["nnodes"] = nnodes if nnodes is not None else (number("WORLD_SIZE") or 1)
        rank = number("PET_NODE_RANK")
        out["node_rank"] = rank if rank is not None else (number("RANK") or 0)
        if e.get("MASTER_ADDR"):
            out["rdzv_endpoint"] = f"{e['MASTER_ADDR']}:{e.get('MASTER_PORT') or DEFAULT_RDZV_PORT}"
        if (n := number("PET_NPROC_PER_NODE")) is not None:
            out["nproc_per_node"] = n
    return out


def _rendezvous_endpoint(spec: LaunchSpec) -> tuple[str, int] | None:
    if spec.nnodes == 1:
        return None  # --standalone: torchrun picks a free port itself
    endpoint = spec.rdzv_endpoint or f"127.0.0.1:{DEFAULT_RDZV_PORT}"
    host, _, port = endpoint.rpartition(":") if ":" in endpoint else (endpoint, "", "")
    return host, int(port) if port else DEFAULT_RDZV_PORT  # LaunchSpec.validate checked it


def check_rendezvous_port(spec: LaunchSpec) -> None:
    """Node 0 hosts the rendezvous store: refuse at once when its port is taken on this machine
    (else every attempt would fail the same way and end as 'the command kept failing')."""
    found = _rendezvous_endpoint(spec)
    if found is None or spec.node_rank != 0:
        return
    import errno
    import socket

    _, port = found
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the c10d store binds
        try:
            s.bind(("", port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                return  # not ours to judge (e.g. no permission on this interface)
            raise InputError(
                f"the rendezvous port {port} is in use on this machine (node 0 hosts the "
                "rendezvous store)",
                hint="stop what holds it (another gpuwise run or torchrun?), or give a free "
                "port with --rdzv-endpoint HOST:PORT on every node",
            ) from exc


def _notice_up(env: dict[str, str], progress: list[dict[str, Any]]) -> Any:
    """The cloud's preemption notice for this machine, if one is up now (None otherwise).

    Asked only when a worker reported a notice from a cloud (``notice`` in its progress file),
    and only that cloud: probing for clouds on a machine without one costs seconds."""
    from gpuwise.train.preemption import CLOUDS, PreemptionWatcher

    clouds = sorted({str(p.get("notice")) for p in progress} & set(CLOUDS))
    if not clouds:
        return None
    try:
        watcher = PreemptionWatcher(
            cloud=clouds[0],
            metadata_url=env.get("GPUWISE_METADATA_URL") or None,
            signals=(),
        )
    except InputError:
        return None  # a bad GPUWISE_CLOUD: the workers report it
    return watcher.check_now()


DEADLINE_MARGIN_S = 3.0
"""When every worker here reported its notice save committed but some still run this close to
the notice's deadline, the attempt is ended (the machine is about to go anyway)."""


def _past_notice_deadline(progress: list[dict[str, Any]], nproc: int) -> bool:
    """Every local rank reported ``preempted`` (its notice checkpoint is committed) and the
    earliest notice deadline is less than :data:`DEADLINE_MARGIN_S` away."""
    if len(progress) < nproc or any(p.get("exit") != "preempted" for p in progress):
        return False
    deadlines = [p["deadline_unix"] for p in progress if isinstance(p.get("deadline_unix"), float)]
    return bool(deadlines) and time.time() > min(deadlines) - DEADLINE_MARGIN_S


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL torchrun and every process below it (its workers run in sessions of their own)."""
    from gpuwise.train.chaos import descendants

    for pid in [*descendants(proc.pid), proc.pid]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _wait(
    proc: subprocess.Popen[bytes],
    spec: LaunchSpec,
    run_dir: str,
    number: int,
    say: Callable[[str], None],
    log_every_s: float,
) -> int:
    """Wait for an attempt. In a multi-node job, say every ``log_every_s`` what it waits for
    while no worker has started (the rendezvous). After a notice, end the attempt when every
    worker here committed its notice save but some still run at the notice's deadline (a worker
    stuck at exit must not keep ``gpuwise run`` from handing over 75 in the window)."""
    started = last_log = time.monotonic()
    endpoint = _rendezvous_endpoint(spec)
    while True:
        try:
            return proc.wait(timeout=0.5)
        except KeyboardInterrupt:  # our handler already forwarded SIGTERM
            continue
        except subprocess.TimeoutExpired:
            pass
        progress = _read_progress(run_dir)
        if _past_notice_deadline(progress, spec.nproc_per_node):
            say(
                f"attempt {number}: every worker committed its notice checkpoint but some are "
                "still running at the notice's deadline: ending them"
            )
            _kill_tree(proc)
            proc.wait()
            return EXIT_PREEMPTED
        if endpoint is not None and not progress and time.monotonic() - last_log >= log_every_s:
            last_log = time.monotonic()
            say(
                f"attempt {number}: waiting {last_log - started:.0f} s for the "
                f"rendezvous at {endpoint[0]}:{endpoint[1]} (job {spec.rdzv_id!r}, "
                f"{spec.nnodes} nodes, this is node {spec.node_rank}); no worker has "
                "started yet"
            )


def _final_exit_code(
    outcome: Outcome,
    code: int,
    committed: int | None,
    failures: dict[int, int] | None,
    say: Callable[[str], None],
) -> int | None:
    """The exit code of ``gpuwise run`` when ``outcome`` ends it (said in a line), else None."""
    if outcome == "done":
        return EXIT_OK
    if outcome == "done-then-crashed":
        say(
            f"every worker here finished and committed step {committed}, then "
            f"{_describe(failures, code)} after the training loop (typically a crash in the "
            "framework's teardown): the training is done and not redone; if the script does more "
            "after its loop, check that it finished"
        )
        return EXIT_OK
    if outcome == "failed-after-done":
        exit_code = _exit_after_done(failures, code)
        say(
            f"every worker here finished and committed step {committed}, then "
            f"{_describe(failures, code)} after the training loop: not restarted (the other nodes "
            f"are done and would never join again); exiting with {exit_code}"
        )
        return exit_code
    if outcome == "usage":
        say(
            f"the command exited with {code} (a usage error): not retried, a retry cannot change it"
        )
        return EXIT_USAGE
    if outcome == "stopped":
        say(
            f"stop signal received: exiting with {EXIT_PREEMPTED} so the scheduler can recover the job"
        )
        return EXIT_PREEMPTED
    return None


def _notice_still_up(notice: Any) -> str:
    left = notice.seconds_left
    return (
        f"the {notice.source} preemption notice is still up ("
        + (f"{notice.action}; " if notice.action else "")
        + "this machine "
        + (f"goes in {left:.0f} s" if left is not None else "is going away")
        + f"): not restarting; exiting with {EXIT_PREEMPTED} so the scheduler "
        "can recover the job elsewhere"
    )


def launch(
    spec: LaunchSpec,
    *,
    say: Callable[[str], None] | None = None,
    env: dict[str, str] | None = None,
    stdout: int | None = None,
    rendezvous_log_s: float = RENDEZVOUS_LOG_S,
) -> LaunchResult:
    """Run ``spec`` until it finishes or runs out of restarts; see the module docstring.

    ``env``: variables for the workers, over :meth:`LaunchSpec.worker_env` (the plan and pilot).
    ``stdout``: a file descriptor for the command's output (``--json`` sends it to stderr).
    ``rendezvous_log_s``: how often a multi-node attempt says what its rendezvous waits for."""
    say = say or (lambda text: log.info("%s", text))
    env = {**spec.worker_env(), **(env or {})}  # a bad plan file stops here, before any worker
    argv = build_argv(spec)
    check_rendezvous_port(spec)
    attempts: list[AttemptResult] = []
    crashes = preemptions = 0
    closed_since: float | None = None
    received: list[int] = []
    proc: subprocess.Popen[bytes] | None = None

    def on_signal(signum: int, frame: Any) -> None:
        received.append(signum)
        if proc is not None and proc.poll() is None:  # torchrun forwards it to the workers
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)

    previous = {
        s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
    }
    try:
        with tempfile.TemporaryDirectory(prefix="gpuwise-run-") as run_dir:
            child_env = {
                **os.environ,
                **env,
                "GPUWISE_RUN_DIR": run_dir,
                PARENT_ENV: str(os.getpid()),  # its children die with this process (._worker)
            }
            child_env["GPUWISE_RUN_ID"] = job_run_id()  # names the run's records
            while True:
                for path in glob.glob(os.path.join(run_dir, "progress-rank*.json")):
                    os.remove(path)
                closed_marker = os.path.join(run_dir, RENDEZVOUS_CLOSED_MARKER)
                failures_file = os.path.join(run_dir, FAILURES_FILE)
                usage_file = os.path.join(run_dir, USAGE_ERROR_FILE)
                for marker in (closed_marker, failures_file, usage_file):
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(marker)
                number = len(attempts) + 1
                say(f"attempt {number}: {' '.join(argv)}")
                started = time.monotonic()
                child_env["GPUWISE_ATTEMPT"] = str(number - 1)
                proc = subprocess.Popen(argv, env=child_env, stdout=stdout)
                code = _wait(proc, spec, run_dir, number, say, rendezvous_log_s)
                progress = _read_progress(run_dir)
                failures = _read_failures(failures_file)
                if not spec.torchrun and code < 0:  # the command itself, killed by a signal
                    failures = {0: code}
                usage = _read_usage_error(usage_file)
                if usage is not None and not received:  # a worker's gpuwise usage error: the
                    say(f"a worker stopped on a usage error: {usage}")  # others were stopped
                    code = EXIT_USAGE
                outcome = _classify(
                    code,
                    progress,
                    bool(received),
                    os.path.exists(closed_marker),
                    spec.nnodes,
                    failures,
                    spec.nproc_per_node if spec.torchrun else 1,
                )
                steps = _ints(progress, "step")
                # a commit is global: the rank that knows the newest one is right
                commits = _ints(progress, "committed_step")
                resumed = _ints(progress, "resumed_from")
                reached = max(steps) if steps else None
                committed = max(commits) if commits else None
                lost = (
                    (reached - (committed or 0))
                    if reached is not None and outcome not in FINISHED_OUTCOMES
                    else None
                )
                result = AttemptResult(
                    number,
                    code,
                    outcome,
                    min(resumed) if resumed else None,
                    reached,
                    committed,
                    lost,
                    time.monotonic() - started,
                    *_notice_and_error(progress),
                )
                attempts.append(result)
                lost_text = (
                    f"; {lost} step(s) lost (reached {reached}, committed {committed})"
                    if lost is not None
                    else ""
                )
                say(
                    f"attempt {number} {outcome} (exit code {code}) after {result.wall_s:.1f} s{lost_text}"
                )
                if result.error:
                    say(f"error: {result.error}")
                final = _final_exit_code(outcome, code, committed, failures, say)
                if final is not None:
                    return LaunchResult(final, tuple(attempts))
                if outcome in ("preempted", "peer-lost", "crashed"):
                    notice = _notice_up(child_env, progress)
                    if notice is not None:  # the cloud announced this machine's end: no restart
                        say(_notice_still_up(notice))
                        return LaunchResult(EXIT_PREEMPTED, tuple(attempts))
                # consecutive closed-rendezvous attempts: since the first one started
                closed_since = (closed_since or started) if outcome == "rendezvous-closed" else None
                delay = spec.restart_delay_s
                if (
                    closed_since is not None
                    and time.monotonic() - closed_since <= RENDEZVOUS_CLOSED_WAIT_S
                ):
                    say(
                        "the rendezvous is still closed: the other nodes are ending the previous "
                        "attempt; joining again (not counted as a failure)"
                    )
                    delay = max(delay, 1.0)  # no busy loop with --restart-delay 0s
                elif outcome in ("preempted", "peer-lost"):  # a lost peer: the job was preempted
                    preemptions += 1
                    if preemptions > spec.max_preemptions:
                        say(
                            f"{preemptions} preemptions: handing over with exit code {EXIT_PREEMPTED}"
                        )
                        return LaunchResult(EXIT_PREEMPTED, tuple(attempts))
                    what = "a lost peer" if outcome == "peer-lost" else "preemption"
                    say(f"restarting after {what} ({preemptions}/{spec.max_preemptions})")
                else:
                    crashes += 1
                    if crashes > spec.max_restarts:
                        say(
                            f"the command failed {crashes} time(s): giving up with exit code {EXIT_RESTARTS_EXHAUSTED}"
                        )
                        return LaunchResult(EXIT_RESTARTS_EXHAUSTED, tuple(attempts))
                    say(f"restarting after a failure ({crashes}/{spec.max_restarts})")
                time.sleep(delay)
                if received:
                    return LaunchResult(EXIT_PREEMPTED, tuple(attempts))
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
