"""Reading GPU history back from a Prometheus server's HTTP API (``/api/v1/query_range``).

The exporter's series become the same :class:`~gpuwise.monitor.history.History` the SQLite store
yields, so ``gpuwise report --prometheus URL`` and ``gpuwise report`` agree. Each point stands
for one ``step`` (Prometheus caps a range query at 11,000 points per series; gpuwise asks for at
most 10,000). Standard library HTTP only.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from gpuwise.errors import InputError, StorageError
from gpuwise.monitor.history import History, SampleContext, SeriesBuilder, WorkloadShares

# the one activity threshold (the rules' 0.05 too), named as the queries below use it
from gpuwise.monitor.snapshot import ACTIVE_THRESHOLD as ACTIVE

MAX_POINTS = 10_000
BRIDGE_S = 900.0
"""Longest gap billed through (15 minutes): the rules' ``[15m]`` (deploy/prometheus)."""


def promql_duration(seconds: float) -> str:
    """A PromQL duration as the rules write it: ``15m``, ``15m30s``, ``15500ms``."""
    ms = round(seconds * 1000)
    if ms % 1000:
        return f"{ms}ms"
    sec, out = ms // 1000, ""
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if sec >= size:
            out += f"{sec // size}{unit}"
            sec %= size
    return out or "0s"


def _at(metric: str, sel: str, b: str, m: str) -> str:
    """The latest value of ``metric`` at or before the minute's middle, within the bridge, one
    per GPU however many jobs scrape it (the rules' billing records use the same form)."""
    return f"max by (host, uuid) (last_over_time({metric}{sel}[{b}] offset {m}))"


def rented_query(sel: str, b: str, m: str) -> str:
    """1 per GPU rented at the minute's middle: seen within the bridge before it and after it
    (the recording rule ``gpuwise:gpu_rented:bool``)."""
    return (
        f"max by (host, uuid, gpu, model) (last_over_time(gpuwise_gpu_up{sel}[{b}] offset {m}) * 0 + 1)"
        f" and on (host, uuid) max by (host, uuid) (count_over_time(gpuwise_gpu_up{sel}[{m}]))"
    )


def price_query(sel: str, b: str, m: str) -> str:
    """The exporter's price at the minute's middle: the series alive then, else the latest within
    the bridge (inside ``gpuwise:gpu_cost_usd_per_hour:billed``)."""
    return (
        f"max by (host, uuid) (gpuwise_gpu_cost_usd_per_hour{sel} offset {m})"
        f" or {_at('gpuwise_gpu_cost_usd_per_hour', sel, b, m)}"
    )


def mig_active_share_query(sel: str, b: str = "15m", m: str = "15m30s") -> str:
    """Share of a MIG GPU's slices in active instances at the minute's middle: the MIG part of
    the recording rule ``gpuwise:gpu_active_billed:ratio``, on raw series."""

    def at(metric: str) -> str:
        return f"last_over_time({metric}{sel}[{b}] offset {m})"

    return (
        "max by (host, uuid) (sum without (mig_uuid, gpu_instance, profile) "
        f"((({at('gpuwise_mig_sm_active_ratio')} >= bool {ACTIVE}) or "
        f"({at('gpuwise_mig_processes')} > bool 0)) * {at('gpuwise_mig_slices')}) "
        f"/ {at('gpuwise_mig_gpu_slices')})"
        f" or max by (host, uuid) ({at('gpuwise_mig_gpu_slices')} * 0)"
    )


_AT_MIDDLE = {
    "util": "gpuwise_gpu_utilization_ratio",
    "sm": "gpuwise_gpu_sm_active_ratio",
    "mem": "gpuwise_gpu_memory_used_bytes",
    "total": "gpuwise_gpu_memory_total_bytes",
    "power": "gpuwise_gpu_power_watts",
    "temp": "gpuwise_gpu_temperature_celsius",
    "up": "gpuwise_gpu_up",
}


class PrometheusHistory:
    """History from a Prometheus server at ``url`` (e.g. ``http://127.0.0.1:9090``)."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 30.0,
        selector: str = "",
        bridge_s: float = BRIDGE_S,
    ) -> None:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise InputError(
                f"--prometheus must be an http(s) URL, got {url!r}",
                hint="e.g. http://127.0.0.1:9090",
            )
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.selector = selector
        """Extra label matchers, e.g. ``host="node1"``."""
        self.bridge_s = bridge_s
        """Longest gap billed through; the rules' 15 minutes (a test speeds it up)."""

    def _query_range(
        self, expr: str, start: float, end: float, step: float
    ) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode(
            {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        )
        try:
            with urllib.request.urlopen(
                f"{self.url}/api/v1/query_range?{q}", timeout=self.timeout_s
            ) as resp:
                doc = json.load(resp)
        except urllib.error.HTTPError as exc:
            raise StorageError(
                f"Prometheus at {self.url} refused {expr!r}: HTTP {exc.code}",
                hint="check the URL and that the gpuwise exporter is scraped",
            ) from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise StorageError(
                f"cannot query Prometheus at {self.url}: {exc}",
                hint="check --prometheus points to a running Prometheus server",
            ) from exc
        if doc.get("status") != "success":
            raise StorageError(
                f"Prometheus error for {expr!r}: {doc.get('error')}",
                hint="check the server version",
            )
        return list(doc["data"]["result"])

    def _mig_shares(
        self,
        in_instance: dict[tuple[str, str], dict[float, dict[str, set[str]]]],
        sel: str,
        span: tuple[float, float, float],
        b: str,
        m: str,
    ) -> dict[tuple[str, str], dict[float, WorkloadShares]]:
        """Per MIG GPU and time: (workload, share of the GPU, active) as the SQLite history keeps it."""
        if not in_instance:
            return {}
        inst: dict[
            str, dict[float, list[float]]
        ] = {}  # mig_uuid → t → [slices, active, gpu slices]

        def at(metric: str) -> str:
            return f"max by (host, uuid, mig_uuid) (last_over_time({metric}{sel}[{b}] offset {m}))"

        queries = (
            (0, at("gpuwise_mig_slices")),
            (
                1,
                f"({at('gpuwise_mig_sm_active_ratio')} >= bool {ACTIVE}) or "
                f"({at('gpuwise_mig_processes')} > bool 0)",
            ),
            (
                2,
                f"{at('gpuwise_mig_slices')} * 0 + on (host, uuid) group_left () "
                f"max by (host, uuid) (last_over_time(gpuwise_mig_gpu_slices{sel}[{b}] offset {m}))",
            ),
        )
        for k, expr in queries:
            for series in self._query_range(expr, *span):
                mig_uuid = series["metric"].get("mig_uuid", "")
                for t, v in series["values"]:
                    inst.setdefault(mig_uuid, {}).setdefault(float(t), [1.0, 0.0, 7.0])[k] = float(
                        v
                    )
        out: dict[tuple[str, str], dict[float, WorkloadShares]] = {}
        for gk, by_t in in_instance.items():
            for t, by_inst in by_t.items():
                entries: list[tuple[str, float, bool]] = []
                for mig_uuid, names in by_inst.items():
                    slices, active, total = inst.get(mig_uuid, {}).get(t, [1.0, 1.0, 7.0])
                    entries.extend(
                        (w, slices / total / len(names), active > 0) for w in sorted(names)
                    )
                out.setdefault(gk, {})[t] = tuple(entries)
        return out

    def read(self, start_s: float, end_s: float, step_s: float | None = None) -> History:
        """All GPUs between ``start_s`` and ``end_s``, billed as the recording rules bill them.

        One sample per step (a minute, more for long windows) whose middle lies in the window:
        the GPU was rented at that middle when the exporter showed it within the bridge (15
        minutes) before and after it; its values and price are the latest at or before the
        middle. The queries are the rules' own expressions, evaluated a bridge and half a step
        after each middle, so on the same data the report's dollars are the rules' (a GPU
        scraped by two jobs counts once). The last bridge before now is not billed yet."""
        window = end_s - start_s
        step = max(step_s or 60.0, math.ceil(window / MAX_POINTS), 1.0)
        if step_s is None and step > 60:
            step = math.ceil(step / 60) * 60
        b, m = promql_duration(self.bridge_s), promql_duration(self.bridge_s + step / 2)
        lag = self.bridge_s + step / 2
        first = start_s + step / 2 + lag  # evaluation time of the first middle
        last = end_s - step / 2 + lag - 1e-6
        if last < first:
            return History(start_s, end_s, (), source=f"prometheus:{self.url}")
        span = (first, last, step)
        sel = "{" + self.selector + "}" if self.selector else ""

        def ts(t: float) -> float:  # evaluation time → start of the sample it bills
            return t - lag - step / 2

        def key(lab: dict[str, str]) -> tuple[str, str]:
            return (lab.get("host", ""), lab.get("uuid", ""))

        meta: dict[tuple[str, str], tuple[int, str]] = {}
        rented: dict[tuple[str, str], set[float]] = {}
        for series in self._query_range(rented_query(sel, b, m), *span):
            lab = series["metric"]
            meta.setdefault(key(lab), (int(lab.get("gpu", 0)), lab.get("model", "unknown")))
            rented.setdefault(key(lab), set()).update(float(t) for t, _ in series["values"])
        values: dict[tuple[str, str], dict[str, dict[float, float]]] = {}
        queries = {name: _at(metric, sel, b, m) for name, metric in _AT_MIDDLE.items()}
        queries["price"] = price_query(sel, b, m)
        queries["mig"] = mig_active_share_query(sel, b, m)
        for name, expr in queries.items():
            for series in self._query_range(expr, *span):
                values.setdefault(key(series["metric"]), {}).setdefault(name, {}).update(
                    {float(t): float(v) for t, v in series["values"]}
                )
        xids: dict[tuple[str, str], set[int]] = {}
        for series in self._query_range(f"gpuwise_gpu_xid_errors_total{sel}", *span):
            lab = series["metric"]
            if lab.get("xid", "").isdigit():
                xids.setdefault(key(lab), set()).add(int(lab["xid"]))
        workloads: dict[tuple[str, str], dict[float, set[str]]] = {}
        in_instance: dict[tuple[str, str], dict[float, dict[str, set[str]]]] = {}
        alloc = f"gpuwise_gpu_allocation_info{sel} offset {m}"
        for series in self._query_range(alloc, *span):
            lab = series["metric"]
            for t, _ in series["values"]:
                name = lab.get("workload", "unknown")
                workloads.setdefault(key(lab), {}).setdefault(float(t), set()).add(name)
                if lab.get("mig_uuid"):
                    in_instance.setdefault(key(lab), {}).setdefault(float(t), {}).setdefault(
                        lab["mig_uuid"], set()
                    ).add(name)
        shares = self._mig_shares(in_instance, sel, span, b, m)
        plans: dict[tuple[str, str], dict[float, str]] = {}
        # the plan alive at the middle, else the latest within the bridge (a crash loop)
        plan_q = (
            f"max by (host, uuid, plan_id) (gpuwise_gpu_plan_info{sel} offset {m}) or on (host, uuid) "
            f"max by (host, uuid, plan_id) (last_over_time(gpuwise_gpu_plan_info{sel}[{b}] offset {m}))"
        )
        for series in self._query_range(plan_q, *span):
            lab = series["metric"]
            for t, _ in series["values"]:
                plans.setdefault(key(lab), {})[float(t)] = lab.get("plan_id", "")
        gpus = []
        for gk, times in rented.items():
            by = values.get(gk, {})
            totals = list(by.get("total", {}).values())
            builder = SeriesBuilder(
                gk[0], gk[1], meta[gk][0], meta[gk][1], max(totals) if totals else float("nan")
            )
            mig = by.get("mig", {})
            for t in sorted(times):
                builder.add(
                    ts(t),
                    step,
                    by.get("util", {}).get(t),
                    by.get("sm", {}).get(t),
                    by.get("mem", {}).get(t),
                    by.get("power", {}).get(t),
                    by.get("temp", {}).get(t),
                    tuple(sorted(workloads.get(gk, {}).get(t, ()))),
                    mig_share=mig.get(t),
                    lost=by.get("up", {}).get(t) == 0,
                    xids=tuple(sorted(xids.get(gk, ()))),
                    shares=shares.get(gk, {}).get(t) if t in mig else None,
                    usd_per_hour=by.get("price", {}).get(t),
                    context=SampleContext(plan_id=plans[gk][t]) if t in plans.get(gk, {}) else None,
                )
            gpus.append(builder.build())
        return History(start_s, end_s, tuple(gpus), source=f"prometheus:{self.url}")
