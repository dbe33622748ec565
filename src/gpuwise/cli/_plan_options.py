"""The options of ``gpuwise plan`` that are its own (constraints, spot model, fixed costs,
calibration, output and export), defined once; the workload options are shared with ``estimate``
(:mod:`._workload`).

Each flag's name, help and panel is an ``Annotated`` alias below; :class:`PlanFlags` is the table
(one field per flag, in ``--help`` order, with its default) and :meth:`PlanFlags.request` the one
place that turns the flags into a :class:`~gpuwise.planner.PlanRequest` (``--gpu`` →
``PlanRequest.gpus``); :meth:`PlanFlags.validate` the one place that refuses a bad value or
combination of them (run as the table is made). :func:`plan_flags` gives the command every field as a flag, the way
:func:`~gpuwise.cli._workload.workload_options` does for the workload table.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from gpuwise.cli._output import split_list
from gpuwise.cli._runs import CalibrationFileOpt, NoCalibrationOpt, RunsOpt

if TYPE_CHECKING:
    from gpuwise.planner import PlanRequest

F = TypeVar("F", bound=Callable[..., Any])

_C = "Constraints and objective"
_S = "Spot model"
_O = "Output and export"
_F = "Fixed costs"

GpuOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--gpu",
        help="Only these GPU models (comma-separated or repeated), e.g. H100,A100-80GB.",
        rich_help_panel=_C,
    ),
]
DeadlineOpt = Annotated[
    str | None,
    typer.Option(
        "--deadline",
        metavar="DURATION",
        help="Finish within this time, e.g. 24h, 2d.",
        rich_help_panel=_C,
    ),
]
BudgetOpt = Annotated[
    str | None,
    typer.Option("--budget", help="Spend at most this much, e.g. 2000 or $2k.", rich_help_panel=_C),
]
MaxGpusOpt = Annotated[
    int | None,
    typer.Option("--max-gpus", help="At most this many GPUs in total.", rich_help_panel=_C),
]
MaxNodesOpt = Annotated[
    int,
    typer.Option("--max-nodes", help="Try 1..N nodes of each instance type.", rich_help_panel=_C),
]
CloudOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--cloud", help="Only these clouds (comma-separated or repeated).", rich_help_panel=_C
    ),
]
RegionOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--region", help="Only these regions (names or globs like 'us-*').", rich_help_panel=_C
    ),
]
BillingOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--billing",
        help="on-demand, spot, reserved-1y, reserved-3y (default: all).",
        rich_help_panel=_C,
    ),
]
ObjectiveOpt = Annotated[
    str,
    typer.Option(
        "--objective",
        help="cost: the lowest expected cost meeting deadline and budget (options within 2% of "
        "it: the faster first, then fewer nodes); time: the shortest; balanced: cost × time.",
        rich_help_panel=_C,
    ),
]
PreferFasterOpt = Annotated[
    str | None,
    typer.Option(
        "--prefer-faster-within",
        help="Cost objective: pick the fastest option costing at most PCT more than the cheapest, "
        "e.g. 20%.",
        rich_help_panel=_C,
    ),
]
DeadlineConfidenceOpt = Annotated[
    str,
    typer.Option(
        "--deadline-confidence",
        help="Cost objective: when the cheapest option's chance to finish by the deadline (the "
        "estimator's error and spot interruptions counted) is below this, pick the cheapest that "
        "reaches it (0 = off).",
        rich_help_panel=_C,
    ),
]
MemoryHeadroomOpt = Annotated[
    str,
    typer.Option(
        "--memory-headroom",
        help="Leave this share of each GPU's usable memory free after every modelled term "
        "(weights, activations, buffers, allocator), e.g. 8% or 0.08.",
        rich_help_panel=_C,
    ),
]
ConfidenceOpt = Annotated[
    str,
    typer.Option(
        "--confidence",
        help="Spot options must meet the deadline with this probability, e.g. 0.9 or 90%.",
        rich_help_panel=_C,
    ),
]
SpotMtbfOpt = Annotated[
    str | None,
    typer.Option(
        "--spot-mtbf",
        metavar="DURATION",
        help="Mean time between interruptions of one spot instance, e.g. 72h (default: per-cloud data); "
        "auto: observed per cloud, region and instance type in the run records of --runs DIR.",
        rich_help_panel=_S,
    ),
]
CheckpointSizeOpt = Annotated[
    str | None,
    typer.Option(
        "--checkpoint-size",
        help="GiB per checkpoint (default: weights + optimizer state from the estimate).",
        rich_help_panel=_S,
    ),
]
CheckpointBandwidthOpt = Annotated[
    str | None,
    typer.Option(
        "--checkpoint-bandwidth",
        help="Checkpoint storage GB/s (default: 1, a placeholder).",
        rich_help_panel=_S,
    ),
]
RestartTimeOpt = Annotated[
    str | None,
    typer.Option(
        "--restart-time",
        metavar="DURATION",
        help="Re-provision + start time per interruption, e.g. 10m (default: 10m, a placeholder).",
        rich_help_panel=_S,
    ),
]
MaxZeroOpt = Annotated[
    int | None,
    typer.Option(
        "--max-zero",
        help="With --fixed-settings: allow raising the ZeRO stage up to N where the workload would not fit.",
        rich_help_panel=_C,
    ),
]
SearchOpt = Annotated[
    bool,
    typer.Option(
        "--search-settings/--fixed-settings",
        help="Search recompute × ZeRO × micro-batch (inference: TP × batch) per "
        "offer for the cheapest that fits (default), or keep the workload's settings.",
        rich_help_panel=_C,
    ),
]
MaxBatchOpt = Annotated[
    int | None,
    typer.Option(
        "--max-batch",
        help="Inference: at most this many concurrent sequences per model copy "
        "(default: as many as the KV cache holds, up to 256).",
        rich_help_panel=_C,
    ),
]
AllowZoneOutliersOpt = Annotated[
    bool,
    typer.Option(
        "--allow-zone-outliers",
        help="Use zone prices far below their region's other zones (the export then pins "
        "that zone).",
        rich_help_panel=_C,
    ),
]
ProvisionTimeOpt = Annotated[
    str | None,
    typer.Option(
        "--provision-time",
        metavar="DURATION",
        help="Time to get a usable machine, e.g. 10m (default 10m, a placeholder).",
        rich_help_panel=_F,
    ),
]
StartupTimeOpt = Annotated[
    str | None,
    typer.Option(
        "--startup-time",
        metavar="DURATION",
        help="Imports, NCCL init, weights into GPU memory, e.g. 3m (default 3m, a placeholder).",
        rich_help_panel=_F,
    ),
]
DownloadGbpsOpt = Annotated[
    float | None,
    typer.Option(
        "--download-gbps",
        help="Download rate of a node for the image and model weights, Gbit/s "
        "(default 5, a placeholder).",
        rich_help_panel=_F,
    ),
]
LimitOpt = Annotated[
    int,
    typer.Option("--limit", help="Show at most this many options (0 = all).", rich_help_panel=_O),
]
ExportOpt = Annotated[
    str | None,
    typer.Option(
        "--export", help="skypilot | k8s: print a task YAML / manifest.", rich_help_panel=_O
    ),
]
OutputOpt = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        help="Write the export to this file (without --export: the plan as JSON).",
        rich_help_panel=_O,
    ),
]
SaveOpt = Annotated[
    Path | None,
    typer.Option(
        "--save",
        help="Write the winner's recipe and expected figures as a plan file: `gpuwise run --plan` "
        "runs it, `gpuwise report --runs` compares runs with it. --export writes one too.",
        rich_help_panel=_O,
    ),
]
RunCmdOpt = Annotated[
    str,
    typer.Option(
        "--run",
        help="The job's command for the export, e.g. 'python train.py --lr 3e-4' (gpuwise run adds torchrun).",
        rich_help_panel=_O,
    ),
]
NameOpt = Annotated[
    str | None, typer.Option("--name", help="Job name for the export.", rich_help_panel=_O)
]
BucketOpt = Annotated[
    str | None,
    typer.Option("--bucket", help="SkyPilot checkpoint bucket name.", rich_help_panel=_O),
]
WorkdirOpt = Annotated[
    Path,
    typer.Option(
        "--workdir",
        help="Your code's folder, the SkyPilot task's workdir: the export writes the gpuwise wheel "
        "its setup installs to WORKDIR/.gpuwise-dist/.",
        rich_help_panel=_O,
    ),
]
NetworkTierOpt = Annotated[
    str,
    typer.Option(
        "--network-tier",
        help="best: time EFA/InfiniBand/RDMA/TCPX and ask for them in the export; standard: "
        "time every instance on its default network.",
        rich_help_panel=_O,
    ),
]
AwsEfaOpt = Annotated[
    str,
    typer.Option(
        "--aws-efa-interfaces",
        help="one: time AWS multi-EFA instances on the one interface SkyPilot attaches by "
        "default; all: every interface (your SkyPilot config sets aws.use_internal_ips).",
        rich_help_panel=_O,
    ),
]
SkyCandidatesOpt = Annotated[
    str,
    typer.Option(
        "--skypilot-candidates",
        help="ordered (our ranking, tried in order) | any_of (SkyPilot picks the cheapest).",
        rich_help_panel=_O,
    ),
]
ImageOpt = Annotated[
    str | None,
    typer.Option(
        "--image",
        help="Container image with gpuwise and your code for the k8s export (default gpuwise-job:VERSION, "
        "built from deploy/docker/job.Dockerfile).",
        rich_help_panel=_O,
    ),
]
PvcOpt = Annotated[
    str | None,
    typer.Option(
        "--pvc",
        help="Your PersistentVolumeClaim for checkpoints (k8s export; default: the export prints "
        "one, ReadWriteMany when several pods share it).",
        rich_help_panel=_O,
    ),
]


@dataclass(frozen=True)
class PlanFlags:
    """Every flag of ``gpuwise plan`` that is its own, in ``--help`` order: the field is the
    command's parameter, its alias the flag, help and panel, its default the flag's default."""

    # -- constraints and objective ---------------------------------------------------------
    gpu: GpuOpt = None
    deadline: DeadlineOpt = None
    budget: BudgetOpt = None
    max_gpus: MaxGpusOpt = None
    max_nodes: MaxNodesOpt = 8
    cloud: CloudOpt = None
    region: RegionOpt = None
    billing: BillingOpt = None
    objective: ObjectiveOpt = "cost"
    prefer_faster_within: PreferFasterOpt = None
    deadline_confidence: DeadlineConfidenceOpt = "0.9"
    memory_headroom: MemoryHeadroomOpt = "8%"
    confidence: ConfidenceOpt = "0.9"
    # -- spot model --------------------------------------------------------------------------
    spot_mtbf: SpotMtbfOpt = None
    checkpoint_size: CheckpointSizeOpt = None
    checkpoint_bandwidth: CheckpointBandwidthOpt = None
    restart_time: RestartTimeOpt = None
    max_zero: MaxZeroOpt = None
    search: SearchOpt = True
    max_batch: MaxBatchOpt = None
    allow_zone_outliers: AllowZoneOutliersOpt = False
    provision_time: ProvisionTimeOpt = None
    startup_time: StartupTimeOpt = None
    download_gbps: DownloadGbpsOpt = None
    # -- calibration and history (cli/_runs.py) ---------------------------------------------
    calibration_file: CalibrationFileOpt = None
    no_calibration: NoCalibrationOpt = False
    runs: RunsOpt = None
    # -- output and export ----------------------------------------------------------------------
    limit: LimitOpt = 15
    export: ExportOpt = None
    output: OutputOpt = None
    save: SaveOpt = None
    run_cmd: RunCmdOpt = "python train.py"
    name: NameOpt = None
    bucket: BucketOpt = None
    workdir: WorkdirOpt = Path(".")
    network_tier: NetworkTierOpt = "best"
    aws_efa_interfaces: AwsEfaOpt = "one"
    sky_candidates: SkyCandidatesOpt = "ordered"
    image: ImageOpt = None
    pvc: PvcOpt = None

    def __post_init__(self) -> None:
        self.validate()

    @property
    def skypilot_mode(self) -> str:
        """``--skypilot-candidates`` as the export reads it (``any-of`` → ``any_of``)."""
        return self.sky_candidates.strip().lower().replace("-", "_")

    def validate(self) -> None:
        """Refuse an unusable value or combination of plan's own flags (InputError with a
        one-line hint, exit 2), before anything is read or planned: the one place they are
        checked. The constraints' values are checked where :meth:`request` parses them."""
        from gpuwise.errors import InputError, check_choice, did_you_mean

        if self.calibration_file is not None and self.no_calibration:
            raise InputError(
                "--calibration and --no-calibration contradict each other",
                hint="give --calibration FILE to use a file, or --no-calibration to use none",
            )
        auto = self.spot_mtbf is not None and self.spot_mtbf.strip().lower() == "auto"
        if self.runs is not None and not auto:
            raise InputError("--runs is read by --spot-mtbf auto", hint="add --spot-mtbf auto")
        if auto and self.runs is None:
            raise InputError(
                "--spot-mtbf auto needs run history",
                hint="add --runs DIR: the folder (or s3://, gs:// URL) above your runs' gpuwise-runs/",
            )
        if self.export is not None:
            check_choice(self.export, EXPORTS, "--export")
        if self.limit < 0:
            raise InputError(
                f"--limit must be ≥ 0, got {self.limit}",
                hint="give 0 for all rows, or a positive count",
            )
        if self.skypilot_mode not in ("ordered", "any_of"):
            raise InputError(
                f"unknown --skypilot-candidates {self.sky_candidates!r}",
                hint="use ordered or any_of",
                suggestions=did_you_mean(self.skypilot_mode, ("ordered", "any_of")),
            )

    def request(self, *, spot_mtbf: str | None, inter_node_gbps: float | None) -> PlanRequest:
        """The plan's constraints, spot model and fixed costs (bad input → InputError, exit 2).

        ``spot_mtbf``: ``--spot-mtbf`` as the calibration head resolved it (``auto`` → None);
        ``inter_node_gbps``: the workload table's ``--inter-node-gbps``."""
        from gpuwise.catalog import BILLINGS
        from gpuwise.planner import PlanRequest
        from gpuwise.units import (
            check_finite,
            parse_bandwidth_gb_s,
            parse_duration_hours,
            parse_fraction,
            parse_money_usd,
            parse_size_gib,
        )

        def hours(value: str | None, flag: str) -> float | None:
            return parse_duration_hours(value, flag) if value else None

        for value, flag in (
            (inter_node_gbps, "--inter-node-gbps"),
            (self.download_gbps, "--download-gbps"),
        ):
            if value is not None:
                check_finite(value, flag, strict=True)
        return PlanRequest(
            deadline_hours=hours(self.deadline, "--deadline"),
            budget_usd=parse_money_usd(self.budget, "--budget") if self.budget else None,
            max_gpus=self.max_gpus,
            max_nodes=self.max_nodes,
            clouds=tuple(c.lower() for c in split_list(self.cloud)),
            regions=tuple(split_list(self.region)),
            gpus=tuple(split_list(self.gpu)),
            billings=tuple(b.lower() for b in split_list(self.billing)) or BILLINGS,  # type: ignore[misc]
            objective=self.objective.lower(),  # type: ignore[arg-type]
            prefer_faster_within=parse_fraction(self.prefer_faster_within, "--prefer-faster-within")
            if self.prefer_faster_within
            else None,
            deadline_confidence=parse_fraction(self.deadline_confidence, "--deadline-confidence"),
            memory_headroom=parse_fraction(self.memory_headroom, "--memory-headroom"),
            confidence=parse_fraction(self.confidence, "--confidence"),
            spot_mtbf_hours=hours(spot_mtbf, "--spot-mtbf"),
            checkpoint_gib=parse_size_gib(self.checkpoint_size, "--checkpoint-size")
            if self.checkpoint_size
            else None,
            checkpoint_bandwidth_gb_s=(
                parse_bandwidth_gb_s(self.checkpoint_bandwidth, "--checkpoint-bandwidth")
                if self.checkpoint_bandwidth
                else None
            ),
            restart_hours=hours(self.restart_time, "--restart-time"),
            inter_node_gbit_s=inter_node_gbps,
            network_tier=self.network_tier.strip().lower(),  # type: ignore[arg-type]
            aws_efa_interfaces=self.aws_efa_interfaces.strip().lower(),  # type: ignore[arg-type]
            search_settings=self.search,
            max_zero=self.max_zero,
            max_batch=self.max_batch,
            allow_zone_outliers=self.allow_zone_outliers,
            provision_hours=hours(self.provision_time, "--provision-time"),
            startup_hours=hours(self.startup_time, "--startup-time"),
            download_gbit_s=self.download_gbps,
        )


def plan_flags(func: F) -> F:
    """Give a command every :class:`PlanFlags` field as a flag, in the table's order, where the
    command has its ``flags: PlanFlags`` parameter; the command receives them as that argument."""
    sig = inspect.signature(func, eval_str=True)
    hints = typing.get_type_hints(PlanFlags, include_extras=True)
    names = [f.name for f in dataclasses.fields(PlanFlags)]
    keyword = inspect.Parameter.KEYWORD_ONLY
    table = [
        inspect.Parameter(f.name, keyword, default=f.default, annotation=hints[f.name])
        for f in dataclasses.fields(PlanFlags)
    ]
    params: list[inspect.Parameter] = []
    for p in sig.parameters.values():
        params += table if p.name == _FLAGS else [p.replace(kind=keyword)]

    @functools.wraps(func)
    def command(**kwargs: Any) -> Any:
        flags = PlanFlags(**{name: kwargs.pop(name) for name in names})
        return func(**{_FLAGS: flags}, **kwargs)

    command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params} | {
        "return": sig.return_annotation
    }
    return command  # type: ignore[return-value]


_FLAGS = "flags"
EXPORTS = ("skypilot", "k8s")
"""What ``--export`` writes."""
