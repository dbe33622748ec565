"""The AWS public price list (``<base>/<region>/index.json``) for ``catalog update --fetch
aws-price-list``: Reserved 1y/3y No Upfront prices of GPU instance types.

A regional file is hundreds of MB of JSON; building it as Python objects took ~5× its size in
memory. It is read as a stream instead (:mod:`ijson`): the top-level scalars, then each product,
then only the reserved terms of the GPU products, so peak memory stays near the size of the
downloaded bytes (``benchmarks/catalog_speed.py --price-list`` measures it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gpuwise.catalog.offer import Offer
from gpuwise.catalog.remote_common import (
    UNKNOWN_DATE,
    Fetched,
    Getter,
    Refusals,
    env,
    env_list,
    expect,
    number,
    oldest_date,
)
from gpuwise.catalog.risk import ReservedPrice
from gpuwise.errors import CatalogError

AWS_PRICE_LIST_URL = "https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current"
AWS_PRICE_LIST_REGIONS = ("us-east-1", "us-west-2")
AWS_GPU_FAMILY = re.compile(r"^(p\d|g\d|gr\d|inf\d|trn\d|dl\d)[a-z0-9-]*\.", re.I)
"""AWS instance families with GPUs or ML accelerators (p, g, gr, inf, trn, dl)."""


def _short(exc: Exception) -> str:
    return " ".join(str(exc).split())[:60]


class _Reader:
    """A file-like view of the downloaded bytes for ijson, without copying them."""

    def __init__(self, data: bytes | bytearray) -> None:
        self._view = memoryview(data)
        self._pos = 0

    def read(self, n: int = -1) -> bytes:
        end = len(self._view) if n < 0 else self._pos + n
        out = bytes(self._view[self._pos : end])
        self._pos += len(out)
        return out


def _events(data: bytes | bytearray, prefix: str, url: str) -> Iterator[tuple[str, Any]]:
    """``(key, value)`` pairs of the object at ``prefix``, streamed; a damaged file is a CatalogError."""
    import ijson

    try:
        yield from ijson.kvitems(_Reader(data), prefix, use_float=True)
    except ijson.JSONError as exc:
        raise CatalogError(
            f"{url}: not valid JSON ({_short(exc)})",
            hint="the download is damaged or the source changed; try again later",
        ) from None


def _top_level(data: bytes | bytearray, url: str) -> dict[str, Any]:
    """The scalar fields before ``products`` (``version``, ``publicationDate``, …)."""
    import ijson

    out: dict[str, Any] = {}
    try:
        for prefix, event, value in ijson.parse(_Reader(data)):
            if prefix in ("products", "terms"):
                out.setdefault("_has_" + prefix, True)
                if prefix == "products":
                    break
            elif prefix and "." not in prefix and event in ("string", "number"):
                out[prefix] = value
    except ijson.JSONError as exc:
        raise CatalogError(
            f"{url}: not valid JSON ({_short(exc)})",
            hint="the download is damaged or the source changed; try again later",
        ) from None
    return out


_PLAIN = {
    "operatingSystem": "Linux",
    "tenancy": "Shared",
    "preInstalledSw": "NA",
    "capacitystatus": "Used",
    "licenseModel": "No License required",
    "marketoption": "OnDemand",
}
"""Product attributes of the plain Linux instance (an absent attribute counts as this value): the
price list also sells each type dedicated, with SQL Server or another licence, unused
reservations and capacity blocks, each a separate SKU with its own reserved terms."""


def _gpu_skus(
    data: bytes | bytearray, url: str, region: str, aws_types: set[str]
) -> dict[str, tuple[str, str]]:
    """sku → (instance type, region) for the plain Linux products (:data:`_PLAIN`) of GPU types."""
    out: dict[str, tuple[str, str]] = {}
    for sku, product in _events(data, "products", url):
        expect(
            isinstance(product, dict) and isinstance(product.get("attributes", {}), dict),
            url,
            f"products.{sku} is not an object",
        )
        a = product.get("attributes", {})
        itype = str(a.get("instanceType", ""))
        if not itype or (itype not in aws_types and not AWS_GPU_FAMILY.match(itype)):
            continue
        if any(a.get(k, v) != v for k, v in _PLAIN.items() if k != "operatingSystem") or (
            a.get("operatingSystem") != "Linux"
        ):
            continue
        out[sku] = (itype, str(a.get("regionCode") or region))
    return out


def _reserved_rows(
    url: str, sku: str, terms: Any, itype: str, reg: str, label: str, published: str
) -> Iterator[ReservedPrice]:
    expect(isinstance(terms, dict), url, f"terms.Reserved.{sku} is not a mapping")
    for code, term in terms.items():
        where = f"terms.Reserved.{sku}.{code}"
        expect(
            isinstance(term, dict)
            and isinstance(term.get("termAttributes"), dict)
            and isinstance(term.get("priceDimensions"), dict),
            url,
            f"{where} needs termAttributes and priceDimensions",
        )
        ta = term["termAttributes"]
        if ta.get("PurchaseOption") != "No Upfront" or ta.get("OfferingClass", "standard") != (
            "standard"
        ):
            continue
        years = {"1yr": 1, "3yr": 3}.get(str(ta.get("LeaseContractLength")), 0)
        expect(years > 0, url, f"{where}.LeaseContractLength = {ta.get('LeaseContractLength')!r}")
        hourly = [
            d
            for d in term["priceDimensions"].values()
            if isinstance(d, dict) and d.get("unit") == "Hrs"
        ]
        expect(len(hourly) == 1, url, f"{where}: expected one hourly price dimension")
        usd = number(
            (hourly[0].get("pricePerUnit") or {}).get("USD"),
            url,
            f"{where} pricePerUnit.USD",
            positive=True,
        )
        yield ReservedPrice("aws", reg, itype, years, usd, f"aws-price-list:{label}", published)


@dataclass(frozen=True)
class AwsPriceList:
    """AWS public price list (``<base>/<region>/index.json``): Reserved 1y/3y, No Upfront, standard
    class, for Linux shared-tenancy GPU instances. Schema: ``products[sku].attributes`` (``instanceType``,
    ``regionCode``, ``operatingSystem``, ``tenancy``, ``preInstalledSw``, ``capacitystatus``) and
    ``terms.Reserved[sku][code]`` with ``termAttributes`` (``LeaseContractLength``, ``PurchaseOption``,
    ``OfferingClass``) and ``priceDimensions[*]`` (``unit`` ``Hrs``, ``pricePerUnit.USD``). Dated by the
    file's ``publicationDate``.

    The regional files are large (hundreds of MB for big regions): raise GPUWISE_FETCH_MAX_BYTES
    and list only the regions you use in GPUWISE_AWS_PRICE_LIST_REGIONS.
    """

    name: str = "aws-price-list"

    def fetch(self, get: Getter, known: Sequence[Offer]) -> Fetched:
        base = env("GPUWISE_AWS_PRICE_LIST_URL", AWS_PRICE_LIST_URL)
        regions = env_list("GPUWISE_AWS_PRICE_LIST_REGIONS", AWS_PRICE_LIST_REGIONS)
        aws_types = {o.instance_type for o in known if o.cloud == "aws"}
        out: dict[tuple[str, str, str, int], ReservedPrice] = {}
        by_sku: dict[tuple[str, str, str, int], str] = {}
        clash: dict[tuple[str, str, str, int], set[str]] = {}
        versions, dates = [], []
        for region in regions:
            url = f"{base}/{region}/index.json"
            data = get(url)
            top = _top_level(data, url)
            expect(bool(top.get("_has_products")), url, "needs 'products' and 'terms'")
            version = str(top.get("version", ""))
            published = str(top.get("publicationDate", ""))[:10] or UNKNOWN_DATE
            versions.append(version)
            dates.append(published)
            gpu_skus = _gpu_skus(data, url, region, aws_types)
            seen_terms = False
            for sku, terms in _events(data, "terms.Reserved", url):
                seen_terms = True
                if sku not in gpu_skus:
                    continue
                itype, reg = gpu_skus[sku]
                for row in _reserved_rows(
                    url, sku, terms, itype, reg, version or published, published
                ):
                    old = out.get(row.key)
                    if old is not None and old.usd_per_hour != row.usd_per_hour:
                        clash.setdefault(row.key, {by_sku[row.key]}).add(
                            f"{sku} {row.usd_per_hour:g}"
                        )
                        continue
                    out[row.key] = row
                    by_sku.setdefault(row.key, f"{sku} {row.usd_per_hour:g}")
            expect(seen_terms or not gpu_skus, url, "needs 'products' and 'terms'")
            del data  # one region's bytes at a time
        refused = Refusals()
        for key, skus in sorted(clash.items()):
            del out[key]
            refused.add(
                "two plain Linux SKUs with different reserved prices for one type and term",
                f"{key[2]} in {key[1]} {key[3]}y: {' vs '.join(sorted(skus))}",
            )
        expect(bool(out), base, "no Reserved No-Upfront price for a GPU instance type")
        return Fetched(
            self.name,
            base,
            ",".join(sorted(set(versions))),
            oldest_date(dates),
            reserved=tuple(out.values()),
            refused=refused.as_tuple(),
        )
