"""``gpuwise catalog``: which price sources are in use, and updating them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuwise.cli._output import JsonFlag, console, emit_json, make_table

app = typer.Typer(help="Price catalog: sources in use, and updates.", no_args_is_help=True)


@app.command("info")
def info(json: JsonFlag = False) -> None:
    """Sources in use, their dates, age and row counts, and the clouds each supplies."""
    import datetime as dt

    from gpuwise.catalog import load_catalog, parse_as_of, read_manifest, store_path, user_edited

    cat = load_catalog()
    today = dt.date.today()

    def age_days(as_of: str) -> int | None:
        d = parse_as_of(as_of)
        return None if d is None else max(0, (today - d).days)

    manifest = read_manifest()
    history = [h for h in manifest.get("history") or [] if isinstance(h, dict)]
    fetched = [
        {"source": name, **entry, "age_days": age_days(str(entry.get("as_of", "")))}
        for name, entry in sorted((manifest.get("sources") or {}).items())
        if isinstance(entry, dict)
    ]
    data = {
        "offers": len(cat.offers),
        "clouds": cat.clouds,
        "layers": [
            layer.__dict__ | {"clouds": list(layer.clouds), "age_days": age_days(layer.as_of)}
            for layer in cat.layers
        ],
        "fetched": fetched,
        "history": history,
        "store": str(store_path()),
        "store_edited_by_user": user_edited(store_path()),
    }
    if json:
        emit_json(data)
        return

    def age(days: int | None) -> str:
        return "?" if days is None else f"{days} d"

    columns = ("source", "as of", "age", "clouds", "offers", "location")
    table = make_table(
        columns,
        title=f"Catalog: {len(cat.offers)} offers from {', '.join(cat.clouds)}",
        left=columns,
    )
    for layer in cat.layers:
        table.add_row(
            layer.kind,
            layer.as_of,
            age(age_days(layer.as_of)),
            ", ".join(layer.clouds) or layer.note,
            str(layer.rows),
            layer.location,
        )
    out = console()
    out.print(table)
    out.print(
        "[dim]Per cloud, a later source replaces an earlier one: store > SkyPilot folder > bundled.[/dim]"
    )
    if fetched:
        cols = (
            "fetched source",
            "as of",
            "age",
            "version",
            "offers",
            "spot bands",
            "reserved",
            "fetched at",
        )
        t = make_table(
            cols,
            title="Fetched into the store (`catalog update --fetch`)",
            left=("fetched source", "as of", "version", "fetched at"),
        )
        for f in fetched:
            t.add_row(
                f["source"],
                str(f.get("as_of")),
                age(f["age_days"]),
                str(f.get("version", ""))[:40],
                str(f.get("offers", 0)),
                str(f.get("spot_risks", 0)),
                str(f.get("reserved_prices", 0)),
                str(f.get("fetched_at", "")),
            )
        out.print(t)
    if history:
        _print_history(history[-HISTORY_SHOWN:], len(history))


HISTORY_SHOWN = 10
"""Fetches `catalog info` lists as text (``--json`` gives the whole history)."""


def _print_history(rows: Sequence[dict[str, Any]], total: int) -> None:
    cols = ("fetched at", "source", "as of", "version", "offers", "bands", "reserved", "skipped")
    t = make_table(
        cols,
        title=f"Fetch history (last {len(rows)} of {total}; all with --json)",
        left=("fetched at", "source", "as of", "version"),
    )
    for h in rows:
        skipped = h.get("skipped") or {}
        t.add_row(
            str(h.get("fetched_at", "")),
            str(h.get("source", "")),
            str(h.get("as_of", "")),
            str(h.get("version", ""))[:40],
            str(h.get("offers", 0)),
            str(h.get("spot_risks", 0)),
            str(h.get("reserved_prices", 0)),
            f"{sum(skipped.values())} skipped" if isinstance(skipped, dict) and skipped else "",
        )
    console().print(t)


@app.command("update")
def update(
    sources: Annotated[
        list[str] | None,
        typer.Argument(
            help="With --fetch: sources to fetch (skypilot, aws-spot-advisor, azure-prices, aws-price-list, "
            "gpuhunt); default: all but gpuhunt.",
            show_default=False,
        ),
    ] = None,
    fetch: Annotated[
        bool,
        typer.Option(
            "--fetch",
            help="Download from maintained public price sources "
            "(the only command that uses the network).",
        ),
    ] = False,
    from_skypilot: Annotated[
        str | None,
        typer.Option(
            "--from-skypilot",
            help="SkyPilot catalog folder; without a value, ~/.sky/catalogs.",
            metavar="[DIR]",
        ),
    ] = None,
    from_csv: Annotated[
        Path | None,
        typer.Option(
            "--from-csv",
            help="A CSV in gpuwise's or SkyPilot's schema; "
            "its rows are merged into the catalog by key.",
        ),
    ] = None,
    replace: Annotated[
        bool,
        typer.Option(
            "--replace",
            help="With --from-csv: replace every offer of the clouds "
            "in the file instead of merging.",
        ),
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Replace a store you edited by hand (it is backed up).")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report the changes without writing.")
    ] = False,
    allow_shrink: Annotated[
        bool,
        typer.Option(
            "--allow-shrink",
            help="With --fetch: accept a cloud losing over a quarter of its offers since the last fetch "
            "(refused by default as a likely truncated upstream file).",
        ),
    ] = False,
    include_sovereign_regions: Annotated[
        bool,
        typer.Option(
            "--include-sovereign-regions",
            help="With --fetch: keep government/sovereign regions (AWS GovCloud and China, Azure "
            "Government and China), left out by default.",
        ),
    ] = False,
    json: JsonFlag = False,
) -> None:
    """Import fresher offers into your catalog store; reports rows added, changed and dropped.

    A file with any bad row (a $0, negative or NaN price, a missing column, a wrong type) is refused
    as a whole, naming the first bad row: nothing is imported.
    """
    from gpuwise.base.paths import skypilot_catalog_root
    from gpuwise.catalog import CsvFile, SkyPilotDir, UpdateMode, source_for_path, update_store
    from gpuwise.errors import InputError

    if sources and not fetch:
        raise InputError(
            f"unexpected argument(s) {' '.join(sources)}",
            hint=f"source names go with --fetch: `gpuwise catalog update --fetch {' '.join(sources)}`",
        )
    given = sum((fetch, from_skypilot is not None, from_csv is not None))
    if given != 1:
        raise InputError(
            "give exactly one of --fetch [SOURCE...], --from-skypilot [DIR] or --from-csv FILE",
            hint="e.g. `gpuwise catalog update --fetch` or `--from-skypilot ~/.sky/catalogs`",
        )
    if replace and from_csv is None:
        raise InputError("--replace goes with --from-csv", hint="drop --replace")
    if fetch:
        _fetch(
            sources or [],
            force=force,
            dry_run=dry_run,
            json=json,
            allow_shrink=allow_shrink,
            sovereign=include_sovereign_regions,
        )
        return
    if from_csv is not None:
        if from_csv.is_dir():
            raise InputError(
                f"{from_csv} is a folder", hint="use --from-skypilot for a SkyPilot catalog folder"
            )
        if not from_csv.exists():  # the library's own hint names --catalog
            raise InputError(f"{from_csv}: no such file", hint="check the --from-csv path")
        source = source_for_path(from_csv)
        if not isinstance(source, CsvFile):
            raise InputError(
                f"{from_csv} is a folder", hint="use --from-skypilot for a SkyPilot catalog folder"
            )
    else:
        root = skypilot_catalog_root() if from_skypilot == "default" else Path(str(from_skypilot))
        if root is None:
            raise InputError("no SkyPilot catalog folder given", hint="pass --from-skypilot DIR")
        if not root.exists():
            raise InputError(f"{root}: no such folder", hint="check the --from-skypilot path")
        source = source_for_path(root)
        if not isinstance(source, SkyPilotDir):
            raise InputError(f"{root} is a file", hint="use --from-csv for a single CSV file")
    mode: UpdateMode = "merge" if from_csv is not None and not replace else "replace"
    report = update_store(source, force=force, dry_run=dry_run, mode=mode)
    if json:
        emit_json({"dry_run": dry_run, "mode": mode, **report.__dict__})
        return
    out = console()
    verb = "Would write" if dry_run else "Wrote"
    out.print(f"{verb} {report.offers_written} offers to {report.store} ({mode})")
    _print_diffs(report.clouds)
    if report.previous_copy:
        out.print(f"Previous store kept as {report.previous_copy}")
    if report.edited_backup:
        out.print(f"Your edited file was backed up to {report.edited_backup}")


def _print_diffs(diffs: Sequence[Any], indent: str = "  ") -> None:
    out = console()
    for d in diffs:
        out.print(
            f"{indent}{d.cloud}: +{d.added} added, ~{d.changed} changed, -{d.dropped} dropped, "
            f"{d.unchanged} unchanged"
        )


def _fetch(
    names: list[str],
    *,
    force: bool,
    dry_run: bool,
    json: bool,
    allow_shrink: bool = False,
    sovereign: bool = False,
) -> None:
    """Fetch each named source, then write what it brought (one atomic update per source). A source
    that fails changes nothing; the others still import; the exit status is 2 when any failed."""
    import time

    from gpuwise.catalog import (
        DEFAULT_FETCH,
        FetchSettings,
        apply_fetched,
        drop_sovereign,
        fetch_bytes,
        load_catalog,
        remote_sources,
    )
    from gpuwise.errors import CatalogError, GpuwiseError

    sources = remote_sources(names or DEFAULT_FETCH)
    settings = FetchSettings.from_env()
    run_deadline = time.monotonic() + _run_deadline_s()
    known = list(load_catalog().offers)
    reports: list[Any] = []
    failures: list[tuple[str, GpuwiseError]] = []
    report = None
    for src in sources:
        try:
            res = src.fetch(
                lambda url: fetch_bytes(url, settings, run_deadline=run_deadline), known
            )
            if not sovereign:
                res = drop_sovereign(res)
            report, per_source = apply_fetched(
                [res], force=force, dry_run=dry_run, allow_shrink=allow_shrink
            )
        except CatalogError as exc:
            failures.append((src.name, exc))
            continue
        reports += per_source
        known = [o for o in known if o.cloud not in res.offer_clouds] + list(res.offers)
    if json:
        emit_json(
            {
                "dry_run": dry_run,
                "store": report.store if report else None,
                "previous_copy": report.previous_copy if report else None,
                "offers_written": report.offers_written if report else None,
                "sources": reports,
                "failed": [
                    {"source": name, "error": err.message, "hint": err.hint}
                    for name, err in failures
                ],
            }
        )
    else:
        _print_fetch(report, reports, dry_run)
    if failures:
        import sys

        for name, err in failures:
            print(f"error: {name}: {' '.join(err.one_line().split())}", file=sys.stderr)
        raise typer.Exit(2)


def _run_deadline_s() -> float:
    from gpuwise.base import settings

    return settings.number("GPUWISE_FETCH_RUN_DEADLINE_S", 1800.0)


def _print_fetch(report: Any, per_source: Sequence[Any], dry_run: bool) -> None:
    out = console()
    if report is not None:
        out.print(
            f"{'Would write' if dry_run else 'Wrote'} {report.offers_written} offers to {report.store}"
        )
    for s in per_source:
        out.print(
            f"{s.source} (prices as of {s.as_of}, version {s.version[:60]}): "
            f"{len(s.clouds)} cloud(s), {s.spot_risks} spot bands, {s.reserved_prices} reserved prices"
        )
        _print_diffs(s.clouds, "    ")
        for reason, rows in s.skipped.items():
            out.print(f"    [dim]skipped {rows} row(s): {reason}[/dim]")
        for note in s.notes:
            out.print(f"    [dim]{note}[/dim]")
    if report is not None and report.previous_copy:
        out.print(f"Previous store kept as {report.previous_copy}")
