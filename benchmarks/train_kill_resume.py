"""Kill injection at scale: SIGKILL examples/train_tiny.py 500 times at random moments.

    PYTHONPATH=src python benchmarks/train_kill_resume.py [--kills 500] [--steps 15000]
    PYTHONPATH=src python benchmarks/train_kill_resume.py --exec --kills 20 --steps 8000 --hidden 512 \
        --min-delay 3.0 --max-delay 4.5      # the real script, a fresh process per attempt

FSDP2 over gloo ranks under ``gpuwise run`` (each attempt a fresh ``gpuwise run``; a kill
SIGKILLs the whole process tree; ``--sigterm-share`` of the stops are SIGTERMs instead):

    PYTHONPATH=src python benchmarks/train_kill_resume.py --fsdp 2 --kills 50 --steps 1500 \
        --min-delay 6 --max-delay 14 --sigterm-share 0.1

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

from gpuwise.train.chaos import Attempt, reference_run, run_with_kills

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_tiny.py"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=500)
    ap.add_argument("--steps", type=int, default=15000)
    ap.add_argument("--min-delay", type=float, default=0.08)
    ap.add_argument("--max-delay", type=float, default=0.35)
    ap.add_argument("--slow-write", type=float, default=0.02, help="GPUWISE_CKPT_SLOW_WRITE_S")
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
    args = ap.parse_args()
    spec = importlib.util.spec_from_file_location("train_tiny", EXAMPLE)
    assert spec and spec.loader
    tiny = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny)
    argv = ["--steps", str(args.steps), "--hidden", str(args.hidden), "--every", "3"]
    how = {"command": [sys.executable, str(EXAMPLE)]} if args.exec else {"target": tiny.main}
    if args.fsdp:
        argv += ["--fsdp", "--batch", "16"]
        how = {
            "command": [
                sys.executable,
                "-m",
                "gpuwise",
                "run",
                "--nproc-per-node",
                str(args.fsdp),
                "--restart-delay",
                "0s",
                "--",
                sys.executable,
                str(EXAMPLE),
            ]
        }
    env = {"GPUWISE_CLOUD": "none", "GPUWISE_CKPT_SLOW_WRITE_S": str(args.slow_write)}
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
    rows = [
        (
            "attempts run as",
            f"gpuwise run, FSDP2 on {args.fsdp} gloo ranks"
            if args.fsdp
            else "fresh processes (exec)"
            if args.exec
            else "forks of this process",
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
        ("wall time, s", round(rep.wall_s, 1)),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
