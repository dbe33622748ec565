"""The report as one self-contained HTML file: jinja2 template, plotly charts, plotly.js inlined.

No CDN, no fonts, no network: the file opens offline and from an air-gapped cluster. Every number
in the tables carries ``data-field``/``data-value`` attributes with the exact value the JSON report
has, which is how the browser test checks the page against ``--json``.
"""

from __future__ import annotations

import datetime as dt
import functools
from importlib import resources
from typing import Any

import numpy as np

from gpuwise.monitor.history import History
from gpuwise.monitor.report import EfficiencyReport
from gpuwise.units import BYTES_PER_GIB

MAX_CHART_POINTS = 1500  # per GPU line; keeps a 30-day report file small


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _thin(x: np.ndarray, *ys: np.ndarray) -> tuple[np.ndarray, ...]:
    if x.size <= MAX_CHART_POINTS:
        return (x, *ys)
    idx = np.linspace(0, x.size - 1, MAX_CHART_POINTS).astype(int)
    return (x[idx], *(y[idx] for y in ys))


def _charts(report: EfficiencyReport, history: History) -> list[tuple[str, str]]:
    import plotly.graph_objects as go

    activity, memory = go.Figure(), go.Figure()
    for s in history.gpus:
        t = (
            np.array([dt.datetime.fromtimestamp(v, tz=dt.timezone.utc) for v in s.timestamp_s])
            if len(s)
            else np.array([])
        )
        frac = (
            s.memory_used_bytes / s.memory_total_bytes
            if s.memory_total_bytes == s.memory_total_bytes
            else s.memory_used_bytes * np.nan
        )
        tt, act, mem = _thin(t, s.activity_ratio * 100, frac * 100)
        if len(s):  # step lines: the last sample lasts until its end, not its start
            end = dt.datetime.fromtimestamp(
                float(s.timestamp_s[-1] + s.duration_s[-1]), tz=dt.timezone.utc
            )
            tt = np.append(tt, np.array([end], dtype=object))
            act, mem = np.append(act, act[-1]), np.append(mem, mem[-1])
        name = f"GPU {s.index} ({s.host})"
        activity.add_trace(go.Scatter(x=tt, y=act, mode="lines", name=name, line_shape="hv"))
        memory.add_trace(go.Scatter(x=tt, y=mem, mode="lines", name=name, line_shape="hv"))
    activity.add_hline(
        y=report.active_threshold * 100, line_dash="dot", annotation_text="idle below"
    )
    activity.update_layout(
        title="Activity (SM-active where available, else utilization), %", yaxis_range=[0, 100]
    )
    memory.add_hline(y=85, line_dash="dot", annotation_text="85 %")
    memory.update_layout(title="Memory used, % of GPU memory", yaxis_range=[0, 100])
    labels = [f"GPU {u.index} ({u.host})" for u in report.gpus]
    money = go.Figure(
        [
            go.Bar(
                name="used",
                x=labels,
                y=[(u.cost_usd or 0) - (u.wasted_usd or 0) for u in report.gpus],
            ),
            go.Bar(name="wasted (idle)", x=labels, y=[u.wasted_usd or 0 for u in report.gpus]),
        ]
    )
    money.update_layout(barmode="stack", title="Cost per GPU, USD")
    out = []
    for key, fig in (("activity", activity), ("memory", memory), ("cost", money)):
        fig.update_layout(
            height=320, margin={"l": 40, "r": 20, "t": 40, "b": 30}, template="plotly_white"
        )
        out.append(
            (
                key,
                fig.to_html(
                    full_html=False,
                    include_plotlyjs=False,
                    div_id=f"chart-{key}",
                    config={"displaylogo": False, "responsive": True},
                ),
            )
        )
    return out


@functools.lru_cache(maxsize=1)
def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return str(get_plotlyjs())


def render_html(report: EfficiencyReport, history: History, report_json: dict[str, Any]) -> str:
    """The HTML page; ``report_json`` is the exact ``--json`` document (numbers are taken from it)."""
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    template = env.from_string(
        resources.files("gpuwise.monitor").joinpath("templates/report.html.j2").read_text()
    )
    return str(
        template.render(
            report=report_json,
            charts=_charts(report, history),
            plotly_js=_plotly_js(),
            start=_when(report.start_s),
            end=_when(report.end_s),
            when=_when,
            gib=BYTES_PER_GIB,
        )
    )
