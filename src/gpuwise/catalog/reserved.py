"""Reserved / committed-use pricing: a discount off on-demand, per cloud and term.

The defaults live in ``data/reserved.yaml`` with their sources; a user file
``<config dir>/reserved.yaml`` of the same shape overrides them key by key (negotiated rates).
A ``null`` discount means "not known": reserved billing is then not offered for that cloud.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from gpuwise.base.datafiles import read_user_yaml
from gpuwise.base.paths import config_dir
from gpuwise.catalog.offer import Offer
from gpuwise.errors import DataFileError

Term = Literal[1, 3]
TERMS: tuple[Term, ...] = (1, 3)


@dataclass(frozen=True)
class ReservedTerm:
    """A commitment term's discount off on-demand for one cloud."""

    cloud: str
    term_years: Term
    discount: float
    """Fraction off the on-demand hourly price, in [0, 1)."""
    source: str


def _parse(data: Any, origin: str) -> dict[tuple[str, int], ReservedTerm | None]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise DataFileError(
            f"{origin}: expected a mapping of cloud → term → discount",
            hint="see gpuwise/catalog/data/reserved.yaml for the shape",
        )
    out: dict[tuple[str, int], ReservedTerm | None] = {}
    for cloud, terms in data.items():
        if not isinstance(terms, dict):
            raise DataFileError(
                f"{origin}: {cloud}: expected 1y/3y entries",
                hint="write e.g. `1y: {discount: 0.3}`",
            )
        for key, entry in terms.items():
            years = {"1y": 1, "3y": 3}.get(str(key))
            if years is None:
                raise DataFileError(f"{origin}: {cloud}.{key}: unknown term", hint="use 1y or 3y")
            entry = entry if isinstance(entry, dict) else {"discount": entry}
            value = entry.get("discount")
            if value is None:
                out[(str(cloud).lower(), years)] = None
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or not 0 <= value < 1
            ):
                raise DataFileError(
                    f"{origin}: {cloud}.{key}.discount: {value!r} is not a fraction in [0, 1)",
                    hint="write the discount as e.g. 0.35 for 35% off on-demand",
                )
            out[(str(cloud).lower(), years)] = ReservedTerm(
                str(cloud).lower(),
                years,  # type: ignore[arg-type]
                float(value),
                str(entry.get("source", origin)),
            )
    return out


def load_reserved_terms(
    user_file: Path | None = None,
) -> dict[tuple[str, int], ReservedTerm | None]:
    """(cloud, years) → term, defaults overridden by the user's file."""
    import yaml

    text = resources.files("gpuwise.catalog").joinpath("data/reserved.yaml").read_text("utf-8")
    terms = _parse(yaml.safe_load(text), "gpuwise/catalog/data/reserved.yaml")
    path = user_file if user_file is not None else config_dir() / "reserved.yaml"
    if path.is_file():
        terms.update(_parse(read_user_yaml(path), str(path)))
    return terms


def reserved_usd_per_hour(
    offer: Offer, term_years: int, terms: dict[tuple[str, int], ReservedTerm | None]
) -> float | None:
    """The offer's hourly price under a commitment, or None when unknown for its cloud."""
    term = terms.get((offer.cloud, term_years))
    if term is None or offer.on_demand_usd_per_hour is None:
        return None
    return offer.on_demand_usd_per_hour * (1 - term.discount)
