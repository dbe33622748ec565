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
from gpuwise.monitor.history import History, SeriesBuilder, WorkloadShares

# the one activity threshold (the rules' 0.05 too), named as the queries below use it
from gpuwise.monitor.snapshot import ACTIVE_THRESHOLD as ACTIVE

_SERIES = {
    "util": "gpuwise_gpu_utilization_ratio",
    "sm": "gpuwise_gpu_sm_active_ratio",
    "mem": "gpuwise_gpu_memory_used_bytes",
    "total": "gpuwise_gpu_memory_total_bytes",
    "power": "gpuwise_gpu_power_watts",
    "temp": "gpuwise_gpu_temperature_celsius",
    "up": "gpuwise_gpu_up",
}
MAX_POINTS = 10_000


def mig_active_share_query(sel: str) -> str:
    """Share of a MIG GPU's slices in active instances: the expression of the recording rule
    ``gpuwise:gpu_active:ratio`` for MIG GPUs, on raw series (no recording rules needed)."""
    return (
        f"(sum without (mig_uuid, gpu_instance, profile) ((((gpuwise_mig_sm_active_ratio{sel} >= bool {ACTIVE}) "
        f"or (gpuwise_mig_processes{sel} > bool 0))) * gpuwise_mig_slices{sel}) / gpuwise_mig_gpu_slices{sel})"
        f" or (gpuwise_mig_gpu_slices{sel} * 0)"
    )


class PrometheusHistory:
    """History from a Prometheus server at ``url`` (e.g. ``http://127.0.0.1:9090``)."""

    def __init__(self, url: str, *, timeout_s: float = 30.0, selector: str = "") -> None:
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
        start_s: float,
        end_s: float,
        step: float,
    ) -> dict[tuple[str, str], dict[float, WorkloadShares]]:
        """Per MIG GPU and time: (workload, share of the GPU, active) as the SQLite history keeps it."""
        if not in_instance:
            return {}
        inst: dict[
            str, dict[float, list[float]]
        ] = {}  # mig_uuid → t → [slices, active, gpu slices]
        queries = (
            (0, f"gpuwise_mig_slices{sel}"),
            (
                1,
                f"(gpuwise_mig_sm_active_ratio{sel} >= bool {ACTIVE}) or (gpuwise_mig_processes{sel} > bool 0)",
            ),
            (
                2,
                f"gpuwise_mig_slices{sel} * 0 + on (instance, uuid) group_left () gpuwise_mig_gpu_slices{sel}",
            ),
        )
        for k, expr in queries:
            for series in self._query_range(expr, start_s, end_s, step):
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
        """All GPUs between ``start_s`` and ``end_s``."""
        window = end_s - start_s
        step = max(step_s or 0.0, math.ceil(window / MAX_POINTS), 1.0)
        sel = "{" + self.selector + "}" if self.selector else ""
        values: dict[tuple[str, str], dict[str, dict[float, float]]] = {}
        meta: dict[tuple[str, str], tuple[int, str]] = {}
        for key, metric in _SERIES.items():
            for series in self._query_range(metric + sel, start_s, end_s, step):
                lab = series["metric"]
                gk = (lab.get("host", lab.get("instance", "")), lab.get("uuid", ""))
                meta.setdefault(gk, (int(lab.get("gpu", 0)), lab.get("model", "unknown")))
                values.setdefault(gk, {}).setdefault(key, {}).update(
                    {float(t): float(v) for t, v in series["values"]}
                )
        mig: dict[tuple[str, str], dict[float, float]] = {}
        for series in self._query_range(mig_active_share_query(sel), start_s, end_s, step):
            lab = series["metric"]
            gk = (lab.get("host", lab.get("instance", "")), lab.get("uuid", ""))
            mig.setdefault(gk, {}).update({float(t): float(v) for t, v in series["values"]})
        xids: dict[tuple[str, str], set[int]] = {}
        for series in self._query_range(f"gpuwise_gpu_xid_errors_total{sel}", start_s, end_s, step):
            lab = series["metric"]
            if lab.get("xid", "").isdigit():
                xids.setdefault(
                    (lab.get("host", lab.get("instance", "")), lab.get("uuid", "")), set()
                ).add(int(lab["xid"]))
        workloads: dict[tuple[str, str], dict[float, set[str]]] = {}
        in_instance: dict[
            tuple[str, str], dict[float, dict[str, set[str]]]
        ] = {}  # MIG: instance → workloads
        for series in self._query_range(f"gpuwise_gpu_allocation_info{sel}", start_s, end_s, step):
            lab = series["metric"]
            gk = (lab.get("host", lab.get("instance", "")), lab.get("uuid", ""))
            for t, _ in series["values"]:
                workloads.setdefault(gk, {}).setdefault(float(t), set()).add(
                    lab.get("workload", "unknown")
                )
                if lab.get("mig_uuid"):
                    in_instance.setdefault(gk, {}).setdefault(float(t), {}).setdefault(
                        lab["mig_uuid"], set()
                    ).add(lab.get("workload", "unknown"))
        shares = self._mig_shares(in_instance, sel, start_s, end_s, step)
        gpus = []
        for gk, by_key in values.items():
            up = by_key.get("up", {})
            totals = list(by_key.get("total", {}).values())
            b = SeriesBuilder(
                gk[0], gk[1], meta[gk][0], meta[gk][1], max(totals) if totals else float("nan")
            )
            for t in sorted(up):
                b.add(
                    t,
                    step,
                    by_key.get("util", {}).get(t),
                    by_key.get("sm", {}).get(t),
                    by_key.get("mem", {}).get(t),
                    by_key.get("power", {}).get(t),
                    by_key.get("temp", {}).get(t),
                    tuple(sorted(workloads.get(gk, {}).get(t, ()))),
                    mig_share=mig.get(gk, {}).get(t),
                    lost=up[t] == 0,
                    xids=tuple(sorted(xids.get(gk, ()))),
                    shares=shares.get(gk, {}).get(t) if gk in mig else None,
                )
            gpus.append(b.build())
        return History(start_s, end_s, tuple(gpus), source=f"prometheus:{self.url}")
