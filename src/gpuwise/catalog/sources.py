"""Where offers come from, and how the sources layer into one catalog.

Sources, each a :class:`CatalogSource`, registered in :data:`SOURCE_KINDS`:

- ``bundled``: the snapshot shipped in the package (``data/offers.csv.gz``, provenance in
  ``data/SOURCE.md``), built from SkyPilot catalog rows by ``scripts/build_snapshot.py``;
- ``skypilot``: the user's own SkyPilot catalog (``~/.sky/catalogs/<version>/<cloud>/vms.csv``),
  fresher prices for free when SkyPilot is installed;
- ``store``: the user's catalog written by ``gpuwise catalog update``;
- ``file``: a CSV or SkyPilot catalog folder named on the command line (``--catalog``).

Without ``--catalog``, layers apply per cloud: the store beats SkyPilot's folder, which beats
the bundled snapshot. With ``--catalog``, only the named files are used.
"""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Protocol

from gpuwise.base import settings
from gpuwise.base.paths import data_dir, skypilot_catalog_root
from gpuwise.catalog.cache import decode_text, parse_offer_bytes
from gpuwise.catalog.offer import Offer, parse_offer_csv
from gpuwise.catalog.skypilot import read_vms_csv
from gpuwise.errors import CatalogError

BUNDLED_MANIFEST = "data/manifest.json"
BUNDLED_OFFERS = "data/offers.csv.gz"


@dataclass(frozen=True)
class Layer:
    """One source's contribution to a catalog, for ``gpuwise catalog info``."""

    kind: str
    """``bundled``, ``skypilot``, ``store`` or ``file``."""
    location: str
    """Path (or package resource) it was read from."""
    as_of: str
    """Date of the prices, as the source states it."""
    clouds: tuple[str, ...]
    """Clouds this layer supplies in the final catalog."""
    rows: int
    """Offers this layer supplies in the final catalog."""
    note: str = ""


@dataclass(frozen=True)
class Catalog:
    """Offers from one or more sources, with where each came from."""

    offers: tuple[Offer, ...]
    layers: tuple[Layer, ...] = field(default=())

    @property
    def clouds(self) -> list[str]:
        return sorted({o.cloud for o in self.offers})


class CatalogSource(Protocol):
    @property
    def kind(self) -> str:
        """``bundled``, ``skypilot``, ``store`` or ``file``."""
        ...

    def read(self) -> tuple[list[Offer], str, str]:
        """(offers, location, as_of)."""
        ...


def read_text_file(path: Path) -> str:
    """A text file, gunzipped when it ends in .gz; errors name the file."""
    return decode_text(read_file_bytes(path), str(path))


def read_file_bytes(path: Path) -> bytes:
    """A file's bytes, gunzipped when it ends in .gz; errors name the file."""
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
    except FileNotFoundError:
        raise CatalogError(f"{path}: no such file", hint="check the path") from None
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise CatalogError(
            f"{path}: cannot read ({exc})", hint="check the file and its permissions"
        ) from None
    return data


@dataclass(frozen=True)
class BundledSnapshot:
    """The price snapshot shipped inside the package."""

    kind: str = "bundled"

    location: str = "gpuwise/catalog/" + BUNDLED_OFFERS

    def manifest(self) -> tuple[set[str], str]:
        """(clouds the snapshot holds, as_of), from its manifest, without parsing the offers."""
        manifest = json.loads(
            resources.files("gpuwise.catalog").joinpath(BUNDLED_MANIFEST).read_text("utf-8")
        )
        return set(manifest["clouds"]), manifest["as_of"]

    def read(self) -> tuple[list[Offer], str, str]:
        pkg = resources.files("gpuwise.catalog")
        manifest = json.loads(pkg.joinpath(BUNDLED_MANIFEST).read_text("utf-8"))
        text = gzip.decompress(pkg.joinpath(BUNDLED_OFFERS).read_bytes()).decode("utf-8")
        return parse_offer_csv(text, "bundled snapshot"), self.location, manifest["as_of"]


def _version_key(name: str) -> int:
    m = re.fullmatch(r"v(\d+)", name)
    return int(m.group(1)) if m else -1


def newest_skypilot_version_dir(root: Path) -> Path | None:
    """``root/vN`` with the highest N that holds at least one ``<cloud>/vms.csv``."""
    if not root.is_dir():
        return None
    versions = sorted(
        (p for p in root.iterdir() if p.is_dir() and _version_key(p.name) >= 0),
        key=lambda p: _version_key(p.name),
        reverse=True,
    )
    for version in versions:
        if any(version.glob("*/vms.csv")):
            return version
    return None


@dataclass(frozen=True)
class SkyPilotDir:
    """A SkyPilot catalog folder: the root (``~/.sky/catalogs``), a version (``v8``) or one cloud."""

    path: Path
    kind: str = "skypilot"

    def files(self) -> list[tuple[str, Path]]:
        """(cloud, vms.csv) pairs found under the folder."""
        if (self.path / "vms.csv").is_file():
            return [(self.path.name.lower(), self.path / "vms.csv")]
        version = (
            self.path
            if any(self.path.glob("*/vms.csv"))
            else newest_skypilot_version_dir(self.path)
        )
        if version is None:
            return []
        return sorted((p.parent.name.lower(), p) for p in version.glob("*/vms.csv"))

    def read(self) -> tuple[list[Offer], str, str]:
        offers: list[Offer] = []
        dates = []
        for cloud, path in self.files():
            date = dt.date.fromtimestamp(path.stat().st_mtime).isoformat()
            dates.append(date)
            offers += read_vms_csv(
                read_text_file(path),
                cloud,
                str(path),
                as_of=date,
                source=f"skypilot:{path.parent.parent.name}/{cloud}",
            )
        return offers, str(self.path), max(dates, default="unknown")


def _sniff_cloud(path: Path) -> str:
    """Cloud name for a SkyPilot-schema CSV given as a file: ``aws.csv`` or ``.../aws/vms.csv``."""
    stem = path.name.removesuffix(".gz").removesuffix(".csv")
    return (path.parent.name if stem == "vms" else stem).lower()


@dataclass(frozen=True)
class CsvFile:
    """One CSV file, in gpuwise's schema or SkyPilot's (detected from the header)."""

    path: Path
    kind: str = "file"

    def read(self) -> tuple[list[Offer], str, str]:
        text = read_text_file(self.path)
        if not text.strip():
            raise CatalogError(
                f"{self.path}: empty file", hint="give a CSV with a header and offer rows"
            )
        header = next(csv.reader(io.StringIO(text)), [])
        if "InstanceType" in header:
            date = dt.date.fromtimestamp(self.path.stat().st_mtime).isoformat()
            offers = read_vms_csv(
                text,
                _sniff_cloud(self.path),
                str(self.path),
                as_of=date,
                source=f"file:{self.path.name}",
            )
            if not offers:
                raise CatalogError(
                    f"{self.path}: no accelerator offers", hint="the file has no priced GPU rows"
                )
            return offers, str(self.path), date
        offers = parse_offer_csv(text, str(self.path))
        return offers, str(self.path), max((o.as_of for o in offers), default="unknown")


def store_path() -> Path:
    """The user catalog written by ``gpuwise catalog update``: ``<data dir>/catalog/offers.csv``, or
    ``$GPUWISE_CATALOG_DIR/offers.csv`` (a store shared by a scheduled refresh and its readers,
    e.g. the exporter, without moving the rest of the data folder)."""
    shared = settings.path("GPUWISE_CATALOG_DIR")
    if shared is not None:
        return shared / "offers.csv"
    return data_dir() / "catalog" / "offers.csv"


@dataclass(frozen=True)
class UserStore:
    kind: str = "store"

    def read(self) -> tuple[list[Offer], str, str]:
        path = store_path()
        offers = parse_offer_bytes(read_file_bytes(path), str(path), "store")
        return offers, str(path), max((o.as_of for o in offers), default="unknown")


SOURCE_KINDS: dict[str, type] = {
    "bundled": BundledSnapshot,
    "skypilot": SkyPilotDir,
    "store": UserStore,
    "file": CsvFile,
}


def source_for_path(path: Path) -> CatalogSource:
    """A source for a ``--catalog`` argument: a folder is a SkyPilot catalog, a file a CSV."""
    path = path.expanduser()
    if path.is_dir():
        src = SkyPilotDir(path)
        if not src.files():
            raise CatalogError(
                f"{path}: no <cloud>/vms.csv under this folder",
                hint="point at ~/.sky/catalogs, a version folder like v8, or a CSV file",
            )
        return src
    if not path.exists():
        raise CatalogError(f"{path}: no such file or folder", hint="check the --catalog path")
    return CsvFile(path)


def default_sources() -> list[CatalogSource]:
    """Bundled, then SkyPilot's folder if present, then the user store if present (later wins per cloud)."""
    sources: list[CatalogSource] = [BundledSnapshot()]
    root = skypilot_catalog_root()
    if root is not None and newest_skypilot_version_dir(root) is not None:
        sources.append(SkyPilotDir(root))
    if store_path().is_file():
        sources.append(UserStore())
    return sources


def layer_sources(sources: Iterable[CatalogSource], *, per_cloud: bool) -> Catalog:
    """Combine sources; with ``per_cloud`` a later source replaces earlier ones cloud by cloud."""
    by_cloud: dict[str, tuple[int, list[Offer]]] = {}
    read: list[tuple[CatalogSource, str, str, list[Offer]]] = []
    merged: list[Offer] = []
    sources = list(sources)
    results = _read_all(sources, per_cloud)
    for i, source in enumerate(sources):
        offers, location, as_of = results[i]
        read.append((source, location, as_of, offers))
        if per_cloud:
            clouds: dict[str, list[Offer]] = {}
            for o in offers:
                clouds.setdefault(o.cloud, []).append(o)
            for cloud, rows in clouds.items():
                by_cloud[cloud] = (i, rows)
        else:
            merged += offers
    layers = []
    for i, (source, location, as_of, offers) in enumerate(read):
        if per_cloud:
            kept = {c: rows for c, (j, rows) in by_cloud.items() if j == i}
            layers.append(
                Layer(
                    source.kind,
                    location,
                    as_of,
                    tuple(sorted(kept)),
                    sum(map(len, kept.values())),
                    note="" if kept else "superseded by a later source",
                )
            )
        else:
            layers.append(
                Layer(
                    source.kind,
                    location,
                    as_of,
                    tuple(sorted({o.cloud for o in offers})),
                    len(offers),
                )
            )
    if per_cloud:
        # each cloud's rows come from one source, and no source repeats a key under two sources
        # (the CSV readers refuse duplicate rows; a SkyPilot cloud file has one source name)
        merged = [o for _, rows in sorted(by_cloud.values(), key=lambda x: x[0]) for o in rows]
    else:
        _check_unique(merged)
    return Catalog(offers=tuple(merged), layers=tuple(layers))


def _read_all(
    sources: Sequence[CatalogSource], per_cloud: bool
) -> list[tuple[list[Offer], str, str]]:
    """Every source's ``read()``, in order; with ``per_cloud``, the bundled snapshot is not parsed
    when later sources supply every cloud it has (it would contribute nothing)."""
    results: dict[int, tuple[list[Offer], str, str]] = {}
    deferred = []
    for i, source in enumerate(sources):
        if per_cloud and isinstance(source, BundledSnapshot) and i < len(sources) - 1:
            deferred.append(i)
        else:
            results[i] = source.read()
    for i in deferred:
        bundled = sources[i]
        assert isinstance(bundled, BundledSnapshot)
        later = {o.cloud for j, (offers, _, _) in results.items() if j > i for o in offers}
        clouds, as_of = bundled.manifest()
        results[i] = ([], bundled.location, as_of) if clouds <= later else bundled.read()
    return [results[i] for i in range(len(sources))]


def _check_unique(offers: Sequence[Offer]) -> None:
    seen: dict[tuple[object, ...], Offer] = {}
    for o in offers:
        if o.key in seen and seen[o.key].source != o.source:
            raise CatalogError(
                f"the same offer ({o.cloud} {o.region} {o.zone or ''} {o.instance_type}) comes from "
                f"both {seen[o.key].source} and {o.source}",
                hint="give each cloud's offers in one --catalog file only",
            )
        seen[o.key] = o


def load_catalog(paths: Sequence[Path | str] = ()) -> Catalog:
    """The catalog in effect: the given files/folders only, or the default layers."""
    if paths:
        return layer_sources([source_for_path(Path(p)) for p in paths], per_cloud=False)
    return layer_sources(default_sources(), per_cloud=True)
