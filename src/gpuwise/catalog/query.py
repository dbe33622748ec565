"""Questions asked of a catalog: filter offers, sort them, and the cheapest price per GPU model.

Pure functions over a sequence of :class:`Offer`; no I/O.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from gpuwise.catalog.offer import Offer
from gpuwise.errors import InputError, did_you_mean
from gpuwise.hardware import gpu_table

SortKey = Literal["price", "gpu-price", "spot", "spot-gpu-price"]
SORT_KEYS: tuple[SortKey, ...] = ("price", "gpu-price", "spot", "spot-gpu-price")


@dataclass(frozen=True)
class OfferQuery:
    """What ``gpuwise offers`` asks; every field optional."""

    gpu: str | None = None
    """GPU model or alias (``H100``, ``a100-80gb``); matched after alias resolution."""
    count: float | None = None
    """Exact GPUs per instance."""
    min_count: float | None = None
    """At least this many GPUs per instance."""
    clouds: tuple[str, ...] = ()
    """Only these clouds."""
    region: str | None = None
    """Region name or shell glob (``us-*``)."""
    max_price_usd_per_hour: float | None = None
    """Instance price cap, applied to the spot price with ``spot``, else to on-demand."""
    spot: bool = False
    """Only offers with a real spot discount, priced at spot."""
    min_gpu_memory_gib: float | None = None
    """Only GPUs with at least this much memory each."""


def check_clouds(names: Iterable[str], offers: Sequence[Offer]) -> None:
    """InputError, with did-you-mean, for a ``--cloud`` the catalog has no offer from."""
    known = sorted({o.cloud for o in offers})
    for name in names:
        if name not in known:
            raise InputError(
                f"unknown cloud {name!r}",
                hint=f"use one of: {', '.join(known)} (see `gpuwise catalog info`)",
                suggestions=did_you_mean(name, known),
            )


def check_region(pattern: str, offers: Sequence[Offer], clouds: Collection[str] = ()) -> None:
    """InputError, with did-you-mean, when no region of ``clouds`` (all when empty) matches ``pattern``."""
    regions = {o.region for o in offers if not clouds or o.cloud in clouds}
    if not any(fnmatch.fnmatchcase(r, pattern) for r in regions):
        raise InputError(
            f"no region matches {pattern!r}"
            + (f" in {', '.join(sorted(clouds))}" if clouds else ""),
            hint="give a region name or a glob like 'us-*' (see `gpuwise offers`)",
            suggestions=did_you_mean(pattern, regions),
        )


def resolve_gpu_filter(name: str, offers: Sequence[Offer]) -> str:
    """Canonical model for a ``--gpu`` value, checked against the table and the catalog."""
    spec = gpu_table().get(name)
    if spec is not None:
        return spec.name
    catalog_names = {o.gpu for o in offers}
    for model in catalog_names:  # accelerators the table does not know (Inferentia, ...)
        if model.lower() == name.lower():
            return model
    known = sorted(catalog_names | set(gpu_table().names))
    raise InputError(
        f"unknown GPU {name!r}",
        hint="run `gpuwise gpus` to list GPU models",
        suggestions=did_you_mean(name, known),
    )


def query_offers(offers: Sequence[Offer], query: OfferQuery) -> list[Offer]:
    """Offers matching every field of ``query`` (unsorted)."""
    if query.count is not None and query.min_count is not None and query.count < query.min_count:
        raise InputError(
            f"--count {query.count:g} is below --min-count {query.min_count:g}: nothing can match",
            hint="give one of --count and --min-count",
        )
    check_clouds(query.clouds, offers)
    gpu = resolve_gpu_filter(query.gpu, offers) if query.gpu else None
    if query.region:
        check_region(query.region, offers, query.clouds)

    def keep(o: Offer) -> bool:
        if gpu is not None and o.gpu != gpu:
            return False
        if query.count is not None and o.gpu_count != query.count:
            return False
        if query.min_count is not None and o.gpu_count < query.min_count:
            return False
        if query.clouds and o.cloud not in query.clouds:
            return False
        if query.region and not fnmatch.fnmatchcase(o.region, query.region):
            return False
        if (
            query.min_gpu_memory_gib is not None
            and (o.gpu_memory_gib or 0) < query.min_gpu_memory_gib
        ):
            return False
        price = o.spot_usd_per_hour if query.spot else o.on_demand_usd_per_hour
        if query.spot and not o.has_spot_discount:
            return False
        if price is None:
            return False
        return query.max_price_usd_per_hour is None or price <= query.max_price_usd_per_hour

    return [o for o in offers if keep(o)]


def sort_offers(offers: Iterable[Offer], by: SortKey = "price") -> list[Offer]:
    """Cheapest first by instance price, $/GPU-hour, spot price or spot $/GPU-hour; unpriced last."""
    inf = float("inf")

    def key(o: Offer) -> tuple[float, str, str, str]:
        value = {
            "price": o.on_demand_usd_per_hour,
            "gpu-price": o.on_demand_usd_per_gpu_hour,
            "spot": o.spot_usd_per_hour if o.has_spot_discount else None,
            "spot-gpu-price": o.spot_usd_per_gpu_hour,
        }[by]
        return (inf if value is None else value, o.cloud, o.region, o.zone or "")

    return sorted(offers, key=key)


@dataclass(frozen=True)
class CheapestPrice:
    usd_per_gpu_hour: float
    cloud: str
    region: str
    instance_type: str


def cheapest_per_gpu(offers: Iterable[Offer], *, spot: bool) -> dict[str, CheapestPrice]:
    """The lowest $/GPU-hour per GPU model (whole GPUs only), with where it is offered."""
    best: dict[str, CheapestPrice] = {}
    for o in offers:
        if o.gpu_count < 1:
            continue
        price = o.spot_usd_per_gpu_hour if spot else o.on_demand_usd_per_gpu_hour
        if price is None:
            continue
        current = best.get(o.gpu)
        if current is None or price < current.usd_per_gpu_hour:
            best[o.gpu] = CheapestPrice(price, o.cloud, o.region, o.instance_type)
    return best
