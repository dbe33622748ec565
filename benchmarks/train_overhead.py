"""Total checkpoint overhead of ``resilient`` at its default (Young/Daly) interval.

    PYTHONPATH=src python benchmarks/train_overhead.py [--hidden 2048] [--steps 400]

Measured, not assumed: (1) the step time when no write is in flight; (2) the same loop saving
every ``--every`` steps: the cost of one save to the loop is its stall plus the slowdown of the
steps that run while the writer process works (on this 2-core box the writer competes for the
CPU; on a GPU machine it competes only for host cores); (3) the interval ``resilient`` picks by
default from the measured stall (Daly, MTBF = AWS Spot Advisor's worst band, capped at 30 min).
Overhead at the default interval = cost per save / default interval.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

from gpuwise.train import resilient


def loop(
    hidden: int, steps: int, every: int | None, ckpt: str
) -> tuple[float, float | None, list[float], list[tuple[float, bool]]]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, hidden),
        torch.nn.GELU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.GELU(),
        torch.nn.Linear(hidden, 512),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(32, 512)
    kw = {"every_steps": every} if every else {"every_minutes": 1e6}
    with resilient(
        model, opt, checkpoint_dir=ckpt, max_steps=steps + 10, watcher=False, **kw
    ) as run:
        for _ in range(10):  # warm-up, not timed
            run.step(model(x).pow(2).mean())
        t0 = time.perf_counter()
        timed: list[tuple[float, bool]] = []  # (seconds, a write was in flight during the step)
        for _ in range(steps):
            busy = run.checkpointer._pending is not None
            s0 = time.perf_counter()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            timed.append((time.perf_counter() - s0, busy))
            run.global_step += 1
            run._after_step()  # the save decision and the stall, timed apart through run.stalls_s
        wall = time.perf_counter() - t0
        default_interval = None
        if every:
            run.every_steps, run.every_minutes = None, None
            default_interval = run.interval_s
        stalls = list(run.stalls_s)
    return wall, default_interval, stalls, timed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--every", type=int, default=50)
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        base, _, _, _ = loop(args.hidden, args.steps, None, a)
        with_ck, interval, stalls, timed = loop(args.hidden, args.steps, args.every, b)
    saves = args.steps // args.every
    quiet = sorted(t for t, busy in timed if not busy)
    step = quiet[len(quiet) // 2]
    busy = [t for t, b in timed if b]
    dip_s = (
        sum(busy) - len(busy) * step
    )  # steps slowed by the writer process (GIL-free, CPU-shared)
    per_save = (sum(stalls) + max(dip_s, 0.0)) / saves
    state_mib = (
        sum(
            p.numel()
            for p in torch.nn.Sequential(
                torch.nn.Linear(512, args.hidden),
                torch.nn.Linear(args.hidden, args.hidden),
                torch.nn.Linear(args.hidden, 512),
            ).parameters()
        )
        * 12
        / 2**20
    )
    assert interval is not None
    rows = [
        ("state (fp32 weights + AdamW), MiB", f"{state_mib:.0f}"),
        ("median step time, ms (no write in flight)", f"{step * 1e3:.1f}"),
        ("wall without / with checkpoints, s", f"{base:.2f} / {with_ck:.2f}"),
        (
            "step-time increase while the writer runs, %",
            f"{100 * (sum(busy) / max(len(busy), 1) / step - 1):.1f}",
        ),
        (f"saves in the timed loop (every {args.every} steps)", f"{saves}"),
        (
            "median stall per save (loop blocked), ms",
            f"{sorted(stalls)[len(stalls) // 2] * 1e3:.1f}",
        ),
        ("cost per save to the loop (stall + slower steps), ms", f"{per_save * 1e3:.1f}"),
        ("overhead at every-N-steps, %", f"{100 * per_save / (args.every * step):.2f}"),
        ("default interval (Daly, measured stall), s", f"{interval:.0f}"),
        ("overhead at the default interval, %", f"{100 * per_save / interval:.4f}"),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
