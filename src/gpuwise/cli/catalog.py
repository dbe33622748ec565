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


def _history_note(h: dict[str, Any]) -> str:
    """``12 skipped, 1 row(s) refused``, or ``source refused`` for a source that imported nothing."""
    if h.get("refused"):
        return "source refused"
    counts = [
        (h.get("skipped"), "skipped"),
        (h.get("refused_rows"), "row(s) refused"),
    ]
    return ", ".join(f"{sum(c.values())} {what}" for c, what in counts if isinstance(c, dict) and c)


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
        t.add_row(
            str(h.get("fetched_at", "")),
            str(h.get("source", "")),
            str(h.get("as_of", "")),
            str(h.get("version", ""))[:40],
            str(h.get("offers", 0)),
            str(h.get("spot_risks", 0)),
            str(h.get("reserved_prices", 0)),
            _history_note(h),
        )
    console().print(t)


@app.command("sources")
def sources_(json: JsonFlag = False) -> None:
    """The --fetch sources, and which one wins per cloud when two price the same instance type
    (set with GPUWISE_CATALOG_PRECEDENCE, e.g. `gcp=gpuhunt,skypilot`)."""
    from gpuwise.catalog import DEFAULT_FETCH, OFFER_SOURCES, REMOTE_SOURCES, precedence

    order = precedence()
    data = {
        "sources": [
            {"name": n, "default": n in DEFAULT_FETCH, "offers": n in OFFER_SOURCES}
            for n in REMOTE_SOURCES
        ],
        "precedence": {cloud: list(names) for cloud, names in sorted(order.items())},
    }
    if json:
        emit_json(data)
        return
    out = console()
    t = make_table(
        ("cloud", "wins first → last"),
        title="Offer precedence per cloud",
        left=("cloud", "wins first → last"),
    )
    for cloud, names in sorted(order.items(), key=lambda kv: (kv[0] == "*", kv[0])):
        t.add_row("every other cloud" if cloud == "*" else cloud, " > ".join(names))
    out.print(t)
    out.print(
        "[dim]A fetch replaces its own earlier rows only; another source's row for the same "
        "instance type and region gives way to a source ranked before it (counted in the notes). "
        "Rows of sources not listed (--from-csv) rank last. Change it with "
        "GPUWISE_CATALOG_PRECEDENCE, e.g. `gcp=gpuhunt,skypilot`.[/dim]"
    )
    out.print(
        "--fetch sources: "
        + ", ".join(
            f"{n}{'' if n in DEFAULT_FETCH else ' (not by default)'}" for n in REMOTE_SOURCES
        )
    )


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
    allow_price_jump: Annotated[
        bool,
        typer.Option(
            "--allow-price-jump",
            help="With --fetch: accept offers whose price moved 100x or more against the catalog "
            "in effect (refused by default as a likely unit or schema change upstream).",
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

    With --fetch the exit status is 0 when every source imported, 3 when some sources were refused
    and the store was updated from the rest, 2 when nothing could be imported.
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
            allow_price_jump=allow_price_jump,
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


EXIT_PARTIAL = 3
"""``catalog update --fetch``: some sources were refused, the store was updated from the rest."""
EXIT_NOTHING = 2
"""``catalog update --fetch``: nothing could be fetched or imported; the store is unchanged."""


def _fetch(
    names: list[str],
    *,
    force: bool,
    dry_run: bool,
    json: bool,
    allow_shrink: bool = False,
    sovereign: bool = False,
    allow_price_jump: bool = False,
) -> None:
    """Fetch and validate every named source (progress on stderr), then write what they brought as
    one atomic update. A refused source changes nothing and the others still import. Exit 0 when
    every source imported, 3 when some were refused and the store was updated from the rest, 2 when
    nothing could be imported."""
    import time

    from gpuwise.catalog import (
        DEFAULT_FETCH,
        FetchSettings,
        apply_fetched,
        drop_sovereign,
        fetch_bytes,
        remote_sources,
        screen_fields,
    )
    from gpuwise.errors import CatalogError, GpuwiseError

    sources = remote_sources(names or DEFAULT_FETCH)
    settings = FetchSettings.from_env()
    run_deadline = time.monotonic() + _run_deadline_s()
    known = _known_offers()
    results: list[Any] = []
    failures: list[tuple[str, GpuwiseError]] = []
    with _FetchProgress(len(sources)) as progress:
        for src in sources:
            progress.start(src.name)
            try:
                res = src.fetch(
                    lambda url: fetch_bytes(url, settings, run_deadline=run_deadline), known
                )
                res = screen_fields(res if sovereign else drop_sovereign(res))
            except CatalogError as exc:
                failures.append((src.name, exc))
                progress.done(src.name, "refused (error below)")
                continue
            results.append(res)
            progress.done(src.name, _brought(res))
            known = [o for o in known if o.cloud not in res.offer_clouds] + list(res.offers)
    outcome = None
    if results:
        outcome = apply_fetched(
            results,
            force=force,
            dry_run=dry_run,
            allow_shrink=allow_shrink,
            allow_price_jump=allow_price_jump,
            failed=[(name, err.one_line()) for name, err in failures],
        )
        failures += list(outcome.refused)
    report = outcome.report if outcome and outcome.sources else None
    reports = outcome.sources if outcome else ()
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
        partial = bool(reports)
        if len(sources) > 1:
            print(
                f"{len(failures)} of {len(sources)} source(s) refused; "
                + (
                    f"the store {'would be' if dry_run else 'was'} updated from the other "
                    f"{len(reports)} (exit {EXIT_PARTIAL})"
                    if partial
                    else f"nothing was imported, the store is unchanged (exit {EXIT_NOTHING})"
                ),
                file=sys.stderr,
            )
        raise typer.Exit(EXIT_PARTIAL if partial else EXIT_NOTHING)


def _known_offers() -> list[Any]:
    from gpuwise.catalog import load_catalog

    return list(load_catalog().offers)


def _brought(res: Any) -> str:
    parts = [
        f"{len(res.offers):,} offers" if res.offers else "",
        f"{len(res.spot_risks):,} spot bands" if res.spot_risks else "",
        f"{len(res.reserved):,} reserved prices" if res.reserved else "",
        f"{sum(n for _, n in res.refused):,} row(s) refused" if res.refused else "",
    ]
    return ", ".join(p for p in parts if p) or "nothing"


class _FetchProgress:
    """Progress of a ``--fetch`` run on stderr: a rich bar on a terminal, else one line per source
    (what a CronJob or systemd journal keeps)."""

    def __init__(self, total: int) -> None:
        import sys

        self.total = total
        self.n = 0
        self.started = 0.0
        self.bar: Any = None
        self.task: Any = None
        if sys.stderr.isatty():
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            from gpuwise.cli._output import console

            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TimeElapsedColumn(),
                console=console(stderr=True),
                transient=True,
            )

    def __enter__(self) -> _FetchProgress:
        if self.bar is not None:
            self.bar.start()
            self.task = self.bar.add_task("fetching", total=self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def start(self, name: str) -> None:
        import time

        self.n += 1
        self.started = time.monotonic()
        if self.bar is not None:
            self.bar.update(self.task, description=f"fetching {name}")

    def done(self, name: str, what: str) -> None:
        import sys
        import time

        line = (
            f"[{self.n}/{self.total}] {name}: {what} ({_seconds(time.monotonic() - self.started)})"
        )
        if self.bar is not None:
            self.bar.console.print(line, markup=False, highlight=False)
            self.bar.advance(self.task)
        else:
            print(line, file=sys.stderr, flush=True)


def _seconds(s: float) -> str:
    from gpuwise.catalog import seconds_text

    return seconds_text(s)


def _run_deadline_s() -> float:
    from gpuwise.base import settings

    return settings.number("GPUWISE_FETCH_RUN_DEADLINE_S", 1800.0)


def _print_fetch(report: Any, per_source: Sequence[Any], dry_run: bool) -> None:
    from rich.markup import escape

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
            out.print(f"    [dim]skipped {rows} row(s): {escape(reason)}[/dim]")
        for reason, rows in s.refused.items():
            out.print(f"    refused {rows} row(s): {escape(reason)}")
        for note in s.notes:
            out.print(f"    [dim]{escape(note)}[/dim]")
    if report is not None and report.previous_copy:
        out.print(f"Previous store kept as {report.previous_copy}")
