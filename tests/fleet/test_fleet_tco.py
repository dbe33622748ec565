"""TCO against hand-computed cases."""

from __future__ import annotations

import pytest

from gpuwise.errors import InputError
from gpuwise.fleet.tco import CloudRates, OwnCosts, compute_tco

HOURS_3Y = 3 * 8760


def test_cash_purchase_hand_case() -> None:
    own = OwnCosts(server_price_usd=200_000, usd_per_kwh=0.10, pue=1.5)
    rates = CloudRates(on_demand=2.0, spot=0.5, reserved_1y=1.2, reserved_3y=None)
    r = compute_tco("A100-80GB", 8, 3, 0.5, own, rates, tdp_w=400, spot_overhead=0.1)
    # power: 8 × 0.4 kW × 1.5 PUE × 26,280 h = 126,144 kWh × $0.10
    assert r.own.energy_kwh == pytest.approx(126_144)
    assert r.own.power_usd == pytest.approx(12_614.4)
    assert r.own.depreciation_usd == pytest.approx(200_000)
    assert r.own_cost_usd == pytest.approx(212_614.4)
    assert r.cloud_cost_usd == pytest.approx(
        {
            "on-demand": 2.0 * 8 * HOURS_3Y * 0.5,  # 210,240: pay only busy hours
            "spot": 0.5 * 1.1 * 8 * HOURS_3Y * 0.5,  # 57,816: overhead included
            "reserved-1y": 1.2 * 8 * HOURS_3Y,  # 252,288: every hour
            "reserved-3y": None,
        }
    )
    # owning = renting on demand at 212,614.4 / (2 × 8 × 26,280)
    assert r.break_even_utilization == pytest.approx(212_614.4 / 420_480)
    # monthly: reserved rent 7,008 vs own 200,000 up front + 350.4/month → month 31
    assert r.break_even_month_by_billing["reserved-1y"] == 31
    # on demand: 5,840/month catches up only at month 37 > 36
    assert r.break_even_month_by_billing["on-demand"] is None
    assert r.cheapest_cloud_billing == "spot" and r.break_even_month is None
    assert r.break_even_utilization_by_billing["reserved-1y"] is None


def test_residual_and_opex_hand_case() -> None:
    own = OwnCosts(
        server_price_usd=100_000,
        usd_per_kwh=0.0,
        depreciation_years=5,
        residual_fraction=0.2,
        colocation_usd_per_month=1_000,
        staff_usd_per_year=10_000,
        maintenance_fraction_per_year=0.05,
    )
    r = compute_tco("H100", 8, 3, 1.0, own, CloudRates(3.0, None, None, None), tdp_w=700)
    assert r.own.depreciation_usd == pytest.approx(80_000 * 3 / 5)
    assert r.own.colocation_usd == pytest.approx(36_000)
    assert r.own.staff_usd == pytest.approx(30_000)
    assert r.own.maintenance_usd == pytest.approx(15_000)
    assert r.own_cost_usd == pytest.approx(48_000 + 36_000 + 30_000 + 15_000)
    assert any("undepreciated" in n for n in r.notes)


def test_financed_purchase_interest() -> None:
    own = OwnCosts(server_price_usd=120_000, usd_per_kwh=0.0, interest_rate=0.12)
    r = compute_tco("H100", 8, 1, 1.0, own, CloudRates(3.0, None, None, None), tdp_w=700)
    payment = 120_000 * 0.01 / (1 - 1.01**-12)  # annuity, 1% a month for 12 months
    assert r.own.interest_usd == pytest.approx(12 * payment - 120_000)
    assert r.monthly_own_cash_usd[0] == 0  # nothing up front when financed
    assert r.monthly_own_cash_usd[12] == pytest.approx(12 * payment)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"server_price_usd": -1, "usd_per_kwh": 0.1},  # negative price
        {"server_price_usd": float("nan"), "usd_per_kwh": 0.1},  # NaN
        {"server_price_usd": 1e5, "usd_per_kwh": 0.1, "pue": 0.5},  # PUE below 1
        {"server_price_usd": 1e5, "usd_per_kwh": float("inf")},  # infinite tariff
    ],
)
def test_bad_own_costs(kwargs: dict[str, float]) -> None:
    with pytest.raises(InputError):
        OwnCosts(**kwargs)  # type: ignore[arg-type]


def test_bad_count_and_utilization() -> None:
    own = OwnCosts(server_price_usd=1e5, usd_per_kwh=0.1)
    with pytest.raises(InputError):
        compute_tco("H100", 0, 3, 0.5, own, CloudRates(3.0, None, None, None), tdp_w=700)
    with pytest.raises(InputError):
        compute_tco("H100", 8, 3, 1.5, own, CloudRates(3.0, None, None, None), tdp_w=700)
