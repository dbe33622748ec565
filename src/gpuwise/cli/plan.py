"""``gpuwise plan``: rank cloud offers for a workload by job cost and time; export to SkyPilot/k8s.

Exit codes: 0 a plan with at least one option; 2 bad input; 3 no option meets the constraints
(the output still says why, and the nearest miss).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuwise.cli._output import CatalogFlag, JsonFlag, emit_json, money, split_list
from gpuwise.cli._prices import MaxPriceAgeFlag, prices_age, print_price_age
from gpuwise.cli._workload import WorkloadRequest, workload_options

if TYPE_CHECKING:
    from gpuwise.catalog.age import PriceAge
    from gpuwise.planner import Plan, PlanOption

EXIT_NO_OPTION = 3
_C = "Constraints and objective"
_S = "Spot model"
_O = "Output and export"
_F = "Fixed costs"


@workload_options(setup=("inter_node_gbps",))  # the flags shared with `estimate`: options.py
def plan_command(
    workload_request: WorkloadRequest,
    gpu: Annotated[
        list[str] | None,
        typer.Option(
            "--gpu",
            help="Only these GPU models (comma-separated or repeated), e.g. H100,A100-80GB.",
            rich_help_panel=_C,
        ),
    ] = None,
    # -- constraints and objective ---------------------------------------------------------
    deadline: Annotated[
        str | None,
        typer.Option(
            "--deadline",
            metavar="DURATION",
            help="Finish within this time, e.g. 24h, 2d.",
            rich_help_panel=_C,
        ),
    ] = None,
    budget: Annotated[
        str | None,
        typer.Option(
            "--budget", help="Spend at most this much, e.g. 2000 or $2k.", rich_help_panel=_C
        ),
    ] = None,
    max_gpus: Annotated[
        int | None,
        typer.Option("--max-gpus", help="At most this many GPUs in total.", rich_help_panel=_C),
    ] = None,
    max_nodes: Annotated[
        int,
        typer.Option(
            "--max-nodes", help="Try 1..N nodes of each instance type.", rich_help_panel=_C
        ),
    ] = 8,
    cloud: Annotated[
        list[str] | None,
        typer.Option(
            "--cloud", help="Only these clouds (comma-separated or repeated).", rich_help_panel=_C
        ),
    ] = None,
    region: Annotated[
        list[str] | None,
        typer.Option(
            "--region", help="Only these regions (names or globs like 'us-*').", rich_help_panel=_C
        ),
    ] = None,
    billing: Annotated[
        list[str] | None,
        typer.Option(
            "--billing",
            help="on-demand, spot, reserved-1y, reserved-3y (default: all).",
            rich_help_panel=_C,
        ),
    ] = None,
    objective: Annotated[
        str,
        typer.Option(
            "--objective", help="cost | time | balanced (cost × time).", rich_help_panel=_C
        ),
    ] = "cost",
    confidence: Annotated[
        str,
        typer.Option(
            "--confidence",
            help="Spot options must meet the deadline with this probability, e.g. 0.9 or 90%.",
            rich_help_panel=_C,
        ),
    ] = "0.9",
    # -- spot model --------------------------------------------------------------------------
    spot_mtbf: Annotated[
        str | None,
        typer.Option(
            "--spot-mtbf",
            metavar="DURATION",
            help="Mean time between interruptions of one spot instance, e.g. 72h (default: per-cloud data).",
            rich_help_panel=_S,
        ),
    ] = None,
    checkpoint_size: Annotated[
        str | None,
        typer.Option(
            "--checkpoint-size",
            help="GiB per checkpoint (default: weights + optimizer state from the estimate).",
            rich_help_panel=_S,
        ),
    ] = None,
    checkpoint_bandwidth: Annotated[
        str | None,
        typer.Option(
            "--checkpoint-bandwidth",
            help="Checkpoint storage GB/s (default: 1, a placeholder).",
            rich_help_panel=_S,
        ),
    ] = None,
    restart_time: Annotated[
        str | None,
        typer.Option(
            "--restart-time",
            metavar="DURATION",
            help="Re-provision + start time per interruption, e.g. 10m (default: 10m, a placeholder).",
            rich_help_panel=_S,
        ),
    ] = None,
    max_zero: Annotated[
        int | None,
        typer.Option(
            "--max-zero",
            help="With --fixed-settings: allow raising the ZeRO stage up to N where the workload would not fit.",
            rich_help_panel=_C,
        ),
    ] = None,
    search: Annotated[
        bool,
        typer.Option(
            "--search-settings/--fixed-settings",
            help="Search recompute × ZeRO × micro-batch (inference: TP × batch) per "
            "offer for the cheapest that fits (default), or keep the workload's settings.",
            rich_help_panel=_C,
        ),
    ] = True,
    max_batch: Annotated[
        int | None,
        typer.Option(
            "--max-batch",
            help="Inference: at most this many concurrent sequences per model copy "
            "(default: as many as the KV cache holds, up to 256).",
            rich_help_panel=_C,
        ),
    ] = None,
    allow_zone_outliers: Annotated[
        bool,
        typer.Option(
            "--allow-zone-outliers",
            help="Use zone prices far below their region's other zones (the export then pins "
            "that zone).",
            rich_help_panel=_C,
        ),
    ] = False,
    provision_time: Annotated[
        str | None,
        typer.Option(
            "--provision-time",
            metavar="DURATION",
            help="Time to get a usable machine, e.g. 10m (default 10m, a placeholder).",
            rich_help_panel=_F,
        ),
    ] = None,
    startup_time: Annotated[
        str | None,
        typer.Option(
            "--startup-time",
            metavar="DURATION",
            help="Imports, NCCL init, weights into GPU memory, e.g. 3m (default 3m, a placeholder).",
            rich_help_panel=_F,
        ),
    ] = None,
    download_gbps: Annotated[
        float | None,
        typer.Option(
            "--download-gbps",
            help="Download rate of a node for the image and model weights, Gbit/s "
            "(default 5, a placeholder).",
            rich_help_panel=_F,
        ),
    ] = None,
    # -- output and export ----------------------------------------------------------------------
    limit: Annotated[
        int,
        typer.Option(
            "--limit", help="Show at most this many options (0 = all).", rich_help_panel=_O
        ),
    ] = 15,
    export: Annotated[
        str | None,
        typer.Option(
            "--export", help="skypilot | k8s: print a task YAML / manifest.", rich_help_panel=_O
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write the export to this file (without --export: the plan as JSON).",
            rich_help_panel=_O,
        ),
    ] = None,
    run_cmd: Annotated[
        str,
        typer.Option(
            "--run",
            help="The job's command for the export, e.g. 'python train.py --lr 3e-4' (gpuwise run adds torchrun).",
            rich_help_panel=_O,
        ),
    ] = "python train.py",
    name: Annotated[
        str | None, typer.Option("--name", help="Job name for the export.", rich_help_panel=_O)
    ] = None,
    bucket: Annotated[
        str | None,
        typer.Option("--bucket", help="SkyPilot checkpoint bucket name.", rich_help_panel=_O),
    ] = None,
    sky_candidates: Annotated[
        str,
        typer.Option(
            "--skypilot-candidates",
            help="ordered (our ranking, tried in order) | any_of (SkyPilot picks the cheapest).",
            rich_help_panel=_O,
        ),
    ] = "ordered",
    image: Annotated[
        str | None,
        typer.Option(
            "--image",
            help="Container image with gpuwise and your code for the k8s export (default gpuwise-job:VERSION, "
            "built from deploy/docker/job.Dockerfile).",
            rich_help_panel=_O,
        ),
    ] = None,
    pvc: Annotated[
        str | None,
        typer.Option(
            "--pvc", help="PersistentVolumeClaim for checkpoints (k8s export).", rich_help_panel=_O
        ),
    ] = None,
    catalog: CatalogFlag = None,
    max_price_age: MaxPriceAgeFlag = "30d",
    json: JsonFlag = False,
) -> int:
    """Rank cloud offers for a workload by what the job costs and how long it takes (spot-risk aware).

    Exit code 3 when no option meets the constraints (the reason and the nearest miss are printed).
    """
    from gpuwise.estimate import load_calibration

    workload = workload_request.workload(load_calibration())
    inter_node_gbps: float | None = workload_request.setup("inter_node_gbps")
    from gpuwise.catalog import BILLINGS
    from gpuwise.errors import InputError, check_choice, did_you_mean
    from gpuwise.planner import PlanRequest, plan
    from gpuwise.units import (
        check_finite,
        parse_count,
        parse_duration_hours,
        parse_fraction,
        parse_money_usd,
    )

    if export is not None:
        check_choice(export, EXPORTS, "--export")
    if limit < 0:
        raise InputError(
            f"--limit must be ≥ 0, got {limit}", hint="give 0 for all rows, or a positive count"
        )
    sky_mode = sky_candidates.strip().lower().replace("-", "_")
    if sky_mode not in ("ordered", "any_of"):
        raise InputError(
            f"unknown --skypilot-candidates {sky_candidates!r}",
            hint="use ordered or any_of",
            suggestions=did_you_mean(sky_mode, ("ordered", "any_of")),
        )
    if inter_node_gbps is not None:
        check_finite(inter_node_gbps, "--inter-node-gbps", strict=True)
    if download_gbps is not None:
        check_finite(download_gbps, "--download-gbps", strict=True)
    request = PlanRequest(
        deadline_hours=parse_duration_hours(deadline, "--deadline") if deadline else None,
        budget_usd=parse_money_usd(budget, "--budget") if budget else None,
        max_gpus=max_gpus,
        max_nodes=max_nodes,
        clouds=tuple(c.lower() for c in split_list(cloud)),
        regions=tuple(split_list(region)),
        gpus=tuple(split_list(gpu)),
        billings=tuple(b.lower() for b in split_list(billing)) or BILLINGS,  # type: ignore[misc]
        objective=objective.lower(),  # type: ignore[arg-type]
        confidence=parse_fraction(confidence, "--confidence"),
        spot_mtbf_hours=parse_duration_hours(spot_mtbf, "--spot-mtbf") if spot_mtbf else None,
        checkpoint_gib=parse_count(checkpoint_size, "--checkpoint-size")
        if checkpoint_size
        else None,
        checkpoint_bandwidth_gb_s=(
            parse_count(checkpoint_bandwidth, "--checkpoint-bandwidth", allow_zero=False)
            if checkpoint_bandwidth
            else None
        ),
        restart_hours=parse_duration_hours(restart_time, "--restart-time")
        if restart_time
        else None,
        inter_node_gbit_s=inter_node_gbps,
        search_settings=search,
        max_zero=max_zero,
        max_batch=max_batch,
        allow_zone_outliers=allow_zone_outliers,
        provision_hours=parse_duration_hours(provision_time, "--provision-time")
        if provision_time
        else None,
        startup_hours=parse_duration_hours(startup_time, "--startup-time")
        if startup_time
        else None,
        download_gbit_s=download_gbps,
    )
    from gpuwise.catalog import load_catalog

    prices_age((), max_price_age)  # a bad --max-price-age fails before planning
    offers = load_catalog(catalog or ()).offers
    result = plan(workload, request, offers=offers)
    # the age of the prices behind the options shown (all considered offers when none is)
    shown = {(o.cloud, o.instance_type) for o in result.options[: limit or None]}
    age = prices_age(
        [o for o in offers if (o.cloud, o.instance_type) in shown] if shown else offers,
        max_price_age,
    )
    return _emit(
        result,
        age,
        limit=limit,
        export=export,
        output=output,
        json=json,
        export_options={
            "name": name,
            "run_cmd": run_cmd,
            "bucket": bucket,
            "image": image,
            "pvc": pvc,
            "mode": sky_mode,
        },
    )


EXPORTS = ("skypilot", "k8s")


def _emit(
    plan: Plan,
    age: PriceAge,
    *,
    limit: int,
    export: str | None,
    output: Path | None,
    json: bool,
    export_options: dict[str, Any],
) -> int:
    """Render, export and write what was asked; return the exit code."""
    code = 0 if plan.options else EXIT_NO_OPTION
    text = _export_text(plan, export, **export_options) if export and plan.options else None
    if output is not None:
        written = text
        if export is None:  # -o without --export writes the plan itself
            import json as _json

            written = _json.dumps(plan.to_dict(limit=limit or None), indent=2, default=str) + "\n"
        if written is not None:
            _write(output, written)
    if json:
        doc = plan.to_dict(limit=limit or None)
        if export:
            doc["export"] = {
                "format": export,
                "text": text,
                "path": str(output) if output else None,
            }
        doc.update(age.to_dict())
        emit_json(doc)
        print_price_age(age, json=True)  # the staleness warning only, on stderr
        return code
    if text is not None and output is None:
        import sys

        sys.stdout.write(text)
        _render(plan, limit, _console(stderr=True))  # the YAML owns stdout
        print_price_age(age, json=True)  # warning only (stderr)
        return code
    out = _console()
    _render(plan, limit, out)
    print_price_age(age, json=False)
    if output is not None and (text is not None or export is None):
        out.print(
            f"[green]wrote {export + ' export' if export else 'the plan (JSON)'} to {output}[/green]"
        )
    return code


def _write(path: Path, text: str) -> None:
    from gpuwise.errors import InputError
    from gpuwise.paths import write_text_atomic

    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise InputError(
            f"cannot write {path}: {exc.strerror}", hint="check the --output path"
        ) from None


def _console(stderr: bool = False) -> Any:
    """A rich console at the terminal's width; piped, rich's default (80 columns, or $COLUMNS)."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _export_text(plan: Plan, export: str, **kw: Any) -> str:
    from gpuwise.planner.export import k8s_manifest, skypilot_task, to_yaml, zone_id_notes

    if export == "skypilot":
        doc = skypilot_task(
            plan, name=kw["name"], command=kw["run_cmd"], bucket=kw["bucket"], mode=kw["mode"]
        )
        head = (
            "# SkyPilot task from `gpuwise plan`: candidates in our ranking order. Run from your code's folder:\n"
            "#   sky jobs launch this.yaml   (setup installs the pinned gpuwise; set GPUWISE_PIP_SPEC to override)\n"
        ) + "".join(f"# {note}\n" for note in zone_id_notes(plan))
    else:
        doc = k8s_manifest(
            plan, name=kw["name"], command=kw["run_cmd"], image=kw["image"], pvc=kw["pvc"]
        )
        image = (
            doc["spec"]["template"]["spec"]["containers"][0]["image"]
            if doc["kind"] == "Job"
            else doc["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0][
                "image"
            ]
        )
        head = (
            f"# {doc['kind']} from `gpuwise plan`. Needs a PVC named for checkpoints"
            f"{', the Kubeflow training operator' if doc['kind'] == 'PyTorchJob' else ''} and the image {image}\n"
            "# (docker build -f deploy/docker/job.Dockerfile -t IMAGE . ; then --image IMAGE).\n"
        )
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


def _short_billing(billing: str) -> str:
    return {"on-demand": "on-dem", "reserved-1y": "res 1y", "reserved-3y": "res 3y"}.get(
        billing, billing
    )


def _render(plan: Plan, limit: int, out: Any) -> None:
    from rich.table import Table

    req = plan.request
    # one row per (GPU setup, cloud, instance, billing): its best option; node-count variants and
    # other regions are counted in the row (all of them are in --json and on the Pareto front)
    rows: dict[tuple[object, ...], tuple[PlanOption, set[int], set[str]]] = {}
    for o in plan.options:
        key = (o.gpu, o.gpu_count, o.cloud, o.instance_type, o.billing)
        if key in rows:
            rows[key][1].add(o.nodes)
            rows[key][2].update(o.regions)
        else:
            rows[key] = (o, {o.nodes}, set(o.regions))
    shown = list(rows.values()) if not limit else list(rows.values())[:limit]
    title = (
        f"{len(shown)} of {len(rows)} choices, by {req.objective} ({len(plan.options)} options: "
        "other node counts and regions folded into rows)"
    )
    if req.deadline_hours is not None:
        title += f", deadline {_hours(req.deadline_hours)}"
    if req.budget_usd is not None:
        title += f", budget {money(req.budget_usd, 0)}"
    table = Table(title=title)
    for col, justify in [
        ("#", "right"),
        ("GPUs", "left"),
        ("where", "left"),
        ("bill", "left"),
        ("cost", "right"),
        ("time", "right"),
        ("settings", "left"),
    ]:
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for o, nodes, regions in shown:
        gpus = f"{o.total_gpus}×{o.gpu}"
        if o.nodes > 1 or len(nodes) > 1:
            gpus += f"\n{o.nodes} node{'s' if o.nodes > 1 else ''}"
            if len(nodes) > 1:
                gpus += f" (or {_ranges(sorted(nodes - {o.nodes}))})"
        where = f"{o.cloud} {o.instance_type}\n{o.region}" + (f"/{o.zone}" if o.zone_pinned else "")
        if len(regions) > 1:
            where += f" +{len(regions) - 1}"
        cost = money(o.cost_usd)
        if o.cost_usd_p10 is not None and o.cost_usd_p90 is not None:
            cost += f"\n{money(o.cost_usd_p10, 0)}–{money(o.cost_usd_p90, 0)}"
        time = _hours(o.hours)
        if o.p_meet_deadline is not None and o.billing == "spot":
            time += f"\nP {o.p_meet_deadline:.0%}"
        settings = str((o.settings or {}).get("text", ""))
        if not o.network_known and o.nodes > 1:
            settings += "; network unknown"
        table.add_row(
            str(o.rank) + ("★" if o.on_pareto_front else ""),
            gpus,
            where,
            _short_billing(o.billing),
            cost,
            time,
            settings,
        )
    if shown:
        out.print(table)
        ages = sorted({o.price_as_of for o, _, _ in shown if o.price_as_of})
        fixed = shown[0][0].fixed_hours
        out.print(
            f"Cost and time include {_hours(fixed)} of start-up (provisioning, downloads)"
            + (f"; prices as of {', '.join(ages)}" if ages else "")
            + "."
        )
        notes = {o.capacity_note for o, _, _ in shown[:3] if o.capacity_note}
        for note in sorted(notes):
            out.print(f"[yellow]{note}[/yellow]")
        front = " → ".join(
            f"{money(o.cost_usd, 0)}/{_hours(o.hours)} {o.setup} {o.cloud} {o.billing}"
            for o in plan.pareto[:4]
        )
        out.print(
            f"[bold]Pareto front[/bold] (cost/time, ★): {front}"
            + (f" … ({len(plan.pareto)} in all)" if len(plan.pareto) > 4 else "")
        )
    else:
        out.print(f"[bold red]No option: {plan.reason}.[/bold red]")
        if plan.nearest_miss:
            out.print(f"[yellow]Nearest miss — {plan.nearest_miss}.[/yellow]")
    for line in plan.explanation:
        out.print(line, markup=False)
    for line in plan.assumptions:
        out.print(f"[dim]assumed: {line}[/dim]")
