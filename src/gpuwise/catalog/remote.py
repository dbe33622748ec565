"""Maintained public price sources for ``gpuwise catalog update --fetch``.

Each source is a :class:`RemoteSource` registered by name in :data:`REMOTE_SOURCES`. A source
downloads through :func:`gpuwise.catalog.fetch.fetch_bytes`, parses and validates everything it
got, and returns a :class:`Fetched` (offers, spot bands, reserved prices); it never writes. Any
problem (HTTP error, truncated body, a missing column, a wrong type) raises, so that
:func:`gpuwise.catalog.update.apply_fetched` writes nothing half-imported.

Base URLs are settings (environment variables) so that tests serve recorded files from
127.0.0.1 and a mirror can stand in for the public host:

=================  ====================================  =========================================
source             setting                               what it gives
=================  ====================================  =========================================
skypilot           GPUWISE_SKYPILOT_CATALOG_URL,         offers per cloud (SkyPilot ``vms.csv``)
                   GPUWISE_SKYPILOT_CLOUDS
aws-spot-advisor   GPUWISE_AWS_SPOT_ADVISOR_URL          AWS interruption band + savings per
                                                         instance type × region
azure-prices       GPUWISE_AZURE_PRICES_URL              Azure on-demand + spot offers and 1y/3y
                                                         reservations per GPU SKU × region
aws-price-list     GPUWISE_AWS_PRICE_LIST_URL,           AWS Reserved 1y/3y no-upfront prices for
                   GPUWISE_AWS_PRICE_LIST_REGIONS        GPU instance types
gpuhunt            GPUHUNT_CATALOG_URL,                  dstack's gpuhunt catalogs (AWS, Azure, GCP,
                   GPUHUNT_CATALOG_DIR,                  Lambda, OCI, RunPod, Nebius, Verda,
                   GPUWISE_GPUHUNT_PROVIDERS             CloudRift): offers
=================  ====================================  =========================================
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
import os
import re
import urllib.parse
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpuwise.catalog.offer import Offer
from gpuwise.catalog.resolve import resolve_gpu
from gpuwise.catalog.risk import ReservedPrice, SpotRisk
from gpuwise.catalog.skypilot import read_vms_csv
from gpuwise.errors import CatalogError
from gpuwise.units import HOURS_PER_YEAR

Getter = Callable[[str], bytes]
"""Downloads one URL (``fetch_bytes`` with the session's settings)."""


@dataclass(frozen=True)
class Fetched:
    """Everything one source returned, validated, not yet written."""

    source: str
    """Registry name, e.g. ``aws-spot-advisor``."""
    url: str
    """Where it was read from (base URL, or folder)."""
    version: str
    """The source's own version or date (gpuhunt catalog version, price-list version, …)."""
    as_of: str
    """Date of the prices (ISO date)."""
    offers: tuple[Offer, ...] = ()
    offer_clouds: tuple[str, ...] = ()
    """Clouds whose offers in the store these replace."""
    spot_risks: tuple[SpotRisk, ...] = ()
    reserved: tuple[ReservedPrice, ...] = ()
    notes: tuple[str, ...] = ()
    """What was skipped and why."""


class RemoteSource(Protocol):
    @property
    def name(self) -> str:
        """The registry name (``--fetch NAME``)."""
        ...

    def fetch(self, get: Getter, known: Sequence[Offer]) -> Fetched:
        """Download and validate; ``known`` is the current catalog (maps SKUs to GPUs)."""
        ...


def _today() -> str:
    return dt.date.today().isoformat()


def _env(name: str, default: str) -> str:
    return (os.environ.get(name) or default).rstrip("/")


def _json(data: bytes, url: str) -> Any:
    try:
        return json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CatalogError(
            f"{url}: not valid JSON ({type(exc).__name__})",
            hint="the download is damaged or the source changed; try again later",
        ) from None


def _text(data: bytes, url: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CatalogError(
            f"{url}: not UTF-8 text (byte {exc.start})",
            hint="the download is damaged or the source changed",
        ) from None


def _expect(cond: bool, url: str, what: str) -> None:
    if not cond:
        raise CatalogError(
            f"{url}: unexpected format: {what}",
            hint="the source changed its schema; nothing was imported (report it to gpuwise)",
        )


def _num(value: Any, url: str, what: str, *, positive: bool = False) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise CatalogError(
            f"{url}: {what}: {value!r} is not a number",
            hint="the source changed its schema; nothing was imported",
        ) from None
    if not math.isfinite(out) or out < 0 or (positive and out == 0):
        raise CatalogError(
            f"{url}: {what}: {value!r} is not a valid price/number",
            hint="the source changed its schema; nothing was imported",
        )
    return out


# --------------------------------------------------------------------------- SkyPilot

SKYPILOT_CATALOG_URL = (
    "https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/master/catalogs/v8"
)
SKYPILOT_CLOUDS = ("aws", "gcp", "azure", "lambda", "nebius", "runpod", "oci")


@dataclass(frozen=True)
class SkyPilotCatalog:
    """SkyPilot's public catalog: ``<base>/<cloud>/vms.csv`` per cloud (the bundled snapshot's schema)."""

    name: str = "skypilot"

    def fetch(self, get: Getter, known: Sequence[Offer]) -> Fetched:
        base = _env("GPUWISE_SKYPILOT_CATALOG_URL", SKYPILOT_CATALOG_URL)
        clouds = [
            c.strip().lower()
            for c in _env("GPUWISE_SKYPILOT_CLOUDS", ",".join(SKYPILOT_CLOUDS)).split(",")
            if c.strip()
        ]
        version = base.rsplit("/", 1)[-1]
        today = _today()
        offers: list[Offer] = []
        for cloud in clouds:
            url = f"{base}/{cloud}/vms.csv"
            rows = read_vms_csv(
                _text(get(url), url), cloud, url, as_of=today, source=f"skypilot:{version}/{cloud}"
            )
            if not rows:
                raise CatalogError(
                    f"{url}: no priced GPU rows", hint="the file is not a SkyPilot vms.csv"
                )
            offers += rows
        return Fetched(self.name, base, version, today, tuple(offers), tuple(clouds))


# --------------------------------------------------------------------------- AWS Spot Instance Advisor

AWS_SPOT_ADVISOR_URL = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"
_AWS_GPU_FAMILY = re.compile(r"^(p\d|g\d|gr\d|inf\d|trn\d|dl\d)[a-z0-9-]*\.", re.I)


@dataclass(frozen=True)
class AwsSpotAdvisor:
    """AWS Spot Instance Advisor data: interruption band (``r``) and savings (``s``) per type × region.

    Schema: ``{"ranges": [{"index", "label", "max"}…], "spot_advisor": {region: {"Linux": {type:
    {"s": savings %, "r": range index}}}}, "instance_types": {…}}``. Linux rows of GPU/accelerator
    families only (p, g, gr, inf, trn, dl, and any type the catalog knows for AWS).
    """

    name: str = "aws-spot-advisor"

    def fetch(self, get: Getter, known: Sequence[Offer]) -> Fetched:
        url = _env("GPUWISE_AWS_SPOT_ADVISOR_URL", AWS_SPOT_ADVISOR_URL)
        data = _json(get(url), url)
        _expect(
            isinstance(data, dict)
            and isinstance(data.get("ranges"), list)
            and isinstance(data.get("spot_advisor"), dict),
            url,
            "needs 'ranges' and 'spot_advisor'",
        )
        labels: dict[int, str] = {}
        for r in data["ranges"]:
            _expect(
                isinstance(r, dict)
                and isinstance(r.get("index"), int)
                and isinstance(r.get("label"), str),
                url,
                "each range needs an integer 'index' and a 'label'",
            )
            labels[r["index"]] = r["label"]
        aws_types = {o.instance_type for o in known if o.cloud == "aws"}
        today = _today()
        risks: list[SpotRisk] = []
        for region, by_os in data["spot_advisor"].items():
            _expect(isinstance(by_os, dict), url, f"spot_advisor.{region} is not a mapping")
            linux = by_os.get("Linux") or {}
            _expect(isinstance(linux, dict), url, f"spot_advisor.{region}.Linux is not a mapping")
            for itype, stats in linux.items():
                if itype not in aws_types and not _AWS_GPU_FAMILY.match(itype):
                    continue
                where = f"spot_advisor.{region}.Linux.{itype}"
                _expect(isinstance(stats, dict) and "r" in stats, url, f"{where} has no 'r'")
                r = stats["r"]
                _expect(
                    isinstance(r, int) and not isinstance(r, bool) and r in labels,
                    url,
                    f"{where}.r = {r!r} is not a range index",
                )
                s = stats.get("s")
                savings = None if s is None else _num(s, url, f"{where}.s")
                risks.append(
                    SpotRisk(
                        "aws",
                        str(region),
                        str(itype),
                        labels[r],
                        savings,
                        f"aws-spot-advisor:{today}",
                        today,
                    )
                )
        _expect(bool(risks), url, "no GPU instance type in the file")
        return Fetched(
            self.name,
            url,
            today,
            today,
            spot_risks=tuple(risks),
            notes=("the advisor file carries no date: as-of is the download date",),
        )


# --------------------------------------------------------------------------- Azure retail prices

AZURE_PRICES_URL = "https://prices.azure.com/api/retail/prices"
_AZURE_FILTER = (
    "serviceName eq 'Virtual Machines' and currencyCode eq 'USD' and "
    "contains(armSkuName, 'Standard_N')"
)
_MAX_PAGES = 500


@dataclass(frozen=True)
class AzureRetailPrices:
    """Azure Retail Prices API: ``{"Items": [...], "NextPageLink": ...}``, items with ``armSkuName``,
    ``armRegionName``, ``retailPrice``, ``unitOfMeasure``, ``type`` (``Consumption`` / ``Reservation``),
    ``skuName`` (``… Spot``, ``… Low Priority``), ``productName`` (``… Windows``), ``reservationTerm``
    (``1 Year`` / ``3 Years``; the price is then for the whole term) and ``effectiveStartDate``.

    GPU model and count come from the catalog's Azure rows for the same SKU; SKUs the catalog does
    not know are skipped and counted in the notes.
    """

    name: str = "azure-prices"

    def fetch(self, get: Getter, known: Sequence[Offer]) -> Fetched:
        base = _env("GPUWISE_AZURE_PRICES_URL", AZURE_PRICES_URL)
        url: str | None = base + "?" + urllib.parse.urlencode({"$filter": _AZURE_FILTER})
        origin = urllib.parse.urlsplit(base)[:2]
        items: list[dict[str, Any]] = []
        for _ in range(_MAX_PAGES):
            if url is None:
                break
            page = _json(get(url), url)
            _expect(
                isinstance(page, dict) and isinstance(page.get("Items"), list),
                url,
                "needs an 'Items' list",
            )
            items += page["Items"]
            nxt = page.get("NextPageLink")
            if nxt and urllib.parse.urlsplit(nxt)[:2] != origin:
                raise CatalogError(
                    f"{url}: NextPageLink points to another host ({nxt})",
                    hint="check GPUWISE_AZURE_PRICES_URL",
                )
            url = nxt or None
        else:
            raise CatalogError(
                f"{base}: more than {_MAX_PAGES} pages",
                hint="the filter no longer narrows the list",
            )
        specs = {o.instance_type: o for o in known if o.cloud == "azure"}
        od: dict[tuple[str, str], float] = {}
        spot: dict[tuple[str, str], float] = {}
        reserved: dict[tuple[str, str, int], float] = {}
        dates: list[str] = []
        unknown: set[str] = set()
        for i, item in enumerate(items):
            where = f"Items[{i}]"
            _expect(isinstance(item, dict), base, f"{where} is not an object")
            for col in (
                "armSkuName",
                "armRegionName",
                "retailPrice",
                "type",
                "skuName",
                "productName",
            ):
                _expect(col in item, base, f"{where} has no '{col}'")
            sku, region = str(item["armSkuName"]), str(item["armRegionName"])
            sku_name, product = str(item["skuName"]), str(item["productName"])
            if (
                item.get("unitOfMeasure", "1 Hour") != "1 Hour"
                or "Windows" in product
                or "Low Priority" in sku_name
            ):
                continue
            if sku not in specs:
                unknown.add(sku)
                continue
            price = _num(item["retailPrice"], base, f"{where}.retailPrice")
            if str(item.get("effectiveStartDate", ""))[:10]:
                dates.append(str(item["effectiveStartDate"])[:10])
            kind = item["type"]
            if kind == "Reservation":
                years = {"1 Year": 1, "3 Years": 3}.get(str(item.get("reservationTerm")), 0)
                _expect(
                    years > 0, base, f"{where}.reservationTerm = {item.get('reservationTerm')!r}"
                )
                if price > 0:
                    reserved[(sku, region, years)] = price / (HOURS_PER_YEAR * years)
            elif kind == "Consumption" and price > 0:
                (spot if sku_name.endswith(" Spot") else od)[(sku, region)] = price
        today = _today()
        as_of = today
        src = f"azure-prices:{today}"
        offers = []
        for sku, region in sorted(od.keys() | spot.keys()):
            spec = specs[sku]
            offers.append(
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
                    od.get((sku, region)),
                    spot.get((sku, region)),
                    spec.arch,
                    src,
                    as_of,
                )
            )
        res = tuple(
            ReservedPrice("azure", region, sku, years, round(usd, 6), src, as_of)
            for (sku, region, years), usd in sorted(reserved.items())
        )
        _expect(bool(offers) or bool(res), base, "no priced GPU SKU the catalog knows")
        notes = (
            (
                f"{len(unknown)} Azure GPU SKU(s) skipped: the catalog does not know their GPU "
                f"(e.g. {', '.join(sorted(unknown)[:3])})",
            )
            if unknown
            else ()
        )
        return Fetched(
            self.name,
            base,
            max(dates, default=today),
            as_of,
            tuple(offers),
            ("azure",) if offers else (),
            reserved=res,
            notes=notes,
        )


# --------------------------------------------------------------------------- AWS price list

AWS_PRICE_LIST_URL = "https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current"
AWS_PRICE_LIST_REGIONS = ("us-east-1", "us-west-2")


@dataclass(frozen=True)
class AwsPriceList:
    """AWS public price list (``<base>/<region>/index.json``): Reserved 1y/3y, No Upfront, standard
    class, for Linux shared-tenancy GPU instances. Schema: ``products[sku].attributes`` (``instanceType``,
    ``regionCode``, ``operatingSystem``, ``tenancy``, ``preInstalledSw``, ``capacitystatus``) and
    ``terms.Reserved[sku][code]`` with ``termAttributes`` (``LeaseContractLength``, ``PurchaseOption``,
    ``OfferingClass``) and ``priceDimensions[*]`` (``unit`` ``Hrs``, ``pricePerUnit.USD``).

    The regional files are large (hundreds of MB for big regions): raise GPUWISE_FETCH_MAX_BYTES
    and list only the regions you use in GPUWISE_AWS_PRICE_LIST_REGIONS.
    """

    name: str = "aws-price-list"

    def fetch(self, get: Getter, known: Sequence[Offer]) -> Fetched:
        base = _env("GPUWISE_AWS_PRICE_LIST_URL", AWS_PRICE_LIST_URL)
        regions = [
            r.strip()
            for r in _env("GPUWISE_AWS_PRICE_LIST_REGIONS", ",".join(AWS_PRICE_LIST_REGIONS)).split(
                ","
            )
            if r.strip()
        ]
        aws_types = {o.instance_type for o in known if o.cloud == "aws"}
        out: dict[tuple[str, str, str, int], ReservedPrice] = {}
        versions, dates = [], []
        for region in regions:
            url = f"{base}/{region}/index.json"
            data = _json(get(url), url)
            _expect(
                isinstance(data, dict)
                and isinstance(data.get("products"), dict)
                and isinstance(data.get("terms"), dict),
                url,
                "needs 'products' and 'terms'",
            )
            version = str(data.get("version", ""))
            published = str(data.get("publicationDate", ""))[:10] or _today()
            versions.append(version)
            dates.append(published)
            gpu_skus: dict[str, tuple[str, str]] = {}
            for sku, product in data["products"].items():
                _expect(
                    isinstance(product, dict) and isinstance(product.get("attributes", {}), dict),
                    url,
                    f"products.{sku} is not an object",
                )
                a = product.get("attributes", {})
                itype = str(a.get("instanceType", ""))
                if not itype or (itype not in aws_types and not _AWS_GPU_FAMILY.match(itype)):
                    continue
                if (
                    a.get("operatingSystem"),
                    a.get("tenancy"),
                    a.get("preInstalledSw", "NA"),
                    a.get("capacitystatus", "Used"),
                ) != ("Linux", "Shared", "NA", "Used"):
                    continue
                gpu_skus[sku] = (itype, str(a.get("regionCode") or region))
            reserved = data["terms"].get("Reserved", {})
            _expect(isinstance(reserved, dict), url, "terms.Reserved is not a mapping")
            for sku, (itype, reg) in gpu_skus.items():
                for code, term in (reserved.get(sku) or {}).items():
                    where = f"terms.Reserved.{sku}.{code}"
                    _expect(
                        isinstance(term, dict)
                        and isinstance(term.get("termAttributes"), dict)
                        and isinstance(term.get("priceDimensions"), dict),
                        url,
                        f"{where} needs termAttributes and priceDimensions",
                    )
                    ta = term["termAttributes"]
                    if (
                        ta.get("PurchaseOption") != "No Upfront"
                        or ta.get("OfferingClass", "standard") != "standard"
                    ):
                        continue
                    years = {"1yr": 1, "3yr": 3}.get(str(ta.get("LeaseContractLength")), 0)
                    _expect(
                        years > 0,
                        url,
                        f"{where}.LeaseContractLength = {ta.get('LeaseContractLength')!r}",
                    )
                    hourly = [
                        d
                        for d in term["priceDimensions"].values()
                        if isinstance(d, dict) and d.get("unit") == "Hrs"
                    ]
                    _expect(len(hourly) == 1, url, f"{where}: expected one hourly price dimension")
                    usd = _num(
                        (hourly[0].get("pricePerUnit") or {}).get("USD"),
                        url,
                        f"{where} pricePerUnit.USD",
                        positive=True,
                    )
                    out[("aws", reg, itype, years)] = ReservedPrice(
                        "aws",
                        reg,
                        itype,
                        years,
                        usd,
                        f"aws-price-list:{version or published}",
                        published,
                    )
        _expect(bool(out), base, "no Reserved No-Upfront price for a GPU instance type")
        return Fetched(
            self.name,
            base,
            ",".join(sorted(set(versions))),
            max(dates),
            reserved=tuple(out.values()),
        )


# --------------------------------------------------------------------------- gpuhunt

GPUHUNT_CATALOG_URL = "https://dstack-gpu-pricing.s3.eu-west-1.amazonaws.com/v3"
GPUHUNT_PROVIDERS = (
    "aws",
    "azure",
    "verda",
    "gcp",
    "lambdalabs",
    "nebius",
    "oci",
    "runpod",
    "cloudrift",
)
GPUHUNT_COLUMNS = (
    "instance_name",
    "location",
    "price",
    "cpu",
    "memory",
    "gpu_count",
    "gpu_name",
    "gpu_memory",
    "spot",
)
"""Required columns of gpuhunt's published catalog CSV (its ``CATALOG_V2_FIELDS`` also has
``disk_size``, ``gpu_vendor``, ``flags``, ``cpu_arch``, ``provider_data``, read when present)."""
_GPUHUNT_CLOUD = {"lambdalabs": "lambda", "datacrunch": "verda"}


def _gpuhunt_defaults() -> tuple[str, tuple[str, ...]]:
    """gpuhunt's own base URL and offline providers when the extra is installed, else the same constants."""
    try:
        from gpuhunt._internal import catalog as gh  # optional extra: gpuwise[gpuhunt]
    except ImportError:
        return GPUHUNT_CATALOG_URL, GPUHUNT_PROVIDERS
    return str(getattr(gh, "CATALOG_URL", GPUHUNT_CATALOG_URL)), tuple(
        getattr(gh, "OFFLINE_PROVIDERS", GPUHUNT_PROVIDERS)
    )


def _gpuhunt_gpu(name: str, memory_gb: float | None) -> str:
    """Canonical model; an A100 with 80 GB is gpuwise's ``A100-80GB``."""
    model = resolve_gpu(name)
    if memory_gb:
        wider = resolve_gpu(f"{name}-{memory_gb:g}GB")
        if wider != f"{name}-{memory_gb:g}GB":
            return wider
    return model


def read_gpuhunt_csv(
    text: str, provider: str, origin: str, *, version: str, as_of: str
) -> list[Offer]:
    """gpuhunt's catalog CSV → offers: its on-demand and spot rows of one instance merge into one Offer.

    Strict where gpuhunt's own loader is lenient (it skips bad rows with a warning): a row with a
    wrong type is an error naming the row, so nothing is half-imported.
    """
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in GPUHUNT_COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise CatalogError(
            f"{origin}: missing column(s) {', '.join(missing)}",
            hint="the gpuhunt catalog schema changed; nothing was imported",
        )
    cloud = _GPUHUNT_CLOUD.get(provider, provider)
    src = f"gpuhunt:{provider}@{version}"
    merged: dict[tuple[str, str, str, float], dict[str, Any]] = {}
    for lineno, row in enumerate(reader, start=2):
        where = f"{origin}, row {lineno}"
        if None in row:
            raise CatalogError(f"{where}: more cells than columns", hint="the download is damaged")
        count = _num(row["gpu_count"], where, "gpu_count")
        if count == 0 or not (row.get("gpu_name") or "").strip():
            continue  # CPU-only instance
        price = _num(row["price"], where, "price")
        spot = (row["spot"] or "").strip().lower()
        _expect(spot in ("true", "false"), where, f"spot = {row['spot']!r}")
        gpu_mem = (
            _num(row["gpu_memory"], where, "gpu_memory")
            if (row.get("gpu_memory") or "").strip()
            else None
        )
        gpu = _gpuhunt_gpu(row["gpu_name"].strip(), gpu_mem)
        key = (row["location"].strip(), row["instance_name"].strip(), gpu, count)
        entry = merged.setdefault(
            key,
            {
                "cpu": _num(row["cpu"], where, "cpu"),
                "memory": _num(row["memory"], where, "memory"),
                "gpu_mem": gpu_mem,
                "arch": "arm64" if (row.get("cpu_arch") or "") == "arm" else "x86_64",
            },
        )
        if price > 0:
            entry["spot" if spot == "true" else "od"] = price
    offers = [
        Offer(
            cloud,
            loc,
            None,
            itype,
            gpu,
            count,
            e["gpu_mem"],
            e["cpu"] or None,
            e["memory"] or None,
            e.get("od"),
            e.get("spot"),
            e["arch"],
            src,
            as_of,
        )
        for (loc, itype, gpu, count), e in merged.items()
        if "od" in e or "spot" in e
    ]
    return offers


def _version_date(version: str) -> str:
    m = re.match(r"^(\d{4})(\d{2})(\d{2})", version)
    return f"{m.group(1)}-{m.group(2)}-{m.group(3)}" if m else _today()


@dataclass(frozen=True)
class Gpuhunt:
    """dstack's gpuhunt catalogs: ``<base>/<provider>/version`` then ``<base>/<provider>/<version>/catalog.zip``
    holding ``<provider>.csv`` (the layout gpuhunt itself reads; ``GPUHUNT_CATALOG_URL`` moves it, and
    ``GPUHUNT_CATALOG_DIR`` reads ``<dir>/<provider>.csv`` files instead, as gpuhunt does)."""

    name: str = "gpuhunt"

    def fetch(self, get: Getter, known: Sequence[Offer]) -> Fetched:
        default_url, default_providers = _gpuhunt_defaults()
        base = _env("GPUHUNT_CATALOG_URL", default_url)
        providers = [
            p.strip().lower()
            for p in _env("GPUWISE_GPUHUNT_PROVIDERS", ",".join(default_providers)).split(",")
            if p.strip()
        ]
        folder = os.environ.get("GPUHUNT_CATALOG_DIR")
        offers: list[Offer] = []
        versions: list[str] = []
        for provider in providers:
            if folder:
                path = Path(folder) / f"{provider}.csv"
                try:
                    text = path.read_text("utf-8")
                except OSError as exc:
                    raise CatalogError(
                        f"{path}: cannot read ({exc.strerror})", hint="check GPUHUNT_CATALOG_DIR"
                    ) from None
                version = dt.date.fromtimestamp(path.stat().st_mtime).isoformat()
                origin = str(path)
            else:
                version = _text(
                    get(f"{base}/{provider}/version"), f"{base}/{provider}/version"
                ).strip()
                _expect(
                    bool(re.fullmatch(r"[\w.-]{1,64}", version)),
                    f"{base}/{provider}/version",
                    f"version {version[:40]!r}",
                )
                origin = f"{base}/{provider}/{version}/catalog.zip"
                text = _unzip_one(get(origin), f"{provider}.csv", origin)
            versions.append(f"{provider}@{version}")
            offers += read_gpuhunt_csv(
                text, provider, origin, version=version, as_of=_version_date(version)
            )
        clouds = tuple(sorted({o.cloud for o in offers}))
        _expect(bool(offers), base, "no GPU offer in the catalogs")
        return Fetched(
            self.name,
            folder or base,
            " ".join(versions),
            max(o.as_of for o in offers),
            tuple(offers),
            clouds,
        )


def _unzip_one(data: bytes, member: str, origin: str) -> str:
    from gpuwise.catalog.fetch import FetchSettings

    limit = FetchSettings.from_env().max_bytes
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            info = zf.getinfo(member)
            if info.file_size > limit:
                raise CatalogError(
                    f"{origin}: {member} unpacks to {info.file_size:,} bytes, over the limit",
                    hint="raise GPUWISE_FETCH_MAX_BYTES if that is expected",
                )
            raw = zf.read(info)
    except KeyError:
        raise CatalogError(
            f"{origin}: no {member} inside", hint="the gpuhunt catalog layout changed"
        ) from None
    except (zipfile.BadZipFile, EOFError, OSError) as exc:
        raise CatalogError(
            f"{origin}: not a valid zip ({exc})", hint="the download is damaged; try again"
        ) from None
    return _text(raw, origin)


REMOTE_SOURCES: dict[str, Callable[[], RemoteSource]] = {
    "skypilot": SkyPilotCatalog,
    "aws-spot-advisor": AwsSpotAdvisor,
    "azure-prices": AzureRetailPrices,
    "aws-price-list": AwsPriceList,
    "gpuhunt": Gpuhunt,
}
"""Every ``--fetch`` source by name. ``--fetch`` without names runs :data:`DEFAULT_FETCH` in order."""

DEFAULT_FETCH = ("skypilot", "azure-prices", "aws-spot-advisor", "aws-price-list")
"""gpuhunt is left out of the default: it supplies the same clouds as SkyPilot from another
collector, and two sources for one cloud would only replace each other."""


def remote_sources(names: Iterable[str]) -> list[RemoteSource]:
    from gpuwise.errors import InputError, did_you_mean

    out = []
    for name in names:
        if name not in REMOTE_SOURCES:
            raise InputError(
                f"unknown source {name!r}",
                hint=f"use one of: {', '.join(REMOTE_SOURCES)}",
                suggestions=did_you_mean(name, list(REMOTE_SOURCES)),
            )
        out.append(REMOTE_SOURCES[name]())
    return out
