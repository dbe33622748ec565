"""Own or rent: the total cost of buying GPU servers against renting the same GPUs in a cloud.

**Own (cash view, over ``years``):**

* capex: the server price, paid up front, or financed as a loan repaid monthly over the
  depreciation life (annuity at ``interest_rate``);
* depreciation: straight line over ``depreciation_years`` down to ``residual_fraction`` of capex;
  what is not yet depreciated at the end of the horizon is still an asset and is not a cost;
* power: GPUs × TDP × ``power_load`` × PUE × $/kWh for every hour (servers draw power whether
  busy or not; the default load 1.0 charges the full TDP, an upper bound), plus host power;
* space (colocation per month), staff (per year), maintenance (fraction of capex per year).

``own_cost_usd`` = depreciation + interest + power + space + staff + maintenance over the horizon.

**Rent:** GPUs × hours × utilization × price for on-demand and spot (spot with the interruption
overhead of the plan's spot model for the cloud that sells it, :attr:`CloudRates.spot_overhead`,
the same figure ``plan`` and ``fleet`` use), and GPUs × every hour × price
for reservations (paid whether used or not).

**Break-even utilization:** the utilization at which renting on demand (or spot) costs what
owning does over the horizon. **Break-even month:** the first month whose cumulative rent has
caught up with the cumulative cash spent on owning (capex up front), or None within the horizon.

Defaults with sources: ``pue`` 1.58 is the average annual PUE of the Uptime Institute Global Data
Center Survey 2023 (UII keynote report 106, July 2023). There is no citable default server price
or electricity price here: both must be given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuwise.errors import InputError
from gpuwise.fleet.plan_values import DEFAULT_SPOT_OVERHEAD
from gpuwise.units import HOURS_PER_YEAR, check_finite

if TYPE_CHECKING:
    from gpuwise.fleet.pricing import GpuPrices

DEFAULT_PUE = 1.58
"""Uptime Institute Global Data Center Survey 2023: average annual PUE 1.58 (2022: 1.55)."""


@dataclass(frozen=True)
class OwnCosts:
    """What owning the servers costs; every amount in US dollars."""

    server_price_usd: float
    """Purchase price of all the servers holding the GPUs (GPUs, hosts, network), no default."""
    usd_per_kwh: float
    """Electricity price, no default (it varies several-fold by place)."""
    pue: float = DEFAULT_PUE
    """Power usage effectiveness of the facility (Uptime Institute 2023 average: 1.58)."""
    power_load: float = 1.0
    """Average draw as a fraction of GPU TDP (1.0 = full TDP every hour, an upper bound)."""
    host_power_w: float = 0.0
    """Extra power of the hosts (CPUs, NICs, fans) for all servers, watts; 0 = not counted."""
    depreciation_years: float | None = None
    """Straight-line depreciation life; None = the horizon."""
    residual_fraction: float = 0.0
    """Value left at the end of the depreciation life, as a fraction of the price."""
    interest_rate: float = 0.0
    """Yearly interest when the purchase is financed over the depreciation life; 0 = paid cash."""
    colocation_usd_per_month: float = 0.0
    """Rack space, cooling and connectivity per month; 0 = not counted."""
    staff_usd_per_year: float = 0.0
    """Share of operations staff cost per year; 0 = not counted."""
    maintenance_fraction_per_year: float = 0.0
    """Support contracts and repairs per year as a fraction of the price; 0 = not counted."""

    def __post_init__(self) -> None:
        check_finite(self.server_price_usd, "server price", strict=True)
        check_finite(self.usd_per_kwh, "electricity price ($/kWh)")
        check_finite(self.pue, "PUE", minimum=1.0, maximum=5.0)
        check_finite(self.power_load, "power load", maximum=2.0)
        check_finite(self.host_power_w, "host power (W)")
        if self.depreciation_years is not None:
            check_finite(self.depreciation_years, "depreciation years", strict=True, maximum=50)
        check_finite(self.residual_fraction, "residual fraction", maximum=1.0)
        check_finite(self.interest_rate, "interest rate", maximum=1.0)
        check_finite(self.colocation_usd_per_month, "colocation $/month")
        check_finite(self.staff_usd_per_year, "staff $/year")
        check_finite(
            self.maintenance_fraction_per_year, "maintenance fraction per year", maximum=1.0
        )


@dataclass(frozen=True)
class CloudRates:
    """$/GPU-hour to rent the same GPU; None where that billing is not available."""

    on_demand: float | None
    """On-demand $/GPU-hour."""
    spot: float | None
    """Spot $/GPU-hour (before interruption overhead)."""
    reserved_1y: float | None
    """1-year reservation, effective $/GPU-hour."""
    reserved_3y: float | None
    """3-year reservation, effective $/GPU-hour."""
    reserved_unavailable: tuple[str, ...] = ()
    """``cloud Ny`` terms with no known reserved discount (a note says how to give one)."""
    spot_overhead: float | None = None
    """Extra GPU-hours per useful spot GPU-hour from the plan's spot model for the spot offer's
    cloud (:func:`gpuwise.fleet.pricing.spot_model_overhead`); None: not derived."""
    spot_overhead_source: str = ""
    """The spot model's inputs behind :attr:`spot_overhead`."""

    @classmethod
    def from_prices(cls, prices: GpuPrices) -> CloudRates:
        """The rates of one GPU model's :class:`~gpuwise.fleet.pricing.GpuPrices`: the cheapest
        on-demand and spot, and the cheapest reservation of each term."""

        def best(term: int) -> float | None:
            rates = [o.usd_per_gpu_hour for o in prices.reserved if o.term_years == term]
            return min(rates) if rates else None

        from gpuwise.fleet.pricing import spot_model_overhead

        model = spot_model_overhead({prices.gpu: prices})
        return cls(
            prices.on_demand.usd_per_gpu_hour,
            prices.spot.usd_per_gpu_hour if prices.spot else None,
            best(1),
            best(3),
            prices.reserved_unavailable,
            spot_overhead=model.fraction if model else None,
            spot_overhead_source=model.describe() if model else "",
        )


@dataclass(frozen=True)
class OwnBreakdown:
    """Owning, by item, over the horizon."""

    depreciation_usd: float
    """Price × (1 − residual) × share of the depreciation life inside the horizon."""
    interest_usd: float
    """Interest paid inside the horizon."""
    power_usd: float
    """Electricity for GPUs and hosts, PUE included."""
    colocation_usd: float
    """Space."""
    staff_usd: float
    """Staff."""
    maintenance_usd: float
    """Maintenance."""
    energy_kwh: float
    """Electricity used, PUE included."""


@dataclass(frozen=True)
class TcoResult:
    """Own versus rent for one GPU model."""

    gpu: str
    """GPU model."""
    count: int
    """GPUs."""
    years: float
    """Horizon."""
    utilization: float
    """Fraction of hours the GPUs do useful work."""
    own_cost_usd: float
    """Owning over the horizon (economic cost, see module docstring)."""
    own: OwnBreakdown
    """Its parts."""
    cloud_cost_usd: dict[str, float | None]
    """Renting over the horizon per billing type (None: not available)."""
    break_even_utilization: float | None
    """Utilization above which owning beats renting on demand (None: no on-demand price, or >1)."""
    break_even_utilization_by_billing: dict[str, float | None]
    """The same against spot; reservations do not depend on utilization (None)."""
    break_even_month: int | None
    """First month when cumulative cheapest-cloud rent ≥ cumulative cash spent owning (None: not
    within the horizon)."""
    break_even_month_by_billing: dict[str, int | None]
    """The same per billing type."""
    cheapest_cloud_billing: str | None
    """The cheapest available billing at this utilization."""
    monthly_own_cash_usd: tuple[float, ...]
    """Cumulative cash spent owning at the end of each month (month 0 = purchase)."""
    monthly_cloud_usd: dict[str, tuple[float, ...]]
    """Cumulative rent at the end of each month, per available billing."""
    tdp_w: float
    """GPU TDP used for power."""
    notes: tuple[str, ...]
    """Items left out or assumptions to check."""
    spot_overhead: float = 0.0
    """Extra GPU-hours per useful spot GPU-hour the spot figures include."""
    spot_overhead_source: str = ""
    """Where :attr:`spot_overhead` comes from: given, the plan's spot model, or the default."""


def _annuity_payment(principal: float, yearly_rate: float, months: int) -> float:
    if months <= 0:
        return principal
    r = yearly_rate / 12
    if r == 0:
        return principal / months
    return principal * r / (1 - (1 + r) ** -months)


def compute_tco(
    gpu: str,
    count: int,
    years: float,
    utilization: float,
    own: OwnCosts,
    rates: CloudRates,
    *,
    tdp_w: float,
    spot_overhead: float | None = None,
) -> TcoResult:
    """Own versus rent ``count`` GPUs of model ``gpu`` for ``years`` at ``utilization``.

    ``spot_overhead``: extra GPU-hours per useful spot GPU-hour; None = ``rates.spot_overhead``
    (the plan's spot model), else the cautious :data:`~gpuwise.fleet.DEFAULT_SPOT_OVERHEAD`."""
    source = "given"
    if spot_overhead is None:
        if rates.spot_overhead is not None:
            spot_overhead, source = (
                rates.spot_overhead,
                "plan's spot model: " + (rates.spot_overhead_source or "the spot offer's cloud"),
            )
        else:
            spot_overhead, source = DEFAULT_SPOT_OVERHEAD, "cautious default (6 h node MTBF)"
    if isinstance(count, bool) or count < 1:
        raise InputError(
            f"count must be a whole number of GPUs ≥ 1, got {count!r}", hint="give e.g. count=8"
        )
    check_finite(years, "years", strict=True, maximum=30)
    check_finite(utilization, "utilization", maximum=1.0)
    check_finite(tdp_w, "TDP (W)", strict=True)
    check_finite(spot_overhead, "spot overhead", maximum=10)
    hours = years * HOURS_PER_YEAR
    n_months = max(1, math.ceil(years * 12 - 1e-9))
    life = own.depreciation_years or years
    depreciable = own.server_price_usd * (1 - own.residual_fraction)
    depreciation = depreciable * min(years / life, 1.0)
    power_kw = (count * tdp_w * own.power_load + own.host_power_w) / 1000
    energy_kwh = power_kw * own.pue * hours
    power = energy_kwh * own.usd_per_kwh
    colo = own.colocation_usd_per_month * years * 12
    staff = own.staff_usd_per_year * years
    maint = own.maintenance_fraction_per_year * own.server_price_usd * years
    # financing: an annuity over the depreciation life; interest inside the horizon
    loan_months = max(1, round(life * 12))
    pay = (
        _annuity_payment(own.server_price_usd, own.interest_rate, loan_months)
        if own.interest_rate
        else 0.0
    )
    balance, interest = own.server_price_usd, 0.0
    cash = [0.0] * (n_months + 1)
    opex_month = (power + colo + staff + maint) / (years * 12)
    cash[0] = 0.0 if own.interest_rate else own.server_price_usd
    for m in range(1, n_months + 1):
        step = opex_month
        if own.interest_rate and m <= loan_months:
            i = balance * own.interest_rate / 12
            interest += i
            balance -= pay - i
            step += pay
        cash[m] = cash[m - 1] + step
    own_cost = depreciation + interest + power + colo + staff + maint

    overhead = 1 + spot_overhead
    used_hours = count * hours * utilization
    cloud: dict[str, float | None] = {
        "on-demand": None if rates.on_demand is None else rates.on_demand * used_hours,
        "spot": None if rates.spot is None else rates.spot * overhead * used_hours,
        "reserved-1y": None if rates.reserved_1y is None else rates.reserved_1y * count * hours,
        "reserved-3y": None if rates.reserved_3y is None else rates.reserved_3y * count * hours,
    }
    per_month_cloud = {k: v / (years * 12) for k, v in cloud.items() if v is not None}
    monthly_cloud = {
        k: tuple(v * m for m in range(n_months + 1)) for k, v in per_month_cloud.items()
    }

    def be_util(price: float | None) -> float | None:
        if price is None or price <= 0:
            return None
        u = own_cost / (price * count * hours)
        return u if u <= 1 else None

    be_by = {
        "on-demand": be_util(rates.on_demand),
        "spot": be_util(None if rates.spot is None else rates.spot * overhead),
        "reserved-1y": None,
        "reserved-3y": None,
    }

    def be_month(series: tuple[float, ...]) -> int | None:
        for m in range(n_months + 1):
            if m > 0 and series[m] >= cash[m] - 1e-9:
                return m
        return None

    be_month_by: dict[str, int | None] = {
        k: (be_month(monthly_cloud[k]) if k in monthly_cloud else None) for k in cloud
    }
    available = {k: v for k, v in cloud.items() if v is not None}
    cheapest = min(available, key=lambda k: available[k]) if available else None
    notes = []
    left_out = [
        name
        for name, v in (
            ("colocation", own.colocation_usd_per_month),
            ("staff", own.staff_usd_per_year),
            ("maintenance", own.maintenance_fraction_per_year),
            ("host power", own.host_power_w),
        )
        if v == 0
    ]
    if left_out:
        notes.append(
            f"not counted (0): {', '.join(left_out)} — owning is understated until you give them"
        )
    if rates.reserved_1y is None and rates.reserved_3y is None and rates.reserved_unavailable:
        notes.append(
            "reserved billing unavailable: no known discount for "
            f"{', '.join(rates.reserved_unavailable)}; set one with --reserved-discount "
            "CLOUD:1y=FRACTION or in reserved.yaml"
        )
    if own.depreciation_years and own.depreciation_years > years:
        notes.append(
            f"{own.depreciation_years:g}-year depreciation: the undepreciated value at year {years:g} "
            "is an asset, not a cost"
        )
    return TcoResult(
        gpu=gpu,
        count=count,
        years=years,
        utilization=utilization,
        own_cost_usd=own_cost,
        own=OwnBreakdown(depreciation, interest, power, colo, staff, maint, energy_kwh),
        cloud_cost_usd=cloud,
        break_even_utilization=be_by["on-demand"],
        break_even_utilization_by_billing=be_by,
        break_even_month=be_month_by.get(cheapest) if cheapest else None,
        break_even_month_by_billing=be_month_by,
        cheapest_cloud_billing=cheapest,
        monthly_own_cash_usd=tuple(cash),
        monthly_cloud_usd=monthly_cloud,
        tdp_w=tdp_w,
        notes=tuple(notes),
        spot_overhead=spot_overhead,
        spot_overhead_source=source,
    )
