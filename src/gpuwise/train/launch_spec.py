"""What ``gpuwise run`` runs and how: :class:`LaunchSpec`, the one table of its options.

Each field that is a flag of ``gpuwise run`` carries its :class:`RunFlag` (the flag, its help and
metavar) in the field's metadata; ``gpuwise.cli._run_options`` generates the command's options
from them in field order, so a flag is defined here and nowhere else (as the workload flags are in
:mod:`gpuwise.estimate.options`). :meth:`LaunchSpec.validate` refuses every unusable value and
combination, in one place, with an :class:`~gpuwise.errors.InputError` and a one-line hint (exit 2
on the command line).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from gpuwise.errors import InputError
from gpuwise.train.commandline import split_python, worker_command

FLAG = "gpuwise.run.flag"
"""The metadata key of a field's :class:`RunFlag`."""


@dataclass(frozen=True)
class RunFlag:
    """How one :class:`LaunchSpec` field is typed on the ``gpuwise run`` command line."""

    decls: str
    """The flag: ``--nproc-per-node``, or ``--torchrun/--no-torchrun`` for an on/off pair."""
    help: str
    metavar: str | None = None
    from_environment: bool = False
    """Left out, the field takes the launch environment's value (SkyPilot's or a PyTorchJob's,
    :func:`~gpuwise.train.launcher.from_environment`), else its default; the flag shows none."""
    parse: Callable[[str], Any] | None = None
    """The flag takes text (``text_default`` when left out) that this turns into the field."""
    text_default: str | None = None


def _flag(decls: str, help: str, **kw: Any) -> dict[str, RunFlag]:
    """A field's metadata that makes it a flag."""
    return {FLAG: RunFlag(decls, help, **kw)}


def _restart_delay_s(text: str) -> float:
    """``30s``, ``2m``, ``0s`` → seconds; a unit is required (gpuwise.units' one rule)."""
    from gpuwise.units import parse_duration_seconds

    return parse_duration_seconds(text, "--restart-delay", allow_zero=True)


_LEAST_HINTS = {
    "--nproc-per-node": "e.g. 8 on an 8-GPU machine",
    "--nnodes": "e.g. --nnodes 2, with --node-rank and --rdzv-endpoint",
    "--max-restarts": "e.g. 3",
    "--max-preemptions": "e.g. 10",
    "--pilot": "e.g. --pilot 20",
    "--pilot-warmup": "e.g. 2",
}


def _not_runnable(program: str) -> InputError:
    """Why ``program`` cannot be started: a file without the execute bit is not a typo."""
    path = Path(program)
    if path.is_dir():
        return InputError(
            f"{program!r} is a folder, not a program",
            hint="give the script or program to run, e.g. gpuwise run -- python train.py",
        )
    if path.is_file():
        chmod = "" if os.access(path, os.X_OK) else f"chmod +x {program}, then "
        if "/" not in program:  # the file is here, but a bare name is looked up on PATH only
            return InputError(
                f"command not found: {program!r} (a file of that name is in this folder, "
                "and a bare name is looked up on PATH)",
                hint=f"{chmod}write ./{program}",
            )
        return InputError(
            f"{program!r} is not executable",
            hint=f"chmod +x {program}, or run it through its interpreter "
            f"(gpuwise run -- bash {program}, or -- python {program})",
        )
    return InputError(
        f"command not found: {program!r}",
        hint="check the spelling and PATH, or give the program's full path",
    )


@dataclass(frozen=True)
class LaunchSpec:
    """What ``gpuwise run`` runs and how often it may restart it; the fields after ``command`` are
    the command's flags, in ``--help`` order (keyword-only)."""

    command: tuple[str, ...]
    """The training command, e.g. ``("python", "train.py", "--lr", "3e-4")``."""
    _: KW_ONLY
    nproc_per_node: int = field(
        default=1,
        metadata=_flag(
            "--nproc-per-node",
            "Worker processes (GPUs) on this machine [default: 1, or SKYPILOT_NUM_GPUS_PER_NODE / PET_NPROC_PER_NODE].",
            from_environment=True,
        ),
    )
    """Worker processes (GPUs) on this machine."""
    nnodes: int = field(
        default=1,
        metadata=_flag(
            "--nnodes",
            "Machines in the job [default: 1, or SKYPILOT_NUM_NODES / PET_NNODES].",
            from_environment=True,
        ),
    )
    """Machines in the job; more than 1 uses c10d rendezvous at ``rdzv_endpoint``."""
    node_rank: int = field(
        default=0,
        metadata=_flag(
            "--node-rank",
            "This machine's index, 0 = hosts the rendezvous [default: SKYPILOT_NODE_RANK / PET_NODE_RANK, else 0].",
            from_environment=True,
        ),
    )
    """This machine's index, 0 .. nnodes-1 (node 0 hosts the rendezvous store)."""
    rdzv_endpoint: str | None = field(
        default=None,
        metadata=_flag(
            "--rdzv-endpoint",
            "Node 0's HOST:PORT for the c10d rendezvous [default: first of SKYPILOT_NODE_IPS or MASTER_ADDR:MASTER_PORT; port 29500].",
            from_environment=True,
        ),
    )
    """``HOST[:PORT]`` of the rendezvous (node 0); the port defaults to 29500."""
    max_restarts: int = field(
        default=3,
        metadata=_flag("--max-restarts", "Restarts after crashes before giving up (exit 76)."),
    )
    """Restarts after crashes (non-preemption failures) before giving up with exit code 76."""
    max_preemptions: int = field(
        default=10,
        metadata=_flag(
            "--max-preemptions",
            "Restarts after preemption exits before handing over (exit 75).",
        ),
    )
    """Restarts after preemption exits before handing over with exit code 75."""
    torchrun: bool = field(
        default=True,
        metadata=_flag(
            "--torchrun/--no-torchrun",
            "Launch through torchrun (elastic); --no-torchrun runs the command as is.",
        ),
    )
    """Launch through torchrun; False runs the command as is (one process)."""
    restart_delay_s: float = field(
        default=1.0,
        metadata=_flag(
            "--restart-delay",
            "Pause before a restart, with a unit (30s, 2m).",
            metavar="DURATION",
            parse=_restart_delay_s,
            text_default="1s",
        ),
    )
    """Pause before a restart."""
    plan: Path | None = field(
        default=None,
        metadata=_flag(
            "--plan",
            "The plan file (`gpuwise plan --save`) the job runs: its workers read the recipe with gpuwise.train.plan_recipe().",
        ),
    )
    """The plan file the workers run (``GPUWISE_PLAN``/``GPUWISE_PLAN_ID``); read when the launch
    starts, so a bad file stops it before any worker."""
    pilot: int | None = field(
        default=None,
        metadata=_flag(
            "--pilot",
            "Measure N optimizer steps after warm-up (tokens/s, step time, peak memory, checkpoint stall), write the run record beside the checkpoints and exit 0.",
            metavar="N",
        ),
    )
    """Optimizer steps a pilot run measures before it stops (``GPUWISE_PILOT_STEPS``)."""
    pilot_warmup: int | None = field(
        default=None,
        metadata=_flag(
            "--pilot-warmup",
            "Optimizer steps run before timing starts [default: 2].",
            metavar="N",
        ),
    )
    """Optimizer steps not timed (``GPUWISE_PILOT_WARMUP``; None: the records' default)."""
    allow_plan_mismatch: bool = field(
        default=False,
        metadata=_flag(
            "--allow-plan-mismatch",
            "Train although world size, replicas, GPU or batch differ from --plan (the run record lists what differed); without it such a job exits 2 before its first step.",
        ),
    )
    """Train although the job differs from its plan (``GPUWISE_ALLOW_PLAN_MISMATCH``)."""
    rdzv_id: str = "gpuwise"
    """Job id shared by every node's rendezvous."""

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def flags(cls) -> list[tuple[dataclasses.Field[Any], RunFlag]]:
        """The fields that are flags of ``gpuwise run``, in ``--help`` order, with their flags."""
        return [(f, f.metadata[FLAG]) for f in dataclasses.fields(cls) if FLAG in f.metadata]

    def validate(self) -> None:
        """Refuse an unusable value or combination (InputError with a one-line hint): the one
        place where ``gpuwise run``'s options are checked (the flag is named; a Python caller
        knows it by its field)."""
        self._check_command()
        for value, least, flag in (
            (self.nproc_per_node, 1, "--nproc-per-node"),
            (self.nnodes, 1, "--nnodes"),
            (self.max_restarts, 0, "--max-restarts"),
            (self.max_preemptions, 0, "--max-preemptions"),
            (self.pilot, 1, "--pilot"),
            (self.pilot_warmup, 0, "--pilot-warmup"),
        ):
            if value is not None and value < least:
                raise InputError(
                    f"{flag} {value} must be {'at least 1' if least else '0 or more'}",
                    hint=_LEAST_HINTS[flag],
                )
        if not (self.restart_delay_s >= 0 and self.restart_delay_s < 3600):
            raise InputError(
                f"restart delay {self.restart_delay_s} s is not usable",
                hint="give --restart-delay from 0s to under 1h, e.g. 1s",
            )
        # combinations
        if not 0 <= self.node_rank < self.nnodes:
            raise InputError(
                f"--node-rank {self.node_rank} is not a machine of --nnodes {self.nnodes}",
                hint=f"give --node-rank from 0 to {self.nnodes - 1}",
            )
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise InputError(
                f"--nnodes {self.nnodes} needs a rendezvous endpoint",
                hint="give node 0's address with --rdzv-endpoint HOST:PORT on every node",
            )
        if self.nnodes > 1 and self.rdzv_endpoint:
            port = self.rdzv_endpoint.rpartition(":")[2] if ":" in self.rdzv_endpoint else "1"
            if not (port.isdigit() and 0 < int(port) < 65536):
                raise InputError(
                    f"rendezvous endpoint {self.rdzv_endpoint!r} has no usable port",
                    hint="give it as HOST:PORT with a port from 1 to 65535, e.g. 10.0.0.1:29500",
                )

    def _check_command(self) -> None:
        if not self.command:
            raise InputError(
                "no command to run", hint="put it after --, e.g. gpuwise run -- python train.py"
            )
        if self.command[0].startswith("-") and shutil.which(self.command[0]) is None:
            # an option gpuwise run does not know reaches here as the command's first word
            raise InputError(
                f"no such option: {self.command[0]}",
                hint="see gpuwise run --help; the training command goes after --, "
                "e.g. gpuwise run --nproc-per-node 2 -- python train.py",
            )
        if shutil.which(self.command[0]) is None:  # restarting a typo would only fail N more times
            raise _not_runnable(self.command[0])
        python = split_python(self.command)
        if python is not None:
            worker_command(self.command)  # raises when it names no script
            if python.target[0] not in ("-m", "-c") and not os.path.isfile(python.target[0]):
                raise InputError(
                    f"script not found: {python.target[0]!r}",
                    hint="check the path (relative to the current folder)",
                )

    def worker_env(self) -> dict[str, str]:
        """The variables that hand ``plan``, ``pilot``, ``pilot_warmup`` and
        ``allow_plan_mismatch`` to every worker (reading the plan file: a bad one raises here)."""
        env: dict[str, str] = {}
        if self.plan is not None:
            from gpuwise.base.recipe import load_plan_file

            loaded = load_plan_file(self.plan)
            env |= {
                "GPUWISE_PLAN": str(Path(self.plan).resolve()),
                "GPUWISE_PLAN_ID": loaded.plan_id,
            }
        if self.pilot is not None:
            env["GPUWISE_PILOT_STEPS"] = str(self.pilot)
        if self.pilot_warmup is not None:
            env["GPUWISE_PILOT_WARMUP"] = str(self.pilot_warmup)
        if self.allow_plan_mismatch:
            env["GPUWISE_ALLOW_PLAN_MISMATCH"] = "1"
        return env
