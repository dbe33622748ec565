"""Paying less for a fleet: the reserved/spot/on-demand mix for a demand profile
(:func:`plan_fleet`), owning versus renting (:func:`compute_tco`), and weighted vendor scoring
(:func:`score_vendors`). Pure Python + numpy/scipy: no network, no CLI.
"""

from gpuwise.fleet.charts import fleet_html, tco_html
from gpuwise.fleet.demand import (
    Demand,
    demand_to_csv,
    parse_demand_csv,
    read_demand_csv,
    synthetic_demand,
)
from gpuwise.fleet.history import HistoryUsage, demand_from_history
from gpuwise.fleet.milp import solve
from gpuwise.fleet.optimize import hourly_split, plan_fleet
from gpuwise.fleet.plan_values import (
    DEFAULT_SPOT_OVERHEAD,
    Commitment,
    FleetOptions,
    FleetPlan,
    GpuBreakdown,
    MonthCost,
    Scenario,
    Solution,
    parse_spot_capacity,
    parse_terms,
)
from gpuwise.fleet.pricing import (
    GpuPrices,
    PriceQuote,
    ReservedOption,
    gpu_prices,
    parse_reserved_overrides,
    reserved_terms,
)
from gpuwise.fleet.tco import DEFAULT_PUE, CloudRates, OwnCosts, TcoResult, compute_tco
from gpuwise.fleet.vendors import (
    DEFAULT_WEIGHTS,
    Criteria,
    VendorRanking,
    catalog_filler,
    parse_criteria,
    read_criteria,
    score_vendors,
)

__all__ = [
    "DEFAULT_PUE",
    "DEFAULT_SPOT_OVERHEAD",
    "DEFAULT_WEIGHTS",
    "CloudRates",
    "Commitment",
    "Criteria",
    "Demand",
    "FleetOptions",
    "FleetPlan",
    "GpuBreakdown",
    "GpuPrices",
    "HistoryUsage",
    "MonthCost",
    "OwnCosts",
    "PriceQuote",
    "ReservedOption",
    "Scenario",
    "Solution",
    "TcoResult",
    "VendorRanking",
    "catalog_filler",
    "compute_tco",
    "demand_from_history",
    "demand_to_csv",
    "fleet_html",
    "gpu_prices",
    "hourly_split",
    "parse_criteria",
    "parse_demand_csv",
    "parse_reserved_overrides",
    "parse_spot_capacity",
    "parse_terms",
    "plan_fleet",
    "read_criteria",
    "read_demand_csv",
    "reserved_terms",
    "score_vendors",
    "solve",
    "synthetic_demand",
    "tco_html",
]
