"""Demand from what monitoring saw: ``gpuwise fleet --demand-from-history DB`` (or Prometheus).

A hand-written demand CSV guesses; the monitor's history knows. Per GPU model and hour this module
counts three things from a :class:`~gpuwise.monitor.history.History` (the SQLite store of
``gpuwise monitor`` or the exporter's series in Prometheus read the same way):

- **rented** GPU-hours: the GPU was seen at all (a node you pay for);
- **allocated** GPU-hours: a process held memory on it (a job ran there);
- **active** GPU-hours: its SM-active (or, without GPM, utilization) reached the report's
  active threshold.

The fleet's demand is the *allocated* hours: what jobs used. Rented-but-unallocated hours are
idle capacity to release, not demand to reserve for, so they are shown beside the plan (the idle
share) instead of being baked into a reservation. Work seen on spot nodes is interruptible by
construction: a series whose capacity type is ``spot`` goes to the interruptible part; everything
else is firm (the safe side: firm work never runs on spot).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuwise.errors import HardwareError, InputError
from gpuwise.fleet.demand import Demand
from gpuwise.monitor.history import GpuSeries, History
from gpuwise.monitor.snapshot import ACTIVE_THRESHOLD

HOUR_S = 3600


@dataclass(frozen=True)
class HistoryUsage:
    """What monitoring saw for one GPU model over the window, in GPU-hours."""

    gpu: str
    """GPU model, gpuwise's name."""
    gpus_seen: int
    """Distinct GPUs (UUIDs) of this model in the window."""
    rented_gpu_hours: float
    """Hours the GPUs were seen (rented), whatever ran on them."""
    allocated_gpu_hours: float
    """Hours a process held memory on them: the demand the fleet plans for."""
    active_gpu_hours: float
    """Hours their SM-active (or utilization) reached the active threshold."""
    interruptible_gpu_hours: float
    """Allocated hours on spot nodes (interruptible work)."""

    @property
    def idle_share(self) -> float | None:
        """Share of rented hours with nothing allocated (None when nothing was rented)."""
        if self.rented_gpu_hours <= 0:
            return None
        return max(0.0, 1 - self.allocated_gpu_hours / self.rented_gpu_hours)

    @property
    def active_share(self) -> float | None:
        """Share of allocated hours the GPUs were busy (None when nothing was allocated)."""
        if self.allocated_gpu_hours <= 0:
            return None
        return min(1.0, self.active_gpu_hours / self.allocated_gpu_hours)


def series_capacity_type(series: GpuSeries) -> str:
    """The capacity type the history recorded for ``series`` (``unknown`` where it recorded none)."""
    return series.capacity_type or "unknown"


def demand_from_history(
    history: History,
    *,
    active_threshold: float = ACTIVE_THRESHOLD,
    capacity_type: Callable[[GpuSeries], str] = series_capacity_type,
) -> tuple[Demand, tuple[HistoryUsage, ...]]:
    """Hourly demand per GPU model from ``history`` (module docstring) and what was seen.

    InputError when the window holds no GPU gpuwise knows, so the fleet has nothing to plan for.
    """
    from gpuwise.hardware import find_gpu

    # the hours the history covers, not the whole window asked for: a month's window over a day
    # of history is a day of demand, not 29 days of zeros
    seen = [s for s in history.gpus if len(s)]
    first = min((float(s.timestamp_s.min()) for s in seen), default=history.start_s)
    last = max((float((s.timestamp_s + s.duration_s).max()) for s in seen), default=history.end_s)
    start = math.floor(max(first, history.start_s) / HOUR_S) * HOUR_S
    hours = max(1, math.ceil((min(last, history.end_s) - start) / HOUR_S))
    models: dict[str, list[GpuSeries]] = {}
    unknown: set[str] = set()
    for s in history.gpus:
        try:
            gpu_name = find_gpu(s.model).name
        except HardwareError:
            unknown.add(s.model)
            continue
        models.setdefault(gpu_name, []).append(s)
    if not models:
        named = f" (seen: {', '.join(sorted(unknown))})" if unknown else ""
        raise InputError(
            f"{history.source or 'the history'} has no GPU samples gpuwise can price in the window{named}",
            hint="widen --since, or record with `gpuwise monitor` on the GPU nodes first",
        )
    gpus = tuple(sorted(models))
    firm = np.zeros((len(gpus), hours))
    flexible = np.zeros((len(gpus), hours))
    usage = []
    for row, gpu in enumerate(gpus):
        rented = allocated = active = spot = 0.0
        for s in models[gpu]:
            dur = np.clip(s.duration_s, 0.0, None)
            held = np.array([bool(w) for w in s.workloads], dtype=bool)
            busy = np.nan_to_num(s.activity_ratio, nan=0.0) >= active_threshold
            on_spot = capacity_type(s) == "spot"
            target = flexible if on_spot else firm
            _add_by_hour(target[row], s.timestamp_s, dur * held, start, hours)
            rented += float(dur.sum())
            allocated += float((dur * held).sum())
            active += float((dur * (held & busy)).sum())
            spot += float((dur * held).sum()) if on_spot else 0.0
        usage.append(
            HistoryUsage(
                gpu,
                len({s.uuid for s in models[gpu]}),
                rented / HOUR_S,
                allocated / HOUR_S,
                active / HOUR_S,
                spot / HOUR_S,
            )
        )
    origin = f"history {history.source or ''}".strip()
    begins = dt.datetime.fromtimestamp(start, dt.timezone.utc).replace(tzinfo=None)
    return Demand(begins, gpus, firm, flexible, origin), tuple(usage)


def _add_by_hour(
    out: np.ndarray, ts: np.ndarray, seconds: np.ndarray, start: float, hours: int
) -> None:
    """Spread each sample's GPU-seconds over the hours it covers (a sample may cross hours)."""
    if ts.size == 0:
        return
    t = ts.astype(float)
    left = seconds.astype(float)
    while np.any(left > 0):
        idx = np.floor((t - start) / HOUR_S).astype(np.int64)
        part = np.minimum(left, start + (idx + 1) * HOUR_S - t)
        keep = (idx >= 0) & (idx < hours) & (part > 0)
        np.add.at(out, idx[keep], part[keep] / HOUR_S)
        t, left = t + part, left - part
