"""The decisions ``gpuwise fleet`` and ``gpuwise tco`` used to make in the CLI, now library calls:
reserved terms with overrides, the rates of a GPU's prices, spot capacity and terms text."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwise.catalog import Offer
from gpuwise.errors import InputError
from gpuwise.fleet import (
    CloudRates,
    GpuPrices,
    OwnCosts,
    PriceQuote,
    ReservedOption,
    compute_tco,
    parse_spot_capacity,
    parse_terms,
    reserved_terms,
)

_OFFER = Offer(
    "aws", "us-east-1", None, "p5.48xlarge", "H100", 8.0, 80.0, 192.0, 2048.0, 98.32, 40.0,
    "x86_64", "test", "2026-11",
)  # fmt: skip


def test_reserved_terms_take_the_override_and_refuse_an_unknown_cloud() -> None:
    terms = reserved_terms([_OFFER], ["aws:1y=0.3"])
    term = terms[("aws", 1)]
    assert term is not None and term.discount == pytest.approx(0.3)
    with pytest.raises(InputError, match="unknown cloud 'awz'"):  # a typo, not a silent no-op
        reserved_terms([_OFFER], ["awz:1y=0.3"])


def _prices(reserved: tuple[ReservedOption, ...], unavailable: tuple[str, ...]) -> GpuPrices:
    return GpuPrices(
        "H100",
        PriceQuote(12.29, "aws", "us-east-1 p5.48xlarge"),
        PriceQuote(5.0, "aws", "us-east-1 p5.48xlarge"),
        reserved,
        unavailable,
    )


def test_cloud_rates_take_the_cheapest_reservation_of_each_term() -> None:
    prices = _prices(
        (
            ReservedOption("gcp", 1, 8.0, 0.35, "quote"),
            ReservedOption("aws", 1, 8.6, 0.3, "quote"),
            ReservedOption("aws", 3, 6.1, 0.5, "quote"),
        ),
        (),
    )
    rates = CloudRates.from_prices(prices)
    assert replace(rates, spot_overhead=None, spot_overhead_source="") == CloudRates(
        12.29, 5.0, 8.0, 6.1, ()
    )


def test_fleet_and_tco_price_spot_with_the_plans_spot_model() -> None:
    from gpuwise.fleet import FleetOptions, plan_fleet
    from gpuwise.fleet.demand import Demand
    from gpuwise.planner.spot import load_spot_defaults, spot_overhead

    prices = _prices((), ())
    model = spot_overhead(
        load_spot_defaults(), "aws", region="us-east-1", instance_type="p5.48xlarge"
    )
    assert 0 < model.fraction < 0.01  # a 10%/month pool: a fraction of a percent, not 7.5%
    rates = CloudRates.from_prices(prices)
    assert rates.spot_overhead == model.fraction and "aws" in rates.spot_overhead_source
    import datetime as dt

    import numpy as np

    flex = Demand(dt.datetime(2026, 1, 1), ("H100",), np.zeros((1, 24)), np.full((1, 24), 4.0))
    plan = plan_fleet(flex, {"H100": prices}, sensitivity=False)
    assert plan.spot_overhead == model.fraction and "spot model" in plan.spot_overhead_source
    given = plan_fleet(flex, {"H100": prices}, FleetOptions(spot_overhead=0.05), sensitivity=False)
    assert given.spot_overhead == 0.05 and given.spot_overhead_source == "given"


def test_an_observed_mtbf_moves_the_shared_spot_overhead() -> None:
    from gpuwise.planner.spot import load_spot_defaults, spot_overhead

    d = load_spot_defaults()
    hot = spot_overhead(d, "aws", mtbf_hours=6.0)
    calm = spot_overhead(d, "aws", mtbf_hours=6000.0)
    # a 6 h pool loses about Young/Daly's sqrt(2C/M) = 7.5% plus restarts; a calm one almost nothing
    assert 0.075 < hot.fraction < 0.15 and calm.fraction < 0.005
    assert "observed" in hot.source


def test_tco_says_when_no_reservation_could_be_priced() -> None:
    rates = CloudRates.from_prices(_prices((), ("aws 1y", "aws 3y")))
    own = OwnCosts(server_price_usd=300_000, usd_per_kwh=0.12)
    result = compute_tco("H100", 8, 3.0, 0.6, own, rates, tdp_w=700)
    assert result.cloud_cost_usd["reserved-1y"] is None
    assert any(n.startswith("reserved billing unavailable: no known discount for aws 1y, aws 3y")
               for n in result.notes)  # fmt: skip


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["32"], {"H100": 32.0, "L4": 32.0}),  # N caps every model of the demand
        (["h100=16"], {"H100": 16.0}),  # an alias names one model
        (["8", "L4=2"], {"H100": 8.0, "L4": 2.0}),  # a later GPU=N wins for that model
    ],
)
def test_spot_capacity(values: list[str], expected: dict[str, float]) -> None:
    assert parse_spot_capacity(values, ("H100", "L4")) == expected


def test_spot_capacity_for_a_model_outside_the_demand_is_refused() -> None:
    with pytest.raises(InputError, match="A100-80GB is not in the demand"):
        parse_spot_capacity(["a100-80gb=4"], ("H100",))


@pytest.mark.parametrize(("text", "terms"), [("1,3", (1, 3)), ("3y, 1y", (1, 3)), ("1", (1,))])
def test_terms(text: str, terms: tuple[int, ...]) -> None:
    assert parse_terms(text) == terms


def test_terms_that_are_not_numbers_are_refused() -> None:
    with pytest.raises(InputError, match="cannot read --terms 'one'"):
        parse_terms("one")
