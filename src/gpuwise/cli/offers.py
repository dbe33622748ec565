"""``gpuwise offers``: instance offers across clouds, filtered and ranked by price."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from gpuwise.cli._output import (
    CatalogFlag,
    JsonFlag,
    console,
    emit_json,
    money,
    number,
    print_table,
    split_list,
)
from gpuwise.cli._prices import MaxPriceAgeFlag, prices_age, print_price_age

if TYPE_CHECKING:
    from gpuwise.catalog import Offer


def offers(
    gpu: Annotated[
        str | None, typer.Option("--gpu", help="GPU model or alias, e.g. H100, A100-80GB, L4.")
    ] = None,
    count: Annotated[
        float | None, typer.Option("--count", help="Exactly this many GPUs per instance.")
    ] = None,
    min_count: Annotated[
        float | None, typer.Option("--min-count", help="At least this many GPUs per instance.")
    ] = None,
    cloud: Annotated[
        list[str] | None,
        typer.Option("--cloud", help="Only these clouds (comma-separated or repeated)."),
    ] = None,
    region: Annotated[
        str | None, typer.Option("--region", help="Region name or glob, e.g. 'us-*'.")
    ] = None,
    max_price: Annotated[
        str | None,
        typer.Option("--max-price", help="Max $/hour for the instance (spot price with --spot)."),
    ] = None,
    min_gpu_memory: Annotated[
        float | None,
        typer.Option("--min-gpu-memory", help="Only GPUs with at least this many GiB each."),
    ] = None,
    spot: Annotated[
        bool, typer.Option("--spot", help="Only offers with a real spot discount, priced at spot.")
    ] = False,
    sort: Annotated[
        str, typer.Option("--sort", help="price | gpu-price | spot | spot-gpu-price.")
    ] = "price",
    limit: Annotated[
        int, typer.Option("--limit", help="Show at most this many rows (0 = all).")
    ] = 20,
    catalog: CatalogFlag = None,
    max_price_age: MaxPriceAgeFlag = "30d",
    json: JsonFlag = False,
) -> None:
    """Instance offers with filters, one table across clouds, cheapest first; with the age of the prices."""
    from gpuwise.catalog import SORT_KEYS, OfferQuery, load_catalog, query_offers, sort_offers
    from gpuwise.errors import InputError, check_choice
    from gpuwise.units import check_finite, parse_money_usd

    check_choice(sort, SORT_KEYS, "--sort")
    if gpu is not None and not gpu.strip():
        raise InputError(
            "--gpu is empty",
            hint="give a GPU model such as H100 (see `gpuwise gpus`), or leave --gpu out",
        )
    prices_age((), max_price_age)  # a bad --max-price-age fails before any work
    for value, flag in ((count, "--count"), (min_count, "--min-count")):
        if value is not None:
            check_finite(value, flag, strict=True)
    if min_gpu_memory is not None:
        check_finite(min_gpu_memory, "--min-gpu-memory")
    if limit < 0:
        raise InputError(
            f"--limit must be ≥ 0, got {limit}", hint="give 0 for all rows, or a positive count"
        )
    query = OfferQuery(
        gpu=gpu,
        count=count,
        min_count=min_count,
        clouds=tuple(c.lower() for c in split_list(cloud)),
        region=region,
        max_price_usd_per_hour=parse_money_usd(max_price, "--max-price") if max_price else None,
        spot=spot,
        min_gpu_memory_gib=min_gpu_memory,
    )
    cat = load_catalog(catalog or ())
    if spot and sort == "price":
        sort = "spot"
    found = sort_offers(query_offers(cat.offers, query), sort)  # type: ignore[arg-type]
    shown = found[:limit] if limit else found
    age = prices_age(shown, max_price_age)
    from gpuwise.planner import zone_outliers

    # the rows a plan sets aside (AWS Local Zones, zone prices far below the region's others)
    sites = {(o.cloud, o.region, o.instance_type) for o in shown}
    aside = zone_outliers(
        [o for o in cat.offers if (o.cloud, o.region, o.instance_type) in sites],
        spot=spot or sort == "spot",
    )

    def outlier(o: Offer) -> bool:
        return (o.cloud, o.region, o.instance_type, o.zone or "") in aside

    if json:
        emit_json(
            {
                "offers": [
                    {
                        **o.to_dict(),
                        "on_demand_usd_per_gpu_hour": o.on_demand_usd_per_gpu_hour,
                        "spot_usd_per_gpu_hour": o.spot_usd_per_gpu_hour,
                        # as `plan` sets it aside: a Local Zone or a price far below the region's
                        "zone_outlier": outlier(o),
                    }
                    for o in shown
                ],
                "matched": len(found),
                **age.to_dict(),
            }
        )
        print_price_age(age, json=True)
        return
    _print_offers(shown, found, gpu=gpu, spot=spot, outlier=outlier)
    print_price_age(age, json=False)


def _print_offers(
    shown: list[Offer],
    found: list[Offer],
    *,
    gpu: str | None,
    spot: bool,
    outlier: Callable[[Offer], bool],
) -> None:
    """The offers table, with notes for an empty result and for zone outliers."""
    columns = [
        "cloud",
        "region",
        "zone",
        "instance",
        "GPU",
        "n",
        "GiB/GPU",
        "vCPU",
        "RAM GiB",
        "$/h",
        "$/GPU-h",
        "spot $/h",
    ] + (["spot $/GPU-h"] if spot else [])
    rows = [
        [
            o.cloud,
            o.region,
            (o.zone or "—") + (" ⚑" if outlier(o) else ""),
            o.instance_type,
            o.gpu,
            f"{o.gpu_count:g}",
            number(o.gpu_memory_gib, ",.0f"),
            number(o.vcpus, ",.0f"),
            number(o.memory_gib, ",.0f"),
            money(o.on_demand_usd_per_hour),
            money(o.on_demand_usd_per_gpu_hour),
            money(o.spot_usd_per_hour) if o.has_spot_discount else "—",
            *([money(o.spot_usd_per_gpu_hour)] if spot else []),
        ]
        for o in shown
    ]
    out = console()
    print_table(
        columns,
        rows,
        title=f"{len(shown)} of {len(found)} offers" + (f" for {gpu}" if gpu else ""),
        left=("cloud", "region", "zone", "instance", "GPU"),
        whole=("GPU",),
        # in a narrow terminal, the prices stay whole and these go first
        drop=("zone", "vCPU", "RAM GiB", "GiB/GPU", "$/h", "n", "region"),
        out=out,
    )
    if not found:
        out.print(
            "[yellow]No offer matches. Loosen a filter, or see `gpuwise gpus` for models and prices.[/yellow]"
        )
    if any(outlier(o) for o in shown):
        out.print(
            "[yellow]⚑ zone outlier: an AWS Local Zone (opt-in) or a price far below the region's "
            "other zones; `gpuwise plan` sets these aside (--allow-zone-outliers to use them).[/yellow]"
        )
