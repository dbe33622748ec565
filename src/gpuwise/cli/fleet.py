"""``gpuwise fleet``, ``gpuwise tco`` and ``gpuwise vendors``: how to pay less for a fleet."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuwise.cli._flags import named_as_flags
from gpuwise.cli._output import (
    CatalogFlag,
    JsonFlag,
    console,
    emit_json,
    make_table,
    money,
    number,
    split_list,
)
from gpuwise.cli._prices import MaxPriceAgeFlag, prices_age, print_price_age

if TYPE_CHECKING:
    from gpuwise.catalog import ReservedTerm
    from gpuwise.fleet import GpuPrices

ReservedFlag = Annotated[
    list[str] | None,
    typer.Option(
        "--reserved-discount",
        help="Reserved discount off on-demand, CLOUD:1y=FRACTION or "
        "CLOUD:3y=FRACTION (e.g. gcp:1y=0.37); overrides reserved.yaml. Repeatable.",
    ),
]
CloudFlag = Annotated[
    list[str] | None,
    typer.Option("--cloud", help="Only these clouds (comma-separated or repeated)."),
]
SpotOverheadFlag = Annotated[
    float | None,
    typer.Option(
        "--spot-overhead",
        help="Extra GPU-hours lost per useful spot GPU-hour to interruptions "
        "(default: the plan's spot model for the cloud selling spot, see docs/fleet.md).",
    ),
]


def _terms(
    reserved_discount: list[str] | None, offers: Sequence[Any]
) -> dict[tuple[str, int], ReservedTerm | None]:
    from gpuwise.fleet import reserved_terms

    return reserved_terms(offers, reserved_discount or [])


def _all_offers(catalog: list[Path] | None) -> Sequence[Any]:
    from gpuwise.catalog import load_catalog

    return load_catalog(catalog or ()).offers


def _offers(offers: Sequence[Any], cloud: list[str] | None, region: str | None) -> list[Any]:
    from gpuwise.catalog import OfferQuery, query_offers

    return query_offers(
        offers, OfferQuery(clouds=tuple(c.lower() for c in split_list(cloud)), region=region)
    )


def _money_opt(value: str | None, what: str) -> float | None:
    from gpuwise.units import parse_money_usd

    return None if value is None else parse_money_usd(value, what)


# the library's argument names (in its error messages) → this module's flags
FLEET_FLAGS = {
    "hours": "--profile-hours",
    "seed": "--seed",
    "peak_gpus": "--profile-peak",
    "budget_usd": "--budget",
    "monthly_budget_usd": "--monthly-budget",
    "normalize_weights": "--normalize-weights",
    "count": "--gpus",
    "years": "--years",
    "utilization": "--utilization",
}


@named_as_flags(FLEET_FLAGS)
def fleet(
    demand: Annotated[
        Path | None,
        typer.Option("--demand", help="Hourly demand CSV: timestamp,gpu,gpus,interruptible."),
    ] = None,
    profile: Annotated[
        bool,
        typer.Option(
            "--profile",
            help="Use a synthetic year (daily/weekly cycles + bursts) instead of --demand.",
        ),
    ] = False,
    profile_gpus: Annotated[
        list[str] | None,
        typer.Option(
            "--profile-gpus", help="GPU models of the synthetic profile (default H100,A100-80GB)."
        ),
    ] = None,
    profile_hours: Annotated[
        int, typer.Option("--profile-hours", help="Hours in the synthetic profile.")
    ] = 8760,
    profile_peak: Annotated[
        float,
        typer.Option("--profile-peak", help="Scale of the synthetic profile, GPUs (first model)."),
    ] = 64.0,
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of the synthetic profile (same seed, same year).")
    ] = 0,
    save_demand: Annotated[
        Path | None, typer.Option("--save-demand", help="Write the demand used as CSV.")
    ] = None,
    demand_from_history: Annotated[
        Path | None,
        typer.Option(
            "--demand-from-history",
            help="Take the demand from `gpuwise monitor`'s SQLite history: allocated GPU-hours per "
            "model and hour (spot nodes' work is interruptible); idle rented hours are shown, not reserved.",
        ),
    ] = None,
    demand_from_prometheus: Annotated[
        str | None,
        typer.Option(
            "--demand-from-prometheus",
            help="Take the demand from the exporter's series in Prometheus (as --demand-from-history).",
        ),
    ] = None,
    since: Annotated[
        str,
        typer.Option(
            "--since", metavar="DURATION", help="History window for --demand-from-* (e.g. 30d)."
        ),
    ] = "30d",
    cloud: CloudFlag = None,
    region: Annotated[
        str | None, typer.Option("--region", help="Only regions matching this name or glob.")
    ] = None,
    spot_overhead: SpotOverheadFlag = None,
    spot_capacity: Annotated[
        list[str] | None,
        typer.Option(
            "--spot-capacity",
            help="Most GPUs on spot at once: N for every model, or GPU=N. Default: no limit.",
        ),
    ] = None,
    budget: Annotated[
        str | None, typer.Option("--budget", help="Most the whole profile may cost (USD).")
    ] = None,
    monthly_budget: Annotated[
        str | None, typer.Option("--monthly-budget", help="Most any calendar month may cost (USD).")
    ] = None,
    max_commitment: Annotated[
        str | None,
        typer.Option(
            "--max-commitment",
            help="Most all reservations may commit to over their full terms (USD).",
        ),
    ] = None,
    max_reserved: Annotated[
        int | None, typer.Option("--max-reserved", help="Most GPUs reserved in total.")
    ] = None,
    terms: Annotated[
        str, typer.Option("--terms", help="Reservation terms allowed, in years: 1, 3 or 1,3.")
    ] = "1,3",
    reserved_discount: ReservedFlag = None,
    html: Annotated[
        Path | None, typer.Option("--html", help="Write an offline HTML chart here.")
    ] = None,
    catalog: CatalogFlag = None,
    max_price_age: MaxPriceAgeFlag = "30d",  # issue 13
    json: JsonFlag = False,
) -> None:
    """Best reserved/spot/on-demand mix for an hourly demand profile (a MILP solved by HiGHS)."""
    from gpuwise.fleet import (
        FleetOptions,
        gpu_prices,
        hourly_split,
        parse_spot_capacity,
        parse_terms,
        plan_fleet,
    )

    usage = None
    if demand_from_history is not None or demand_from_prometheus is not None:
        from gpuwise.cli._fleet_history import history_demand

        dem, usage = history_demand(
            demand_from_history, demand_from_prometheus, since, demand is not None or profile
        )
        _save_demand(dem, save_demand)
    else:
        dem = _demand(demand, profile, profile_gpus, profile_hours, profile_peak, seed, save_demand)
    options = FleetOptions(
        spot_capacity_gpus=parse_spot_capacity(split_list(spot_capacity), dem.gpus),
        budget_usd=_money_opt(budget, "--budget"),
        monthly_budget_usd=_money_opt(monthly_budget, "--monthly-budget"),
        max_commitment_usd=_money_opt(max_commitment, "--max-commitment"),
        max_reserved_gpus=max_reserved,
        terms=parse_terms(terms),
        **({} if spot_overhead is None else {"spot_overhead": spot_overhead}),
    )
    prices_age((), max_price_age)  # issue 13: a bad --max-price-age fails before solving
    offers = _all_offers(catalog)
    allowed = _offers(offers, cloud, region)
    prices = gpu_prices(allowed, dem.gpus, _terms(reserved_discount, offers))
    age = prices_age([o for o in allowed if o.gpu in set(dem.gpus)], max_price_age)  # issue 13
    if sys.stderr.isatty():  # someone is watching: say what runs and how to stop it
        console(stderr=True).print(
            f"[dim]Solving for {len(dem.gpus)} GPU model(s) × {dem.hours:,} h "
            "(HiGHS; Ctrl-C stops it)…[/dim]"
        )
    try:
        plan = plan_fleet(dem, prices, options)
    except KeyboardInterrupt:  # the solve runs in a worker thread, so this comes at once
        sys.stderr.write("gpuwise fleet: interrupted (Ctrl-C) while solving; no plan\n")
        raise typer.Exit(130) from None
    if html is not None:
        from gpuwise.fleet import fleet_html

        fleet_html(plan, hourly_split(dem, prices, plan, options), dem.timestamps(), html)
    if json:
        doc = _fleet_json(plan, dem.origin, dem.start.isoformat(), prices, usage)
        if html is not None:
            doc["html"] = str(html)
        doc.update(age.to_dict())  # issue 13
        emit_json(doc)
        print_price_age(age, json=True)
        return
    _fleet_text(plan, dem.origin, html, usage)
    print_price_age(age, json=False)  # issue 13


def _demand(
    demand: Path | None,
    profile: bool,
    profile_gpus: list[str] | None,
    profile_hours: int,
    profile_peak: float,
    seed: int,
    save_demand: Path | None,
) -> Any:
    """The demand of ``--demand FILE`` or ``--profile``, written to ``--save-demand`` if asked."""
    from gpuwise.errors import InputError
    from gpuwise.fleet import read_demand_csv, synthetic_demand

    if (demand is None) == (not profile):
        raise InputError(
            "give exactly one of --demand FILE or --profile",
            hint="e.g. `gpuwise fleet --demand examples/demand.csv` or `gpuwise fleet --profile`",
        )
    if demand is not None:
        if profile_gpus:  # only the synthetic profile has models to choose; it used to be ignored
            raise InputError(
                "--profile-gpus applies to --profile, not to --demand FILE",
                hint="drop --profile-gpus (the file's gpu column names the models)",
            )
        dem = read_demand_csv(demand)
    else:
        dem = synthetic_demand(
            tuple(split_list(profile_gpus)) or ("H100", "A100-80GB"),
            hours=profile_hours,
            seed=seed,
            peak_gpus=profile_peak,
        )
    _save_demand(dem, save_demand)
    return dem


def _save_demand(dem: Any, save_demand: Path | None) -> None:
    from gpuwise.errors import InputError
    from gpuwise.fleet import demand_to_csv

    if save_demand is not None:
        try:
            from gpuwise.base.paths import write_text_atomic

            write_text_atomic(save_demand, demand_to_csv(dem))
        except OSError as exc:
            raise InputError(
                f"cannot write {save_demand} ({exc.strerror})",
                hint="give a writable --save-demand path",
            ) from None


def _fleet_json(
    plan: Any, origin: str, start: str, prices: dict[str, GpuPrices], usage: Any = None
) -> dict[str, Any]:
    from gpuwise.cli._fleet_history import usage_json
    from gpuwise.cli._output import to_jsonable

    doc: dict[str, Any] = to_jsonable(plan)
    doc["solver"] = {
        "name": "HiGHS (scipy.optimize.milp)",
        "seconds": plan.solver.seconds,
        "variables": plan.solver.variables,
        "constraints": plan.solver.constraints,
    }
    doc["demand"] = {"source": origin, "start": start, "hours": plan.hours}
    doc["reserved_options"] = {g: to_jsonable(p.reserved) for g, p in prices.items()}
    if usage is not None:
        doc["history"] = usage_json(usage)
    return doc


def _fleet_text(plan: Any, origin: str, html: Path | None, usage: Any = None) -> None:
    out = console()
    if usage is not None:
        from gpuwise.cli._fleet_history import print_usage

        print_usage(usage, out)
    out.print(
        f"[bold]Fleet plan[/bold] for {origin} ({plan.hours:,} h), solved in {plan.solver.seconds:.2f} s"
    )
    t = make_table(
        (
            "GPU",
            "cloud",
            "term",
            "GPUs",
            "$/GPU-h",
            "discount",
            "cost over profile",
            "contract value",
        ),
        title="Reservations to buy",
        left=("GPU", "cloud"),
    )
    for c in plan.commitments:
        t.add_row(
            c.gpu,
            c.cloud,
            f"{c.term_years}y",
            str(c.count),
            money(c.usd_per_gpu_hour, 3),
            f"{c.discount:.0%}",
            money(c.cost_usd, 0),
            money(c.commitment_usd, 0),
        )
    if not plan.commitments:
        t.add_row("—", "reserve nothing", "", "", "", "", "", "")
    out.print(t)
    g = make_table(
        (
            "GPU",
            "peak",
            "reserved",
            "res. util",
            "spot GPU-h",
            "on-demand GPU-h",
            "cost",
            "all on-demand",
        ),
        title="Per GPU model",
        left=("GPU",),
    )
    for b in plan.per_gpu:
        g.add_row(
            b.gpu,
            number(b.peak_gpus, ",.0f"),
            str(b.reserved_gpus),
            "—" if b.reserved_utilization is None else f"{b.reserved_utilization:.1%}",
            number(b.spot_gpu_hours, ",.0f"),
            number(b.on_demand_gpu_hours, ",.0f"),
            money(b.cost_usd, 0),
            money(b.on_demand_only_cost_usd, 0),
        )
    out.print(g)
    m = make_table(("month", "reserved", "spot", "on-demand", "total"), title="Cost per month")
    for mc in plan.monthly:
        m.add_row(
            mc.month,
            money(mc.reserved_usd, 0),
            money(mc.spot_usd, 0),
            money(mc.on_demand_usd, 0),
            money(mc.total_usd, 0),
        )
    out.print(m)
    util = "—" if plan.reserved_utilization is None else f"{plan.reserved_utilization:.1%}"
    out.print(
        f"Total {money(plan.cost_usd, 0)} vs all on-demand {money(plan.on_demand_only_cost_usd, 0)}: "
        f"[bold]{plan.savings_fraction:.1%} saved[/bold]; vs best single billing ({plan.best_single_billing}, "
        f"{money(plan.best_single_cost_usd, 0)}): {plan.savings_vs_best_single_fraction:.1%} saved. "
        f"Reservation utilization {util}. Spot overhead {plan.spot_overhead:.2%}"
        + (f" ({plan.spot_overhead_source})." if plan.spot_overhead_source else ".")
    )
    s = make_table(
        ("scenario", "cost", "saved vs on-demand", "res. util", "best possible"),
        title="Sensitivity (commitments kept, hourly split redone)",
        left=("scenario",),
    )
    for sc in plan.sensitivity:
        s.add_row(
            sc.name,
            money(sc.cost_usd, 0),
            f"{sc.savings_fraction:.1%}",
            "—" if sc.reserved_utilization is None else f"{sc.reserved_utilization:.1%}",
            money(sc.reoptimized_cost_usd, 0) if sc.reoptimized_cost_usd is not None else "—",
        )
    out.print(s)
    for note in plan.notes:
        label = (
            "[bold yellow]warning:[/bold yellow]"
            if note.startswith("extrapolated:")
            else "[yellow]note:[/yellow]"
        )
        out.print(f"{label} {note}")
    if html is not None:
        out.print(f"chart: {html}")


@named_as_flags(FLEET_FLAGS)
def tco(
    gpu: Annotated[str, typer.Option("--gpu", help="GPU model, e.g. A100-80GB.")],
    count: Annotated[
        int, typer.Option("--gpus", help="GPUs owned or rented, as in `estimate --gpus`.")
    ] = 8,
    years: Annotated[float, typer.Option("--years", help="Horizon in years.")] = 3.0,
    utilization: Annotated[
        str,
        typer.Option(
            "--utilization", help="Fraction of hours the GPUs do useful work (0.6 or 60%)."
        ),
    ] = "0.6",
    server_price: Annotated[
        str | None,
        typer.Option(
            "--server-price",
            help="Price of the servers holding all the GPUs (USD). Required: no citable default exists.",
        ),
    ] = None,
    usd_per_kwh: Annotated[
        float | None,
        typer.Option(
            "--usd-per-kwh",
            help="Electricity price, USD per kWh. Required: it varies several-fold by place.",
        ),
    ] = None,
    pue: Annotated[
        float | None,
        typer.Option(
            "--pue", help="Facility PUE (default 1.58: Uptime Institute 2023 survey average)."
        ),
    ] = None,
    power_load: Annotated[
        str,
        typer.Option(
            "--power-load",
            help="Average GPU draw as a fraction of TDP, 0.7 or 70% (1.0 = full TDP always, an upper bound).",
        ),
    ] = "1.0",
    host_power_w: Annotated[
        float,
        typer.Option(
            "--host-power-w",
            help="Extra host power for all servers, watts (default 0: not counted).",
        ),
    ] = 0.0,
    depreciation_years: Annotated[
        float | None,
        typer.Option(
            "--depreciation-years", help="Straight-line depreciation life (default: the horizon)."
        ),
    ] = None,
    residual: Annotated[
        str,
        typer.Option(
            "--residual",
            help="Value left after the depreciation life, fraction of the price (0.1 or 10%).",
        ),
    ] = "0",
    interest_rate: Annotated[
        str,
        typer.Option(
            "--interest-rate",
            help="Yearly interest rate when financed over the depreciation life, 0.05 or 5% (0 = cash).",
        ),
    ] = "0",
    colocation: Annotated[
        str,
        typer.Option(
            "--colocation-per-month",
            help="Space/colocation per month, USD (default 0: not counted).",
        ),
    ] = "0",
    staff: Annotated[
        str,
        typer.Option(
            "--staff-per-year",
            help="Operations staff share per year, USD (default 0: not counted).",
        ),
    ] = "0",
    maintenance: Annotated[
        str,
        typer.Option(
            "--maintenance",
            help="Maintenance per year as a fraction of the price, 0.05 or 5% (default 0: not counted).",
        ),
    ] = "0",
    cloud: CloudFlag = None,
    spot_overhead: SpotOverheadFlag = None,
    reserved_discount: ReservedFlag = None,
    html: Annotated[
        Path | None, typer.Option("--html", help="Write an offline HTML chart here.")
    ] = None,
    catalog: CatalogFlag = None,
    json: JsonFlag = False,
) -> None:
    """Own versus rent: cost of buying GPU servers vs renting them, break-even utilization and month."""
    from gpuwise.errors import InputError
    from gpuwise.fleet import CloudRates, compute_tco, gpu_prices
    from gpuwise.hardware import find_gpu
    from gpuwise.units import parse_fraction

    spec = find_gpu(gpu)
    if count < 1:
        raise InputError(
            f"--gpus must be ≥ 1, got {count}", hint="give the number of GPUs owned, e.g. --gpus 8"
        )
    if spec.tdp_w is None:
        raise InputError(
            f"the hardware table has no TDP for {spec.name}", hint="add tdp_w in your gpus.csv"
        )
    own = _own_costs(
        server_price,
        usd_per_kwh,
        pue,
        power_load,
        host_power_w,
        depreciation_years,
        residual,
        interest_rate,
        colocation,
        staff,
        maintenance,
    )
    offers = _all_offers(catalog)
    p = gpu_prices(_offers(offers, cloud, None), [spec.name], _terms(reserved_discount, offers))[
        spec.name
    ]
    rates = CloudRates.from_prices(p)
    result = compute_tco(
        spec.name,
        count,
        years,
        parse_fraction(utilization, "--utilization"),
        own,
        rates,
        tdp_w=spec.tdp_w,
        spot_overhead=spot_overhead,
    )
    if html is not None:
        from gpuwise.fleet import tco_html

        tco_html(result, html)
    if json:
        emit_json(_tco_json(result, p, html))
        return
    _tco_text(result, rates, own.pue, html)


def _tco_json(result: Any, prices: GpuPrices, html: Path | None) -> dict[str, Any]:
    from gpuwise.cli._output import to_jsonable

    doc: dict[str, Any] = to_jsonable(result)
    doc["cloud_prices"] = {
        "on_demand": to_jsonable(prices.on_demand),
        "spot": to_jsonable(prices.spot),
        "reserved": to_jsonable(prices.reserved),
    }
    if html is not None:
        doc["html"] = str(html)
    return doc


def _own_costs(
    server_price: str | None,
    usd_per_kwh: float | None,
    pue: float | None,
    power_load: str,
    host_power_w: float,
    depreciation_years: float | None,
    residual: str,
    interest_rate: str,
    colocation: str,
    staff: str,
    maintenance: str,
) -> Any:
    """``tco``'s owning flags as :class:`~gpuwise.fleet.OwnCosts` (two have no default)."""
    from gpuwise.errors import InputError
    from gpuwise.fleet import DEFAULT_PUE, OwnCosts
    from gpuwise.units import parse_fraction, parse_money_usd

    if server_price is None:
        raise InputError(
            "--server-price is required: gpuwise has no citable default server price",
            hint="give the quoted price of the servers holding all the GPUs, e.g. --server-price 250k",
        )
    if usd_per_kwh is None:
        raise InputError(
            "--usd-per-kwh is required: electricity prices vary several-fold by place",
            hint="give your tariff, e.g. --usd-per-kwh 0.12",
        )
    return OwnCosts(
        server_price_usd=parse_money_usd(server_price, "--server-price"),
        usd_per_kwh=usd_per_kwh,
        pue=DEFAULT_PUE if pue is None else pue,
        power_load=parse_fraction(power_load, "--power-load"),
        host_power_w=host_power_w,
        depreciation_years=depreciation_years,
        residual_fraction=parse_fraction(residual, "--residual"),
        interest_rate=parse_fraction(interest_rate, "--interest-rate"),
        colocation_usd_per_month=parse_money_usd(colocation, "--colocation-per-month"),
        staff_usd_per_year=parse_money_usd(staff, "--staff-per-year"),
        maintenance_fraction_per_year=parse_fraction(maintenance, "--maintenance"),
    )


def _tco_text(result: Any, rates: Any, pue: float, html: Path | None) -> None:
    out = console()
    out.print(
        f"[bold]Own vs rent[/bold]: {result.count}× {result.gpu} for {result.years:g} years at "
        f"{result.utilization:.0%} utilization"
    )
    t = make_table(("item", "USD"), title="Owning", left=("item",))
    o = result.own
    for name, v in (
        ("depreciation", o.depreciation_usd),
        ("interest", o.interest_usd),
        (f"power ({o.energy_kwh:,.0f} kWh, TDP {result.tdp_w:g} W × PUE {pue:g})", o.power_usd),
        ("colocation", o.colocation_usd),
        ("staff", o.staff_usd),
        ("maintenance", o.maintenance_usd),
        ("[bold]total[/bold]", result.own_cost_usd),
    ):
        t.add_row(name, money(v, 0))
    out.print(t)
    c = make_table(
        ("billing", "$/GPU-h", "cost", "break-even utilization", "break-even month"),
        title="Renting",
        left=("billing",),
    )
    price = {
        "on-demand": rates.on_demand,
        "spot": rates.spot,
        "reserved-1y": rates.reserved_1y,
        "reserved-3y": rates.reserved_3y,
    }
    for billing, cost in result.cloud_cost_usd.items():
        be_u = result.break_even_utilization_by_billing.get(billing)
        be_m = result.break_even_month_by_billing.get(billing)
        c.add_row(
            billing,
            money(price[billing], 3),
            money(cost, 0) if cost is not None else "unavailable",
            "—" if be_u is None else f"{be_u:.1%}",
            "—" if be_m is None else str(be_m),
        )
    out.print(c)
    be = result.break_even_utilization
    out.print(
        f"Buying beats renting on demand above [bold]{'—' if be is None else f'{be:.1%}'}[/bold] utilization; "
        f"break-even month vs the cheapest cloud option ({result.cheapest_cloud_billing}): "
        f"{'not within the horizon' if result.break_even_month is None else result.break_even_month}."
    )
    for note in result.notes:
        out.print(f"[yellow]note:[/yellow] {note}")
    if rates.spot is not None:
        out.print(
            f"Spot includes {result.spot_overhead:.2%} interruption overhead "
            f"({result.spot_overhead_source}; --spot-overhead sets it)."
        )
    if html is not None:
        out.print(f"chart: {html}")


@named_as_flags(FLEET_FLAGS)
def vendors(
    criteria: Annotated[
        Path,
        typer.Option("--criteria", help="Vendors YAML: weights, criteria, vendors and values."),
    ],
    normalize_weights: Annotated[
        bool,
        typer.Option(
            "--normalize-weights",
            help="Rescale weights that do not sum to 1 (otherwise they are rejected).",
        ),
    ] = False,
    reserved_discount: ReservedFlag = None,
    catalog: CatalogFlag = None,
    json: JsonFlag = False,
) -> None:
    """Weighted multi-criteria vendor scoring with explained normalization and weight sensitivity."""
    from gpuwise.catalog import load_catalog
    from gpuwise.fleet import catalog_filler, read_criteria, score_vendors

    offers = load_catalog(catalog or ()).offers
    fill = catalog_filler(offers, _terms(reserved_discount, offers))
    crit = read_criteria(criteria, normalize_weights=normalize_weights, fill=fill)
    ranking = score_vendors(crit)
    for note in crit.notes:
        sys.stderr.write(f"warning: {note}\n")
    if json:
        emit_json(ranking)
        return
    out = console()
    n = make_table(
        ("metric", "better", "min", "max", *[v.name for v in crit.vendors]),
        title="Normalization (min–max across vendors; 1 = best)",
        left=("metric", "better"),
    )
    for norm in ranking.normalization:
        n.add_row(
            f"{norm.dimension}.{norm.metric}",
            norm.direction,
            f"{norm.min_value:g}",
            f"{norm.max_value:g}",
            *[f"{norm.normalized[v.name]:.2f}" for v in crit.vendors],
        )
    out.print(n)
    out.print(
        "[dim]higher is better: (x − min) / (max − min); lower is better: (max − x) / (max − min); "
        "all vendors equal: 1 for everyone. Score = Σ dimension weight × Σ metric weight × normalized.[/dim]"
    )
    dims = list(ranking.weights)
    r = make_table(
        ("#", "vendor", "score", *[f"{d} ({ranking.weights[d]:.0%})" for d in dims]),
        title="Ranking (each cell: the dimension's contribution to the score)",
        left=("vendor",),
    )
    for s in ranking.ranking:
        r.add_row(
            str(s.rank), s.vendor, f"{s.score:.3f}", *[f"{s.by_dimension[d]:.3f}" for d in dims]
        )
    out.print(r)
    t = make_table(
        ("dimension", "weight", "switch at", "change", "new winner"),
        title=f"Sensitivity: weight at which {ranking.ranking[0].vendor} stops winning (others rescaled)",
        left=("dimension", "new winner"),
    )
    for w in ranking.sensitivity:
        t.add_row(
            w.dimension,
            f"{w.weight:.2f}",
            "never" if w.switch_weight is None else f"{w.switch_weight:.3f}",
            "—" if w.change is None else f"{w.change:+.3f}",
            w.new_winner or "—",
        )
    out.print(t)
    for note in ranking.notes:
        if note not in crit.notes:
            out.print(f"[dim]{note}[/dim]")
