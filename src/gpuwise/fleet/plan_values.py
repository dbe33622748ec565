"""What :func:`~gpuwise.fleet.optimize.plan_fleet` takes and returns: the options and caps of
the fleet optimizer, and the plan (commitments, per-GPU breakdown, months, scenarios, solver).

Frozen dataclasses only; the optimizer lives in :mod:`gpuwise.fleet.milp` (the MILP) and
:mod:`gpuwise.fleet.optimize` (the plan built around it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpuwise.base.interval import young_daly_waste
from gpuwise.errors import InputError, PlanError
from gpuwise.fleet.pricing import GpuPrices, PriceQuote
from gpuwise.planner.spot import HOT_SPOT_POOL_MTBF_HOURS

DEFAULT_SPOT_OVERHEAD = round(young_daly_waste(60 / 3600, HOT_SPOT_POOL_MTBF_HOURS), 3)
"""A stress figure, no longer the default: 7.5% extra GPU-hours per useful spot GPU-hour, the
Young/Daly first-order waste √(2C/M) (Young 1974, CACM 17(9); Daly 2006, FGCS 22(3) §3) for a
synchronous 60 s checkpoint in a "hot" spot pool with a 6 h node MTBF. The default is now the
plan's own spot model for the clouds that sell the spot capacity
(:func:`gpuwise.planner.spot.spot_overhead`, :func:`~gpuwise.fleet.pricing.spot_model_overhead`),
so ``plan``, ``fleet`` and ``tco`` price the same pools alike; pass this to stress-test a plan."""


@dataclass(frozen=True)
class FleetOptions:
    """Knobs and caps of the fleet optimizer."""

    spot_overhead: float | None = None
    """Extra GPU-hours per useful spot GPU-hour lost to interruptions (0.075 = 7.5%); None = the
    plan's spot model for the clouds that sell the spot capacity (resolved by ``plan_fleet``)."""
    spot_capacity_gpus: Mapping[str, float] = field(default_factory=dict)
    """Most GPUs on spot at once, per GPU model; a model not listed has no limit."""
    budget_usd: float | None = None
    """Most the whole profile may cost."""
    monthly_budget_usd: float | None = None
    """Most any calendar month of the profile may cost (all GPU models together)."""
    max_commitment_usd: float | None = None
    """Most that all reservations may commit to, over their full terms."""
    max_reserved_gpus: int | None = None
    """Most GPUs reserved in total."""
    terms: tuple[int, ...] = (1, 3)
    """Reservation terms allowed (years)."""

    def __post_init__(self) -> None:
        if self.spot_overhead is not None and not (
            math.isfinite(self.spot_overhead) and 0 <= self.spot_overhead <= 10
        ):
            raise InputError(
                f"spot overhead {self.spot_overhead!r} is not a fraction in [0, 10]",
                hint="give e.g. 0.075 for 7.5% extra GPU-hours on spot",
            )
        for gpu, cap in self.spot_capacity_gpus.items():
            if not (math.isfinite(cap) and cap >= 0):
                raise InputError(
                    f"spot capacity for {gpu} must be a number of GPUs ≥ 0, got {cap!r}",
                    hint="give e.g. spot_capacity_gpus={'H100': 32}",
                )
        for name in ("budget_usd", "monthly_budget_usd", "max_commitment_usd"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise InputError(
                    f"{name.replace('_', ' ')} must be a finite amount ≥ 0, got {value!r}",
                    hint="give a dollar amount such as 250000",
                )
        if self.max_reserved_gpus is not None and self.max_reserved_gpus < 0:
            raise InputError("the reserved-GPU cap must be ≥ 0", hint="give a whole number of GPUs")
        if not self.terms or any(t not in (1, 3) for t in self.terms):
            raise InputError(
                f"terms {self.terms!r}: only 1 and 3 years exist", hint="use 1, 3 or both"
            )

    @property
    def overhead(self) -> float:
        """:attr:`spot_overhead` as a number; PlanError while it is still to be resolved."""
        if self.spot_overhead is None:
            raise PlanError(
                "the spot overhead is not resolved yet",
                hint="call plan_fleet (it takes it from the spot model) or set spot_overhead",
            )
        return self.spot_overhead


@dataclass(frozen=True)
class Commitment:
    """Reserved GPUs to buy."""

    gpu: str
    """GPU model."""
    cloud: str
    """Cloud to buy from."""
    term_years: int
    """1 or 3."""
    count: int
    """GPUs reserved."""
    usd_per_gpu_hour: float
    """Effective hourly price per reserved GPU."""
    discount: float
    """Fraction off on-demand."""
    cost_usd: float
    """What these reservations cost over the profile's hours."""
    commitment_usd: float
    """Contract value over the full term (count × price × term hours)."""
    source: str
    """Where the discount comes from."""


@dataclass(frozen=True)
class MonthCost:
    """One calendar month's cost by billing type."""

    month: str
    """``YYYY-MM``."""
    hours: int
    """Hours of the profile in this month."""
    reserved_usd: float
    """Reservations (paid whether used or not)."""
    spot_usd: float
    """Spot GPU-hours, interruption overhead included."""
    on_demand_usd: float
    """On-demand GPU-hours."""
    total_usd: float
    """Sum of the three."""


@dataclass(frozen=True)
class GpuBreakdown:
    """How one GPU model's demand is served."""

    gpu: str
    """GPU model."""
    demand_gpu_hours: float
    """GPU-hours wanted (firm + interruptible)."""
    firm_gpu_hours: float
    """Of which non-interruptible."""
    peak_gpus: float
    """Largest hourly demand."""
    reserved_gpus: int
    """GPUs reserved (all options)."""
    reserved_used_gpu_hours: float
    """Reserved GPU-hours that served demand."""
    reserved_utilization: float | None
    """Used / paid reserved GPU-hours; None when nothing is reserved."""
    spot_gpu_hours: float
    """GPU-hours bought on spot, overhead included."""
    on_demand_gpu_hours: float
    """GPU-hours bought on demand."""
    cost_usd: float
    """Total cost for this model."""
    on_demand_only_cost_usd: float
    """Cost if every hour were on demand."""
    on_demand: PriceQuote
    """On-demand price used."""
    spot: PriceQuote | None
    """Spot price used (None: no spot, or spot with overhead not cheaper than on-demand)."""
    reserved_unavailable: tuple[str, ...]
    """Clouds/terms with no known reserved discount (not considered)."""


@dataclass(frozen=True)
class Scenario:
    """The plan's commitments under changed demand or spot prices."""

    name: str
    """What changed, e.g. ``demand -20%``."""
    cost_usd: float
    """Cost with the plan's commitments kept, hourly split redone."""
    on_demand_only_cost_usd: float
    """All-on-demand cost in the scenario."""
    savings_fraction: float
    """1 − cost / on-demand-only cost."""
    reserved_utilization: float | None
    """Reservation utilization in the scenario."""
    reoptimized_cost_usd: float | None
    """Cost if the commitments were chosen for this scenario (None: infeasible under the caps)."""


@dataclass(frozen=True)
class Solution:
    """Reserved counts per (GPU, option) and what solving took."""

    counts: dict[tuple[str, int], int]
    """(gpu, index into that GPU's ``reserved`` options) → GPUs reserved."""
    objective_usd: float
    """Cost the solver reports."""
    seconds: float
    """Wall time of building and solving the model."""
    variables: int
    """Model columns."""
    constraints: int
    """Model rows."""


@dataclass(frozen=True)
class FleetPlan:
    """The recommended mix and what it saves."""

    commitments: tuple[Commitment, ...]
    """Reservations to buy (empty: reserve nothing)."""
    cost_usd: float
    """Cost of the plan over the profile's hours."""
    on_demand_only_cost_usd: float
    """Cost if everything ran on demand."""
    savings_fraction: float
    """1 − cost / on-demand-only cost."""
    best_single_billing: str
    """The cheapest plan that uses one billing type for everything."""
    best_single_cost_usd: float
    """Its cost."""
    savings_vs_best_single_fraction: float
    """1 − cost / best single billing cost."""
    single_billing_costs_usd: dict[str, float | None]
    """Cost per single billing type (None: not possible, e.g. spot with firm demand)."""
    monthly: tuple[MonthCost, ...]
    """Cost per calendar month by billing type."""
    reserved_utilization: float | None
    """Used / paid reserved GPU-hours over all models; None when nothing is reserved."""
    per_gpu: tuple[GpuBreakdown, ...]
    """Breakdown per GPU model."""
    sensitivity: tuple[Scenario, ...]
    """Demand ±20% and spot price rises, commitments kept."""
    hours: int
    """Hours in the profile."""
    spot_overhead: float
    """Interruption overhead used."""
    solver: Solution
    """Solver statistics."""
    notes: tuple[str, ...]
    """Things the user should know (unavailable reservations, assumptions)."""
    extrapolated: bool = False
    """A proposed reservation's term is longer than the demand profile: its cost and saving assume
    the profile repeats for the whole term (said in ``notes``)."""
    spot_overhead_source: str = ""
    """Where :attr:`spot_overhead` comes from: the plan's spot model and its inputs, or "given"."""


def parse_spot_capacity(values: Iterable[str], gpus: Sequence[str]) -> dict[str, float]:
    """``--spot-capacity`` text → :attr:`FleetOptions.spot_capacity_gpus` for a demand of ``gpus``.

    ``"32"`` caps every model of the demand at 32 GPUs on spot at once; ``"H100=32"`` (any name
    ``gpuwise gpus`` knows) caps one model, which must be in the demand.
    """
    from gpuwise.hardware import find_gpu
    from gpuwise.units import GPU_COUNT_HINT, parse_count

    caps: dict[str, float] = {}
    for raw in values:
        if "=" in raw:
            name, _, n = raw.partition("=")
            gpu = find_gpu(name.strip()).name
            if gpu not in gpus:
                raise InputError(
                    f"--spot-capacity {raw!r}: {gpu} is not in the demand",
                    hint=f"the demand has {', '.join(gpus)}",
                )
            caps[gpu] = parse_count(n, "--spot-capacity", hint=GPU_COUNT_HINT)
        else:
            if not gpus:
                raise InputError(
                    "--spot-capacity N needs a demand", hint="give --demand or --profile"
                )
            caps.update(
                dict.fromkeys(gpus, parse_count(raw, "--spot-capacity", hint=GPU_COUNT_HINT))
            )
    return caps


def parse_terms(text: str) -> tuple[int, ...]:
    """``"1,3"`` (or ``"1y"``, ``"3"``) → :attr:`FleetOptions.terms`, sorted."""
    try:
        return tuple(
            sorted({int(t.strip().lower().removesuffix("y")) for t in text.split(",") if t.strip()})
        )
    except ValueError:
        raise InputError(
            f"cannot read --terms {text!r}", hint="write 1, 3 or 1,3 (years)"
        ) from None


def resolve_spot_overhead(
    options: FleetOptions, gpus: Iterable[str], prices: Mapping[str, GpuPrices]
) -> tuple[FleetOptions, str]:
    """``options`` with a number for the spot overhead (the spot model's for the spot quotes of
    ``gpus`` where it was left None) and where that number comes from."""
    from dataclasses import replace

    from gpuwise.fleet.pricing import spot_model_overhead

    if options.spot_overhead is not None:
        return options, "given"
    model = spot_model_overhead({g: prices[g] for g in gpus if g in prices})
    if model is None:
        return replace(options, spot_overhead=0.0), "no spot offers"
    return replace(options, spot_overhead=model.fraction), "plan's spot model: " + model.describe()
