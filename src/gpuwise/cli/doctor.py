"""``gpuwise doctor``: environment diagnosis with fixes.

Exit codes: 0 when no check failed (warnings and skips included), 3 when at least one check
failed, 2 for bad input, 1 for an internal error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuwise.cli._output import JsonFlag, console, emit_json, split_list

EXIT_CHECK_FAILED = 3

_MARK = {
    "ok": "[green]ok[/]",
    "warn": "[yellow]warn[/]",
    "fail": "[bold red]FAIL[/]",
    "skip": "[dim]skip[/]",
}


def doctor(
    num_workers: Annotated[
        int,
        typer.Option(
            "--num-workers",
            help="DataLoader num_workers per training process (for the shm and CPU checks).",
        ),
    ] = 8,
    checkpoint_dir: Annotated[
        Path,
        typer.Option(
            "--checkpoint-dir",
            file_okay=False,
            help="Folder where checkpoints go (free-disk check).",
        ),
    ] = Path("."),
    shm_per_worker_mib: Annotated[
        float,
        typer.Option(
            "--shm-per-worker-mib",
            help="/dev/shm each DataLoader worker may use (a rule of thumb; raise for big batches).",
        ),
    ] = 512.0,
    min_free_disk_gib: Annotated[
        float,
        typer.Option("--min-free-disk-gib", help="Fail the disk check below this much free space."),
    ] = 20.0,
    min_free_memory_gib: Annotated[
        float,
        typer.Option(
            "--min-free-memory-gib", help="Fail the memory check below this much available RAM."
        ),
    ] = 4.0,
    only: Annotated[
        list[str] | None,
        typer.Option("--only", help="Run only these checks (comma-separated or repeated)."),
    ] = None,
    no_torch: Annotated[
        bool,
        typer.Option("--no-torch", help="Do not import torch (faster; skips the torch checks)."),
    ] = False,
    replay: Annotated[
        Path | None,
        typer.Option(
            "--replay",
            help="Diagnose a recorded machine: a folder with fs/, commands/ (e.g. 'nvidia-smi -q.txt') and facts.json.",
        ),
    ] = None,
    expect_gpu: Annotated[
        str | None,
        typer.Option(
            "--expect-gpu",
            help="The GPUs this machine should have, e.g. H100x8 (or H100 for any count): a missing "
            "or different GPU fails the gpu-expected check (exit 3).",
        ),
    ] = None,
    json: JsonFlag = False,
) -> None:
    """Diagnose the driver, CUDA, torch, NCCL, shared memory, disk, RAM and GPU health, each with its fix.

    Exit code 0 when nothing failed, 3 when a check failed.
    """
    from gpuwise.doctor import DoctorOptions, FixtureProbe, gpu_present, run_doctor, worst
    from gpuwise.errors import InputError

    options = DoctorOptions(
        num_workers=num_workers,
        checkpoint_dir=str(checkpoint_dir),
        shm_per_worker_mib=shm_per_worker_mib,
        min_free_disk_gib=min_free_disk_gib,
        min_free_memory_gib=min_free_memory_gib,
        with_torch=not no_torch,
        expect_gpu=expect_gpu,
    )
    probe = None
    if replay is None and not checkpoint_dir.is_dir():  # a typo, not a failed check of this machine
        raise InputError(
            f"--checkpoint-dir {checkpoint_dir}: no such folder",
            hint=f"create it (`mkdir -p {checkpoint_dir}`) or give the folder checkpoints go to",
        )
    if replay is not None:
        if not replay.is_dir():
            raise InputError(
                f"--replay {replay}: not a folder",
                hint="give a folder with fs/, commands/ and facts.json",
            )
        probe = FixtureProbe.from_dir(replay)
    results = run_doctor(probe, options, only=tuple(split_list(only)))
    overall = worst(results)
    counts = {s: sum(1 for r in results if r.status == s) for s in ("ok", "warn", "fail", "skip")}
    driver = next((r for r in results if r.name == "nvidia-driver"), None)
    has_gpu = driver.status != "skip" if driver is not None else gpu_present(probe)
    if json:
        emit_json(
            {
                "status": overall,
                "counts": counts,
                "gpu_present": has_gpu,
                "checks": [
                    {"name": r.name, "status": r.status, "finding": r.finding, "fix": r.fix}
                    for r in results
                ],
            }
        )
    else:
        from rich.table import Table
        from rich.text import Text

        out = console()
        if not has_gpu:
            out.print(
                "[bold]No NVIDIA GPU on this machine[/]: GPU checks are skipped; everything else is checked."
            )
        table = Table(show_lines=True)
        table.add_column("check")
        table.add_column("status")
        table.add_column("finding", overflow="fold")
        table.add_column("fix", overflow="fold")
        for r in results:  # plain text: "pip install 'gpuwise[train]'" is not rich markup
            table.add_row(r.name, _MARK[r.status], Text(r.finding), Text(r.fix))
        out.print(table)
        out.print(
            f"{counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail, {counts['skip']} skipped"
        )
    if overall == "fail":
        raise typer.Exit(EXIT_CHECK_FAILED)
