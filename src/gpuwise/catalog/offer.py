"""The one record every catalog source yields: :class:`Offer`, and its own CSV schema.

The gpuwise CSV schema is the ``Offer`` fields in order (:data:`OFFER_COLUMNS`); it is what the
bundled snapshot, the updated user catalog and private price lists use. SkyPilot's per-cloud
``vms.csv`` files are read by :mod:`gpuwise.catalog.skypilot` into the same record.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import astuple, dataclass, fields
from typing import Literal

from gpuwise.base.datafiles import csv_safe_cell, csv_text_cell, refuse_bidi_controls
from gpuwise.errors import CatalogError

Billing = Literal["on-demand", "spot", "reserved-1y", "reserved-3y"]
BILLINGS: tuple[Billing, ...] = ("on-demand", "spot", "reserved-1y", "reserved-3y")


@dataclass(frozen=True)
class Offer:
    """One way to rent GPUs: an instance type in a region (and zone) at a price."""

    cloud: str
    """Provider, lower-case: ``aws``, ``gcp``, ``azure``, ``lambda``, ``nebius``, or your own name."""
    region: str
    """Provider region, e.g. ``us-east-1``."""
    zone: str | None
    """Availability zone (AWS: the AZ ID such as ``use1-az2``); None where the cloud has none."""
    instance_type: str
    """Instance type; on GCP the host VM type the GPUs attach to."""
    gpu: str
    """GPU model: gpuwise's canonical name when known (see ``gpuwise gpus``), else the cloud's name."""
    gpu_count: float
    """GPUs per instance; below 1 for fractional GPUs (AWS g6f: 0.125 of an L4)."""
    gpu_memory_gib: float | None
    """Memory of one GPU (or of the fraction) in GiB, as the cloud reports it."""
    vcpus: float | None
    """vCPUs per instance."""
    memory_gib: float | None
    """Host RAM per instance in GiB."""
    on_demand_usd_per_hour: float | None
    """On-demand price of the whole instance; None when it is sold only by reservation."""
    spot_usd_per_hour: float | None
    """Spot price of the whole instance; None when there is no spot offer."""
    arch: str
    """Host CPU architecture: ``x86_64`` or ``arm64``."""
    source: str
    """Which source this row came from, e.g. ``bundled:skypilot-v8/aws``."""
    as_of: str
    """When the price was last seen current (date or month): the fetch date for a live price API
    (Azure Retail Prices), the collector's date for a published snapshot (SkyPilot's file, a
    gpuhunt catalog). Price-age warnings use this date only."""
    valid_from: str | None = None
    """Since when the price has been in force, where the source says (Azure's
    ``effectiveStartDate``); None where it does not. Not an age: a price unchanged since 2023 and
    seen today is fresh."""

    @property
    def on_demand_usd_per_gpu_hour(self) -> float | None:
        if self.on_demand_usd_per_hour is None or self.gpu_count <= 0:
            return None
        return self.on_demand_usd_per_hour / self.gpu_count

    @property
    def spot_usd_per_gpu_hour(self) -> float | None:
        """Spot $/GPU-hour, or None when there is no spot or no real discount (spot ≥ on-demand)."""
        if self.spot_usd_per_hour is None or self.gpu_count <= 0 or not self.has_spot_discount:
            return None
        return self.spot_usd_per_hour / self.gpu_count

    @property
    def has_spot_discount(self) -> bool:
        """Spot exists and is cheaper than on-demand (AWS/Azure list some spot at the on-demand price)."""
        if self.spot_usd_per_hour is None:
            return False
        return (
            self.on_demand_usd_per_hour is None
            or self.spot_usd_per_hour < self.on_demand_usd_per_hour
        )

    @property
    def key(self) -> tuple[str, str, str | None, str, str, float]:
        """What makes an offer unique within a catalog."""
        return (self.cloud, self.region, self.zone, self.instance_type, self.gpu, self.gpu_count)

    def to_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


OFFER_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Offer))
_REQUIRED = ("cloud", "region", "instance_type", "gpu", "gpu_count")
_OPTIONAL_FLOATS = (
    "gpu_memory_gib",
    "vcpus",
    "memory_gib",
    "on_demand_usd_per_hour",
    "spot_usd_per_hour",
)


def parse_price(raw: str, where: str, column: str) -> float | None:
    """A price cell: empty → None; a non-negative finite number; ``$``/thousands commas allowed."""
    text = raw.strip().removeprefix("$").replace(",", "")
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise CatalogError(
            f"{where}, column {column}: {raw!r} is not a price",
            hint="write USD per hour as a plain number, or leave it empty",
        ) from None
    if not math.isfinite(value) or value < 0:
        raise CatalogError(
            f"{where}, column {column}: {raw!r} is not a valid price",
            hint="prices must be finite and ≥ 0 (empty = not offered)",
        )
    return value


def parse_positive(raw: str, where: str, column: str, *, required: bool) -> float | None:
    text = raw.strip()
    if not text:
        if required:
            raise CatalogError(
                f"{where}, column {column}: empty", hint=f"give {column} for every row"
            )
        return None
    try:
        value = float(text)
    except ValueError:
        raise CatalogError(
            f"{where}, column {column}: {raw!r} is not a number",
            hint=f"write {column} as a plain number",
        ) from None
    if not math.isfinite(value) or value <= 0:
        raise CatalogError(
            f"{where}, column {column}: {raw!r} must be a positive number",
            hint=f"fix {column} in that row",
        )
    return value


def check_header(fieldnames: Sequence[str] | None, required: Iterable[str], origin: str) -> None:
    """Raise CatalogError naming the missing columns."""
    have = set(fieldnames or ())
    missing = [c for c in required if c not in have]
    if missing:
        raise CatalogError(
            f"{origin}: missing column(s) {', '.join(missing)}",
            hint=f"the header needs {', '.join(required)}",
        )


def _fast_float(cell: str, positive: bool) -> float | None:
    """``float(cell)`` when the cell is a plain valid number (the common case), else None (slow path)."""
    try:
        value = float(cell)
    except ValueError:
        return None
    if value != value or value in (math.inf, -math.inf) or value < 0 or (positive and value == 0):
        return None
    return value


def parse_offer_csv(text: str, origin: str, *, source: str | None = None) -> list[Offer]:
    """Read gpuwise-schema CSV text into offers; every problem names ``origin``, row and column.

    Rows repeating an earlier row's (cloud, region, zone, instance_type, gpu, gpu_count) are
    rejected: two prices for one offer is a mistake, not a choice. A ``$0`` price is refused
    (empty means "not offered"). Plain numbers take a fast path; anything else goes through the
    validators that name the row and column.
    """
    from gpuwise.catalog.resolve import resolve_gpu

    refuse_bidi_controls(text, origin, CatalogError)
    # undo offers_to_csv's "'" before a formula-like cell (only when the file has a quote at all)
    txt: Callable[[str], str] = csv_text_cell if "'" in text else str
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    check_header(header, _REQUIRED, origin)
    assert header is not None
    idx = {name: i for i, name in enumerate(header)}
    width = len(header)
    get_opt = [(c, idx.get(c)) for c in _OPTIONAL_FLOATS]
    i_cloud, i_region, i_itype, i_gpu, i_count = (idx[c] for c in _REQUIRED)
    opt_idx: list[int | None] = [
        idx.get(c) for c in ("zone", "arch", "source", "as_of", "valid_from")
    ]
    i_zone, i_arch, i_source, i_as_of, i_valid = opt_idx
    offers: list[Offer] = []
    seen: dict[tuple[object, ...], int] = {}
    resolved: dict[str, str] = {}
    for lineno, cells in enumerate(reader, start=2):
        if not cells:
            continue  # a blank line
        if len(cells) != width:
            where = f"{origin}, row {lineno}"
            if len(cells) > width:
                raise CatalogError(
                    f"{where}: more cells than columns", hint="quote cells that contain commas"
                )
            cells = cells + [""] * (width - len(cells))
        for col, j in zip(_REQUIRED, (i_cloud, i_region, i_itype, i_gpu, i_count), strict=True):
            if not cells[j].strip():
                raise CatalogError(
                    f"{origin}, row {lineno}, column {col}: empty", hint=f"give {col} for every row"
                )
        gpu_count = _fast_float(cells[i_count], True)
        if gpu_count is None:
            gpu_count = (
                parse_positive(
                    cells[i_count], f"{origin}, row {lineno}", "gpu_count", required=True
                )
                or 0.0
            )
        floats: dict[str, float | None] = {}
        for col, i in get_opt:
            raw = cells[i] if i is not None else ""
            if not raw:
                floats[col] = None
                continue
            usd = "usd" in col
            value = _fast_float(raw, not usd)
            if value is None:
                where = f"{origin}, row {lineno}"
                value = parse_price(raw, where, col) if usd else _opt_positive(raw, where, col)
            if usd and value == 0:
                raise CatalogError(
                    f"{origin}, row {lineno}, column {col}: {raw!r} is a $0 price",
                    hint="leave the cell empty when that billing is not offered",
                )
            floats[col] = value
        gpu_raw = txt(cells[i_gpu])
        gpu = resolved.get(gpu_raw)
        if gpu is None:
            gpu = resolved[gpu_raw] = resolve_gpu(gpu_raw.strip())
        offer = Offer(
            txt(cells[i_cloud]).strip().lower(),
            txt(cells[i_region]).strip(),
            (txt(cells[i_zone]).strip() or None) if i_zone is not None else None,
            txt(cells[i_itype]).strip(),
            gpu,
            gpu_count,
            floats["gpu_memory_gib"],
            floats["vcpus"],
            floats["memory_gib"],
            floats["on_demand_usd_per_hour"],
            floats["spot_usd_per_hour"],
            (txt(cells[i_arch]).strip() if i_arch is not None else "") or "x86_64",
            source or (txt(cells[i_source]).strip() if i_source is not None else "") or origin,
            (txt(cells[i_as_of]).strip() if i_as_of is not None else "") or "unknown",
            (txt(cells[i_valid]).strip() or None) if i_valid is not None else None,
        )
        key = offer.key
        if key in seen:
            raise CatalogError(
                f"{origin}, row {lineno}: duplicate of row {seen[key]} "
                f"({offer.cloud} {offer.region} {offer.zone or ''} {offer.instance_type})",
                hint="keep one row per cloud, region, zone, instance type and GPU",
            )
        seen[key] = lineno
        offers.append(offer)
    if not offers:
        raise CatalogError(f"{origin}: no offers", hint="the file has a header but no rows")
    return offers


def _opt_positive(raw: str, where: str, column: str) -> float | None:
    return parse_positive(raw, where, column, required=False)


def offers_to_csv(offers: Iterable[Offer]) -> str:
    """Write offers in the gpuwise schema (round-trips through :func:`parse_offer_csv`).

    A text cell that a spreadsheet would run as a formula (``=``, ``+``, ``-``, ``@``) is written
    with a leading ``'`` (OWASP's CSV-injection rule); :func:`parse_offer_csv` removes it.
    """
    offers = list(offers)
    # ``valid_from`` only where a row has one: files without it (the bundled snapshot) keep their bytes
    width = len(OFFER_COLUMNS) - (all(o.valid_from is None for o in offers))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(OFFER_COLUMNS[:width])
    for offer in offers:
        writer.writerow(
            [
                "" if v is None else (repr(v) if isinstance(v, float) else csv_safe_cell(v))
                for v in astuple(offer)[:width]
            ]
        )
    return out.getvalue()
