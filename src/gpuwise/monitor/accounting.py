"""Where each GPU-hour and dollar goes: per-sample prices, workloads and plans.

The per-GPU figures are in :mod:`gpuwise.monitor.report`; this module prices every sample
(:func:`sample_prices`: one order for every history source) and splits the hours and dollars of
each sample among the workloads on it (an ``(unallocated)`` row for what none held, so the table
adds up to the GPUs) and among the plans recorded with it (``GPUWISE_PLAN_ID``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuwise.monitor.history import GpuSeries, History
from gpuwise.monitor.node import NodeFacts
from gpuwise.monitor.pricing import PriceBook
from gpuwise.monitor.snapshot import ACTIVE_THRESHOLD


def _activity(s: GpuSeries) -> tuple[np.ndarray, np.ndarray]:
    act = s.activity_ratio
    held = np.array([bool(w) for w in s.workloads], dtype=bool)
    return act, held


@dataclass(frozen=True)
class WorkloadUsage:
    """One workload (pod, container, or user/executable) over the window."""

    workload: str
    """Its name."""
    gpus: tuple[str, ...]
    """UUIDs of the GPUs it used."""
    allocated_hours: float
    """GPU-hours it held (shared samples split evenly)."""
    active_hours: float
    """Of which the GPU was active."""
    idle_hours: float
    """Of which the GPU was idle."""
    efficiency: float | None
    """active / allocated."""
    cost_usd: float | None
    """Its share of the GPU cost."""
    wasted_usd: float | None
    """Its share of the idle cost."""
    unpriced_hours: float = 0.0
    """Of its hours, those with no known price (not in ``cost_usd``)."""


@dataclass(frozen=True)
class PlanUsage:
    """One plan (``GPUWISE_PLAN_ID`` of the job on the GPU) over the window."""

    plan_id: str
    """The plan id."""
    gpus: tuple[str, ...]
    """UUIDs of the GPUs its jobs ran on."""
    allocated_hours: float
    """GPU-hours rented while the GPU carried this plan id."""
    active_hours: float
    """Of which active."""
    idle_hours: float
    """Of which idle."""
    cost_usd: float | None
    """Dollars of its priced hours (None: none priced)."""
    wasted_usd: float | None
    """Dollars of its idle priced hours."""
    unpriced_hours: float
    """Hours with no known price."""


RECORDED = "recorded by gpuwise monitor"


def sample_prices(s: GpuSeries, prices: PriceBook) -> tuple[np.ndarray, str]:
    """Per sample, the price per GPU-hour (NaN: unpriced), and the source of most hours' price.

    One order everywhere: a price or instance type given as a flag prices every sample; else the
    price the source carried (the exporter's series in Prometheus), else the node recorded with
    the sample (``gpuwise monitor``), else the settings (``GPUWISE_INSTANCE_TYPE`` …)."""
    n = len(s)
    if prices.explicit:
        p = prices.price(s.model)
        return np.full(n, np.nan if p.usd_per_gpu_hour is None else p.usd_per_gpu_hour), p.source
    usd = np.full(n, np.nan) if s.usd_per_hour is None else s.usd_per_hour.astype(float)
    hours: dict[str, float] = {}
    if s.usd_per_hour is not None:
        hours["exporter price series"] = float(s.duration_s[~np.isnan(usd)].sum())
    missing = np.isnan(usd)
    if missing.any():
        ctx_idx = s.context_index if s.context_index is not None else np.full(n, -1)
        for ci in np.unique(ctx_idx[missing]):
            ctx = s.contexts[ci] if ci >= 0 else None
            book = (
                prices.for_node(
                    NodeFacts(
                        ctx.instance_type,
                        ctx.region,
                        ctx.capacity_type,
                        ctx.cloud,
                        RECORDED,
                    )
                )
                if ctx is not None and ctx.instance_type
                else prices
            )
            p = book.price(s.model)
            rows = missing & (ctx_idx == ci)
            if p.usd_per_gpu_hour is not None:
                usd[rows] = p.usd_per_gpu_hour
            hours[p.source] = hours.get(p.source, 0.0) + float(s.duration_s[rows].sum())
    source = max(hours, key=lambda k: hours[k]) if hours else "unknown"
    return usd, source


UNALLOCATED = "(unallocated)"
"""The workload row of GPU time no process held (MIG: empty instances and unallocated slices):
rented all the same, so the per-workload table adds up to the per-GPU totals."""


def _entries(
    s: GpuSeries,
    k: int,
    hours: float,
    active_threshold: float,
    activity: tuple[np.ndarray, np.ndarray],
) -> list[tuple[str, float, float]]:
    """(workload, hours, active hours) of sample ``k``, the unattributed rest as UNALLOCATED.
    ``activity``: :func:`_activity` of ``s``, computed once per series."""
    act, held = activity
    names = s.workloads[k]
    mig = s.workload_shares[k] if s.workload_shares is not None else None
    if mig is not None:  # MIG: each workload's instance slices, active as its instance is
        out = [(w, hours * share, hours * share if on else 0.0) for w, share, on in mig]
        rest = hours - sum(h for _, h, _ in out)
        gpu_active = s.mig_active_share[k] if s.mig_active_share is not None else math.nan
        rest_active = (
            max(0.0, hours * gpu_active - sum(a for _, _, a in out))
            if not math.isnan(gpu_active)
            else 0.0
        )
        if rest > 1e-12:
            out.append((UNALLOCATED, rest, min(rest, rest_active)))
        return out
    a = act[k]
    on = bool(held[k]) if math.isnan(a) else bool(a >= active_threshold)
    if s.lost is not None and s.lost[k] > 0:
        on = False
    if not names:
        return [(UNALLOCATED, hours, hours if on else 0.0)]
    return [(w, hours / len(names), hours / len(names) if on else 0.0) for w in names]


def workload_usage(
    history: History,
    prices: PriceBook,
    active_threshold: float = ACTIVE_THRESHOLD,
    priced: dict[int, tuple[np.ndarray, str]] | None = None,
) -> tuple[WorkloadUsage, ...]:
    """Per workload, with an UNALLOCATED row for what no workload held: the rows add up to the
    GPUs' totals. ``priced``: :func:`sample_prices` per series (by ``id``)."""
    acc: dict[str, list[float]] = {}
    gpus: dict[str, set[str]] = {}
    for s in history.gpus:
        known = (priced or {}).get(id(s))
        usd = (known if known is not None else sample_prices(s, prices))[0] if len(s) else None
        activity = _activity(s)
        for k in range(len(s)):
            hours = float(s.duration_s[k]) / 3600
            price = float(usd[k]) if usd is not None else math.nan
            for w, h, a in _entries(s, k, hours, active_threshold, activity):
                row = acc.setdefault(w, [0.0, 0.0, 0.0, 0.0, 0.0])
                row[0] += h
                row[1] += a
                if math.isnan(price):
                    row[4] += h
                else:
                    row[2] += h * price
                    row[3] += (h - a) * price
                gpus.setdefault(w, set()).add(s.uuid)
    out = []
    for w, (alloc, active, cost, wasted, unpriced) in acc.items():
        some = unpriced < alloc - 1e-12
        out.append(
            WorkloadUsage(
                w,
                tuple(sorted(gpus[w])),
                alloc,
                active,
                alloc - active,
                active / alloc if alloc else None,
                cost if some else None,
                wasted if some else None,
                unpriced,
            )
        )
    return tuple(sorted(out, key=lambda u: -(u.wasted_usd or 0.0)))


def plan_usage(
    history: History, priced: dict[int, tuple[np.ndarray, str]], usages: Sequence[object]
) -> tuple[PlanUsage, ...]:
    """Dollars and idle per plan id, from the plan recorded with each sample. A sample's active
    share is its GPU's (MIG: the share of active slices), as in :func:`gpu_usage`."""
    del usages  # the per-GPU figures are recomputed per sample below
    acc: dict[str, list[float]] = {}
    gpus: dict[str, set[str]] = {}
    for s in history.gpus:
        if s.context_index is None or not any(c.plan_id for c in s.contexts):
            continue
        usd = priced[id(s)][0]
        act, held = _activity(s)
        share = np.where(np.isnan(act), held, act >= ACTIVE_THRESHOLD).astype(float)
        if s.mig_active_share is not None:
            mig = ~np.isnan(s.mig_active_share)
            share[mig] = s.mig_active_share[mig]
        if s.lost is not None:
            share[s.lost > 0] = 0.0
        dur_h = s.duration_s / 3600
        for ci, ctx in enumerate(s.contexts):
            if not ctx.plan_id:
                continue
            rows = s.context_index == ci
            known = rows & ~np.isnan(usd)
            row = acc.setdefault(ctx.plan_id, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
            row[0] += float(dur_h[rows].sum())
            row[1] += float((dur_h * share)[rows].sum())
            row[2] += float((dur_h * usd)[known].sum())
            row[3] += float((dur_h * (1 - share) * usd)[known].sum())
            row[4] += float(dur_h[rows & np.isnan(usd)].sum())
            row[5] += float(known.sum())
            gpus.setdefault(ctx.plan_id, set()).add(s.uuid)
    return tuple(
        PlanUsage(
            plan,
            tuple(sorted(gpus[plan])),
            alloc,
            active,
            alloc - active,
            cost if n_known else None,
            wasted if n_known else None,
            unpriced,
        )
        for plan, (alloc, active, cost, wasted, unpriced, n_known) in sorted(acc.items())
    )


def where_it_ran(s: GpuSeries, prices: PriceBook) -> tuple[str | None, str | None]:
    """(cloud, CPU architecture) the GPU ran on: the node recorded for most of its hours, else
    the book's (flags, settings); the architecture from its instance type's catalog offers."""
    instance, cloud = prices.instance_type, prices.cloud
    if s.context_index is not None and not prices.explicit:
        hours: dict[tuple[str | None, str | None], float] = {}
        for ci, ctx in enumerate(s.contexts):
            if ctx.instance_type:
                rows = s.context_index == ci
                key = (ctx.instance_type, ctx.cloud)
                hours[key] = hours.get(key, 0.0) + float(s.duration_s[rows].sum())
        if hours:
            instance, cloud = max(hours, key=lambda k: hours[k])
    if not instance:
        return cloud, None
    same = [o for o in prices.offers if o.instance_type == instance]
    same = [o for o in same if cloud is None or o.cloud == cloud] or same
    if not same:
        return cloud, None
    return cloud or same[0].cloud, same[0].arch
