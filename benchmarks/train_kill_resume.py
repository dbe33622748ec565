"""Kill injection at scale: SIGKILL examples/train_tiny.py 500 times at random moments.

    PYTHONPATH=src python benchmarks/train_kill_resume.py [--kills 500] [--steps 15000]
    PYTHONPATH=src python benchmarks/train_kill_resume.py --exec --kills 20 --steps 8000 --hidden 512 \
        --min-delay 3.0 --max-delay 4.5      # the real script, a fresh process per attempt

FSDP2 over gloo ranks under ``gpuwise run`` (each attempt a fresh ``gpuwise run``; a kill
SIGKILLs the whole process tree; ``--sigterm-share`` of the stops are SIGTERMs instead):

    PYTHONPATH=src python benchmarks/train_kill_resume.py --fsdp 2 --kills 50 --steps 1500 \
        --min-delay 6 --max-delay 14 --sigterm-share 0.1

FSDP2 + tensor parallelism on a (dp, tp=2) mesh: ``--mode tp --ranks 4`` (2x2) or ``--ranks 2``
(1x2); the same kills. Notice scenarios, FSDP2 (or ``--mode tp``) checkpointing to S3 (moto's
server on loopback behind :class:`~gpuwise.train.chaos.StorageProxy`) with a GCP notice that
stays up, the store hung or slow from the moment of the notice:

    PYTHONPATH=src python benchmarks/train_kill_resume.py --scenario notice-hung --ranks 2 --repeats 3 \
        --steps 60 --hidden 64
    PYTHONPATH=src python benchmarks/train_kill_resume.py --scenario notice-slow --ranks 4 --repeats 3 \
        --steps 60 --hidden 64

Multi-node kills: two "nodes" (two ``gpuwise run --nnodes 2`` on loopback, ``--ranks`` workers
in all), node 1's torchrun and workers SIGKILLed ``--kills`` times (its machine lost; its ``gpuwise run``
standing in for the replacement); reports each node's attempt outcomes (node 0: ``peer-lost``,
a preemption, not a crash), the lost steps per kill and whether the run ended exact:

    PYTHONPATH=src python benchmarks/train_kill_resume.py --scenario node-loss --ranks 2 --kills 3 \
        --steps 120 --hidden 64

Each repeat reports the exit code, seconds from notice to exit (goal: < 30 s, GCP's window),
whether ``gpuwise run`` restarted, the steps lost (reached minus committed) and whether the
resume was exact. Every table reports lost steps per scenario.

Every attempt is forked from this process (torch already imported), killed after a random delay,
and restarted; a kill is "mid-write" when it left an uncommitted checkpoint folder behind. The
run must end with the digest and loss curve of an uninterrupted run, bit for bit.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

from gpuwise.train.chaos import Attempt, loopback_node_command, reference_run, run_with_kills

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_tiny.py"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=500)
    ap.add_argument("--steps", type=int, default=15000)
    ap.add_argument("--min-delay", type=float, default=0.08)
    ap.add_argument("--max-delay", type=float, default=0.35)
    ap.add_argument(
        "--slow-write", type=float, default=0.02, help="train_tiny --slow-write (data → marker)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--exec",
        action="store_true",
        help="run each attempt as a fresh `python examples/train_tiny.py` process (slow start) "
        "instead of forking it from this process",
    )
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument(
        "--fsdp", type=int, default=0, help="FSDP2 over this many gloo ranks under gpuwise run"
    )
    ap.add_argument("--sigterm-share", type=float, default=0.0)
    ap.add_argument(
        "--mode",
        choices=["fork", "exec", "fsdp", "tp"],
        default=None,
        help="fork (default), exec, fsdp (FSDP2 under gpuwise run), tp (FSDP2 + TP, tp=2)",
    )
    ap.add_argument("--ranks", type=int, default=2, help="gloo ranks for fsdp/tp")
    ap.add_argument(
        "--scenario",
        choices=["kills", "notice-hung", "notice-slow", "node-loss"],
        default="kills",
    )
    ap.add_argument("--repeats", type=int, default=3, help="notice scenarios: repeats")
    args = ap.parse_args()
    if args.mode is None:
        args.mode = "fsdp" if args.fsdp else "exec" if args.exec else "fork"
    if args.fsdp:
        args.ranks = args.fsdp
    if args.scenario == "node-loss":
        node_loss_scenario(args)
        return
    if args.scenario != "kills":
        notice_scenario(args)
        return
    spec = importlib.util.spec_from_file_location("train_tiny", EXAMPLE)
    assert spec and spec.loader
    tiny = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny)
    argv = ["--steps", str(args.steps), "--hidden", str(args.hidden), "--every", "3"]
    argv += ["--slow-write", str(args.slow_write)]
    how: dict = (
        {"command": [sys.executable, str(EXAMPLE)]}
        if args.mode == "exec"
        else {"target": tiny.main}
    )
    if args.mode in ("fsdp", "tp"):
        argv += ["--fsdp", "--batch", "16", *(["--tp", "2"] if args.mode == "tp" else [])]
        how = {"command": _gpuwise_run(args.ranks)}
    env = {"GPUWISE_CLOUD": "none"}
    t0 = time.monotonic()
    stops = {"all": 0, "mid": 0}

    def progress_line(a: Attempt) -> None:  # on stderr, so a run cut short still tells its count
        stops["all"] += a.killed
        stops["mid"] += a.mid_write
        print(
            f"[{time.monotonic() - t0:7.1f} s] attempt {'stopped' if a.killed else 'ended'} "
            f"after {a.lived_s:.1f} s at step {a.last_step} (resumed from {a.resumed_from}); "
            f"stops {stops['all']}, mid-write {stops['mid']}",
            file=sys.stderr,
            flush=True,
        )

    with tempfile.TemporaryDirectory() as ref_dir, tempfile.TemporaryDirectory() as run_dir:
        ref = reference_run([*argv, "--checkpoint-dir", ref_dir], env=env, **how)  # type: ignore[arg-type]
        print(
            f"[{time.monotonic() - t0:7.1f} s] uninterrupted run done", file=sys.stderr, flush=True
        )
        rep = run_with_kills(
            [*argv, "--checkpoint-dir", run_dir],
            checkpoint_dir=run_dir,
            kills=args.kills,
            min_delay_s=args.min_delay,
            max_delay_s=args.max_delay,
            seed=args.seed,
            env=env,
            sigterm_share=args.sigterm_share,
            timeout_s=6 * 3600,
            on_attempt=progress_line,
            **how,
        )  # type: ignore[arg-type]
    progress = [
        a.last_step - (a.resumed_from or 0) for a in rep.attempts if a.killed and a.last_step
    ]
    lost = [  # steps a stopped attempt reached that the next one had to redo
        max(a.last_step - (b.resumed_from or 0), 0)
        for a, b in zip(rep.attempts, rep.attempts[1:], strict=False)
        if a.killed
    ]
    rows = [
        (
            "attempts run as",
            {
                "fsdp": f"gpuwise run, FSDP2 on {args.ranks} gloo ranks",
                "tp": f"gpuwise run, FSDP2 + TP on a {args.ranks // 2}x2 mesh (gloo)",
                "exec": "fresh processes (exec)",
                "fork": "forks of this process",
            }[args.mode],
        ),
        ("stops (SIGKILL of the process tree, or SIGTERM)", rep.kills),
        ("kills that left an uncommitted checkpoint (mid-write)", rep.mid_write_kills),
        ("resumes that skipped an invalid newest checkpoint", rep.skipped_invalid),
        ("resumes from a partial checkpoint", 0 if rep.digest == ref.digest else "?"),
        ("steps whose replayed loss differed", len(rep.replay_mismatches)),
        ("loss curve equal to uninterrupted (bitwise)", rep.losses == ref.losses),
        ("final digest equal to uninterrupted", rep.digest == ref.digest),
        (
            "median steps gained per killed attempt",
            sorted(progress)[len(progress) // 2] if progress else 0,
        ),
        ("lost steps per stop (median / max / total)", _spread(lost)),
        ("wall time, s", round(rep.wall_s, 1)),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def _spread(values: list[int]) -> str:
    if not values:
        return "-"
    return f"{sorted(values)[len(values) // 2]} / {max(values)} / {sum(values)}"


def _committed(remote: object) -> list[int]:
    from gpuwise.errors import StorageError

    try:
        return remote.committed_steps()  # type: ignore[attr-defined,no-any-return]
    except StorageError:  # moto too slow to answer: ask again
        return []


def _gpuwise_run(ranks: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gpuwise",
        "run",
        "--nproc-per-node",
        str(ranks),
        "--restart-delay",
        "0s",
        "--",
        sys.executable,
        str(EXAMPLE),
    ]


def node_loss_scenario(args: argparse.Namespace) -> None:
    """Two nodes on loopback; node 1's torchrun and workers are SIGKILLed ``--kills`` times."""
    import os
    import random
    import re
    import signal
    import socket
    import subprocess

    from gpuwise.train.chaos import descendants

    per_node = max(args.ranks // 2, 1)
    argv = ["--hidden", str(args.hidden), "--batch", "16", "--fsdp", "--every", "2"]
    argv += ["--steps", str(args.steps), "--step-delay", "0.25"]
    env = {**os.environ, "GPUWISE_CLOUD": "none"}
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        ref = subprocess.run(
            [*_gpuwise_run(2 * per_node), *argv, "--checkpoint-dir", f"{tmp}/ref"],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        nodes, files = [], []
        for rank in (0, 1):
            cmd = loopback_node_command(
                rank,
                port,
                per_node,
                [sys.executable, str(EXAMPLE), *argv, "--checkpoint-dir", f"{tmp}/run"],
                launcher_args=("--restart-delay", "1s", "--max-restarts", str(args.kills + 1)),
            )
            out, err = open(f"{tmp}/out{rank}", "w"), open(f"{tmp}/err{rank}", "w")  # noqa: SIM115
            files += [out, err]
            nodes.append(subprocess.Popen(cmd, stdout=out, stderr=err, env=env))
        t0 = time.monotonic()
        for _ in range(args.kills):
            time.sleep(rng.uniform(args.min_delay, args.max_delay))
            if any(n.poll() is not None for n in nodes):
                break
            workers = [
                pid
                for pid in descendants(nodes[1].pid)
                if str(EXAMPLE)
                in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            ]
            for pid in workers:  # node 1's machine goes away
                os.kill(pid, signal.SIGKILL)
            print(f"killed node 1's {len(workers)} process(es)", file=sys.stderr, flush=True)
        codes = [n.wait(timeout=3600) for n in nodes]
        wall = time.monotonic() - t0
        for f in files:
            f.close()
        errs = [Path(f"{tmp}/err{r}").read_text() for r in (0, 1)]
        outs = "".join(Path(f"{tmp}/out{r}").read_text() for r in (0, 1))
    attempt = re.compile(
        r"attempt \d+ (\S+) \(exit code -?\d+\)[^;\n]*(?:; (\d+) step\(s\) lost.*)?$", re.M
    )
    outcomes = [[m[1] for m in attempt.finditer(e)] for e in errs]
    lost = [int(m[2]) for m in attempt.finditer(errs[0]) if m[2] is not None]
    loss = re.compile(r"^loss (\d+) (\S+)$", re.M)
    got = {int(m[1]): m[2] for m in loss.finditer(outs)}
    want = {int(m[1]): m[2] for m in loss.finditer(ref)}
    digest = re.findall(r"^digest (\w+)$", outs, re.M)[-1:]
    rows = [
        ("nodes x workers", f"2 x {per_node} (FSDP2, gloo, loopback)"),
        ("exit codes (node 0, node 1)", codes),
        ("node 0 attempts", ", ".join(outcomes[0])),
        ("node 1 attempts", ", ".join(outcomes[1])),
        ("lost steps per kill, node 0 (median / max / total)", _spread(lost)),
        ("losses a subset of the uninterrupted run's (bitwise)", got.items() <= want.items()),
        ("final digest equal", digest == re.findall(r"^digest (\w+)$", ref, re.M)[-1:]),
        ("wall time, s", round(wall, 1)),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def notice_scenario(args: argparse.Namespace) -> None:
    """A GCP notice that stays up while the S3 store hangs (or turns slow); see the docstring."""
    import json
    import os
    import re
    import socket
    import subprocess

    import boto3
    from moto.server import ThreadedMotoServer

    from gpuwise.train import Checkpointer, FakeMetadataServer
    from gpuwise.train.chaos import StorageProxy

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    moto.start()
    url = f"http://127.0.0.1:{port}"
    boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_bucket(Bucket="ckpt")
    opts = {
        "key": "testing",
        "secret": "testing",
        "skip_instance_cache": True,
        "client_kwargs": {"endpoint_url": url, "region_name": "us-east-1"},
        # generous: moto on a loaded machine is slow; a hung store is hung whatever the timeout
        "config_kwargs": {"connect_timeout": 2, "read_timeout": 30, "retries": {"max_attempts": 1}},
    }
    env = {**os.environ, "GPUWISE_CLOUD": "none", "AWS_EC2_METADATA_DISABLED": "true"}
    argv = ["--hidden", str(args.hidden), "--batch", "16", "--fsdp", "--every", "5"]
    argv += ["--steps", str(args.steps)] + (["--tp", "2"] if args.mode == "tp" else [])
    loss = re.compile(r"^loss (\d+) (\S+)$", re.M)

    def losses(text: str) -> dict[int, str]:
        return {int(m[1]): m[2] for m in loss.finditer(text)}

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ref = subprocess.run(
            [*_gpuwise_run(args.ranks), *argv, "--checkpoint-dir", f"{tmp}/ref"],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout
        for i in range(args.repeats):
            proxy = StorageProxy(port)
            via = {**opts, "client_kwargs": {**opts["client_kwargs"], "endpoint_url": proxy.url}}
            where = ["--checkpoint-dir", f"s3://ckpt/r{i}", "--local-dir", f"{tmp}/local{i}"]
            remote = Checkpointer(f"s3://ckpt/r{i}", storage_options=opts)
            out_path = f"{tmp}/out{i}.txt"
            with FakeMetadataServer() as md, open(out_path, "w") as out:
                md_env = {
                    **env,
                    "GPUWISE_CLOUD": "gcp",
                    "GPUWISE_METADATA_URL": md.url,
                    "GPUWISE_POLL_INTERVAL_S": "0.5",
                }
                proc = subprocess.Popen(
                    [
                        *_gpuwise_run(args.ranks),
                        *argv,
                        *where,
                        "--storage-options",
                        json.dumps(via),
                        "--step-delay",
                        "0.2",
                    ],
                    stdout=out,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=md_env,
                )
                while not _committed(remote) and proc.poll() is None:
                    time.sleep(0.2)
                if args.scenario == "notice-hung":
                    proxy.hang()
                else:
                    proxy.delay_s = 0.05
                md.preempt(notice_s=30)
                t0 = time.monotonic()
                _, err = proc.communicate(timeout=300)
                took = time.monotonic() - t0
            proxy.close()
            first = losses(Path(out_path).read_text())
            local = Checkpointer(f"{tmp}/local{i}").committed_steps()
            committed = max([*local, *remote.committed_steps(), 0])
            again = subprocess.run(
                [*_gpuwise_run(args.ranks), *argv, *where, "--storage-options", json.dumps(opts)],
                capture_output=True,
                text=True,
                env=env,
            ).stdout
            exact = {**first, **losses(again)} == losses(ref) and (
                again.strip().splitlines()[-1:] == ref.strip().splitlines()[-1:]
            )
            rows.append(
                (
                    i + 1,
                    proc.returncode,
                    took,
                    "attempt 2" in err,
                    max(first or [0]) - committed,
                    exact,
                )
            )
            print(f"repeat {i + 1} done", file=sys.stderr, flush=True)
    moto.stop()
    mode = f"FSDP2 + TP ({args.ranks // 2}x2)" if args.mode == "tp" else f"FSDP2 on {args.ranks}"
    print(f"{args.scenario}: {mode} gloo ranks, S3 via a loopback proxy, GCP notice (30 s) kept up")
    print(
        f"{'repeat':>6} {'exit':>5} {'notice→exit s':>14} {'restarted':>10} {'lost steps':>11} {'exact':>6}"
    )
    for r in rows:
        print(f"{r[0]:>6} {r[1]:>5} {r[2]:>14.1f} {r[3]!s:>10} {r[4]:>11} {r[5]!s:>6}")
    print(f"lost steps per notice (median / max / total): {_spread([r[4] for r in rows])}")


if __name__ == "__main__":
    main()
