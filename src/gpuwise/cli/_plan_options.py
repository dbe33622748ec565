"""The option declarations of ``gpuwise plan`` that are its own (constraints, spot model, fixed
costs, output and export); the workload options are shared with ``estimate`` (:mod:`._workload`).

Declared as ``Annotated`` aliases so the command's signature stays one line per option.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

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
