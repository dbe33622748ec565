"""``gpuwise plan``: rank cloud offers for a workload by job cost and time; export to SkyPilot/k8s.

Exit codes: 0 a plan with at least one option; 2 bad input; 3 no option meets the constraints
(the output still says why, and the nearest miss).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuwise.cli._output import CatalogFlag, JsonFlag, console, emit_json, money, split_list
from gpuwise.cli._prices import MaxPriceAgeFlag, prices_age, print_price_age
from gpuwise.cli._workload import (
    CpuOffloadOpt,
    EpochsOpt,
    FlashAttentionOpt,
    GlobalBatchOpt,
    GradCkptOpt,
    InterNodeOpt,
    LoraRankOpt,
    LoraTargetsOpt,
    MicroBatchOpt,
    ModelOpt,
    OptimizerOpt,
    OutputLenOpt,
    ParamsOpt,
    PipelineParallelOpt,
    PrecisionOpt,
    PromptLenOpt,
    RequestsOpt,
    SamplesOpt,
    SeqLenOpt,
    TaskOpt,
    TensorParallelOpt,
    TokensOpt,
    ZeroOpt,
)

if TYPE_CHECKING:
    from gpuwise.plan import Plan

EXIT_NO_OPTION = 3
_C = "Constraints and objective"
_S = "Spot model"
_O = "Output and export"


def plan_command(
    # -- workload: the flags shared with `gpuwise estimate` (gpuwise.cli._workload) -------------
    model: ModelOpt = None,
    params: ParamsOpt = None,
    task: TaskOpt = "pretrain",
    tokens: TokensOpt = None,
    samples: SamplesOpt = None,
    epochs: EpochsOpt = "1",
    seq_len: SeqLenOpt = None,
    micro_batch: MicroBatchOpt = None,
    global_batch: GlobalBatchOpt = None,
    precision: PrecisionOpt = "bf16",
    optimizer: OptimizerOpt = "adamw",
    zero: ZeroOpt = "0",
    grad_ckpt: GradCkptOpt = None,
    lora_rank: LoraRankOpt = "16",
    lora_targets: LoraTargetsOpt = "all-linear",
    tensor_parallel: TensorParallelOpt = "1",
    pipeline_parallel: PipelineParallelOpt = "1",
    cpu_offload: CpuOffloadOpt = False,
    flash_attention: FlashAttentionOpt = "auto",
    prompt_len: PromptLenOpt = "512",
    output_len: OutputLenOpt = "256",
    requests: RequestsOpt = None,
    inter_node_gbps: InterNodeOpt = 400.0,
    gpu: Annotated[list[str] | None, typer.Option(
        "--gpu", help="Only these GPU models (comma-separated or repeated), e.g. H100,A100-80GB.",
        rich_help_panel=_C)] = None,
    # -- constraints and objective ---------------------------------------------------------
    deadline: Annotated[str | None, typer.Option("--deadline", help="Finish within this time, e.g. 24h, 2d.", rich_help_panel=_C)] = None,
    budget: Annotated[str | None, typer.Option("--budget", help="Spend at most this much, e.g. 2000 or $2k.", rich_help_panel=_C)] = None,
    max_gpus: Annotated[int | None, typer.Option("--max-gpus", help="At most this many GPUs in total.", rich_help_panel=_C)] = None,
    max_nodes: Annotated[int, typer.Option("--max-nodes", help="Try 1..N nodes of each instance type.", rich_help_panel=_C)] = 8,
    cloud: Annotated[list[str] | None, typer.Option("--cloud", help="Only these clouds (comma-separated or repeated).", rich_help_panel=_C)] = None,
    region: Annotated[list[str] | None, typer.Option("--region", help="Only these regions (names or globs like 'us-*').", rich_help_panel=_C)] = None,
    billing: Annotated[list[str] | None, typer.Option(
        "--billing", help="on-demand, spot, reserved-1y, reserved-3y (default: all).", rich_help_panel=_C)] = None,
    objective: Annotated[str, typer.Option("--objective", help="cost | time | balanced (cost × time).", rich_help_panel=_C)] = "cost",
    confidence: Annotated[str, typer.Option(
        "--confidence", help="Spot options must meet the deadline with this probability, e.g. 0.9 or 90%.", rich_help_panel=_C)] = "0.9",
    # -- spot model --------------------------------------------------------------------------
    spot_mtbf: Annotated[str | None, typer.Option(
        "--spot-mtbf", help="Mean time between interruptions of one spot instance, e.g. 72h (default: per-cloud data).", rich_help_panel=_S)] = None,
    checkpoint_size: Annotated[str | None, typer.Option(
        "--checkpoint-size", help="GiB per checkpoint (default: weights + optimizer state from the estimate).", rich_help_panel=_S)] = None,
    checkpoint_bandwidth: Annotated[str | None, typer.Option(
        "--checkpoint-bandwidth", help="Checkpoint storage GB/s (default: 1, a placeholder).", rich_help_panel=_S)] = None,
    restart_time: Annotated[str | None, typer.Option(
        "--restart-time", help="Re-provision + start time per interruption, e.g. 10m (default: 10m, a placeholder).", rich_help_panel=_S)] = None,
    max_zero: Annotated[int | None, typer.Option(
        "--max-zero", help="Allow raising the ZeRO stage up to N where the workload would not fit.", rich_help_panel=_S)] = None,
    # -- output and export ----------------------------------------------------------------------
    limit: Annotated[int, typer.Option("--limit", help="Show at most this many options (0 = all).", rich_help_panel=_O)] = 15,
    export: Annotated[str | None, typer.Option("--export", help="skypilot | k8s: print a task YAML / manifest.", rich_help_panel=_O)] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the export to this file.", rich_help_panel=_O)] = None,
    run_cmd: Annotated[str, typer.Option("--run", help="Training command for the export.", rich_help_panel=_O)] = "python train.py",
    name: Annotated[str | None, typer.Option("--name", help="Job name for the export.", rich_help_panel=_O)] = None,
    bucket: Annotated[str | None, typer.Option("--bucket", help="SkyPilot checkpoint bucket name.", rich_help_panel=_O)] = None,
    sky_candidates: Annotated[str, typer.Option(
        "--skypilot-candidates", help="ordered (our ranking, tried in order) | any_of (SkyPilot picks the cheapest).",
        rich_help_panel=_O)] = "ordered",
    image: Annotated[str, typer.Option("--image", help="Container image for the k8s export.", rich_help_panel=_O)] = "pytorch/pytorch:latest",
    pvc: Annotated[str | None, typer.Option("--pvc", help="PersistentVolumeClaim for checkpoints (k8s export).", rich_help_panel=_O)] = None,
    catalog: CatalogFlag = None,
    max_price_age: MaxPriceAgeFlag = "30d",  # issue 13
    json: JsonFlag = False,
) -> int:
    """Rank cloud offers for a workload by what the job costs and how long it takes (spot-risk aware).

    Exit code 3 when no option meets the constraints (the reason and the nearest miss are printed).
    """
    from gpuwise.cli._workload import workload_from_cli
    from gpuwise.units import check_finite

    workload = workload_from_cli(
        model=model, params=params, task=task, tokens=tokens, samples=samples, epochs=epochs, seq_len=seq_len,
        micro_batch=micro_batch, global_batch=global_batch, precision=precision, optimizer=optimizer, zero=zero,
        grad_ckpt=grad_ckpt, lora_rank=lora_rank, lora_targets=lora_targets, tensor_parallel=tensor_parallel,
        pipeline_parallel=pipeline_parallel, cpu_offload=cpu_offload, flash_attention=flash_attention,
        prompt_len=prompt_len, output_len=output_len, requests=requests)
    check_finite(inter_node_gbps, "--inter-node-gbps", strict=True)
    return run_plan(workload, inter_node_gbit_s=inter_node_gbps, gpus=split_list(gpu), deadline=deadline, budget=budget, max_gpus=max_gpus,
                    max_nodes=max_nodes, cloud=cloud, region=region, billing=billing, objective=objective,
                    confidence=confidence, spot_mtbf=spot_mtbf, checkpoint_size=checkpoint_size,
                    checkpoint_bandwidth=checkpoint_bandwidth, restart_time=restart_time, max_zero=max_zero,
                    limit=limit, export=export, output=output, run_cmd=run_cmd, name=name, bucket=bucket,
                    sky_candidates=sky_candidates,
                    image=image, pvc=pvc, catalog=catalog, json=json, max_price_age=max_price_age)


EXPORTS = ("skypilot", "k8s")


def run_plan(workload: Any, *, inter_node_gbit_s: float = 400.0, gpus: list[str], deadline: str | None, budget: str | None, max_gpus: int | None,
             max_nodes: int, cloud: list[str] | None, region: list[str] | None, billing: list[str] | None,
             objective: str, confidence: str, spot_mtbf: str | None, checkpoint_size: str | None,
             checkpoint_bandwidth: str | None, restart_time: str | None, max_zero: int | None, limit: int,
             export: str | None, output: Path | None, run_cmd: str, name: str | None, bucket: str | None,
             image: str, pvc: str | None, catalog: list[Path] | None, json: bool,
             sky_candidates: str = "ordered", max_price_age: str = "30d") -> int:
    """Everything after the workload is parsed: request, plan, render, export; returns the exit code."""
    from gpuwise.catalog import BILLINGS, load_catalog
    from gpuwise.catalog.reserved import load_reserved_terms
    from gpuwise.errors import InputError, check_choice, did_you_mean
    from gpuwise.plan import EstimatorModel, PlanRequest, load_spot_defaults, plan_offers
    from gpuwise.units import parse_count, parse_duration_hours, parse_fraction, parse_money_usd

    if export is not None:
        check_choice(export, EXPORTS, "--export")
    if limit < 0:
        raise InputError(f"--limit must be ≥ 0, got {limit}", hint="give 0 for all rows, or a positive count")
    sky_mode = sky_candidates.strip().lower().replace("-", "_")
    if sky_mode not in ("ordered", "any_of"):
        raise InputError(f"unknown --skypilot-candidates {sky_candidates!r}", hint="use ordered or any_of",
                         suggestions=did_you_mean(sky_mode, ("ordered", "any_of")))
    if max_zero is not None and max_zero not in (0, 1, 2, 3):
        raise InputError(f"--max-zero must be 0, 1, 2 or 3, got {max_zero}", hint="use 3 to allow FSDP full sharding")
    billings = tuple(b.lower() for b in split_list(billing)) or BILLINGS
    request = PlanRequest(
        deadline_hours=parse_duration_hours(deadline, "--deadline") if deadline else None,
        budget_usd=parse_money_usd(budget, "--budget") if budget else None,
        max_gpus=max_gpus, max_nodes=max_nodes,
        clouds=tuple(c.lower() for c in split_list(cloud)), regions=tuple(split_list(region)), gpus=tuple(gpus),
        billings=billings, objective=objective.lower(),  # type: ignore[arg-type]
        confidence=parse_fraction(confidence, "--confidence"),
        spot_mtbf_hours=parse_duration_hours(spot_mtbf, "--spot-mtbf") if spot_mtbf else None,
        checkpoint_gib=parse_count(checkpoint_size, "--checkpoint-size") if checkpoint_size else None,
        checkpoint_bandwidth_gb_s=(parse_count(checkpoint_bandwidth, "--checkpoint-bandwidth", allow_zero=False)
                                   if checkpoint_bandwidth else None),
        restart_hours=parse_duration_hours(restart_time, "--restart-time") if restart_time else None,
    )
    offers = load_catalog(catalog or ()).offers
    model = workload if hasattr(workload, "evaluate") else \
        EstimatorModel(workload, max_zero=max_zero, inter_node_gbit_s=inter_node_gbit_s)
    prices_age((), max_price_age)  # issue 13: a bad --max-price-age fails before planning
    plan = plan_offers(offers, model, request, spot=load_spot_defaults(), reserved=load_reserved_terms())
    # issue 13: the age of the prices behind the options shown (all considered offers when none is)
    shown = {(o.cloud, o.instance_type) for o in plan.options[: limit or None]}
    age = prices_age([o for o in offers if (o.cloud, o.instance_type) in shown] if shown else offers, max_price_age)
    code = 0 if plan.options else EXIT_NO_OPTION
    text = _export_text(plan, export, run_cmd=run_cmd, name=name, bucket=bucket, image=image, pvc=pvc,
                        mode=sky_mode) \
        if export and plan.options else None
    if text is not None and output is not None:
        from gpuwise.paths import write_text_atomic

        try:
            write_text_atomic(output, text)
        except OSError as exc:
            raise InputError(f"cannot write {output}: {exc.strerror}", hint="check the --output path") from None
    if json:
        doc = plan.to_dict(limit=limit or None)
        if export:
            doc["export"] = {"format": export, "text": text, "path": str(output) if output else None}
        doc.update(age.to_dict())  # issue 13
        emit_json(doc)
        print_price_age(age, json=True)
        return code
    if text is not None and output is None:
        import sys

        sys.stdout.write(text)
        _render(plan, limit, console(stderr=True))  # the YAML owns stdout
        print_price_age(age, json=True)  # issue 13: warning only (stderr)
        return code
    _render(plan, limit, console())
    print_price_age(age, json=False)  # issue 13
    if output is not None and text is not None:
        console().print(f"[green]wrote {export} export to {output}[/green]")
    return code


def _export_text(plan: Plan, export: str, **kw: Any) -> str:
    from gpuwise.plan.export import k8s_manifest, skypilot_task, to_yaml

    if export == "skypilot":
        doc = skypilot_task(plan, name=kw["name"], command=kw["run_cmd"], bucket=kw["bucket"], mode=kw["mode"])
        head = "# SkyPilot task from `gpuwise plan`: candidates in our ranking order. Launch: sky jobs launch this.yaml\n"
    else:
        doc = k8s_manifest(plan, name=kw["name"], command=kw["run_cmd"], image=kw["image"], pvc=kw["pvc"])
        head = (f"# {doc['kind']} from `gpuwise plan`. Needs a PVC named for checkpoints"
                f"{' and the Kubeflow training operator' if doc['kind'] == 'PyTorchJob' else ''}.\n")
    return head + to_yaml(doc)


def _hours(h: float) -> str:
    if h < 1:
        return f"{h * 60:.0f} min"
    return f"{h:.1f} h" if h < 100 else f"{h:,.0f} h"


def _ranges(values: list[int]) -> str:
    """[2, 3, 4, 7] → ``2–4, 7``."""
    out: list[str] = []
    for v in sorted(set(values)):
        if out and out[-1].split("–")[-1] == str(v - 1):
            out[-1] = f"{out[-1].split('–')[0]}–{v}"
        else:
            out.append(str(v))
    return ", ".join(out)


def _render(plan: Plan, limit: int, out: Any) -> None:
    from rich.table import Table

    req = plan.request
    # one row per (cloud, instance, billing, regions): its best node count; the others are in
    # --json and on the Pareto front
    rows: dict[tuple[Any, ...], tuple[Any, list[int]]] = {}
    for o in plan.options:
        key = (o.cloud, o.instance_type, o.billing, o.regions)
        if key in rows:
            rows[key][1].append(o.nodes)
        else:
            rows[key] = (o, [])
    shown = list(rows.values()) if not limit else list(rows.values())[:limit]
    title = (f"{len(shown)} of {len(rows)} instance choices ({len(plan.options)} options with node counts), "
             f"ranked by {req.objective}")
    if req.deadline_hours is not None:
        title += f", deadline {_hours(req.deadline_hours)}"
    if req.budget_usd is not None:
        title += f", budget {money(req.budget_usd, 0)}"
    table = Table(title=title)
    for col, justify in [("#", "right"), ("GPUs", "left"), ("cloud", "left"), ("instance", "left"),
                         ("region", "left"), ("billing", "left"), ("$/h", "right"), ("hours", "right"),
                         ("cost", "right"), ("P(deadline)", "right"), ("front", "center"),
                         ("other nodes", "left")]:
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for o, others in shown:
        extra = f" +{len(o.regions) - 1}" if len(o.regions) > 1 else ""
        table.add_row(str(o.rank), o.setup, o.cloud, o.instance_type, o.region + extra, o.billing,
                      money(o.price_usd_per_hour), _hours(o.hours), money(o.cost_usd),
                      "—" if o.p_meet_deadline is None else f"{o.p_meet_deadline:.0%}",
                      "★" if o.on_pareto_front else "", _ranges(others))
    if shown:
        out.print(table)
        front = " → ".join(f"{money(o.cost_usd, 0)}/{_hours(o.hours)} {o.setup} {o.cloud} {o.billing}"
                           for o in plan.pareto[:6])
        out.print(f"[bold]Pareto front[/bold] (cost/time, ★): {front}" +
                  (f" … ({len(plan.pareto)} in all)" if len(plan.pareto) > 6 else ""))
    else:
        out.print(f"[bold red]No option: {plan.reason}.[/bold red]")
        if plan.nearest_miss:
            out.print(f"[yellow]Nearest miss — {plan.nearest_miss}.[/yellow]")
    for line in plan.explanation:
        out.print(line, markup=False)
    for line in plan.assumptions:
        out.print(f"[dim]assumed: {line}[/dim]")
