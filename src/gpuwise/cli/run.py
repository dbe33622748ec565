"""``gpuwise run -- CMD``: run a training command resiliently (torchrun, restarts, preemption)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuwise.cli._output import JsonFlag, emit_json

CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}


def parse_delay_s(text: str) -> float:
    """``30s``, ``2m``, ``0s`` → seconds; a unit is required (gpuwise.units' one rule)."""
    from gpuwise.units import parse_duration_seconds

    return parse_duration_seconds(text, "--restart-delay", allow_zero=True)


def run(
    ctx: typer.Context,
    nproc_per_node: Annotated[
        int | None,
        typer.Option(
            "--nproc-per-node",
            help="Worker processes (GPUs) on this machine [default: 1, or SKYPILOT_NUM_GPUS_PER_NODE / PET_NPROC_PER_NODE].",
        ),
    ] = None,
    nnodes: Annotated[
        int | None,
        typer.Option(
            "--nnodes", help="Machines in the job [default: 1, or SKYPILOT_NUM_NODES / PET_NNODES]."
        ),
    ] = None,
    node_rank: Annotated[
        int | None,
        typer.Option(
            "--node-rank",
            help="This machine's index, 0 = hosts the rendezvous [default: SKYPILOT_NODE_RANK / PET_NODE_RANK, else 0].",
        ),
    ] = None,
    rdzv_endpoint: Annotated[
        str | None,
        typer.Option(
            "--rdzv-endpoint",
            help="Node 0's HOST:PORT for the c10d rendezvous [default: first of SKYPILOT_NODE_IPS or MASTER_ADDR:MASTER_PORT; port 29500].",
        ),
    ] = None,
    max_restarts: Annotated[
        int,
        typer.Option("--max-restarts", help="Restarts after crashes before giving up (exit 76)."),
    ] = 3,
    max_preemptions: Annotated[
        int,
        typer.Option(
            "--max-preemptions",
            help="Restarts after preemption exits before handing over (exit 75).",
        ),
    ] = 10,
    torchrun: Annotated[
        bool,
        typer.Option(
            "--torchrun/--no-torchrun",
            help="Launch through torchrun (elastic); --no-torchrun runs the command as is.",
        ),
    ] = True,
    restart_delay: Annotated[
        str,
        typer.Option(
            "--restart-delay",
            metavar="DURATION",
            help="Pause before a restart, with a unit (30s, 2m).",
        ),
    ] = "1s",
    json: JsonFlag = False,
) -> None:
    """Run a training command resiliently: torchrun, restarts after crashes and preemptions.

    Exit codes: 0 finished; 75 preempted (put it in SkyPilot's recover_on_exit_codes);
    76 the command kept failing; 2 bad usage (also when the script exits 2 or a worker stops on a
    gpuwise usage error: not retried). Every rank runs the command's own interpreter and flags
    (python -u, -X dev, another venv's python); workers end when gpuwise run ends.
    Example: gpuwise run --nproc-per-node 8 --nnodes 2 --node-rank 0 --rdzv-endpoint 10.0.0.1:29500 -- python train.py
    """
    import sys

    from gpuwise.train import LaunchSpec, from_environment, launch

    command = list(ctx.args)
    if command and command[0] == "--":
        command = command[1:]
    env = from_environment()
    spec = LaunchSpec(
        tuple(command),
        nproc_per_node=(
            nproc_per_node if nproc_per_node is not None else env.get("nproc_per_node", 1)
        ),
        max_restarts=max_restarts,
        max_preemptions=max_preemptions,
        torchrun=torchrun,
        restart_delay_s=parse_delay_s(restart_delay),
        nnodes=nnodes if nnodes is not None else env.get("nnodes", 1),
        node_rank=node_rank if node_rank is not None else env.get("node_rank", 0),
        rdzv_endpoint=rdzv_endpoint or env.get("rdzv_endpoint"),
    )

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
            }
        )
    raise typer.Exit(result.exit_code)
