"""The Azure Retail Prices API for ``catalog update --fetch azure-prices``.

``{"Items": [...], "NextPageLink": ...}``, items with ``armSkuName``, ``armRegionName``,
``retailPrice``, ``unitOfMeasure``, ``type`` (``Consumption`` / ``Reservation``), ``skuName``
(``… Spot``, ``… Low Priority``), ``productName`` (``… Windows``), ``reservationTerm`` (``1 Year`` /
``3 Years``; the price is then for the whole term), ``isPrimaryMeterRegion`` and
``effectiveStartDate``.

Which GPUs a size carries comes from gpuwise's own table ``data/azure_skus.csv`` (each row with its
source); sizes not in it are skipped and counted. When the API lists one size, region and price
kind more than once, the rule is: the primary meter region's row (``isPrimaryMeterRegion``), then
the newest ``effectiveStartDate`` that has begun; rows still tied with different prices refuse that
size, region and price kind only (counted, with examples); the rest of Azure imports.

Dates: the API lists the prices in force now, so each price is *seen* on the day it is fetched
(``as_of``, what price-age warnings use); its ``effectiveStartDate`` is kept as ``valid_from``
(since when it has been in force, which says nothing about staleness).
"""

from __future__ import annotations

import functools
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from gpuwise.base.datafiles import commented_csv
from gpuwise.catalog.offer import Offer
from gpuwise.catalog.remote_common import (
    Fetched,
    Getter,
    Refusals,
    as_json,
    count_skips,
    env,
    expect,
    number,
    today,
)
from gpuwise.catalog.risk import ReservedPrice
from gpuwise.errors import CatalogError
from gpuwise.units import HOURS_PER_YEAR

AZURE_PRICES_URL = "https://prices.azure.com/api/retail/prices"
_AZURE_FILTER = (
    "serviceName eq 'Virtual Machines' and currencyCode eq 'USD' and "
    "contains(armSkuName, 'Standard_N')"
)
_MAX_PAGES = 500


@dataclass(frozen=True)
class AzureSku:
    """One row of ``data/azure_skus.csv``."""

    sku: str
    gpu: str
    gpu_count: float
    gpu_memory_gib: float
    vcpus: float
    memory_gib: float
    source: str


@functools.lru_cache(maxsize=1)
def azure_skus() -> dict[str, AzureSku]:
    """gpuwise's table of Azure GPU sizes, by ``armSkuName``."""
    text = resources.files("gpuwise.catalog").joinpath("data/azure_skus.csv").read_text("utf-8")
    return {
        row["sku"]: AzureSku(
            row["sku"],
            row["gpu"],
            float(row["gpu_count"]),
            float(row["gpu_memory_gib"]),
            float(row["vcpus"]),
            float(row["memory_gib"]),
            row["source"],
        )
        for row in commented_csv(text)
    }


def _pages(get: Getter, base: str) -> list[dict[str, Any]]:
    url: str | None = base + "?" + urllib.parse.urlencode({"$filter": _AZURE_FILTER})
    origin = same_origin_key(base)
    items: list[dict[str, Any]] = []
    for _ in range(_MAX_PAGES):
        if url is None:
            return items
        page = as_json(get(url), url)
        expect(
            isinstance(page, dict) and isinstance(page.get("Items"), list),
            url,
            "needs an 'Items' list",
        )
        items += page["Items"]
        nxt = page.get("NextPageLink")
        if nxt and same_origin_key(nxt) != origin:
            raise CatalogError(
                f"{url}: NextPageLink points to another host or port ({nxt}; "
                f"expected {'://'.join(origin[:2])}:{origin[2]})",
                hint="the API sent a next-page link off its own host, or GPUWISE_AZURE_PRICES_URL "
                "names a mirror that links elsewhere; nothing from Azure was imported",
            )
        url = nxt or None
    raise CatalogError(
        f"{base}: more than {_MAX_PAGES} pages", hint="the filter no longer narrows the list"
    )


_DEFAULT_PORTS = {"http": 80, "https": 443}


def same_origin_key(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, effective port) of ``url``: ``https://prices.azure.com:443/…`` (the form the
    API's ``NextPageLink`` takes) and ``https://prices.azure.com/…`` are the same origin."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:  # a port that is not a number
        port = -1
    return scheme, (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(scheme)


Kind = tuple[str, int]
"""("od", 0), ("spot", 0) or ("reserved", years)."""


def _kind(item: dict[str, Any], where: str, base: str) -> Kind | None:
    """Which price an item is, or None when gpuwise does not use it (Windows, Low Priority, …)."""
    if (
        item.get("unitOfMeasure", "1 Hour") != "1 Hour"
        or "Windows" in str(item["productName"])
        or "Low Priority" in str(item["skuName"])
    ):
        return None
    if item["type"] == "Reservation":
        years = {"1 Year": 1, "3 Years": 3}.get(str(item.get("reservationTerm")), 0)
        expect(years > 0, base, f"{where}.reservationTerm = {item.get('reservationTerm')!r}")
        return ("reserved", years)
    if item["type"] == "Consumption":
        return ("spot", 0) if str(item["skuName"]).endswith(" Spot") else ("od", 0)
    return None


def _choose(
    rows: list[tuple[bool, str, float, str]], what: str, now: str, refused: Refusals
) -> tuple[float, str, int] | None:
    """(price, date, rows set aside) by the rule: primary meter region, then the newest
    effectiveStartDate that has begun (the oldest if none has); a remaining tie must agree, else
    None (that offer refused, counted in ``refused``)."""
    primary = [r for r in rows if r[0]] or rows
    begun = [r for r in primary if r[1] <= now]
    date = max(r[1] for r in begun) if begun else min(r[1] for r in primary)
    tied = {r[2] for r in primary if r[1] == date}
    if len(tied) > 1:
        refused.add(
            "one size, region and price kind with different prices on the same date",
            f"{what}: {', '.join(f'{p:g}' for p in sorted(tied))} from {date or 'no date'}",
        )
        return None
    return tied.pop(), date, len(rows) - 1


@dataclass(frozen=True)
class AzureRetailPrices:
    """Azure Retail Prices API (see the module docstring): offers, spot and 1y/3y reservations."""

    name: str = "azure-prices"

    def fetch(self, get: Getter, known: Sequence[Offer]) -> Fetched:
        base = env("GPUWISE_AZURE_PRICES_URL", AZURE_PRICES_URL)
        items = _pages(get, base)
        specs = azure_skus()
        grouped: dict[tuple[str, str, Kind], list[tuple[bool, str, float, str]]] = {}
        unknown: set[str] = set()
        not_used = 0
        for i, item in enumerate(items):
            where = f"Items[{i}]"
            expect(isinstance(item, dict), base, f"{where} is not an object")
            for col in ("armSkuName", "armRegionName", "retailPrice", "type", "skuName"):
                expect(col in item, base, f"{where} has no '{col}'")
            expect("productName" in item, base, f"{where} has no 'productName'")
            sku, region = str(item["armSkuName"]), str(item["armRegionName"])
            kind = _kind(item, where, base)
            if kind is None:
                not_used += 1
                continue
            if sku not in specs:
                unknown.add(sku)
                continue
            price = number(item["retailPrice"], base, f"{where}.retailPrice")
            if price <= 0:
                continue
            date = str(item.get("effectiveStartDate") or "")[:10]
            primary = item.get("isPrimaryMeterRegion", True) is not False
            grouped.setdefault((sku, region, kind), []).append((primary, date, price, where))
        now = today()
        chosen: dict[tuple[str, str, Kind], tuple[float, str]] = {}
        resolved = 0
        refused = Refusals()
        for (sku, region, kind), rows in grouped.items():
            what = f"{sku} in {region} ({kind[0]}{f' {kind[1]}y' if kind[1] else ''})"
            pick = _choose(rows, what, now, refused)
            if pick is not None:
                chosen[(sku, region, kind)] = pick[:2]
                resolved += pick[2]
        offers = _offers(chosen, specs, now)
        reserved = tuple(
            ReservedPrice(
                "azure",
                region,
                sku,
                kind[1],
                round(price / (HOURS_PER_YEAR * kind[1]), 6),
                f"azure-prices:{now}",
                now,
            )
            for (sku, region, kind), (price, date) in sorted(chosen.items())
            if kind[0] == "reserved"
        )
        expect(bool(offers) or bool(reserved), base, "no priced GPU size gpuwise knows")
        notes = []
        if resolved:
            notes.append(
                f"{resolved} repeated price row(s) set aside by the rule: primary meter region, "
                "then the newest effectiveStartDate"
            )
        valid = [d for (_, d) in chosen.values() if d]
        return Fetched(
            self.name,
            base,
            f"effective {max(valid)}" if valid else "no effectiveStartDate",
            now,
            tuple(offers),
            ("azure",) if offers else (),
            reserved=reserved,
            notes=tuple(notes),
            skipped=count_skips(
                {
                    f"GPU size not in gpuwise's Azure table (e.g. {', '.join(sorted(unknown)[:3])})": len(
                        unknown
                    ),
                    "Windows, Low Priority or non-hourly price": not_used,
                }
            ),
            refused=refused.as_tuple(),
        )


def _offers(
    chosen: dict[tuple[str, str, Kind], tuple[float, str]], specs: dict[str, AzureSku], seen: str
) -> list[Offer]:
    out = []
    pairs = sorted({(sku, region) for sku, region, kind in chosen if kind[0] != "reserved"})
    for sku, region in pairs:
        od = chosen.get((sku, region, ("od", 0)))
        spot = chosen.get((sku, region, ("spot", 0)))
        spec = specs[sku]
        date = (od or spot or (0.0, ""))[1]
        out.append(
            Offer(
                "azure",
                region,
                None,
                sku,
                spec.gpu,
                spec.gpu_count,
                spec.gpu_memory_gib,
                spec.vcpus,
                spec.memory_gib,
                od[0] if od else None,
                spot[0] if spot else None,
                "x86_64",
                f"azure-prices:{seen}",
                seen,
                date or None,
            )
        )
    return out
