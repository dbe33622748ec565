"""Per-instance data fetched next to the offers: spot interruption bands and reserved prices.

Both live in the user's catalog store folder (next to ``offers.csv``), written only by
``gpuwise catalog update --fetch`` through :mod:`gpuwise.catalog.update`:

- ``spot_risk.csv``: one row per (cloud, region, instance type) with the provider's published
  interruption band (AWS Spot Instance Advisor: ``<5%`` … ``>20%`` of instances interrupted in the
  trailing month) and the advertised savings. The planner turns a band into a rate with the
  table in ``gpuwise/planner/data/spot.yaml``.
- ``reserved_prices.csv``: one row per (cloud, region, instance type, term) with the effective
  hourly price of a reservation (no upfront payment), read from a public price list.

Pure Python: no network.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from dataclasses import astuple, dataclass, fields
from pathlib import Path

from gpuwise.base.datafiles import csv_safe_cell, csv_text_cell, refuse_bidi_controls
from gpuwise.base.validate import finite_number
from gpuwise.errors import CatalogError

SPOT_RISK_FILE = "spot_risk.csv"
RESERVED_FILE = "reserved_prices.csv"


@dataclass(frozen=True)
class SpotRisk:
    """A provider's published interruption band for one instance type in one region."""

    cloud: str
    region: str
    instance_type: str
    band: str
    """The band label as published, e.g. ``<5%``, ``5-10%``, ``>20%``."""
    savings_pct: float | None
    """Advertised savings over on-demand, percent (AWS ``s``)."""
    source: str
    as_of: str
    band_max_pct: float | None = None
    """The band's upper edge as the provider's file states it (AWS ``ranges[].max``: 5, 11, 16,
    22, 100), percent; None in files written before gpuwise kept it."""
    band_min_pct: float | None = None
    """The band's lower edge: the upper edge of the band below it in the same file (``>20%``: 22
    in the real file), percent; None for the lowest band and in older files."""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.cloud, self.region, self.instance_type)


@dataclass(frozen=True)
class ReservedPrice:
    """The effective hourly price of reserving one instance for a term, no upfront payment."""

    cloud: str
    region: str
    instance_type: str
    term_years: int
    usd_per_hour: float
    """Whole instance, per hour of the term (paid whether used or not)."""
    source: str
    as_of: str

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.cloud, self.region, self.instance_type, self.term_years)


def _to_csv(rows: Iterable[object], cls: type) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([f.name for f in fields(cls)])
    for row in rows:
        writer.writerow(["" if v is None else csv_safe_cell(v) for v in astuple(row)])  # type: ignore[call-overload]
    return out.getvalue()


def spot_risks_to_csv(rows: Iterable[SpotRisk]) -> str:
    return _to_csv(rows, SpotRisk)


def reserved_to_csv(rows: Iterable[ReservedPrice]) -> str:
    return _to_csv(rows, ReservedPrice)


_OPTIONAL_COLUMNS = {"band_max_pct", "band_min_pct"}
"""Columns added later: a file written before them still reads."""


def _reader(text: str, cls: type, origin: str) -> Iterator[dict[str, str]]:
    refuse_bidi_controls(text, origin, CatalogError)
    reader = csv.DictReader(io.StringIO(text))
    missing = [
        f.name
        for f in fields(cls)
        if f.name not in (reader.fieldnames or ()) and f.name not in _OPTIONAL_COLUMNS
    ]
    if missing:
        raise CatalogError(
            f"{origin}: missing column(s) {', '.join(missing)}",
            hint="run `gpuwise catalog update --fetch` again to rewrite it",
        )
    # undo _to_csv's "'" before formula-like cells, so the file round-trips
    return (
        {k: csv_text_cell(v) if isinstance(v, str) else v for k, v in r.items()} for r in reader
    )


_FIX = "fix or delete that row"


def parse_spot_risks(text: str, origin: str) -> list[SpotRisk]:
    out = []
    for i, row in enumerate(_reader(text, SpotRisk, origin), start=2):
        where = f"{origin}, row {i}"
        savings = row["savings_pct"].strip()
        upper = (row.get("band_max_pct") or "").strip()
        lower = (row.get("band_min_pct") or "").strip()
        out.append(
            SpotRisk(
                row["cloud"],
                row["region"],
                row["instance_type"],
                row["band"],
                finite_number(savings, where, positive=False, text_ok=True, hint=_FIX)
                if savings
                else None,
                row["source"],
                row["as_of"],
                finite_number(upper, where, positive=True, text_ok=True, hint=_FIX)
                if upper
                else None,
                finite_number(lower, where, positive=True, text_ok=True, hint=_FIX)
                if lower
                else None,
            )
        )
    return out


def parse_reserved(text: str, origin: str) -> list[ReservedPrice]:
    out = []
    for i, row in enumerate(_reader(text, ReservedPrice, origin), start=2):
        where = f"{origin}, row {i}"
        years = row["term_years"].strip()
        if years not in ("1", "3"):
            raise CatalogError(
                f"{where}, column term_years: {years!r}", hint="terms are 1 or 3 years"
            )
        out.append(
            ReservedPrice(
                row["cloud"],
                row["region"],
                row["instance_type"],
                int(years),
                finite_number(row["usd_per_hour"], where, positive=True, text_ok=True, hint=_FIX),
                row["source"],
                row["as_of"],
            )
        )
    return out


def _store_dir() -> Path:
    from gpuwise.catalog.sources import store_path

    return store_path().parent


def load_spot_risks(folder: Path | None = None) -> list[SpotRisk]:
    """Fetched interruption bands from the store (empty when never fetched)."""
    path = (folder or _store_dir()) / SPOT_RISK_FILE
    if not path.is_file():
        return []
    return parse_spot_risks(path.read_text("utf-8"), str(path))


def load_reserved_prices(folder: Path | None = None) -> list[ReservedPrice]:
    """Fetched per-instance reserved prices from the store (empty when never fetched)."""
    path = (folder or _store_dir()) / RESERVED_FILE
    if not path.is_file():
        return []
    return parse_reserved(path.read_text("utf-8"), str(path))
