"""``gpuwise run -- CMD``: run a training command resiliently (torchrun, restarts, preemption)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import typer

from gpuwise.cli._output import JsonFlag, emit_json
from gpuwise.cli._run_options import RunFlags, run_flags

CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}


def history(attempts: Sequence[Any]) -> list[dict[str, object]]:
    """Per attempt (``gpuwise.train`` ``AttemptResult``): how it ended, the notice it saw and the
    steps it lost (``--json``)."""
    return [
        {
            "attempt": a.number - 1,
            "outcome": a.outcome,
            "exit_code": a.exit_code,
            "notice": a.notice,
            "preempted": a.outcome in ("preempted", "peer-lost"),
            "steps_lost": a.lost_steps or 0,
            "wall_s": a.wall_s,
        }
        for a in attempts
    ]


@run_flags  # the flags: the LaunchSpec table in gpuwise/train/launch_spec.py
def run(ctx: typer.Context, flags: RunFlags, json: JsonFlag = False) -> None:
    """Run a training command resiliently: torchrun, restarts after crashes and preemptions.

    Exit codes: 0 finished; 75 preempted (put it in SkyPilot's recover_on_exit_codes);
    76 the command kept failing; 2 bad usage (also when the script exits 2 or a worker stops on a
    gpuwise usage error: not retried). Every rank runs the command's own interpreter and flags
    (python -u, -X dev, another venv's python); workers end when gpuwise run ends.
    Example: gpuwise run --nproc-per-node 8 --nnodes 2 --node-rank 0 --rdzv-endpoint 10.0.0.1:29500 -- python train.py
    """
    import sys

    from gpuwise.train import launch

    command = list(ctx.args)
    if command and command[0] == "--":
        command = command[1:]
    spec = flags.spec(command)

    def say(text: str) -> None:
        sys.stderr.write(f"gpuwise run: {text}\n")
        sys.stderr.flush()

    result = launch(spec, say=say, stdout=sys.stderr.fileno() if json else None)
    if json:
        emit_json(
            {
                "exit_code": result.exit_code,
                "restarts": result.restarts,
                "lost_steps": result.lost_steps,
                "attempts": list(result.attempts),
                "preemptions": sum(
                    a.outcome in ("preempted", "peer-lost") for a in result.attempts
                ),
                "history": history(result.attempts),
            }
        )
    raise typer.Exit(result.exit_code)
