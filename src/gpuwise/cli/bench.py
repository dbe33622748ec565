"""``gpuwise bench``: GPU, host and storage benchmarks beside the datasheet peaks."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer

from gpuwise.cli._output import JsonFlag, console, emit_json, number, split_list


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def bench(
    quick: Annotated[
        bool,
        typer.Option(
            "--quick", help="Small sizes: seconds, checks the code path (CI), not the hardware."
        ),
    ] = False,
    calibrate: Annotated[
        bool,
        typer.Option(
            "--calibrate",
            help="Write the measured efficiencies to the calibration file that `gpuwise estimate` and `gpuwise plan` read.",
        ),
    ] = False,
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu",
            help="GPU model for the datasheet peaks, when the device name is not recognised (see `gpuwise gpus`).",
        ),
    ] = None,
    checkpoint_dir: Annotated[
        Path,
        typer.Option(
            "--checkpoint-dir",
            help="Folder for the storage benchmark's scratch file (removed afterwards).",
        ),
    ] = Path("."),
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only",
            help="Run only these groups: matmul, memory, transfer, nccl, train, storage, dataloader.",
        ),
    ] = None,
    num_workers: Annotated[
        int | None,
        typer.Option("--num-workers", help="DataLoader workers for the input-pipeline benchmark."),
    ] = None,
    device: Annotated[
        str | None, typer.Option("--device", help="cuda or cpu (default: cuda when available).")
    ] = None,
    storage_mib: Annotated[
        int | None,
        typer.Option(
            "--storage-mib",
            help="Size of the storage test file in MiB (default 1024 on a GPU machine; 16 with --quick).",
        ),
    ] = None,
    json: JsonFlag = False,
) -> None:
    """Measure matmul TFLOP/s, memory and PCIe bandwidth, NCCL, training MFU, storage and DataLoader
    throughput, each beside the datasheet peak."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from gpuwise.bench import (
        BenchOptions,
        check_calibration_run,
        run_bench,
        stage_names,
        write_calibration,
    )

    if calibrate:  # at once: a CPU run would go on for minutes and then be refused
        check_calibration_run(quick, device)
    options = BenchOptions(
        quick=quick,
        checkpoint_dir=checkpoint_dir,
        gpu=gpu,
        only=tuple(split_list(only)),
        num_workers=num_workers,
        device=device,
        storage_mib=storage_mib,
    )
    stages = stage_names(options)
    # `docker stop`, Slurm and spot preemption send SIGTERM: unwind like Ctrl-C so the storage
    # benchmark's `finally` removes its scratch folder.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    err = console(stderr=True)
    with Progress(
        TextColumn("[bold]bench[/] {task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task("starting", total=len(stages))
        seen: list[str] = []

        def progress(stage: str) -> None:
            if seen:
                bar.advance(task)
            seen.append(stage)
            bar.update(task, description=stage)

        report = run_bench(options, progress)
        bar.update(task, completed=len(stages))
    written = write_calibration(report) if calibrate else None
    if json:
        emit_json(
            {
                "device": report.device,
                "quick": report.quick,
                "results": [
                    {
                        "name": r.name,
                        "value": r.value,
                        "unit": r.unit,
                        "peak": r.peak,
                        "ratio": r.ratio,
                        "note": r.note,
                    }
                    for r in report.results
                ],
                "skipped": report.skipped,
                "calibration": str(written) if written else None,
            }
        )
        return
    from rich.table import Table

    out = console()
    d = report.device
    out.print(
        f"[bold]{d.name}[/] ({d.kind}{', ' + d.gpu + ' datasheet' if d.gpu else ', no datasheet peaks'}), "
        f"torch {d.torch_version}"
        + (" — quick sizes: checks the code, not the hardware" if report.quick else "")
    )
    table = Table()
    for col in ("benchmark", "measured", "unit", "datasheet", "ratio", "how"):
        table.add_column(
            col,
            justify="right" if col in ("measured", "datasheet", "ratio") else "left",
            no_wrap=col == "benchmark",
        )
    for r in report.results:
        table.add_row(
            r.name,
            number(r.value, ",.3g" if r.value < 100 else ",.0f"),
            r.unit,
            number(r.peak, ",.4g"),
            "—" if r.ratio is None else f"{r.ratio:.1%}",
            r.note,
        )
    out.print(table)
    for s in report.skipped:
        out.print(f"[dim]skipped {s.name}: {s.reason}[/]")
    if written:
        out.print(f"calibration written to {written}")
