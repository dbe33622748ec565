"""``gpuwise run -- CMD``: run a training command resiliently (torchrun, restarts, preemption)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuwise.cli._output import JsonFlag, emit_json

CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}


def run(
    ctx: typer.Context,
    nproc_per_node: Annotated[int, typer.Option("--nproc-per-node", help="Worker processes (GPUs) on this machine.")] = 1,
    max_restarts: Annotated[int, typer.Option("--max-restarts", help="Restarts after crashes before giving up (exit 76).")] = 3,
    max_preemptions: Annotated[int, typer.Option("--max-preemptions", help="Restarts after preemption exits before handing over (exit 75).")] = 10,
    torchrun: Annotated[bool, typer.Option("--torchrun/--no-torchrun", help="Launch through torchrun (elastic); --no-torchrun runs the command as is.")] = True,
    restart_delay: Annotated[float, typer.Option("--restart-delay", help="Seconds to wait before a restart.")] = 1.0,
    json: JsonFlag = False,
) -> None:
    """Run a training command resiliently: torchrun, restarts after crashes and preemptions.

    Exit codes: 0 finished; 75 preempted (put it in SkyPilot's recover_on_exit_codes);
    76 the command kept failing; 2 bad usage. Example: gpuwise run --max-restarts 3 -- python train.py
    """
    import sys

    from gpuwise.train.launcher import LaunchSpec, launch

    command = list(ctx.args)
    if command and command[0] == "--":
        command = command[1:]
    spec = LaunchSpec(tuple(command), nproc_per_node=nproc_per_node, max_restarts=max_restarts,
                      max_preemptions=max_preemptions, torchrun=torchrun, restart_delay_s=restart_delay)

    def say(text: str) -> None:
        sys.stderr.write(f"gpuwise run: {text}\n")
        sys.stderr.flush()

    result = launch(spec, say=say, stdout=sys.stderr.fileno() if json else None)
    if json:
        emit_json({"exit_code": result.exit_code, "restarts": result.restarts, "lost_steps": result.lost_steps,
                   "attempts": list(result.attempts)})
    raise typer.Exit(result.exit_code)
