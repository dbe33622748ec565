"""``gpuwise gpus``: GPU models, their datasheet figures and the cheapest prices per cloud."""

from __future__ import annotations

from typing import Annotated, Any

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


def gpus(
    min_memory: Annotated[
        float | None,
        typer.Option(
            "--min-memory",
            "--min-gpu-memory",
            help="Only GPUs with at least this many GiB of memory (--min-gpu-memory, as in `offers`, is the same).",
        ),
    ] = None,
    cloud: Annotated[
        list[str] | None,
        typer.Option(
            "--cloud", help="Prices from these clouds only (comma-separated or repeated)."
        ),
    ] = None,
    spot: Annotated[
        bool, typer.Option("--spot", help="Only GPUs with a spot offer; sort by spot price.")
    ] = False,
    priced_only: Annotated[
        bool, typer.Option("--priced-only", help="Only models with an offer in the catalog.")
    ] = False,
    catalog: CatalogFlag = None,
    max_price_age: MaxPriceAgeFlag = "30d",
    json: JsonFlag = False,
) -> None:
    """GPU types: datasheet specs and the cheapest on-demand and spot $/GPU-hour (and where)."""
    from gpuwise.catalog import OfferQuery, cheapest_per_gpu, load_catalog, query_offers
    from gpuwise.estimate import gpu_memory, load_calibration
    from gpuwise.hardware import gpu_table
    from gpuwise.units import check_finite

    if min_memory is not None:
        check_finite(min_memory, "--min-memory")
    prices_age((), max_price_age)  # a bad --max-price-age fails before any work
    cat = load_catalog(catalog or ())
    offers = query_offers(cat.offers, OfferQuery(clouds=tuple(split_list(cloud))))
    od, sp = cheapest_per_gpu(offers, spot=False), cheapest_per_gpu(offers, spot=True)
    rows: list[dict[str, Any]] = []
    cal = load_calibration()
    for spec in gpu_table().specs:
        if min_memory is not None and spec.memory_gib < min_memory:
            continue
        if spot and spec.name not in sp:
            continue
        if priced_only and spec.name not in od and spec.name not in sp:
            continue
        o, s = od.get(spec.name), sp.get(spec.name)
        peak = spec.peak_bf16_tflops or spec.peak_fp16_tflops
        mem = gpu_memory(spec, cal.for_gpu(spec.name) if cal else None)
        rows.append(
            {
                "gpu": spec.name,
                "vendor": spec.vendor,
                "architecture": spec.architecture,
                "memory_gib": spec.memory_gib,
                # what estimate and plan count as the GPU's memory (estimate.capacity)
                "reported_memory_gib": mem.total_gib,
                "usable_memory_gib": mem.usable_gib,
                "memory_source": mem.source,
                "memory_bandwidth_tb_s": spec.memory_bandwidth_tb_s,
                "peak_fp32_tflops": spec.peak_fp32_tflops,
                "peak_tf32_tflops": spec.peak_tf32_tflops,
                "peak_fp16_tflops": spec.peak_fp16_tflops,
                "peak_bf16_tflops": spec.peak_bf16_tflops,
                "peak_fp8_tflops": spec.peak_fp8_tflops,
                "interconnect": spec.interconnect,
                "tdp_w": spec.tdp_w,
                "mig_profiles": list(spec.mig_profiles),
                "min_on_demand_usd_per_gpu_hour": o.usd_per_gpu_hour if o else None,
                "min_on_demand_where": f"{o.cloud} {o.region} {o.instance_type}" if o else None,
                "min_spot_usd_per_gpu_hour": s.usd_per_gpu_hour if s else None,
                "min_spot_where": f"{s.cloud} {s.region} {s.instance_type}" if s else None,
                # value, not just price: dollars per PFLOP-hour of dense 16-bit tensor compute
                "usd_per_bf16_pflop_hour": (o.usd_per_gpu_hour / (peak / 1000))
                if o and peak
                else None,
            }
        )
    key = "min_spot_usd_per_gpu_hour" if spot else "min_on_demand_usd_per_gpu_hour"
    rows.sort(key=lambda r: (r[key] is None, r[key] or 0.0, r["gpu"]))
    age = prices_age(offers, max_price_age)
    if json:
        emit_json({"gpus": rows, **age.to_dict()})
        print_price_age(age, json=True)
        return
    clouds = sorted({o.cloud for o in offers})
    print_table(
        (
            "GPU",
            "Mem GiB",
            "usable",
            "BW TB/s",
            "BF16 TFLOP/s",
            "FP8",
            "On-demand $/GPU-h",
            "where",
            "Spot $/GPU-h",
            "$/PFLOP-h",
        ),
        [
            (
                r["gpu"],
                number(r["memory_gib"], ",.0f"),
                number(r["usable_memory_gib"], ",.1f")
                + ("" if r["memory_source"] != "datasheet" else "?"),
                number(r["memory_bandwidth_tb_s"], ".2f"),
                number(r["peak_bf16_tflops"] or r["peak_fp16_tflops"], ",.0f"),
                number(r["peak_fp8_tflops"], ",.0f"),
                money(r["min_on_demand_usd_per_gpu_hour"]),
                r["min_on_demand_where"] or "—",
                money(r["min_spot_usd_per_gpu_hour"]),
                money(r["usd_per_bf16_pflop_hour"]),
            )
            for r in rows
        ],
        title=f"GPU models ({len(rows)}) — cheapest prices from {', '.join(clouds) or 'no cloud'}",
        left=("GPU", "where"),
        whole=("GPU",),
        drop=("where", "FP8", "BW TB/s", "$/PFLOP-h", "usable"),
    )
    if not rows:
        console().print(
            "[yellow]No GPU model matches these filters. Loosen --min-memory, --spot or "
            "--priced-only; `gpuwise gpus` lists every model.[/yellow]"
        )
    console().print(
        "[dim]Peaks are dense (no sparsity). BF16 column shows FP16 where the GPU has no BF16. "
        "usable: memory nvidia-smi reports less the CUDA context, as estimate and plan count it "
        "(? = no reported figure known: the datasheet's, likely a few percent high). "
        "Prices: see `gpuwise catalog info` for their sources.[/dim]"
    )
    print_price_age(age, json=False)
