"""``gpuwise plan``: rank cloud offers for a workload by job cost and time; export to SkyPilot/k8s.

Exit codes: 0 a plan with at least one option; 2 bad input; 3 no option meets the constraints
(the output still says why, and the nearest miss).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuwise.cli._output import CatalogFlag, JsonFlag, emit_json, money
from gpuwise.cli._plan_options import PlanFlags, plan_flags
from gpuwise.cli._prices import MaxPriceAgeFlag, prices_age, print_price_age
from gpuwise.cli._workload import WorkloadRequest, workload_options

if TYPE_CHECKING:
    from gpuwise.base.recipe import PlanFile
    from gpuwise.catalog import PriceAge
    from gpuwise.planner import Plan, PlanOption

EXIT_NO_OPTION = 3


@workload_options(setup=("inter_node_gbps",))  # the flags shared with `estimate`: options.py
@plan_flags  # plan's own flags: the PlanFlags table in cli/_plan_options.py
def plan_command(
    workload_request: WorkloadRequest,
    flags: PlanFlags,
    catalog: CatalogFlag = None,
    max_price_age: MaxPriceAgeFlag = "30d",
    json: JsonFlag = False,
) -> int:
    """Rank cloud offers for a workload by what the job costs and how long it takes (spot-risk aware).

    Exit code 3 when no option meets the constraints (the reason and the nearest miss are printed).
    """
    from gpuwise.cli._runs import PlanHead

    f = flags  # validated as it was made: PlanFlags.validate
    head = PlanHead.read(f.calibration_file, f.no_calibration, f.spot_mtbf, f.runs)  # cli/_runs.py
    calibration = head.calibration
    workload = workload_request.workload(calibration)
    from gpuwise.planner import plan

    request = head.spot(
        f.request(
            spot_mtbf=head.spot_mtbf, inter_node_gbps=workload_request.setup("inter_node_gbps")
        )
    )
    from gpuwise.catalog import load_catalog

    prices_age((), max_price_age)  # a bad --max-price-age fails before planning
    offers = load_catalog(catalog or ()).offers
    result = head.plan(plan, workload, workload_request, request, offers)
    # the age of the prices behind the options shown (all considered offers when none is)
    shown = {(o.cloud, o.instance_type) for o in result.options[: f.limit or None]}
    age = prices_age(
        [o for o in offers if (o.cloud, o.instance_type) in shown] if shown else offers,
        max_price_age,
    )
    recipe = None
    if (f.save is not None or f.export is not None) and result.options:
        from gpuwise.planner import plan_file

        runs_used = head.runs_used(result, workload)
        recipe = plan_file(result, workload, calibration=calibration, calibration_runs=runs_used)
        if f.save is not None:
            _write(f.save, recipe.to_json(), flag="--save")
    return _emit(
        result,
        age,
        head=(head.lines, head.doc),
        plan_file=recipe,
        saved=f.save,
        limit=f.limit,
        export=f.export,
        output=f.output,
        json=json,
        export_options={
            "name": f.name,
            "run_cmd": f.run_cmd,
            "bucket": f.bucket,
            "image": f.image,
            "pvc": f.pvc,
            "mode": f.skypilot_mode,
            "workdir": f.workdir,
        },
    )


def _emit(
    plan: Plan,
    age: PriceAge,
    *,
    head: tuple[list[str], dict[str, Any]] = ([], {}),
    plan_file: PlanFile | None,
    saved: Path | None,
    limit: int,
    export: str | None,
    output: Path | None,
    json: bool,
    export_options: dict[str, Any],
) -> int:
    """Render, export and write what was asked; return the exit code."""
    code = 0 if plan.options else EXIT_NO_OPTION
    text = (
        _export_text(plan, export, plan_file=plan_file, **export_options)
        if export and plan.options
        else None
    )
    if output is not None:
        written = text
        if text is not None and plan_file is not None:  # the recipe beside the YAML/manifest
            _write(_beside(output), plan_file.to_json(), flag="--output")
        if export is None:  # -o without --export writes the plan itself
            import json as _json

            written = _json.dumps(plan.to_dict(limit=limit or None), indent=2, default=str) + "\n"
        if written is not None:
            _write(output, written)
    if json:
        doc = {**head[1], **plan.to_dict(limit=limit or None)}
        if export:
            doc["export"] = {
                "format": export,
                "text": text,
                "path": str(output) if output else None,
            }
        if plan_file is not None:
            doc["plan_file"] = {
                "plan_id": plan_file.plan_id,
                "path": str(saved) if saved else None,
                "beside_export": str(_beside(output)) if output and text else None,
            }
        doc.update(age.to_dict())
        emit_json(doc)
        print_price_age(age, json=True)  # the staleness warning only, on stderr
        return code
    if text is not None and output is None:
        import sys

        sys.stdout.write(text)
        _print_head(head[0], _console(stderr=True))
        _render(plan, limit, _console(stderr=True), age.max_age_days)  # the YAML owns stdout
        print_price_age(age, json=True)  # warning only (stderr)
        return code
    out = _console()
    _print_head(head[0], out)
    _render(plan, limit, out, age.max_age_days)
    print_price_age(age, json=False, out=out)
    if output is not None and (text is not None or export is None):
        out.print(
            f"[green]wrote {export + ' export' if export else 'the plan (JSON)'} to {output}[/green]"
        )
    if plan_file is not None and saved is not None:
        out.print(f"[green]saved plan {plan_file.plan_id} to {saved}[/green] (gpuwise run --plan)")
    return code


def _print_head(lines: list[str], out: Any) -> None:
    """The plan's first lines: the calibration and run history its figures rest on."""
    for line in lines:
        out.print(line, style="cyan", markup=False, soft_wrap=True)  # one line each, for grep


def _beside(output: Path) -> Path:
    """``job.yaml`` → ``job.plan.json``: the recipe written beside an export."""
    return output.with_name(output.name.rsplit(".", 1)[0] + ".plan.json")


def _write(path: Path, text: str, flag: str = "--output") -> None:
    from gpuwise.base.paths import write_text_atomic
    from gpuwise.errors import InputError

    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise InputError(
            f"cannot write {path}: {exc.strerror}", hint=f"check the {flag} path"
        ) from None


def _console(stderr: bool = False) -> Any:
    """A rich console at the terminal's width; piped, rich's default (80 columns, or $COLUMNS)."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _export_text(plan: Plan, export: str, plan_file: PlanFile | None = None, **kw: Any) -> str:
    from gpuwise.planner import (
        k8s_manifest,
        k8s_spot_note,
        skypilot_notes,
        skypilot_task,
        to_yaml,
        zone_id_notes,
    )

    if export == "skypilot":
        from gpuwise.planner import WHEEL_DIR, write_wheel

        workdir = Path(kw["workdir"])
        doc = skypilot_task(
            plan,
            name=kw["name"],
            command=kw["run_cmd"],
            bucket=kw["bucket"],
            mode=kw["mode"],
            workdir=str(workdir),
            plan_file=plan_file,
        )
        wheel = write_wheel(workdir, WHEEL_DIR)
        if plan_file is not None:  # synced with the workdir; `gpuwise run --plan` reads it
            from gpuwise.planner import SKYPILOT_PLAN_PATH

            _write(workdir / SKYPILOT_PLAN_PATH, plan_file.to_json(), flag="--workdir")
        head = (
            "# SkyPilot task from `gpuwise plan`: candidates in our ranking order. Launch with:\n"
            "#   sky jobs launch this.yaml\n"
            f"# setup installs {wheel.name} from the workdir's {WHEEL_DIR}/ (the gpuwise this plan ran\n"
            "# with); set GPUWISE_PIP_SPEC to install another. The job reads its settings with\n"
            "# gpuwise.planner.job_settings() (GPUWISE_* variables below) and runs the plan's\n"
            "# recipe: gpuwise.train.plan_recipe() reads the plan file `gpuwise run --plan` hands it.\n"
        ) + "".join(f"# {note}\n" for note in zone_id_notes(plan) + skypilot_notes(plan))
    else:
        doc = k8s_manifest(
            plan,
            name=kw["name"],
            command=kw["run_cmd"],
            image=kw["image"],
            pvc=kw["pvc"],
            plan_file=plan_file,
        )
        image = (
            doc["spec"]["template"]["spec"]["containers"][0]["image"]
            if doc["kind"] == "Job"
            else doc["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0][
                "image"
            ]
        )
        head = (
            f"# {doc['kind']} from `gpuwise plan`"
            f"{' (needs the Kubeflow training operator)' if doc['kind'] == 'PyTorchJob' else ''}"
            f" and the image {image}\n"
            "# (gpuwise plan ... --export k8s --workdir . writes .gpuwise-dist/; then\n"
            "#  docker build -f deploy/docker/job.Dockerfile -t IMAGE . ; and --image IMAGE).\n"
        )
        spot_note = k8s_spot_note(plan)
        head += f"# {spot_note}\n" if spot_note else ""
        from gpuwise.planner import WHEEL_DIR, k8s_checkpoint_pvc, write_wheel

        write_wheel(Path(kw["workdir"]), WHEEL_DIR)  # the image installs it (job.Dockerfile)
        if plan_file is not None:  # the pods mount the plan from this ConfigMap
            from gpuwise.planner import k8s_plan_configmap

            head += to_yaml(k8s_plan_configmap(plan, plan_file, name=kw["name"])) + "---\n"
        if kw["pvc"] is None:  # the checkpoint claim the Job mounts, unless the user names theirs
            claim = k8s_checkpoint_pvc(plan, name=kw["name"])
            modes = claim["spec"]["accessModes"][0]
            head += (
                f"# The PersistentVolumeClaim below is {modes}"
                f"{': use a storage class that supports it (EFS, Filestore, Azure Files)' if modes == 'ReadWriteMany' else ''}.\n"
            )
            return head + to_yaml(claim) + "---\n" + to_yaml(doc)
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


def _price_flag(as_of: str | None, max_age_days: float) -> str:
    """`` price undated`` / `` price 45 d old`` when older than --max-price-age (as ``offers`` warns)."""
    import datetime as dt

    from gpuwise.catalog import parse_as_of

    when = parse_as_of(as_of or "")
    if when is None:
        return "\n[yellow]price undated[/yellow]"
    days = (dt.date.today() - when).days
    return f"\n[yellow]price {days} d old[/yellow]" if days > max_age_days else ""


def _render(plan: Plan, limit: int, out: Any, max_age_days: float = 30.0) -> None:
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
    # "#" is the rank of the row's best option among all options (as in --json and the lines
    # below the table), so it may skip the node-count and region variants folded into a row
    title = (
        f"{len(shown)} of {len(rows)} choices, by {req.objective} ({len(plan.options)} options; "
        "# = its best one's rank, other node counts and regions folded into rows)"
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
        where += _price_flag(o.price_as_of, max_age_days)
        cost = money(o.cost_usd)
        if o.cost_usd_p10 is not None and o.cost_usd_p90 is not None:
            cost += f"\n{money(o.cost_usd_p10, 0)}–{money(o.cost_usd_p90, 0)}"
        time = _hours(o.hours)
        if o.p_meet_deadline is not None and o.billing == "spot":
            # placeholder or fleet-wide rates: the number would look like knowledge it is not
            low = o.p_meet_deadline_confidence == "low"
            time += "\nP unknown" if low else f"\nP {o.p_meet_deadline:.0%}"
        settings = str((o.settings or {}).get("text", ""))
        settings += f"; mem {o.per_gpu_memory_gib:.1f}/{o.capacity_gib:.1f} GiB" + (
            " (datasheet)" if o.capacity_source == "datasheet" else ""
        )
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
    if plan.ranking_note:  # the first line says which rule chose the winner
        out.print(f"[bold]{plan.ranking_note}[/bold]", markup=True)
    w = plan.winner
    if w is not None and _price_flag(w.price_as_of, max_age_days):  # said first, not only below
        from gpuwise.catalog import parse_as_of

        dated = parse_as_of(w.price_as_of or "") is not None
        age = f"older than {max_age_days:g} days" if dated else "undated"
        out.print(
            f"[yellow]The winner's {w.cloud} price is {age} (the bundled snapshot): refresh with "
            "`gpuwise catalog update --fetch` before you commit to it.[/yellow]"
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
        if line != plan.ranking_note:  # printed first
            out.print(line, markup=False)
    for line in plan.assumptions:
        out.print(f"[dim]assumed: {line}[/dim]")
