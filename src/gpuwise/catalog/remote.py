"""Maintained public price sources for ``gpuwise catalog update --fetch``.

Each source is a :class:`RemoteSource` registered by name in :data:`REMOTE_SOURCES`. A source
downloads through :func:`gpuwise.catalog.fetch.fetch_bytes`, parses and validates everything it
got, and returns a :class:`Fetched` (offers, spot bands, reserved prices); it never writes. A
doubtful file (HTTP error, truncated body, a short row, a missing column, a wrong type, two prices
for one offer) raises, so that source imports nothing; the other sources of the run still do.

Base URLs are settings (environment variables) so that tests serve recorded files from
127.0.0.1 and a mirror can stand in for the public host:

=================  ====================================  =========================================
source             setting                               what it gives
=================  ====================================  =========================================
skypilot           GPUWISE_SKYPILOT_CATALOG_URL,         offers per cloud (SkyPilot ``vms.csv``);
                   GPUWISE_SKYPILOT_CLOUDS,              a cloud with no file in this version is
                   GPUWISE_SKYPILOT_COMMITS_URL          read from the newest older version
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

Dates: every source records the date the upstream gives its prices (the catalog file's last commit,
HTTP ``Last-Modified``, Azure's ``effectiveStartDate``, the price list's ``publicationDate``,
gpuhunt's version), never the download time; ``unknown`` when the upstream states none.
"""

from __future__ import annotations

import math
import re
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from gpuwise.base import settings
from gpuwise.catalog.fetch import NotFound
from gpuwise.catalog.offer import Offer
from gpuwise.catalog.remote_aws import AWS_GPU_FAMILY, AwsPriceList
from gpuwise.catalog.remote_azure import AzureRetailPrices
from gpuwise.catalog.remote_common import (
    UNKNOWN_DATE,
    Fetched,
    Getter,
    Refusals,
    RemoteSource,
    add_skips,
    as_json,
    complete_csv,
    count_skips,
    env,
    env_list,
    expect,
    number,
    oldest_date,
)
from gpuwise.catalog.remote_gpuhunt import Gpuhunt, read_gpuhunt_csv
from gpuwise.catalog.risk import SpotRisk
from gpuwise.catalog.skypilot import parse_vms_csv
from gpuwise.errors import CatalogError

__all__ = [
    "DEFAULT_FETCH",
    "REMOTE_SOURCES",
    "AwsPriceList",
    "AwsSpotAdvisor",
    "AzureRetailPrices",
    "Fetched",
    "Gpuhunt",
    "RemoteSource",
    "SkyPilotCatalog",
    "read_gpuhunt_csv",
    "remote_sources",
]

# --------------------------------------------------------------------------- SkyPilot

SKYPILOT_CATALOG_URL = (
    "https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/master/catalogs/v8"
)
SKYPILOT_COMMITS_URL = "https://api.github.com/repos/skypilot-org/skypilot-catalog/commits"
SKYPILOT_CLOUDS = ("aws", "gcp", "azure", "lambda", "nebius", "runpod", "oci")
OLDEST_SKYPILOT_VERSION = 5
"""How far back a cloud with no file in the current schema version is looked for (upstream has
no v8 or v7 Azure ``vms.csv``; v6 is the newest Azure file)."""


def _versions(base: str) -> list[tuple[str, str]]:
    """(version, base URL) to try, newest first: ``…/v8`` → v8, v7, v6, v5; any other base → itself."""
    m = re.search(r"/v(\d+)$", base)
    if not m:
        return [(base.rsplit("/", 1)[-1], base)]
    n = int(m.group(1))
    head = base[: m.start()]
    return [(f"v{k}", f"{head}/v{k}") for k in range(n, min(n, OLDEST_SKYPILOT_VERSION) - 1, -1)]


def _commit_date(get: Getter, version: str, cloud: str) -> str | None:
    """The date of the last commit that touched ``catalogs/<version>/<cloud>/vms.csv`` (GitHub API),
    or None when switched off (``GPUWISE_SKYPILOT_COMMITS_URL=off``), when the catalog is read from
    a mirror and no commits URL is set for it, or when the API does not answer."""

    api = env("GPUWISE_SKYPILOT_COMMITS_URL", SKYPILOT_COMMITS_URL)
    if api.lower() in ("off", "none", "0"):
        return None
    mirror = env("GPUWISE_SKYPILOT_CATALOG_URL", SKYPILOT_CATALOG_URL) != SKYPILOT_CATALOG_URL
    if mirror and not settings.text("GPUWISE_SKYPILOT_COMMITS_URL"):
        return None  # a mirror's files need not match the upstream repository's history
    query = urllib.parse.urlencode({"path": f"catalogs/{version}/{cloud}/vms.csv", "per_page": 1})
    try:
        data = as_json(get(f"{api}?{query}"), api)
        date = str(data[0]["commit"]["committer"]["date"])
    except (CatalogError, LookupError, TypeError):
        return None
    return date[:10] if re.match(r"^\d{4}-\d{2}-\d{2}", date) else None


@dataclass(frozen=True)
class SkyPilotCatalog:
    """SkyPilot's public catalog: ``<base>/<cloud>/vms.csv`` per cloud (the bundled snapshot's schema).

    A cloud with no file in the base version (HTTP 404) is read from the newest older version that
    has one, labelled with that version and its date; with none at all it is skipped with a note.
    Each cloud's prices are dated by the file's last commit (GitHub API), else the server's
    ``Last-Modified``, else ``unknown``.
    """

    name: str = "skypilot"

    def fetch(self, get: Getter, known: Sequence[Offer]) -> Fetched:
        base = env("GPUWISE_SKYPILOT_CATALOG_URL", SKYPILOT_CATALOG_URL)
        clouds = [c.lower() for c in env_list("GPUWISE_SKYPILOT_CLOUDS", SKYPILOT_CLOUDS)]
        offers: list[Offer] = []
        got: list[str] = []
        notes: list[str] = []
        dates: list[str] = []
        versions: list[str] = []
        skipped: dict[str, int] = {}
        for cloud in clouds:
            found = self._one_cloud(get, base, cloud, notes)
            if found is None:
                continue
            version, url, text, as_of = found
            read = parse_vms_csv(
                text, cloud, url, as_of=as_of, source=f"skypilot:{version}/{cloud}"
            )
            if not read.offers:
                raise CatalogError(
                    f"{url}: no priced GPU rows", hint="the file is not a SkyPilot vms.csv"
                )
            add_skips(skipped, read.skipped, f"{cloud}: ")
            offers += read.offers
            got.append(cloud)
            dates.append(as_of)
            versions.append(f"{cloud}@{version}")
        if not offers:
            raise CatalogError(
                f"{base}: no cloud file found ({', '.join(clouds)})",
                hint="check GPUWISE_SKYPILOT_CATALOG_URL and GPUWISE_SKYPILOT_CLOUDS",
            )
        return Fetched(
            self.name,
            base,
            " ".join(versions),
            oldest_date(dates),
            tuple(offers),
            tuple(got),
            notes=tuple(notes),
            skipped=count_skips(skipped),
        )

    def _one_cloud(
        self, get: Getter, base: str, cloud: str, notes: list[str]
    ) -> tuple[str, str, str, str] | None:
        """(version, url, text, as_of) of the newest file for ``cloud``; None (noted) when none."""
        tried = []
        for version, vbase in _versions(base):
            url = f"{vbase}/{cloud}/vms.csv"
            try:
                body = get(url)
            except NotFound:
                tried.append(version)
                continue
            text = complete_csv(body, url)
            as_of = _commit_date(get, version, cloud) or body.last_modified or UNKNOWN_DATE
            if tried:
                notes.append(
                    f"{cloud}: no {'/'.join(tried)} file upstream; read {version} (as of {as_of})"
                )
            return version, url, text, as_of
        notes.append(f"{cloud}: skipped, no vms.csv upstream ({', '.join(tried)})")
        return None


# --------------------------------------------------------------------------- AWS Spot Instance Advisor

AWS_SPOT_ADVISOR_URL = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"
ADVISOR_BAND_LABELS = ("<5%", "5-10%", "10-15%", "15-20%", ">20%")
"""The band labels gpuwise's planner knows (``aws_advisor_bands`` in ``planner/data/spot.yaml``; a
test keeps the two equal). Rows in a band with any other label are refused one by one and counted:
the planner would silently fall back to the cloud default for them."""


@dataclass(frozen=True)
class AwsSpotAdvisor:
    """AWS Spot Instance Advisor data: interruption band (``r``) and savings (``s``) per type × region.

    Schema: ``{"ranges": [{"index", "label", "dots", "max"}…], "spot_advisor": {region: {"Linux":
    {type: {"s": savings %, "r": range index}}}}, "instance_types": {…}, "global_rate"}``. Linux rows
    of GPU/accelerator families only (p, g, gr, inf, trn, dl, and any type the catalog knows for AWS).
    Each band keeps the file's own upper edge (``max``: 5, 11, 16, 22, 100 in the real file). The file
    carries no date: as-of is the server's ``Last-Modified``.
    """

    name: str = "aws-spot-advisor"

    def fetch(self, get: Getter, known: Sequence[Offer]) -> Fetched:
        url = env("GPUWISE_AWS_SPOT_ADVISOR_URL", AWS_SPOT_ADVISOR_URL)
        body = get(url)
        data = as_json(body, url)
        expect(
            isinstance(data, dict)
            and isinstance(data.get("ranges"), list)
            and isinstance(data.get("spot_advisor"), dict),
            url,
            "needs 'ranges' and 'spot_advisor'",
        )
        bands, unknown = _advisor_bands(data["ranges"], url)
        aws_types = {o.instance_type for o in known if o.cloud == "aws"}
        as_of = body.last_modified or UNKNOWN_DATE
        risks: list[SpotRisk] = []
        refused = Refusals()
        other = 0
        for region, by_os in data["spot_advisor"].items():
            expect(isinstance(by_os, dict), url, f"spot_advisor.{region} is not a mapping")
            linux = by_os.get("Linux") or {}
            expect(isinstance(linux, dict), url, f"spot_advisor.{region}.Linux is not a mapping")
            for itype, stats in linux.items():
                if itype not in aws_types and not AWS_GPU_FAMILY.match(itype):
                    other += 1
                    continue
                row = _advisor_row(str(region), str(itype), stats, bands, unknown, refused)
                if row is not None:
                    label, lower, upper, savings = row
                    risks.append(
                        SpotRisk(
                            "aws",
                            str(region),
                            str(itype),
                            label,
                            savings,
                            f"aws-spot-advisor:{as_of}",
                            as_of,
                            upper,
                            lower,
                        )
                    )
        if not risks and refused.total():
            raise CatalogError(
                f"{url}: every GPU row was refused ({refused.total()}): "
                + "; ".join(f"{n} × {why}" for why, n in refused.as_tuple()),
                hint="the advisor changed its values or labels; nothing was imported "
                "(report it to gpuwise)",
            )
        expect(bool(risks), url, "no GPU instance type in the file")
        notes = () if body.last_modified else ("the server sent no Last-Modified: as-of unknown",)
        return Fetched(
            self.name,
            url,
            as_of,
            as_of,
            spot_risks=tuple(risks),
            notes=notes,
            skipped=count_skips({"not a GPU instance type": other}),
            refused=refused.as_tuple(),
        )


Band = tuple[str, float | None, float]
"""(label, lower edge %, upper edge %) of one of the advisor's ranges."""


def _advisor_row(
    region: str,
    itype: str,
    stats: object,
    bands: dict[int, Band],
    unknown: dict[int, str],
    refused: Refusals,
) -> tuple[str, float | None, float, float | None] | None:
    """(label, lower %, upper %, savings %) of one type × region, or None (refused, counted)."""
    where = f"{region}/{itype}"
    if not isinstance(stats, dict) or "r" not in stats:
        refused.add("no interruption range 'r'", f"{where}: {str(stats)[:40]}")
        return None
    r, s = stats["r"], stats.get("s")
    if isinstance(r, int) and not isinstance(r, bool) and r in unknown:
        refused.add("an interruption band gpuwise does not know", f"{where} r={r} {unknown[r]!r}")
        return None
    if isinstance(r, bool) or not isinstance(r, int) or r not in bands:
        refused.add("'r' is not one of the file's range indexes", f"{where} r={r!r}")
        return None
    savings: float | None = None
    if s is not None:
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
            refused.add("savings 's' is not a number", f"{where} s={s!r}")
            return None
        if s < 0 or s > 100:
            refused.add(
                "savings 's' outside 0-100% (below 0: spot dearer than on-demand)",
                f"{where} s={s:g}",
            )
            return None
        savings = float(s)
    label, lower, upper = bands[r]
    return label, lower, upper, savings


def _advisor_bands(ranges: list[object], url: str) -> tuple[dict[int, Band], dict[int, str]]:
    """(index → (label, lower edge %, upper edge %), index → unknown label) from the file's
    ``ranges``. A band's lower edge is the upper edge of the band below it (``>20%``: 22 in the
    real file, whose own upper edge is 100). Rows in a band with an unknown label are refused one
    by one; a malformed ``ranges`` list refuses the file."""
    known: list[tuple[int, str, float]] = []
    unknown: dict[int, str] = {}
    for r in ranges:
        expect(
            isinstance(r, dict)
            and isinstance(r.get("index"), int)
            and isinstance(r.get("label"), str),
            url,
            "each range needs an integer 'index' and a 'label'",
        )
        r = cast(dict[str, Any], r)  # checked just above
        if r["label"] not in ADVISOR_BAND_LABELS:
            unknown[r["index"]] = r["label"]
            continue
        upper = number(r.get("max"), url, f"ranges[{r['index']}].max", positive=True)
        expect(upper <= 100, url, f"ranges[{r['index']}].max = {upper:g} is over 100%")
        known.append((r["index"], r["label"], upper))
    known.sort(key=lambda k: k[2])
    bands: dict[int, Band] = {}
    for i, (index, label, upper) in enumerate(known):
        bands[index] = (label, known[i - 1][2] if i else None, upper)
    return bands, unknown


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
