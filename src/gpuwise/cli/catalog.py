"""``gpuwise catalog``: which price sources are in use, and updating them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuwise.cli._output import JsonFlag, console, emit_json, make_table

app = typer.Typer(help="Price catalog: sources in use, and updates.", no_args_is_help=True)


@app.command("info")
def info(json: JsonFlag = False) -> None:
    """Sources in use, their dates and row counts, and the clouds each supplies."""
    from gpuwise.catalog import load_catalog
    from gpuwise.catalog.sources import store_path
    from gpuwise.catalog.update import user_edited

    cat = load_catalog()
    data = {
        "offers": len(cat.offers),
        "clouds": cat.clouds,
        "layers": [layer.__dict__ | {"clouds": list(layer.clouds)} for layer in cat.layers],
        "store": str(store_path()),
        "store_edited_by_user": user_edited(store_path()),
    }
    if json:
        emit_json(data)
        return
    columns = ("source", "as of", "clouds", "offers", "location")
    table = make_table(columns, title=f"Catalog: {len(cat.offers)} offers from {', '.join(cat.clouds)}", left=columns)
    for layer in cat.layers:
        table.add_row(layer.kind, layer.as_of, ", ".join(layer.clouds) or layer.note, str(layer.rows), layer.location)
    out = console()
    out.print(table)
    out.print("[dim]Per cloud, a later source replaces an earlier one: store > SkyPilot folder > bundled.[/dim]")


@app.command("update")
def update(
    from_skypilot: Annotated[
        str | None,
        typer.Option("--from-skypilot", help="SkyPilot catalog folder; without a value, ~/.sky/catalogs.",
                     metavar="[DIR]"),
    ] = None,
    from_csv: Annotated[Path | None, typer.Option("--from-csv", help="A CSV in gpuwise's or SkyPilot's schema.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a store you edited by hand (it is backed up).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report the changes without writing.")] = False,
    json: JsonFlag = False,
) -> None:
    """Import fresher offers into your catalog store; reports rows added, changed and dropped."""
    from gpuwise.catalog.sources import CsvFile, SkyPilotDir, source_for_path
    from gpuwise.catalog.update import update_store
    from gpuwise.errors import InputError
    from gpuwise.paths import skypilot_catalog_root

    if (from_skypilot is None) == (from_csv is None):
        raise InputError("give exactly one of --from-skypilot [DIR] or --from-csv FILE",
                         hint="e.g. `gpuwise catalog update --from-skypilot ~/.sky/catalogs`")
    if from_csv is not None:
        source = source_for_path(from_csv)
        if not isinstance(source, CsvFile):
            raise InputError(f"{from_csv} is a folder", hint="use --from-skypilot for a SkyPilot catalog folder")
    else:
        root = skypilot_catalog_root() if from_skypilot == "default" else Path(str(from_skypilot))
        if root is None:
            raise InputError("no SkyPilot catalog folder given", hint="pass --from-skypilot DIR")
        source = source_for_path(root)
        if not isinstance(source, SkyPilotDir):
            raise InputError(f"{root} is a file", hint="use --from-csv for a single CSV file")
    report = update_store(source, force=force, dry_run=dry_run)
    if json:
        emit_json({"dry_run": dry_run, **report.__dict__})
        return
    out = console()
    verb = "Would write" if dry_run else "Wrote"
    out.print(f"{verb} {report.offers_written} offers to {report.store}")
    for d in report.clouds:
        out.print(f"  {d.cloud}: +{d.added} added, ~{d.changed} changed, -{d.dropped} dropped, {d.unchanged} unchanged")
    if report.previous_copy:
        out.print(f"Previous store kept as {report.previous_copy}")
    if report.edited_backup:
        out.print(f"Your edited file was backed up to {report.edited_backup}")
