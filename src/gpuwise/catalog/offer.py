"""The one record every catalog source yields: :class:`Offer`, and its own CSV schema.

The gpuwise CSV schema is the ``Offer`` fields in order (:data:`OFFER_COLUMNS`); it is what the
bundled snapshot, the updated user catalog and private price lists use. SkyPilot's per-cloud
``vms.csv`` files are read by :mod:`gpuwise.catalog.skypilot` into the same record.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass, fields
from typing import Literal

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
    """When the price was read (date or month), as the source states it."""

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
        return self.on_demand_usd_per_hour is None or self.spot_usd_per_hour < self.on_demand_usd_per_hour

    @property
    def key(self) -> tuple[str, str, str | None, str, str, float]:
        """What makes an offer unique within a catalog."""
        return (self.cloud, self.region, self.zone, self.instance_type, self.gpu, self.gpu_count)

    def to_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


OFFER_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Offer))
_REQUIRED = ("cloud", "region", "instance_type", "gpu", "gpu_count")
_OPTIONAL_FLOATS = ("gpu_memory_gib", "vcpus", "memory_gib", "on_demand_usd_per_hour", "spot_usd_per_hour")


def parse_price(raw: str, where: str, column: str) -> float | None:
    """A price cell: empty → None; a non-negative finite number; ``$``/thousands commas allowed."""
    text = raw.strip().removeprefix("$").replace(",", "")
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise CatalogError(f"{where}, column {column}: {raw!r} is not a price",
                           hint="write USD per hour as a plain number, or leave it empty") from None
    if not math.isfinite(value) or value < 0:
        raise CatalogError(f"{where}, column {column}: {raw!r} is not a valid price",
                           hint="prices must be finite and ≥ 0 (empty = not offered)")
    return value


def parse_positive(raw: str, where: str, column: str, *, required: bool) -> float | None:
    text = raw.strip()
    if not text:
        if required:
            raise CatalogError(f"{where}, column {column}: empty", hint=f"give {column} for every row")
        return None
    try:
        value = float(text)
    except ValueError:
        raise CatalogError(f"{where}, column {column}: {raw!r} is not a number",
                           hint=f"write {column} as a plain number") from None
    if not math.isfinite(value) or value <= 0:
        raise CatalogError(f"{where}, column {column}: {raw!r} must be a positive number",
                           hint=f"fix {column} in that row")
    return value


def check_header(fieldnames: Sequence[str] | None, required: Iterable[str], origin: str) -> None:
    """Raise CatalogError naming the missing columns."""
    have = set(fieldnames or ())
    missing = [c for c in required if c not in have]
    if missing:
        raise CatalogError(f"{origin}: missing column(s) {', '.join(missing)}",
                           hint=f"the header needs {', '.join(required)}")


def parse_offer_csv(text: str, origin: str, *, source: str | None = None) -> list[Offer]:
    """Read gpuwise-schema CSV text into offers; every problem names ``origin``, row and column.

    Rows repeating an earlier row's (cloud, region, zone, instance_type, gpu, gpu_count) are
    rejected: two prices for one offer is a mistake, not a choice.
    """
    from gpuwise.catalog.resolve import resolve_gpu

    reader = csv.DictReader(io.StringIO(text))
    check_header(reader.fieldnames, _REQUIRED, origin)
    offers: list[Offer] = []
    seen: dict[tuple[object, ...], int] = {}
    resolved: dict[str, str] = {}
    for lineno, row in enumerate(reader, start=2):
        where = f"{origin}, row {lineno}"
        if None in row:
            raise CatalogError(f"{where}: more cells than columns", hint="quote cells that contain commas")
        for col in _REQUIRED:
            if not (row.get(col) or "").strip():
                raise CatalogError(f"{where}, column {col}: empty", hint=f"give {col} for every row")
        gpu_count = parse_positive(row["gpu_count"], where, "gpu_count", required=True) or 0.0
        floats = {c: (parse_price if "usd" in c else _opt_positive)(row.get(c) or "", where, c)
                  for c in _OPTIONAL_FLOATS}
        for col in ("on_demand_usd_per_hour", "spot_usd_per_hour"):
            if floats[col] == 0:
                raise CatalogError(f"{where}, column {col}: {row.get(col)!r} is a $0 price",
                                   hint="leave the cell empty when that billing is not offered")
        on_demand = floats["on_demand_usd_per_hour"]
        offer = Offer(
            cloud=row["cloud"].strip().lower(),
            region=row["region"].strip(),
            zone=(row.get("zone") or "").strip() or None,
            instance_type=row["instance_type"].strip(),
            gpu=resolved.get(row["gpu"]) or resolved.setdefault(row["gpu"], resolve_gpu(row["gpu"].strip())),
            gpu_count=gpu_count,
            gpu_memory_gib=floats["gpu_memory_gib"],
            vcpus=floats["vcpus"],
            memory_gib=floats["memory_gib"],
            on_demand_usd_per_hour=on_demand if on_demand else None,
            spot_usd_per_hour=floats["spot_usd_per_hour"] or None,
            arch=(row.get("arch") or "").strip() or "x86_64",
            source=source or (row.get("source") or "").strip() or origin,
            as_of=(row.get("as_of") or "").strip() or "unknown",
        )
        if offer.key in seen:
            raise CatalogError(f"{where}: duplicate of row {seen[offer.key]} "
                               f"({offer.cloud} {offer.region} {offer.zone or ''} {offer.instance_type})",
                               hint="keep one row per cloud, region, zone, instance type and GPU")
        seen[offer.key] = lineno
        offers.append(offer)
    if not offers:
        raise CatalogError(f"{origin}: no offers", hint="the file has a header but no rows")
    return offers


def _opt_positive(raw: str, where: str, column: str) -> float | None:
    return parse_positive(raw, where, column, required=False)


def offers_to_csv(offers: Iterable[Offer]) -> str:
    """Write offers in the gpuwise schema (round-trips through :func:`parse_offer_csv`)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(OFFER_COLUMNS)
    for offer in offers:
        writer.writerow(["" if v is None else (repr(v) if isinstance(v, float) else v) for v in astuple(offer)])
    return out.getvalue()
