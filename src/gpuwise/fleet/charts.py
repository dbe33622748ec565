"""Offline HTML charts for ``fleet`` and ``tco``: plotly with its JavaScript inlined (no CDN).

Each file is self-contained (about 4 MB, most of it plotly.js) so it opens without a network.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from gpuwise.base.paths import write_text_atomic
from gpuwise.errors import InputError
from gpuwise.fleet.optimize import FleetPlan
from gpuwise.fleet.tco import TcoResult


def _write(fig: object, path: Path, title: str) -> None:
    try:
        html = fig.to_html(include_plotlyjs=True, full_html=True)  # type: ignore[attr-defined]
        write_text_atomic(path, html.replace("<head>", f"<head><title>{title}</title>", 1))
    except OSError as exc:
        raise InputError(
            f"cannot write {path} ({exc.strerror})", hint="give a writable path for the chart"
        ) from None


def fleet_html(
    plan: FleetPlan, hourly: Mapping[str, np.ndarray], timestamps: Sequence[dt.datetime], path: Path
) -> None:
    """Hourly GPUs by billing type (stacked) with the reserved line, and monthly cost by billing type."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=2,
        cols=1,
        subplot_titles=(
            "GPUs per hour by billing type (all GPU models)",
            "Cost per month by billing type (USD)",
        ),
        vertical_spacing=0.12,
    )
    x = list(timestamps)
    for key, name, color in (
        ("reserved_used", "reserved (used)", "#2c7fb8"),
        ("spot", "spot (incl. overhead)", "#41ab5d"),
        ("on_demand", "on-demand", "#fd8d3c"),
    ):
        fig.add_trace(
            go.Scatter(
                x=x, y=hourly[key], name=name, stackgroup="gpus", mode="none", fillcolor=color
            ),
            row=1,
            col=1,
        )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=hourly["reserved_paid"],
            name="reserved (paid)",
            mode="lines",
            line={"color": "#08306b", "dash": "dash"},
        ),
        row=1,
        col=1,
    )
    months = [m.month for m in plan.monthly]
    for attr, name, color in (
        ("reserved_usd", "reserved", "#2c7fb8"),
        ("spot_usd", "spot", "#41ab5d"),
        ("on_demand_usd", "on-demand", "#fd8d3c"),
    ):
        fig.add_trace(
            go.Bar(
                x=months,
                y=[getattr(m, attr) for m in plan.monthly],
                name=f"{name} $",
                marker_color=color,
                showlegend=False,
            ),
            row=2,
            col=1,
        )
    fig.update_layout(
        barmode="stack",
        height=800,
        title=f"gpuwise fleet: ${plan.cost_usd:,.0f} vs ${plan.on_demand_only_cost_usd:,.0f} "
        f"all on-demand ({plan.savings_fraction:.1%} saved)",
    )
    _write(fig, path, "gpuwise fleet")


def tco_html(result: TcoResult, path: Path) -> None:
    """Cumulative cash: owning versus each cloud billing type, month by month."""
    import plotly.graph_objects as go

    months = list(range(len(result.monthly_own_cash_usd)))
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=months,
            y=list(result.monthly_own_cash_usd),
            name="own (cash)",
            line={"width": 3, "color": "black"},
        )
    )
    for billing, series in result.monthly_cloud_usd.items():
        fig.add_trace(go.Scatter(x=months, y=list(series), name=f"cloud {billing}"))
    be = result.break_even_month
    fig.update_layout(
        title=f"gpuwise tco: {result.count}× {result.gpu}, {result.years:g} years at "
        f"{result.utilization:.0%} utilization"
        + (f" — break-even month {be}" if be is not None else ""),
        xaxis_title="month",
        yaxis_title="cumulative USD",
        height=600,
    )
    _write(fig, path, "gpuwise tco")
