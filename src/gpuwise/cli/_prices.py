"""The price-age line and warning every price-bearing command prints (``--max-price-age``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from gpuwise.catalog import Offer, PriceAge

MaxPriceAgeFlag = Annotated[
    str,
    typer.Option(
        "--max-price-age",
        help="Warn when the prices used are older than this (e.g. 30d, 2w).",
        metavar="DURATION",
    ),
]


def prices_age(offers: Iterable[Offer], max_price_age: str = "30d") -> PriceAge:
    """:func:`gpuwise.catalog.price_age` with ``--max-price-age`` parsed (bad input → exit 2)."""
    from gpuwise.catalog import parse_max_price_age_days, price_age

    return price_age(offers, max_age_days=parse_max_price_age_days(max_price_age))


def print_price_age(age: PriceAge, *, json: bool, out: Console | None = None) -> None:
    """The age line on stdout or ``out`` (not with --json), and the staleness warning on stderr."""
    from gpuwise.cli._output import console

    if not json:
        (out or console()).print(f"[dim]{age.line()}[/dim]")
    warning = age.warning()
    if warning:
        console(stderr=True).print(f"[yellow]warning: {warning}[/yellow]")
