"""$/GPU-hour per billing type for each GPU model, read from the catalog and the reserved terms.

For every GPU model the fleet needs, the cheapest whole-GPU on-demand and spot prices across the
allowed clouds, and one reservation option per (cloud, term) whose price is known: a discount
(the user's ``reserved.yaml`` or a ``--reserved-discount`` override), else the per-instance reserved
prices fetched by ``gpuwise catalog update --fetch`` (AWS price list, Azure retail prices). A cloud
with neither offers no reservation, and :attr:`GpuPrices.reserved_unavailable`
says so, so that the output can tell the user why.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuwise.catalog.offer import Offer
from gpuwise.catalog.query import CheapestPrice, cheapest_per_gpu
from gpuwise.catalog.reserved import TERMS, ReservedTerm
from gpuwise.catalog.risk import ReservedPrice
from gpuwise.errors import InputError, PlanError, did_you_mean

if TYPE_CHECKING:
    from gpuwise.planner.spot import SpotOverhead

if TYPE_CHECKING:
    from gpuwise.planner.spot import SpotOverhead

_OVERRIDE = re.compile(r"^\s*([a-z0-9_-]+)\s*:\s*([13])y\s*=\s*(\S+)\s*$", re.I)


@dataclass(frozen=True)
class PriceQuote:
    """One price for one GPU-hour and where it comes from."""

    usd_per_gpu_hour: float
    """The price of one GPU for one hour."""
    cloud: str
    """Cloud selling it."""
    where: str
    """Region and instance type of the offer priced."""


@dataclass(frozen=True)
class ReservedOption:
    """A reservation one may buy: whole GPUs on one cloud for one term."""

    cloud: str
    """Cloud selling it."""
    term_years: int
    """1 or 3."""
    usd_per_gpu_hour: float
    """Effective hourly price per reserved GPU, paid for every hour of the term, used or not."""
    discount: float
    """Fraction off that cloud's cheapest on-demand price for the GPU."""
    source: str
    """Where the discount comes from."""


@dataclass(frozen=True)
class GpuPrices:
    """Every way to pay for one GPU model's hours."""

    gpu: str
    """GPU model."""
    on_demand: PriceQuote
    """Cheapest on-demand price across the allowed clouds."""
    spot: PriceQuote | None
    """Cheapest spot price across the allowed clouds (None: no spot offer)."""
    reserved: tuple[ReservedOption, ...]
    """Reservation options with a known discount, cheapest first."""
    reserved_unavailable: tuple[str, ...]
    """``cloud Ny`` terms for clouds selling this GPU whose reserved discount is unknown (not offered)."""


def parse_reserved_overrides(
    values: Iterable[str], *, known_clouds: Iterable[str] | None = None
) -> dict[tuple[str, int], ReservedTerm]:
    """``aws:1y=0.3`` → a ReservedTerm per (cloud, years), from the command line.

    With ``known_clouds``, a cloud outside it is refused (a typo would otherwise be ignored).
    """
    known = sorted(set(known_clouds)) if known_clouds is not None else None
    out: dict[tuple[str, int], ReservedTerm] = {}
    for raw in values:
        m = _OVERRIDE.match(raw)
        if not m:
            raise InputError(
                f"cannot read --reserved-discount {raw!r}",
                hint="write CLOUD:1y=FRACTION or CLOUD:3y=FRACTION, e.g. gcp:1y=0.37",
            )
        try:
            value = float(m.group(3).rstrip("%")) / (100 if m.group(3).endswith("%") else 1)
        except ValueError:
            raise InputError(
                f"--reserved-discount {raw!r}: {m.group(3)!r} is not a number",
                hint="write the discount as a fraction such as 0.37 or 37%",
            ) from None
        if not 0 <= value < 1:
            raise InputError(
                f"--reserved-discount {raw!r}: the discount must be in [0, 1)",
                hint="write e.g. 0.37 for 37% off on-demand",
            )
        cloud, years = m.group(1).lower(), int(m.group(2))
        if known is not None and cloud not in known:
            raise InputError(
                f"--reserved-discount {raw!r}: unknown cloud {cloud!r}",
                hint=f"use one of: {', '.join(known)}",
                suggestions=did_you_mean(cloud, known),
            )
        out[(cloud, years)] = ReservedTerm(cloud, years, value, f"--reserved-discount {raw}")  # type: ignore[arg-type]
    return out


def reserved_terms(
    offers: Sequence[Offer], overrides: Iterable[str] = ()
) -> dict[tuple[str, int], ReservedTerm | None]:
    """The reserved terms to price with: ``reserved.yaml`` (the user's, else the bundled record),
    then ``overrides`` such as ``"aws:1y=0.3"``, which win.

    An override for a cloud that neither ``offers`` (the whole catalog) nor the terms know is
    refused: a typo would otherwise be ignored and the plan made without the discount.
    """
    from gpuwise.catalog.reserved import load_reserved_terms

    terms = load_reserved_terms()
    known = {o.cloud for o in offers} | {cloud for cloud, _ in terms}
    terms.update(parse_reserved_overrides(overrides, known_clouds=known))
    return terms


def _quote(cheapest: CheapestPrice) -> PriceQuote:
    return PriceQuote(
        cheapest.usd_per_gpu_hour, cheapest.cloud, f"{cheapest.region} {cheapest.instance_type}"
    )


def _fetched_reserved(
    offers: Sequence[Offer], prices: Sequence[ReservedPrice]
) -> dict[tuple[str, str, int], tuple[float, str]]:
    """(cloud, gpu, years) → cheapest fetched reserved $/GPU-hour and where, over instances in ``offers``.

    Only instance types and regions present in ``offers`` count, so cloud/region filters apply.
    """
    carried: dict[tuple[str, str, str], Offer] = {}
    for o in offers:
        if o.gpu_count >= 1:
            carried.setdefault((o.cloud, o.region, o.instance_type), o)
    best: dict[tuple[str, str, int], tuple[float, str]] = {}
    for r in prices:
        match = carried.get((r.cloud, r.region, r.instance_type))
        if match is None:
            continue
        per_gpu = r.usd_per_hour / match.gpu_count
        key = (r.cloud, match.gpu, r.term_years)
        if key not in best or per_gpu < best[key][0]:
            best[key] = (
                per_gpu,
                f"{r.source} ({r.instance_type} {r.region}, {r.term_years}y no upfront, "
                f"as of {r.as_of})",
            )
    return best


def gpu_prices(
    offers: Sequence[Offer],
    gpus: Iterable[str],
    terms: Mapping[tuple[str, int], ReservedTerm | None],
    reserved_prices: Sequence[ReservedPrice] | None = None,
) -> dict[str, GpuPrices]:
    """Prices per GPU model from ``offers`` (already filtered to the allowed clouds/regions).

    A reservation's price is, per (cloud, term): the discount in ``terms`` when one is set (the
    user's reserved.yaml or ``--reserved-discount``: what the user says wins), else the cheapest
    per-instance reserved price fetched by ``gpuwise catalog update --fetch`` (``reserved_prices``;
    None reads them from the catalog store), else none (listed in ``reserved_unavailable``).
    """
    if reserved_prices is None:
        from gpuwise.catalog.risk import load_reserved_prices

        reserved_prices = load_reserved_prices()
    fetched = _fetched_reserved(offers, reserved_prices)
    by_cloud: dict[str, list[Offer]] = {}
    for o in offers:
        by_cloud.setdefault(o.cloud, []).append(o)
    od_per_cloud = {cloud: cheapest_per_gpu(rows, spot=False) for cloud, rows in by_cloud.items()}
    spot_per_gpu = cheapest_per_gpu(offers, spot=True)
    out: dict[str, GpuPrices] = {}
    for gpu in gpus:
        od_by_cloud = {
            cloud: _quote(cheapest[gpu])
            for cloud, cheapest in od_per_cloud.items()
            if gpu in cheapest
        }
        spot_best = _quote(spot_per_gpu[gpu]) if gpu in spot_per_gpu else None
        if not od_by_cloud:
            known = sorted({o.gpu for o in offers if o.on_demand_usd_per_hour is not None})
            raise PlanError(
                f"no on-demand offer for {gpu} in the catalog (with the cloud/region filters)",
                hint="check `gpuwise offers --gpu " + gpu + "`, or drop --cloud/--region",
                suggestions=did_you_mean(gpu, known),
            )
        reserved: list[ReservedOption] = []
        unavailable: list[str] = []
        for cloud, quote in sorted(od_by_cloud.items()):
            for years in TERMS:
                term = terms.get((cloud, years))
                if term is not None:
                    reserved.append(
                        ReservedOption(
                            cloud,
                            years,
                            quote.usd_per_gpu_hour * (1 - term.discount),
                            term.discount,
                            term.source,
                        )
                    )
                    continue
                hit = fetched.get((cloud, gpu, years))
                if hit is None:
                    unavailable.append(f"{cloud} {years}y")
                    continue
                price, source = hit
                discount = 1 - price / quote.usd_per_gpu_hour
                if discount <= 0:
                    continue  # dearer than on-demand somewhere in the same cloud: never worth buying
                reserved.append(ReservedOption(cloud, years, price, discount, source))
        reserved.sort(key=lambda r: (r.usd_per_gpu_hour, r.term_years, r.cloud))
        best_od = min(od_by_cloud.values(), key=lambda q: (q.usd_per_gpu_hour, q.cloud))
        out[gpu] = GpuPrices(gpu, best_od, spot_best, tuple(reserved), tuple(unavailable))
    return out


def spot_model_overhead(
    prices: Mapping[str, GpuPrices], mtbf_hours: float | None = None
) -> SpotOverhead | None:
    """The plan's spot model (:func:`gpuwise.planner.spot.spot_overhead`) for the spot quotes in
    ``prices``: the largest overhead among the clouds (and instance types) that sell the spot
    capacity, so one figure never flatters a riskier pool. None when nothing is sold on spot."""
    from gpuwise.planner.spot import load_spot_defaults, spot_overhead

    quotes = [p.spot for p in prices.values() if p.spot is not None]
    if not quotes:
        return None
    defaults = load_spot_defaults()
    models = []
    for q in quotes:
        region, _, instance = q.where.partition(" ")
        models.append(
            spot_overhead(
                defaults, q.cloud, region=region, instance_type=instance, mtbf_hours=mtbf_hours
            )
        )
    return max(models, key=lambda m: m.fraction)
