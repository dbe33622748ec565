"""``gpuwise calibrate --from-runs DIR``: what real runs measured, as the next plan's calibration."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuwise.cli._output import JsonFlag, console, emit_json, make_table, number
from gpuwise.cli._runs import PlanFilesOpt, read_history


def calibrate(
    from_runs: Annotated[
        str,
        typer.Option(
            "--from-runs",
            metavar="PATH",
            help="Folder or URL (s3://, gs://) holding run records: every gpuwise-runs/ folder "
            "under it is read (training writes one record per attempt beside its checkpoints).",
        ),
    ],
    plan: PlanFilesOpt = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Calibration file to update (default: calibration.json in the config dir, "
            "which `gpuwise plan` and `gpuwise estimate` read).",
        ),
    ] = None,
    assume_gpu: Annotated[
        str | None,
        typer.Option(
            "--assume-gpu",
            help="Take records that ran without a GPU (CPU ranks) as runs on this GPU model, to "
            "rehearse the loop; the entries say rehearsal: they are not that GPU's figures.",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what the runs measured; write nothing.")
    ] = False,
    json: JsonFlag = False,
) -> None:
    """Turn run records (a pilot's or any run's) into calibration per GPU, model and task.

    Each run's measured throughput becomes the MFU at which the estimator reproduces it (communication stays modelled at other GPU counts), its peak memory a ratio to the estimate. The next `gpuwise plan` re-plans from them and names the runs it used.
    """
    import datetime as dt

    from gpuwise.errors import InputError
    from gpuwise.estimate import calibrate_from_runs, load_calibration, write_run_entries

    history = read_history(from_runs, plan)
    base = load_calibration(output) if output is not None and output.exists() else None
    if output is None:
        base = load_calibration()
    from gpuwise.planner import instance_network

    def network(cloud: str, instance_type: str) -> float | None:  # as `plan` times the instance
        return instance_network(cloud, instance_type).inter_node_gbit_s

    result = calibrate_from_runs(history.runs, base, assume_gpu=assume_gpu, network=network)
    skipped = [*result.skipped, *history.skipped]
    if not result.entries:
        raise InputError(
            f"no run under {from_runs} can calibrate a GPU ({len(history.runs)} records: "
            + "; ".join(result.skipped[:3])
            + ")",
            hint="calibrate from runs on a GPU that finished timed steps, with their plan file "
            "in the folder or given with --plan FILE",
        )
    written = None
    if not dry_run:
        now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        written = write_run_entries(result.entries, measured_at=now, path=output)
    if json:
        emit_json(
            {
                "calibration": str(written) if written else None,
                "gpus": result.entries,
                "runs": [f.run for f in result.fits],
                "fits": result.fits,
                "skipped": skipped,
            }
        )
        return
    out = console()
    table = make_table(
        ["GPU", "model", "task", "MFU", "tokens/s/GPU", "model said", "memory × est.", "run"],
        title=f"Measured in {len(result.fits)} of {len(history.runs)} runs under {from_runs}",
        left=("GPU", "model", "task", "run"),
    )
    for fit in result.fits:
        table.add_row(
            fit.gpu,
            fit.model,
            fit.task,
            f"{fit.mfu:.1%}",
            number(fit.tokens_per_s_per_gpu, ",.0f"),
            number(fit.estimated_tokens_per_s_per_gpu, ",.0f"),
            number(fit.memory_ratio, ".2f"),
            fit.run,
        )
    out.print(table)
    for gpu, entries in result.entries.items():
        for e in entries:
            n = len(e["runs"])
            out.print(
                f"{gpu} {e['model']} {e['task']}: MFU {e['mfu']:.1%} from {n} run{'s' * (n != 1)}"
                + (f", memory × {e['memory_ratio']:.2f}" if "memory_ratio" in e else "")
                + (" — a rehearsal: runs without a GPU" if e.get("rehearsal") else "")
            )
    for line in skipped:
        out.print(f"skipped {line}", style="yellow", markup=False)
    if written is not None:
        out.print(f"[green]calibration written to {written}[/green] (gpuwise plan reads it)")
    else:
        out.print("dry run: nothing written")
