"""What every ``catalog update --fetch`` source shares: the result type, the checks on what came
back, and the sovereign-region rule.

A source parses and validates everything it downloaded and returns a :class:`Fetched`; it never
writes. Anything doubtful raises :class:`~gpuwise.errors.CatalogError`, so that source imports
nothing (the other sources of the run still do). What is merely not a GPU offer (a CPU shape, a
TPU in gpuhunt's feed, a reservation-only row) is skipped and counted in :attr:`Fetched.skipped`.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from gpuwise.catalog.fetch import Download
from gpuwise.catalog.offer import Offer
from gpuwise.catalog.risk import ReservedPrice, SpotRisk
from gpuwise.errors import CatalogError

Getter = Callable[[str], Download]
"""Downloads one URL (``fetch_bytes`` with the session's settings and the run's deadline)."""

UNKNOWN_DATE = "unknown"
"""``as_of`` when the upstream states no date: price-age checks treat it as stale, never as new."""


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
    """Date of the prices as the upstream states it (ISO date; the oldest when several files),
    or ``unknown``; never the download date."""
    offers: tuple[Offer, ...] = ()
    offer_clouds: tuple[str, ...] = ()
    """Clouds whose offers in the store these replace."""
    spot_risks: tuple[SpotRisk, ...] = ()
    reserved: tuple[ReservedPrice, ...] = ()
    notes: tuple[str, ...] = ()
    """What was skipped or resolved, and why, in words."""
    skipped: tuple[tuple[str, int], ...] = ()
    """(reason, rows) for rows that were not imported because they are not GPU offers."""


class RemoteSource(Protocol):
    @property
    def name(self) -> str:
        """The registry name (``--fetch NAME``)."""
        ...

    def fetch(self, get: Getter, known: Sequence[Offer]) -> Fetched:
        """Download and validate; ``known`` is the current catalog."""
        ...


def today() -> str:
    return dt.date.today().isoformat()


def env(name: str, default: str) -> str:
    return (os.environ.get(name) or default).rstrip("/")


def env_list(name: str, default: Sequence[str]) -> list[str]:
    return [x.strip() for x in env(name, ",".join(default)).split(",") if x.strip()]


def as_json(data: bytes | bytearray, url: str) -> Any:
    try:
        return json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CatalogError(
            f"{url}: not valid JSON ({type(exc).__name__})",
            hint="the download is damaged or the source changed; try again later",
        ) from None


def as_text(data: bytes | bytearray, url: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CatalogError(
            f"{url}: not UTF-8 text (byte {exc.start})",
            hint="the download is damaged or the source changed",
        ) from None


def complete_csv(data: bytes | bytearray, url: str) -> str:
    """CSV text that ends with a newline: a body that stops mid-line was cut short (a server that
    closes the connection early sends no ``Content-Length`` to check against)."""
    if data and not data.endswith(b"\n"):
        tail = data[-40:].decode("utf-8", "replace").rsplit("\n", 1)[-1]
        raise CatalogError(
            f"{url}: the file ends mid-line ({tail!r}, no final newline): the download was cut short",
            hint="try again later; nothing from this file was imported",
        )
    return as_text(data, url)


def expect(cond: bool, url: str, what: str) -> None:
    if not cond:
        raise CatalogError(
            f"{url}: unexpected format: {what}",
            hint="the source changed its schema; nothing was imported (report it to gpuwise)",
        )


def number(value: Any, url: str, what: str, *, positive: bool = False) -> float:
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


def count_skips(skipped: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((k, v) for k, v in skipped.items() if v))


def add_skips(into: dict[str, int], more: dict[str, int], prefix: str = "") -> None:
    for reason, rows in more.items():
        into[prefix + reason] = into.get(prefix + reason, 0) + rows


# Government and sovereign regions: sold only to eligible customers (US public sector, China via a
# local operator), so an ordinary offer there must not win "cheapest". Names from the providers'
# region lists: AWS GovCloud (us-gov-*), AWS China (cn-*); Azure Government (usgov*, usdod*),
# Azure China (china*), the retired Azure Germany sovereign cloud (germanycentral/-northeast).
_SOVEREIGN = {
    "aws": re.compile(r"^(us-gov-|cn-)"),
    "azure": re.compile(r"^(usgov|usdod|ussec|china|germanycentral$|germanynortheast$)"),
}


def is_sovereign(cloud: str, region: str) -> bool:
    """True for a government or sovereign region (see ``_SOVEREIGN``)."""
    pattern = _SOVEREIGN.get(cloud)
    return bool(pattern and pattern.match(region.lower()))


def drop_sovereign(res: Fetched) -> Fetched:
    """``res`` without government/sovereign regions, the rows left out counted in ``skipped``."""
    offers = tuple(o for o in res.offers if not is_sovereign(o.cloud, o.region))
    risks = tuple(r for r in res.spot_risks if not is_sovereign(r.cloud, r.region))
    reserved = tuple(r for r in res.reserved if not is_sovereign(r.cloud, r.region))
    dropped = (
        len(res.offers) - len(offers)
        + len(res.spot_risks) - len(risks)
        + len(res.reserved) - len(reserved)
    )  # fmt: skip
    if not dropped:
        return res
    skipped = dict(res.skipped)
    skipped["government/sovereign region"] = skipped.get("government/sovereign region", 0) + dropped
    return replace(
        res, offers=offers, spot_risks=risks, reserved=reserved, skipped=count_skips(skipped)
    )


def oldest_date(dates: Sequence[str]) -> str:
    """The oldest ISO date among ``dates``; ``unknown`` when any is unknown (or there are none)."""
    if not dates or any(not re.match(r"^\d{4}-\d{2}-\d{2}", d) for d in dates):
        return UNKNOWN_DATE
    return min(d[:10] for d in dates)
