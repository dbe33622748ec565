"""``gpuwise run -- CMD``: run a training command resiliently (torchrun, restarts, preemption)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuwise.cli._output import JsonFlag, emit_json

CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}


def parse_delay_s(text: str) -> float:
    """``30s``, ``2m``, ``0s`` → seconds; a unit is required (gpuwise.units' one rule)."""
    from gpuwise.units import parse_duration_seconds

    return parse_duration_seconds(text, "--restart-delay", allow_zero=True)


def pilot_env(pilot: int | None, warmup: int | None, allow_mismatch: bool) -> dict[str, str]:
    """The variables for ``--pilot``, ``--pilot-warmup`` and ``--allow-plan-mismatch``."""
    from gpuwise.errors import InputError

    env: dict[str, str] = {}
    if pilot is not None:
        if pilot < 1:
            raise InputError(f"--pilot {pilot} must be at least 1", hint="e.g. --pilot 20")
        env["GPUWISE_PILOT_STEPS"] = str(pilot)
    if warmup is not None:
        if warmup < 0:
            raise InputError(f"--pilot-warmup {warmup} must be 0 or more", hint="e.g. 2")
        env["GPUWISE_PILOT_WARMUP"] = str(warmup)
    if allow_mismatch:
        env["GPUWISE_ALLOW_PLAN_MISMATCH"] = "1"
    return env


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


def plan_env(plan: Path | None) -> dict[str, str]:
    """The variables that hand ``--plan`` to every worker (checked here: a bad file stops the run
    before any worker starts)."""
    if plan is None:
        return {}
    from gpuwise.base.recipe import load_plan_file

    loaded = load_plan_file(plan)
    return {"GPUWISE_PLAN": str(plan.resolve()), "GPUWISE_PLAN_ID": loaded.plan_id}


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
    plan: Annotated[
        Path | None,
        typer.Option(
            "--plan",
            help="The plan file (`gpuwise plan --save`) the job runs: its workers read the recipe with gpuwise.train.plan_recipe().",
        ),
    ] = None,
    pilot: Annotated[
        int | None,
        typer.Option(
            "--pilot",
            metavar="N",
            help="Measure N optimizer steps after warm-up (tokens/s, step time, peak memory, checkpoint stall), write the run record beside the checkpoints and exit 0.",
        ),
    ] = None,
    pilot_warmup: Annotated[
        int | None,
        typer.Option(
            "--pilot-warmup",
            metavar="N",
            help="Optimizer steps run before timing starts [default: 2].",
        ),
    ] = None,
    allow_plan_mismatch: Annotated[
        bool,
        typer.Option(
            "--allow-plan-mismatch",
            help="Train although world size, replicas, GPU or batch differ from --plan (the run record lists what differed); without it such a job exits 2 before its first step.",
        ),
    ] = False,
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

    env = {**plan_env(plan), **pilot_env(pilot, pilot_warmup, allow_plan_mismatch)}
    result = launch(spec, say=say, env=env, stdout=sys.stderr.fileno() if json else None)
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
