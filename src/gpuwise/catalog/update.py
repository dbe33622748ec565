"""``gpuwise catalog update``: bring fresher offers into the user's catalog store, safely.

The new rows are read and validated in full before anything is written; the store is written
to a temporary file, fsynced and renamed; the previous store is kept as ``offers.prev.csv``.
The manifest records the SHA-256 of what gpuwise wrote: if the store no longer matches it, the
user edited the file, and the update refuses unless ``force`` (which backs the edited file up).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuwise.catalog.offer import Offer, offers_to_csv
from gpuwise.catalog.sources import CatalogSource, default_sources, layer_sources, store_path
from gpuwise.errors import CatalogError
from gpuwise.paths import write_text_atomic


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


def diff_offers(before: Sequence[Offer], after: Sequence[Offer], clouds: Sequence[str]) -> list[CloudDiff]:
    """Per cloud: offers added, changed (any price or spec), dropped and unchanged."""
    result = []
    for cloud in clouds:
        old = {o.key: o for o in before if o.cloud == cloud}
        new = {o.key: o for o in after if o.cloud == cloud}
        changed = sum(1 for k in new.keys() & old.keys()
                      if (new[k].on_demand_usd_per_hour, new[k].spot_usd_per_hour, new[k].gpu_memory_gib)
                      != (old[k].on_demand_usd_per_hour, old[k].spot_usd_per_hour, old[k].gpu_memory_gib))
        common = len(new.keys() & old.keys())
        result.append(CloudDiff(cloud, len(new.keys() - old.keys()), changed, len(old.keys() - new.keys()),
                                common - changed))
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


def update_store(source: CatalogSource, *, force: bool = False, dry_run: bool = False) -> UpdateReport:
    """Replace the store's rows for the clouds ``source`` has; other clouds stay as they are."""
    new_offers, location, _ = source.read()  # raises on any bad row: nothing is written
    if not new_offers:
        raise CatalogError(f"{location}: no offers to import", hint="check the file has GPU rows with prices")
    clouds = sorted({o.cloud for o in new_offers})
    before = layer_sources(default_sources(), per_cloud=True).offers
    store = store_path()
    edited = user_edited(store)
    if edited and not force:
        raise CatalogError(f"{store} was edited by hand since gpuwise wrote it",
                           hint="keep your edits with `gpuwise catalog update --from-csv` of your own file, "
                           "or pass --force to back the edited file up and replace it")
    kept: list[Offer] = []
    if store.is_file() and not edited:
        kept = [o for o in layer_sources([_StoreReader(store)], per_cloud=False).offers if o.cloud not in clouds]
    merged = kept + new_offers
    report_clouds = tuple(diff_offers(before, merged, clouds))
    if dry_run:
        return UpdateReport(store, None, None, len(merged), report_clouds)
    store.parent.mkdir(parents=True, exist_ok=True)
    previous = backup = None
    if store.is_file():
        if edited:
            stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
            backup = store.with_name(f"offers.user-edited.{stamp}.csv")
            shutil.copy2(store, backup)
        previous = store.with_name("offers.prev.csv")
        shutil.copy2(store, previous)
    write_text_atomic(store, offers_to_csv(merged))
    write_text_atomic(_manifest_path(store), json.dumps({
        "sha256": _sha256(store),
        "written_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "clouds": {c: location for c in clouds},
    }, indent=2) + "\n")
    return UpdateReport(store, previous, backup, len(merged), report_clouds)


@dataclass(frozen=True)
class _StoreReader:
    path: Path
    kind: str = "store"

    def read(self) -> tuple[list[Offer], str, str]:
        from gpuwise.catalog.offer import parse_offer_csv
        from gpuwise.catalog.sources import read_text_file

        return parse_offer_csv(read_text_file(self.path), str(self.path)), str(self.path), "store"
