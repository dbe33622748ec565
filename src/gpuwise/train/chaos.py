"""Kill injection: SIGKILL a training run at random moments, restart it, and check that it ends
exactly where an uninterrupted run ends. For the tests, ``benchmarks/kill_resume.py`` and your
own training scripts.

The training program must print ``loss <step> <value>`` per optimizer step and, last,
``digest <hex>`` (``examples/train_tiny.py`` does). Two ways to run it:

- ``target`` a Python callable ``main(argv) -> int``: each attempt is forked from this process,
  so torch is already imported and a restart costs milliseconds (Linux);
- ``command`` an argv list: each attempt is a fresh process (slow start, any program).

After every kill the checkpoint folder is inspected: a ``step-*`` folder without its commit
marker, or a temporary file, means the kill landed mid-write.

:class:`StorageProxy` is the storage side of the same game: a loopback TCP proxy in front of an
object store's API (moto's S3 server in the tests) that can be made slow or hung on demand.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_LOSS = re.compile(r"^loss (\d+) (\S+)$")


@dataclass(frozen=True)
class Attempt:
    """One process of a killed-and-restarted run."""

    killed: bool
    """True when we SIGKILLed it; False when it exited on its own."""
    exit_code: int | None
    """Its exit code (None when killed)."""
    resumed_from: int | None
    """Step it resumed from (None: from scratch)."""
    last_step: int
    """Last step it printed a loss for (0: none)."""
    mid_write: bool
    """The kill left an uncommitted checkpoint folder or a temporary file behind."""
    lived_s: float
    """Seconds it ran."""


@dataclass(frozen=True)
class ChaosReport:
    """What a kill-injection run showed."""

    attempts: tuple[Attempt, ...]
    """Every process, in order."""
    losses: dict[int, str]
    """The loss curve: step → printed value (every replay of a step must print the same)."""
    replay_mismatches: tuple[int, ...]
    """Steps whose replays after a resume printed a different loss (should be empty)."""
    digest: str | None
    """The final digest line of the run that finished."""
    wall_s: float
    """Total wall-clock time."""
    skipped_invalid: int = 0
    """Times a resume logged that it skipped an invalid (uncommitted / corrupt) checkpoint."""
    outputs: list[str] = field(default_factory=list)
    """Raw stdout of every attempt (for debugging)."""

    @property
    def kills(self) -> int:
        return sum(a.killed for a in self.attempts)

    @property
    def mid_write_kills(self) -> int:
        return sum(a.mid_write for a in self.attempts)


def _parse(text: str) -> tuple[dict[int, list[str]], int | None, str | None]:
    losses: dict[int, list[str]] = {}
    resumed, digest = None, None
    for line in text.splitlines():
        m = _LOSS.match(line.strip())
        if m:
            losses.setdefault(int(m.group(1)), []).append(m.group(2))
        elif line.startswith("resumed "):
            resumed = int(line.split()[1])
        elif line.startswith("digest "):
            digest = line.split()[1]
    return losses, resumed, digest


def _mid_write(checkpoint_dir: str) -> bool:
    root = Path(checkpoint_dir)
    if not root.is_dir():
        return False
    for folder in root.iterdir():
        if not folder.name.startswith("step-"):
            continue
        names = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
        if "COMMIT.json" not in names or any(n.endswith(".tmp") for n in names):
            return True
    return False


def _start(
    target: Callable[[list[str]], int] | None,
    command: Sequence[str] | None,
    argv: list[str],
    out_path: str,
    err_path: str,
    env: dict[str, str] | None,
) -> tuple[int, subprocess.Popen[bytes] | None]:
    if target is not None:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                out_fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                err_fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(out_fd, 1)
                os.dup2(err_fd, 2)
                for k, v in (env or {}).items():
                    os.environ[k] = v
                import sys

                sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
                sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
                try:
                    code = int(target(argv) or 0)
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
        return pid, None
    assert command is not None
    with (
        open(out_path, "wb") as out,
        open(err_path, "wb") as err,
    ):  # own session: killpg gets the workers too
        proc = subprocess.Popen(
            [*command, *argv],
            stdout=out,
            stderr=err,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    return proc.pid, proc


def loopback_node_command(
    rank: int,
    port: int,
    per_node: int,
    command: Sequence[str],
    *,
    nnodes: int = 2,
    launcher_args: Sequence[str] = ("--restart-delay", "1s"),
) -> list[str]:
    """``gpuwise run`` of node ``rank`` of an ``nnodes``-"node" job on 127.0.0.1 (rendezvous at
    ``port``), ``per_node`` processes each running ``command``: node-loss drills on one machine."""
    return [
        *(sys.executable, "-m", "gpuwise", "run", "--nnodes", str(nnodes)),
        *("--node-rank", str(rank), "--rdzv-endpoint", f"127.0.0.1:{port}"),
        *("--nproc-per-node", str(per_node), *launcher_args, "--", *command),
    ]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux ``/proc``): torchrun starts its workers in sessions of
    their own, so a SIGKILL of the process group would leave them running."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _wait(pid: int, proc: subprocess.Popen[bytes] | None, timeout_s: float) -> int | None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc is not None:
            code = proc.poll()
            if code is not None:
                return code
        else:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.005)


def run_with_kills(
    argv: Sequence[str],
    *,
    checkpoint_dir: str,
    kills: int,
    target: Callable[[list[str]], int] | None = None,
    command: Sequence[str] | None = None,
    min_delay_s: float = 0.1,
    max_delay_s: float = 1.0,
    seed: int = 0,
    env: dict[str, str] | None = None,
    timeout_s: float = 600.0,
    prewarm: Sequence[str] = ("torch._dynamo",),
    aim_mid_write: int = 0,
    sigterm_share: float = 0.0,
    on_attempt: Callable[[Attempt], None] | None = None,
) -> ChaosReport:
    """Run ``argv`` (with ``--checkpoint-dir checkpoint_dir`` already in it), SIGKILL it ``kills``
    times after random delays in [min_delay_s, max_delay_s], then let it finish.

    ``aim_mid_write``: the first N kills, after their delay, wait (up to 10 s) until a checkpoint
    is half-written, so that kills mid-write happen whatever the machine's load (no timing luck).
    ``sigterm_share``: that share of the stops are a SIGTERM to the launcher (a notice: save, then
    exit) instead of a SIGKILL of the whole process group. With ``command`` every attempt runs in
    its own session and a SIGKILL reaches torchrun's workers too. ``on_attempt`` is called with
    each finished attempt (progress for long runs that may be cut short).

    ``prewarm``: modules imported here before forking (torch's first optimizer step imports
    ``torch._dynamo``, ~2 s, which every forked attempt would otherwise pay again)."""
    if (target is None) == (command is None):
        raise ValueError("pass exactly one of target= or command=")
    if target is not None:
        import importlib

        for name in prewarm:
            importlib.import_module(name)
    rng = random.Random(seed)
    t0 = time.monotonic()
    attempts: list[Attempt] = []
    all_losses: dict[int, list[str]] = {}
    outputs: list[str] = []
    digest: str | None = None
    skipped = 0
    with tempfile.TemporaryDirectory(prefix="gpuwise-chaos-") as tmp:
        while True:
            if time.monotonic() - t0 > timeout_s:
                raise TimeoutError(f"kill injection did not finish in {timeout_s} s")
            out_path, err_path = os.path.join(tmp, "out"), os.path.join(tmp, "err")
            started = time.monotonic()
            pid, proc = _start(target, command, list(argv), out_path, err_path, env)
            killing = len([a for a in attempts if a.killed]) < kills
            code = _wait(pid, proc, rng.uniform(min_delay_s, max_delay_s) if killing else timeout_s)
            if code is None and len(attempts) < aim_mid_write:
                aim_until = time.monotonic() + 10.0
                while (
                    code is None and not _mid_write(checkpoint_dir) and time.monotonic() < aim_until
                ):
                    code = _wait(pid, proc, 0.002)
            killed = False
            if code is None:
                sig = signal.SIGTERM if rng.random() < sigterm_share else signal.SIGKILL
                mid_now = _mid_write(checkpoint_dir)
                if sig == signal.SIGTERM:
                    os.kill(pid, signal.SIGTERM)
                    if _wait(pid, proc, 120.0) is None:
                        sig = signal.SIGKILL
                if sig == signal.SIGKILL:
                    if proc is not None:  # the whole tree at once, as when a machine dies
                        for victim in [pid, *descendants(pid)]:
                            with contextlib.suppress(ProcessLookupError):
                                os.kill(victim, signal.SIGKILL)
                        proc.wait()
                    else:
                        os.kill(pid, signal.SIGKILL)
                        os.waitpid(pid, 0)
                killed = True
            lived = time.monotonic() - started
            mid = killed and sig == signal.SIGKILL and (mid_now or _mid_write(checkpoint_dir))
            text = Path(out_path).read_text(errors="replace")
            err = Path(err_path).read_text(errors="replace")
            skipped += err.count("skipping checkpoint")
            outputs.append(text)
            losses, resumed, dig = _parse(text)
            for step, values in losses.items():
                all_losses.setdefault(step, []).extend(values)
            attempts.append(
                Attempt(
                    killed,
                    None if killed else code,
                    resumed,
                    max(losses) if losses else 0,
                    mid,
                    lived,
                )
            )
            if on_attempt is not None:
                on_attempt(attempts[-1])
            if not killed:
                if code != 0:
                    raise RuntimeError(
                        f"the training run failed with exit code {code}:\n{err[-3000:]}"
                    )
                digest = dig
                break
    mismatches = tuple(sorted(s for s, v in all_losses.items() if len(set(v)) > 1))
    return ChaosReport(
        tuple(attempts),
        {s: v[-1] for s, v in sorted(all_losses.items())},
        mismatches,
        digest,
        time.monotonic() - t0,
        skipped,
        outputs,
    )


def reference_run(
    argv: Sequence[str],
    *,
    target: Callable[[list[str]], int] | None = None,
    command: Sequence[str] | None = None,
    env: dict[str, str] | None = None,
) -> ChaosReport:
    """The same program without kills (for the curve and digest to compare with)."""
    checkpoint_dir = (
        list(argv)[list(argv).index("--checkpoint-dir") + 1] if "--checkpoint-dir" in argv else ""
    )
    return run_with_kills(
        argv, checkpoint_dir=checkpoint_dir, kills=0, target=target, command=command, env=env
    )


class StorageProxy:
    """A TCP proxy on 127.0.0.1 in front of another server; ``hang()`` makes it stop answering
    (connections are accepted, nothing is forwarded or returned): a hung object store.
    ``delay_s`` (settable at any time) holds every chunk that passes that long: a slow one."""

    def __init__(self, upstream_port: int, delay_s: float = 0.0) -> None:
        self.upstream_port = upstream_port
        self.delay_s = delay_s
        self.hung = threading.Event()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = int(self._sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            self._held.append(client)
            if self.hung.is_set():
                continue  # accepted, never answered
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            except OSError:
                client.close()
                continue
            self._held.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(None)
        while not self.hung.is_set():
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data or self.hung.is_set():
                return  # once hung, bytes in flight are swallowed and the connection stays open
            if self.delay_s > 0:
                time.sleep(self.delay_s)
            try:
                dst.sendall(data)
            except OSError:
                return

    def hang(self) -> None:
        self.hung.set()

    def close(self) -> None:
        self._sock.close()
        for s in self._held:
            with contextlib.suppress(OSError):
                s.close()
