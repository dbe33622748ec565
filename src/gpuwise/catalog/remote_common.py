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
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from gpuwise.base import settings
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
    refused: tuple[tuple[str, int], ...] = ()
    """(reason with examples, rows) for rows refused one by one (an odd value, a control
    character, an oversize field); the rest of the feed still imports."""


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
    """A ``GPUWISE_*`` URL or list setting, or ``default`` when unset (trailing ``/`` dropped)."""
    return (settings.text(name) or default).rstrip("/")


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


@dataclass
class Refusals:
    """Rows refused one at a time, by reason, with the first few as examples."""

    examples_kept: int = 3
    counts: dict[str, int] | None = None
    examples: dict[str, list[str]] | None = None

    def add(self, reason: str, example: str) -> None:
        counts = self.counts = self.counts if self.counts is not None else {}
        examples = self.examples = self.examples if self.examples is not None else {}
        counts[reason] = counts.get(reason, 0) + 1
        shown = examples.setdefault(reason, [])
        if len(shown) < self.examples_kept:
            shown.append(example)

    def total(self) -> int:
        return sum((self.counts or {}).values())

    def as_tuple(self) -> tuple[tuple[str, int], ...]:
        """``((reason (e.g. a, b, c), rows), …)`` for :attr:`Fetched.refused`."""
        examples = self.examples or {}
        return tuple(
            sorted(
                (f"{reason} (e.g. {'; '.join(examples[reason])})", n)
                for reason, n in (self.counts or {}).items()
            )
        )


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


MAX_FIELD_CHARS = 200
"""Longest text field (region, instance type, GPU name, source label …) a fetched row may carry;
the real feeds' longest are under 80 characters."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""C0/C1 control characters (NUL included), DEL, and the bidirectional controls."""


def _bad_field(row: object, names: Sequence[str]) -> tuple[str, str] | None:
    """(reason, example) for the first text field of ``row`` that is hostile, else None."""
    for name in names:
        value = getattr(row, name)
        if not isinstance(value, str):
            continue
        if _CONTROL.search(value):
            return f"control character or NUL in {name}", f"{name}={value[:40]!r}"
        if len(value) > MAX_FIELD_CHARS:
            return (
                f"{name} longer than {MAX_FIELD_CHARS} characters",
                f"{name}={value[:24]!r}… ({len(value):,} chars)",
            )
    return None


_OFFER_TEXT = (
    "cloud",
    "region",
    "zone",
    "instance_type",
    "gpu",
    "arch",
    "source",
    "as_of",
    "valid_from",
)
_RISK_TEXT = ("cloud", "region", "instance_type", "band", "source", "as_of")
_RESERVED_TEXT = ("cloud", "region", "instance_type", "source", "as_of")


def screen_fields(res: Fetched) -> Fetched:
    """``res`` without rows whose text fields carry control characters, NULs or oversize values
    (they would end up in a SkyPilot export or a terminal), each refused row counted by field with
    examples in :attr:`Fetched.refused`. The rest of the feed still imports."""
    refused = Refusals()

    def keep(rows: Sequence[Any], names: Sequence[str]) -> tuple[Any, ...]:
        out = []
        for row in rows:
            bad = _bad_field(row, names)
            if bad is None:
                out.append(row)
            else:
                refused.add(*bad)
        return tuple(out)

    offers = keep(res.offers, _OFFER_TEXT)
    risks = keep(res.spot_risks, _RISK_TEXT)
    reserved = keep(res.reserved, _RESERVED_TEXT)
    if not refused.total():
        return res
    if not (offers or risks or reserved):
        raise CatalogError(
            f"{res.url}: every row was refused: "
            + "; ".join(f"{n} × {why}" for why, n in refused.as_tuple()),
            hint="the source sent damaged or hostile text; nothing was imported",
        )
    return replace(
        res,
        offers=offers,
        offer_clouds=tuple(c for c in res.offer_clouds if any(o.cloud == c for o in offers)),
        spot_risks=risks,
        reserved=reserved,
        refused=res.refused + refused.as_tuple(),
    )
