"""``gpuwise catalog update``: bring fresher offers into the user's catalog store, safely.

The new rows are read and validated in full before anything is written; the store is written
to a temporary file, fsynced and renamed; the previous store is kept as ``offers.prev.csv``.
The manifest records the SHA-256 of what gpuwise wrote: if the store no longer matches it, the
user edited the file, and the update refuses unless ``force`` (which backs the edited file up).

Every update holds an exclusive lock on ``<store folder>/.lock`` from reading the store to writing
it, so two updates at once run one after the other and neither loses the other's rows. A fetch
that would leave a cloud with less than three quarters of the rows its last fetch from the same
source gave is refused (a truncated or broken upstream file) unless ``allow_shrink``. The manifest
keeps a ``history`` of fetches (source, version, as-of, counts, skipped rows).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gpuwise.base.paths import write_text_atomic
from gpuwise.catalog.offer import Offer, offers_to_csv
from gpuwise.catalog.sources import CatalogSource, default_sources, layer_sources, store_path
from gpuwise.errors import CatalogError

if TYPE_CHECKING:
    from gpuwise.catalog.remote_common import Fetched


@dataclass(frozen=True)
class CloudDiff:
    cloud: str
    added: int
    changed: int
    dropped: int
    unchanged: int


@dataclass(frozen=True)
class UpdateReport:
    store: Path
    previous_copy: Path | None
    edited_backup: Path | None
    offers_written: int
    clouds: tuple[CloudDiff, ...]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest_path(store: Path) -> Path:
    return store.with_name("manifest.json")


def diff_offers(
    before: Sequence[Offer], after: Sequence[Offer], clouds: Sequence[str]
) -> list[CloudDiff]:
    """Per cloud: offers added, changed (any price or spec), dropped and unchanged."""
    result = []
    for cloud in clouds:
        old = {o.key: o for o in before if o.cloud == cloud}
        new = {o.key: o for o in after if o.cloud == cloud}
        changed = sum(
            1
            for k in new.keys() & old.keys()
            if (new[k].on_demand_usd_per_hour, new[k].spot_usd_per_hour, new[k].gpu_memory_gib)
            != (old[k].on_demand_usd_per_hour, old[k].spot_usd_per_hour, old[k].gpu_memory_gib)
        )
        common = len(new.keys() & old.keys())
        result.append(
            CloudDiff(
                cloud,
                len(new.keys() - old.keys()),
                changed,
                len(old.keys() - new.keys()),
                common - changed,
            )
        )
    return result


def user_edited(store: Path) -> bool:
    """True when the store exists and differs from what gpuwise last wrote."""
    if not store.is_file():
        return False
    manifest = _manifest_path(store)
    try:
        recorded = json.loads(manifest.read_text("utf-8")).get("sha256")
    except (OSError, ValueError):
        return True  # a store without a readable manifest was not written by us
    return bool(recorded != _sha256(store))


UpdateMode = Literal["replace", "merge"]

LOCK_TIMEOUT_S = 600.0
"""How long an update waits for another one to finish (``GPUWISE_CATALOG_LOCK_TIMEOUT_S``)."""
HISTORY_LIMIT = 500
"""Fetch records kept in the manifest's ``history`` (oldest dropped first)."""
SHRINK_MIN_ROWS = 20
"""The row-count check applies once a cloud's last fetch gave at least this many offers."""
SHRINK_KEEP = 0.75
"""A fetch that keeps less than this share of a cloud's offers since the last fetch of the same
source is refused (a body cut at a line end loses whole rows and still parses)."""


@contextlib.contextmanager
def store_lock(store: Path) -> Iterator[None]:
    """Hold the store folder's update lock (``fcntl.flock``; released when the process ends)."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; updates are not serialized there
        yield
        return
    _check_store_writable(store)
    from gpuwise.base import settings

    limit = settings.number("GPUWISE_CATALOG_LOCK_TIMEOUT_S", LOCK_TIMEOUT_S)
    path = store.parent / ".lock"
    with open(path, "a+b") as fh:
        start = time.monotonic()
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - start > limit:
                    raise CatalogError(
                        f"another `gpuwise catalog update` has held {path} for over {limit:g} s",
                        hint="wait for it to finish, or end it if it is stuck",
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _check_store_writable(store: Path) -> None:
    """CatalogError (one line) when the store folder cannot be created or written."""
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CatalogError(
            f"cannot write the catalog store {store.parent} ({exc.strerror or exc})",
            hint="make that folder writable, or point GPUWISE_HOME at a writable folder",
        ) from None
    if not os.access(store.parent, os.W_OK) or (store.exists() and not os.access(store, os.W_OK)):
        raise CatalogError(
            f"cannot write the catalog store {store} (permission denied)",
            hint="make that folder writable, or point GPUWISE_HOME at a writable folder",
        )


def _write(path: Path, text: str) -> None:
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise CatalogError(
            f"cannot write {path} ({exc.strerror or exc})",
            hint="make the catalog store folder writable (nothing was changed there)",
        ) from None


def _store_offers(store: Path) -> list[Offer]:
    return (
        list(layer_sources([_StoreReader(store)], per_cloud=False).offers)
        if store.is_file()
        else []
    )


def _merge_offers(
    new_offers: Sequence[Offer],
    before: Sequence[Offer],
    store_rows: Sequence[Offer],
    mode: UpdateMode,
) -> list[Offer]:
    """The store's rows after an import: ``replace`` swaps whole clouds; ``merge`` updates rows by key
    on top of the catalog in effect for those clouds (bundled or SkyPilot rows included)."""
    clouds = {o.cloud for o in new_offers}
    kept = [o for o in store_rows if o.cloud not in clouds]
    if mode == "merge":
        new_keys = {o.key for o in new_offers}
        kept += [o for o in before if o.cloud in clouds and o.key not in new_keys]
    return kept + list(new_offers)


def update_store(
    source: CatalogSource,
    *,
    force: bool = False,
    dry_run: bool = False,
    mode: UpdateMode = "replace",
) -> UpdateReport:
    """Import ``source``'s offers: ``replace`` the store's rows for its clouds, or ``merge`` them by key."""
    _refuse_cut_short(source)
    new_offers, location, _ = source.read()  # raises on any bad row: nothing is written
    if not new_offers:
        raise CatalogError(
            f"{location}: no offers to import", hint="check the file has GPU rows with prices"
        )
    store = store_path()
    with contextlib.nullcontext() if dry_run else store_lock(store):  # a dry run writes nothing
        return _update_locked(store, new_offers, location, force, dry_run, mode)


def _refuse_cut_short(source: CatalogSource) -> None:
    """A file to import that ends mid-line (no final newline) was cut short: refuse it, naming it.
    (Read commands stay lenient; only an update, which replaces rows, insists.)"""
    from gpuwise.catalog.sources import CsvFile, SkyPilotDir

    paths = (
        [source.path]
        if isinstance(source, CsvFile)
        else [p for _, p in source.files()]
        if isinstance(source, SkyPilotDir)
        else []
    )
    for path in paths:
        if path.suffix == ".gz" or not path.is_file() or path.stat().st_size == 0:
            continue
        with open(path, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                raise CatalogError(
                    f"{path}: the file ends mid-line (no final newline): it was cut short",
                    hint="copy or download it again; if it is complete, add a newline at the end",
                )


def _update_locked(
    store: Path,
    new_offers: Sequence[Offer],
    location: str,
    force: bool,
    dry_run: bool,
    mode: UpdateMode,
) -> UpdateReport:
    clouds = sorted({o.cloud for o in new_offers})
    before = layer_sources(default_sources(), per_cloud=True).offers
    edited = _refuse_edited(store, force)
    merged = _merge_offers(new_offers, before, [] if edited else _store_offers(store), mode)
    report_clouds = tuple(diff_offers(before, merged, clouds))
    if dry_run:
        return UpdateReport(store, None, None, len(merged), report_clouds)
    previous, backup = _write_offers_store(store, merged, edited, {c: location for c in clouds})
    return UpdateReport(store, previous, backup, len(merged), report_clouds)


def _refuse_edited(store: Path, force: bool) -> bool:
    edited = user_edited(store)
    if edited and not force:
        raise CatalogError(
            f"{store} was edited by hand since gpuwise wrote it",
            hint="keep your edits with `gpuwise catalog update --from-csv` of your own file, "
            "or pass --force to back the edited file up and replace it",
        )
    return edited


def read_manifest(store: Path | None = None) -> dict[str, Any]:
    """The store's manifest (``{}`` when absent or unreadable)."""
    path = _manifest_path(store or store_path())
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_offers_store(
    store: Path,
    merged: Sequence[Offer],
    edited: bool,
    clouds: dict[str, str],
    sources: dict[str, Any] | None = None,
    extra_files: dict[str, str] | None = None,
    write_offers: bool = True,
    history: Sequence[dict[str, Any]] = (),
) -> tuple[Path | None, Path | None]:
    """Write the offers (and any extra files) atomically, keeping previous copies; then the manifest."""
    _check_store_writable(store)
    old = read_manifest(store)
    previous = backup = None
    try:
        if store.is_file() and write_offers:
            if edited:
                stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
                backup = store.with_name(f"offers.user-edited.{stamp}.csv")
                shutil.copy2(store, backup)
            previous = store.with_name("offers.prev.csv")
            shutil.copy2(store, previous)
        for name in extra_files or {}:
            path = store.with_name(name)
            if path.is_file():
                shutil.copy2(path, path.with_name(path.stem + ".prev.csv"))
    except OSError as exc:
        raise CatalogError(
            f"cannot keep a copy of the catalog store in {store.parent} ({exc.strerror or exc})",
            hint="make that folder writable; nothing was changed",
        ) from None
    texts = {store.with_name(n): t for n, t in (extra_files or {}).items()}
    # no empty offers file (a header only is not a catalog); a fetch of bands/prices only leaves it alone
    if write_offers and (merged or store.is_file()):
        texts[store] = offers_to_csv(merged)
    for path, text in texts.items():
        _write(path, text)
    if store in texts:  # the parsed copy, so the next command need not parse the new store
        from gpuwise.catalog.cache import parse_offer_bytes

        with contextlib.suppress(CatalogError, OSError):
            parse_offer_bytes(store.read_bytes(), str(store), "store")
    sha = (_sha256(store) if store.is_file() else None) if write_offers else old.get("sha256")
    _write(
        _manifest_path(store),
        json.dumps(
            {
                "sha256": sha,
                "written_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "clouds": {**(old.get("clouds") or {}), **clouds},
                "sources": {**(old.get("sources") or {}), **(sources or {})},
                "history": [*(old.get("history") or []), *history][-HISTORY_LIMIT:],
            },
            indent=2,
        )
        + "\n",
    )
    return previous, backup


@dataclass(frozen=True)
class SourceReport:
    """What one ``--fetch`` source brought."""

    source: str
    url: str
    version: str
    as_of: str
    clouds: tuple[CloudDiff, ...]
    spot_risks: int
    reserved_prices: int
    notes: tuple[str, ...]
    skipped: dict[str, int]
    """Rows not imported because they are not GPU offers, by reason."""
    refused: dict[str, int] = dataclasses.field(default_factory=dict)
    """Rows refused one by one (odd or hostile values), by reason with examples."""


@dataclass(frozen=True)
class FetchOutcome:
    """The whole run: what was (or, with ``--dry-run``, would be) written, and what was refused."""

    report: UpdateReport
    sources: tuple[SourceReport, ...]
    refused: tuple[tuple[str, CatalogError], ...]
    """(source, why) for each source a guard refused; nothing of it was imported."""


def check_no_collapse(res: Fetched, store_rows: Sequence[Offer]) -> None:
    """Refuse offers that leave a cloud with under ``SHRINK_KEEP`` of the rows the last fetch of the
    same source gave it (a truncated or broken upstream file), once that fetch gave
    ``SHRINK_MIN_ROWS`` or more."""
    for cloud in res.offer_clouds:
        prev = sum(
            1 for o in store_rows if o.cloud == cloud and o.source.startswith(res.source + ":")
        )
        new = sum(1 for o in res.offers if o.cloud == cloud)
        if prev >= SHRINK_MIN_ROWS and new < prev * SHRINK_KEEP:
            raise CatalogError(
                f"{res.source}: {cloud} would shrink from {prev} offers (last fetch) to {new}; "
                "refused as a likely truncated or broken upstream file",
                hint="try again later; if the provider really dropped them, pass --allow-shrink",
            )


def apply_fetched(
    results: Sequence[Fetched],
    *,
    force: bool = False,
    dry_run: bool = False,
    allow_shrink: bool = False,
    allow_price_jump: bool = False,
    failed: Sequence[tuple[str, str]] = (),
) -> FetchOutcome:
    """Write everything the sources returned, all validated already, as one atomic update under the
    store lock. Offers merge by the per-cloud precedence (:mod:`gpuwise.catalog.merge`); spot bands
    and reserved prices replace the rows of the clouds they cover. A source that a guard refuses
    (its own rows collapsing, a cloud shrinking across sources, a 100× price move) imports nothing
    and is listed in :attr:`FetchOutcome.refused`; the others still import. ``dry_run`` runs the
    same steps and writes nothing, so its totals are the real run's. ``failed`` (source, why) are
    the sources that could not be fetched: recorded in the fetch history next to the refused ones
    when anything is written."""
    store = store_path()
    lock = contextlib.nullcontext() if dry_run else store_lock(store)
    with lock:
        return _apply_locked(store, results, force, dry_run, allow_shrink, allow_price_jump, failed)


def _apply_locked(
    store: Path,
    results: Sequence[Fetched],
    force: bool,
    dry_run: bool,
    allow_shrink: bool,
    allow_price_jump: bool,
    failed: Sequence[tuple[str, str]] = (),
) -> FetchOutcome:
    from gpuwise.catalog import merge
    from gpuwise.catalog.risk import (
        RESERVED_FILE,
        SPOT_RISK_FILE,
        load_reserved_prices,
        load_spot_risks,
        reserved_to_csv,
        spot_risks_to_csv,
    )

    before = layer_sources(default_sources(), per_cloud=True).offers
    edited = _refuse_edited(store, force) if any(r.offers for r in results) else False
    offers = [] if edited else _store_offers(store)
    rank = merge.rank_for(merge.precedence())
    risks = load_spot_risks(store.parent)
    reserved = load_reserved_prices(store.parent)
    reports: list[SourceReport] = []
    refused: list[tuple[str, CatalogError]] = []
    applied: list[Fetched] = []
    clouds: dict[str, str] = {}
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    manifest_sources: dict[str, Any] = {}
    history: list[dict[str, Any]] = []
    for res in results:
        notes = res.notes
        if res.offers:
            try:
                if not allow_shrink:
                    check_no_collapse(res, offers)
                merged = merge.merge_source(offers, res.offers, res.source, res.offer_clouds, rank)
                if not allow_shrink:
                    merge.check_cloud_shrink(
                        res.source, res.offer_clouds, offers, merged.rows, before
                    )
                if not allow_price_jump:
                    merge.check_price_jumps(res.source, res.offers, offers, before)
            except CatalogError as exc:
                refused.append((res.source, exc))
                continue
            notes = (
                *notes,
                *merged.notes,
                *merge.superseded_notes(res.offer_clouds, offers, before),
            )
            offers = merged.rows
            clouds.update({c: f"{res.source} {res.url}" for c in res.offer_clouds})
        applied.append(res)
        if res.spot_risks:
            covered = {r.cloud for r in res.spot_risks}
            risks = [r for r in risks if r.cloud not in covered] + list(res.spot_risks)
        if res.reserved:
            covered = {r.cloud for r in res.reserved}
            reserved = [r for r in reserved if r.cloud not in covered] + list(res.reserved)
        diffs = tuple(diff_offers(before, offers, sorted({o.cloud for o in res.offers})))
        skipped, refused_rows = dict(res.skipped), dict(res.refused)
        reports.append(
            SourceReport(
                res.source,
                res.url,
                res.version,
                res.as_of,
                diffs,
                len(res.spot_risks),
                len(res.reserved),
                notes,
                skipped,
                refused_rows,
            )
        )
        record = {
            "url": res.url,
            "version": res.version,
            "as_of": res.as_of,
            "fetched_at": now,
            "offers": len(res.offers),
            "clouds": list(res.offer_clouds),
            "spot_risks": len(res.spot_risks),
            "reserved_prices": len(res.reserved),
            "skipped": skipped,
            "refused_rows": refused_rows,
            "notes": list(notes),
        }
        manifest_sources[res.source] = record
        history.append({"source": res.source, **record})
    if dry_run or not applied:
        report = UpdateReport(store, None, None, len(offers), ())
        return FetchOutcome(report, tuple(reports), tuple(refused))
    history += [
        {"source": name, "fetched_at": now, "refused": why}
        for name, why in [*failed, *((n, e.one_line()) for n, e in refused)]
    ]
    extra = {}
    if any(r.spot_risks for r in applied):
        extra[SPOT_RISK_FILE] = spot_risks_to_csv(risks)
    if any(r.reserved for r in applied):
        extra[RESERVED_FILE] = reserved_to_csv(reserved)
    previous, backup = _write_offers_store(
        store,
        offers,
        edited,
        clouds,
        manifest_sources,
        extra,
        write_offers=any(r.offers for r in applied),
        history=history,
    )
    report = UpdateReport(store, previous, backup, len(offers), ())
    return FetchOutcome(report, tuple(reports), tuple(refused))


@dataclass(frozen=True)
class _StoreReader:
    path: Path
    kind: str = "store"

    def read(self) -> tuple[list[Offer], str, str]:
        from gpuwise.catalog.offer import parse_offer_csv
        from gpuwise.catalog.sources import read_text_file

        return parse_offer_csv(read_text_file(self.path), str(self.path)), str(self.path), "store"
