"""How old the prices behind an answer are: :func:`price_age` over the offers a command used.

Every price-bearing command (``offers``, ``gpus``, ``plan``, ``fleet``, ``report``) prints
:meth:`PriceAge.line` and, when the oldest price is older than ``--max-price-age`` (default 30 days),
:meth:`PriceAge.warning`; its JSON carries :meth:`PriceAge.to_dict` (``prices_as_of`` …).
An ``as_of`` of a month (``2026-11``) counts from the month's first day; ``unknown`` is stale.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpuwise.catalog.offer import Offer

DEFAULT_MAX_PRICE_AGE = "30d"
_DATE = re.compile(r"^(\d{4})-(\d{2})(?:-(\d{2}))?")


def parse_as_of(text: str) -> dt.date | None:
    """``2026-11-24`` / ``2026-11-24T…`` / ``2026-11`` (→ the 1st) → date; anything else → None."""
    m = _DATE.match(text.strip())
    if not m:
        return None
    try:
        return dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3) or 1))
    except ValueError:
        return None


def parse_max_price_age_days(text: str | float) -> float:
    """``--max-price-age 30d`` (any gpuwise duration) → days."""
    from gpuwise.units import HOURS_PER_DAY, parse_duration_hours

    return parse_duration_hours(text, "--max-price-age") / HOURS_PER_DAY


@dataclass(frozen=True)
class PriceAge:
    """The age of the prices an answer used."""

    oldest_as_of: str | None
    """The oldest ``as_of`` among them, as the source states it (None: no price used)."""
    newest_as_of: str | None
    age_days: int | None
    """Days since the oldest dated price; None when no price is dated."""
    undated: int
    """Prices whose source gives no date."""
    max_age_days: float
    sources: tuple[str, ...]

    @property
    def stale(self) -> bool:
        if self.oldest_as_of is None and not self.undated:
            return False  # no price used at all
        return self.undated > 0 or self.age_days is None or self.age_days > self.max_age_days

    def line(self) -> str:
        if self.oldest_as_of is None and not self.undated:
            return "No prices used."
        when = (
            self.oldest_as_of
            if self.oldest_as_of == self.newest_as_of
            else f"{self.oldest_as_of} … {self.newest_as_of}"
        )
        age = (
            "age unknown"
            if self.age_days is None
            else f"{self.age_days} day{'s' if self.age_days != 1 else ''} old"
        )
        extra = f"; {self.undated} undated" if self.undated and self.oldest_as_of else ""
        return (
            f"Prices as of {when or 'unknown'} ({age}{extra}; {', '.join(self.sources[:3])}"
            f"{', …' if len(self.sources) > 3 else ''})."
        )

    def warning(self) -> str | None:
        if not self.stale:
            return None
        what = (
            "some prices have no date"
            if self.age_days is None or self.undated
            else f"prices are {self.age_days} days old (limit {self.max_age_days:g})"
        )
        return f"{what} — refresh with `gpuwise catalog update --fetch`, or raise --max-price-age"

    def to_dict(self) -> dict[str, object]:
        return {
            "prices_as_of": self.oldest_as_of,
            "prices_newest_as_of": self.newest_as_of,
            "prices_age_days": self.age_days,
            "prices_stale": self.stale,
            "price_sources": list(self.sources),
        }


def price_age(
    offers: Iterable[Offer], *, max_age_days: float = 30.0, today: dt.date | None = None
) -> PriceAge:
    """The age of the oldest price among ``offers`` (those an answer actually used)."""
    today = today or dt.date.today()
    dated: dict[dt.date, str] = {}
    undated = 0
    sources: set[str] = set()
    for o in offers:
        sources.add(o.source)
        d = parse_as_of(o.as_of)
        if d is None:
            undated += 1
        else:
            dated.setdefault(d, o.as_of)
    if not dated:
        return PriceAge(None, None, None, undated, max_age_days, tuple(sorted(sources)))
    oldest, newest = min(dated), max(dated)
    return PriceAge(
        dated[oldest],
        dated[newest],
        max(0, (today - oldest).days),
        undated,
        max_age_days,
        tuple(sorted(sources)),
    )
