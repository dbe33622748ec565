"""The efficiency and waste report: where the GPU-hours and dollars went, and what to change.

Definitions (docs/monitoring.md has them with examples):

* **allocated hours**: hours a GPU was rented and observed (every sample's duration). You pay
  for these whether a process runs or not.
* **active hours**: hours with activity ≥ ``active_threshold`` (5 %). Activity is GPM SM-active
  where the GPU has it, else NVML utilization (a duty cycle that overstates use). Samples with
  neither count as active only while a process holds memory. A MIG GPU is active in proportion
  to the slices of its active instances: empty instances and unallocated slices are idle.
* **idle hours** = allocated − active; **wasted** = idle hours × price; **efficiency** = active /
  allocated. Per workload, a sample's hours and cost are split evenly among the workloads on it;
  on a MIG GPU each workload gets its instance's slices (shared evenly within the instance), active
  as its instance is, and empty or unallocated slices belong to no workload.

Right-sizing rules, each with its dollar effect per month (730 h × the share of the observed
span the GPU was rented: the data seen, never the ``--since`` asked for):
memory peak < 40 % at low activity → the cheapest catalog GPU that fits the peak plus 15 %
(Harness CCM's buffer); peak > 85 % → a bigger GPU or the estimator's memory fixes; a MIG-capable
GPU at low activity → the smallest MIG profile that fits; a GPU idle all window → release it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from gpuwise.base.xid import XID_MEANINGS
from gpuwise.catalog import Offer, cheapest_per_gpu
from gpuwise.errors import HardwareError
from gpuwise.monitor.accounting import UNALLOCATED as UNALLOCATED
from gpuwise.monitor.accounting import PlanUsage as PlanUsage
from gpuwise.monitor.accounting import WorkloadUsage as WorkloadUsage
from gpuwise.monitor.accounting import (
    _activity,
    plan_usage,
    sample_prices,
    where_it_ran,
    workload_usage,
)
from gpuwise.monitor.history import GpuSeries, History
from gpuwise.monitor.pricing import PriceBook, canonical_gpu
from gpuwise.monitor.snapshot import ACTIVE_THRESHOLD
from gpuwise.units import BYTES_PER_GIB, HOURS_PER_MONTH

LOW_ACTIVITY = (
    0.30  # p95 SM-active < 30 % → smaller/MIG (notes/monitoring.md §4, Harness-style rule)
)
MEMORY_SMALL = 0.40  # peak memory below this fraction → a smaller GPU would do (issue 7)
MEMORY_FULL = 0.85  # peak memory above this fraction → OOM risk (issue 7; same as the alert rule)
MEMORY_BUFFER = 1.15  # 15 % headroom over the observed peak (Harness CCM recommendations)

Action = Literal[
    "release",
    "stop-idle-workload",
    "downsize",
    "mig",
    "share",
    "upsize",
    "drain-and-reset",
    "fix-memory-leak",
    "scale-to-zero",
]


@dataclass(frozen=True)
class IdleStretch:
    """A run of idle samples on one GPU."""

    start_s: float
    """Start (Unix time)."""
    end_s: float
    """End (Unix time)."""
    hours: float
    """Length in hours."""
    held_by: tuple[str, ...]
    """Workloads holding memory meanwhile ("allocated but idle"); empty = nothing ran."""


@dataclass(frozen=True)
class GpuUsage:
    """One GPU over the window."""

    host: str
    """Host name."""
    index: int
    """NVML index."""
    uuid: str
    """GPU UUID."""
    model: str
    """NVML model name."""
    gpu: str | None
    """gpuwise's canonical model name (None if not in the hardware table)."""
    allocated_hours: float
    """Hours rented and observed."""
    held_hours: float
    """Hours a process held memory on it."""
    active_hours: float
    """Hours at ≥ 5 % activity."""
    idle_hours: float
    """allocated − active."""
    efficiency: float | None
    """active / allocated."""
    mean_activity_ratio: float | None
    """Duration-weighted mean activity (SM-active, else utilization)."""
    peak_memory_fraction: float | None
    """Peak used / total memory."""
    peak_memory_gib: float | None
    """Peak used memory."""
    memory_headroom_gib: float | None
    """Total − peak used memory."""
    usd_per_hour: float | None
    """Price per GPU-hour used."""
    price_source: str
    """Where the price came from."""
    cost_usd: float | None
    """allocated hours × price."""
    wasted_usd: float | None
    """idle hours × price."""
    idle_stretches: tuple[IdleStretch, ...]
    """Idle runs of at least the report's minimum length."""
    lost: bool = False
    """NVML reported the GPU lost (fell off the bus) in the window."""
    xid_codes: tuple[int, ...] = ()
    """XID codes the GPU reported in the window."""
    mig_active_share: float | None = None
    """MIG GPUs: duration-weighted share of the slices in active instances (None: not in MIG mode)."""
    memory_leak: str | None = None
    """Why memory looks like it leaked (grew steadily, then fell as a process died), if it does."""
    unpriced_hours: float = 0.0
    """Allocated hours with no known price (an unidentified node, an instance type the catalog
    lacks): left out of ``cost_usd`` and ``wasted_usd``, never priced at $0 silently."""
    cloud: str | None = None
    """The cloud it ran in, where known (recorded node, settings, or its instance type)."""
    cpu_arch: str | None = None
    """The CPU architecture of its instance (``x86_64``, ``arm64``), where known."""


@dataclass(frozen=True)
class Recommendation:
    """One right-sizing change and what it saves."""

    host: str
    """The host the GPU is on."""
    gpu_uuid: str
    """The GPU it is about."""
    gpu_index: int
    """Its NVML index."""
    action: Action
    """What to do."""
    reason: str
    """Why, with the numbers."""
    target: str | None
    """The GPU, instance or MIG profile to move to, if any."""
    saving_usd_per_month: float | None
    """Estimated saving per month at the observed usage (None = not estimated; see reason)."""


@dataclass(frozen=True)
class EfficiencyReport:
    """The whole report."""

    start_s: float
    """Window start (Unix time)."""
    end_s: float
    """Window end (Unix time)."""
    window_hours: float
    """Length of the window asked for (``--since``)."""
    observed_start_s: float | None
    """First sample's start (Unix time); None without data."""
    observed_end_s: float | None
    """Last sample's end (Unix time)."""
    observed_hours: float
    """Span of the data actually seen: the window the figures describe."""
    source: str
    """Where the history came from."""
    gpus: tuple[GpuUsage, ...]
    """Per GPU."""
    workloads: tuple[WorkloadUsage, ...]
    """Per workload."""
    recommendations: tuple[Recommendation, ...]
    """Right-sizing advice, largest saving first."""
    allocated_hours: float
    """Sum over GPUs."""
    active_hours: float
    """Sum over GPUs."""
    idle_hours: float
    """Sum over GPUs."""
    cost_usd: float | None
    """Sum over GPUs with a price."""
    wasted_usd: float | None
    """Sum over GPUs with a price."""
    waste_fraction: float | None
    """wasted / cost."""
    active_threshold: float
    """Activity below which a sample is idle."""
    warnings: tuple[str, ...] = ()
    """Problems with the data itself, e.g. a GPU with more allocated hours than observed hours
    (overlapping samples: two monitors writing one history), which overstates every dollar."""
    unpriced_hours: float = 0.0
    """GPU-hours with no known price, left out of ``cost_usd`` (shown beside every total)."""
    plans: tuple[PlanUsage, ...] = ()
    """Per plan id, where the history recorded one (``GPUWISE_PLAN_ID``)."""


OVERLAP_TOLERANCE = 0.01
"""Allocated hours may exceed a GPU's observed span by 1 % (rounding of sample durations)."""


def overlap_warnings(history: History, usages: Sequence[GpuUsage]) -> tuple[str, ...]:
    """GPUs whose allocated hours exceed the time between their first and last sample."""
    spans = {
        (s.host, s.uuid): float((s.timestamp_s + s.duration_s).max() - s.timestamp_s.min()) / 3600
        for s in history.gpus
        if len(s)
    }
    out = []
    for u in usages:
        span = spans.get((u.host, u.uuid))
        if span is not None and u.allocated_hours > span * (1 + OVERLAP_TOLERANCE) + 1 / 3600:
            out.append(
                f"{u.host} GPU {u.index}: {u.allocated_hours:.2f} allocated hours in "
                f"{span:.2f} observed hours ({u.allocated_hours / span:.2f}×): samples overlap, "
                "so hours and dollars are overstated. To fix: run one `gpuwise monitor` per "
                "history database"
            )
    return tuple(out)


def _mul(a: float, b: float | None) -> float | None:
    return None if b is None else a * b


def _stretches(s: GpuSeries, idle: np.ndarray, min_hours: float) -> tuple[IdleStretch, ...]:
    out: list[IdleStretch] = []
    i, n = 0, len(s)
    while i < n:
        if not idle[i]:
            i += 1
            continue
        # a stretch ends where activity resumes, data has a gap, or who holds the GPU changes
        j, held = i, set(s.workloads[i])
        while (
            j + 1 < n
            and idle[j + 1]
            and s.workloads[j + 1] == s.workloads[i]
            and s.timestamp_s[j + 1] <= s.timestamp_s[j] + s.duration_s[j] * 1.5 + 1
        ):
            j += 1
        hours = float(s.duration_s[i : j + 1].sum()) / 3600
        if hours >= min_hours:
            end = float(s.timestamp_s[j] + s.duration_s[j])
            out.append(IdleStretch(float(s.timestamp_s[i]), end, hours, tuple(sorted(held))))
        i = j + 1
    return tuple(out)


def _leak(s: GpuSeries, total: float | None) -> str | None:
    """A steady rise of memory to near full that ends in a sudden fall (the process died, most
    likely of out-of-memory): the sign of a leak rather than a large model."""
    mem = s.memory_used_bytes
    if not total or mem.size < 6:
        return None
    i = 0
    while i < mem.size - 1:
        j = i
        while j + 1 < mem.size and not math.isnan(mem[j + 1]) and mem[j + 1] > mem[j]:
            j += 1
        rise = j - i
        if (
            rise >= 5
            and mem[j] >= 0.9 * total
            and mem[j] - mem[i] >= 0.25 * total
            and j + 1 < mem.size
            and not math.isnan(mem[j + 1])
            and mem[j + 1] <= 0.5 * mem[j]
        ):
            minutes = float(s.timestamp_s[j] - s.timestamp_s[i]) / 60
            who = ", ".join(sorted(set(s.workloads[j]))) or "a process"
            return (
                f"memory of {who} grew from {mem[i] / BYTES_PER_GIB:.1f} to {mem[j] / BYTES_PER_GIB:.1f} GiB "
                f"({mem[j] / total:.0%}) over {minutes:.0f} min, then fell to {mem[j + 1] / BYTES_PER_GIB:.1f} GiB: "
                "it likely ran out of memory"
            )
        i = max(j, i + 1)
    return None


def gpu_usage(
    s: GpuSeries,
    prices: PriceBook,
    *,
    active_threshold: float = ACTIVE_THRESHOLD,
    min_idle_stretch_hours: float = 0.5,
    priced: tuple[np.ndarray, str] | None = None,
) -> GpuUsage:
    """Hours, peaks and dollars for one GPU series (``priced``: :func:`sample_prices`)."""
    dur_h = s.duration_s / 3600
    act, held = _activity(s)
    active = np.where(np.isnan(act), held, act >= active_threshold)
    share = active.astype(float)
    mig = s.mig_active_share if s.mig_active_share is not None else np.full(len(s), np.nan)
    is_mig = ~np.isnan(mig)
    share[is_mig] = mig[is_mig]  # a MIG GPU: the active share of its slices
    active[is_mig] = mig[is_mig] > 0
    lost = s.lost if s.lost is not None else np.zeros(len(s))
    share[lost > 0] = 0.0  # a lost GPU is rented and does no work
    active[lost > 0] = False
    allocated = float(dur_h.sum())
    active_h = float((dur_h * share).sum())
    known = ~np.isnan(act)
    mean_act = (
        float((act[known] * dur_h[known]).sum() / dur_h[known].sum())
        if known.any() and dur_h[known].sum()
        else None
    )
    if mean_act is None and is_mig.any() and dur_h[is_mig].sum():
        mean_act = float((mig[is_mig] * dur_h[is_mig]).sum() / dur_h[is_mig].sum())
    mem = s.memory_used_bytes[~np.isnan(s.memory_used_bytes)]
    peak = float(mem.max()) if mem.size else None
    total = s.memory_total_bytes if not math.isnan(s.memory_total_bytes) else None
    usd, source = priced if priced is not None else sample_prices(s, prices)
    known_price = ~np.isnan(usd)
    priced_h = float(dur_h[known_price].sum())
    cost = float((dur_h * usd)[known_price].sum()) if known_price.any() else None
    wasted = float((dur_h * (1 - share) * usd)[known_price].sum()) if known_price.any() else None
    idle_h = allocated - active_h
    return GpuUsage(
        host=s.host,
        index=s.index,
        uuid=s.uuid,
        model=s.model,
        gpu=canonical_gpu(s.model),
        allocated_hours=allocated,
        held_hours=float(dur_h[held].sum()),
        active_hours=active_h,
        idle_hours=idle_h,
        efficiency=active_h / allocated if allocated else None,
        mean_activity_ratio=mean_act,
        peak_memory_fraction=peak / total if peak is not None and total else None,
        peak_memory_gib=None if peak is None else peak / BYTES_PER_GIB,
        memory_headroom_gib=(total - peak) / BYTES_PER_GIB if peak is not None and total else None,
        usd_per_hour=cost / priced_h if cost is not None and priced_h else None,
        price_source=source,
        cost_usd=cost,
        wasted_usd=wasted,
        idle_stretches=_stretches(s, ~active, min_idle_stretch_hours),
        lost=bool((lost > 0).any()),
        xid_codes=s.xid_codes,
        mig_active_share=float((mig[is_mig] * dur_h[is_mig]).sum() / dur_h[is_mig].sum())
        if is_mig.any() and dur_h[is_mig].sum()
        else None,
        memory_leak=_leak(s, total),
        unpriced_hours=float(dur_h[~known_price].sum()),
    )


_MIG = re.compile(r"^(\d)g\.(\d+)gb$")


Candidate = tuple[float, str, float, str, float | None]
"""(price per GPU-hour, model, memory GiB, where, peak dense 16-bit TFLOP/s or None)."""


def _tflops(spec: object) -> float | None:
    """A GPU's peak 16-bit tensor throughput (bf16, else fp16), the figure compute is compared by."""
    return getattr(spec, "peak_bf16_tflops", None) or getattr(spec, "peak_fp16_tflops", None)


def _candidates(
    offers: Sequence[Offer], cloud: str | None = None, arch: str | None = None
) -> list[Candidate]:
    """The cheapest on-demand offer per NVIDIA model a person could move this job to: in the
    same cloud (where known: another cloud is a migration, not a right-sizing) and with the
    same CPU architecture (an x86 image does not run on an arm64 host; unknown: x86_64)."""
    from gpuwise.hardware import find_gpu

    arch = arch or "x86_64"
    pool = [o for o in offers if o.arch == arch and (cloud is None or o.cloud == cloud)]
    out: list[Candidate] = []
    for name, cheapest in cheapest_per_gpu(pool, spot=False).items():
        try:
            spec = find_gpu(name)
        except HardwareError:
            continue
        if spec.vendor != "nvidia":
            continue  # a CUDA workload moves to another NVIDIA GPU without code changes
        out.append(
            (
                cheapest.usd_per_gpu_hour,
                spec.name,
                spec.memory_gib,
                f"{cheapest.cloud} {cheapest.region} {cheapest.instance_type}",
                _tflops(spec),
            )
        )
    return sorted(out, key=lambda c: (c[0], c[1]))


def _own_tflops(u: GpuUsage) -> float | None:
    from gpuwise.hardware import find_gpu

    if u.gpu is None:
        return None
    try:
        return _tflops(find_gpu(u.gpu))
    except HardwareError:
        return None


@dataclass(frozen=True)
class _Advice:
    """One GPU's usage and what the rules need beside it."""

    u: GpuUsage
    window_hours: float
    candidates: Callable[[], Sequence[Candidate]]

    @property
    def price(self) -> float | None:
        return self.u.usd_per_hour

    @property
    def month(self) -> float:
        """Allocated hours per month at the rate seen in the window."""
        u = self.u
        return HOURS_PER_MONTH * (
            u.allocated_hours / self.window_hours if self.window_hours else 0.0
        )

    def rec(
        self, action: Action, reason: str, target: str | None, saving: float | None
    ) -> Recommendation:
        return Recommendation(
            self.u.host, self.u.uuid, self.u.index, action, reason, target, saving
        )


def _health(a: _Advice) -> list[Recommendation]:
    """A lost GPU or XID errors: drain and reset; a memory leak: fix it."""
    u, out = a.u, []
    if u.lost or u.xid_codes:
        xids = ", ".join(
            f"XID {c} ({XID_MEANINGS[c][1]})" if c in XID_MEANINGS else f"XID {c}"
            for c in u.xid_codes
        )
        out.append(
            a.rec(
                "drain-and-reset",
                f"GPU {u.index} "
                + ("fell off the bus (NVML: GPU is lost)" if u.lost else "reported errors")
                + (f" after {xids}" if xids and u.lost else f": {xids}" if xids else "")
                + "; its hours here are not the workload's fault. Drain the node, reset or replace "
                "the GPU, and run `gpuwise doctor` on it",
                None,
                None,
            )
        )
    if u.memory_leak:
        out.append(
            a.rec(
                "fix-memory-leak",
                f"on GPU {u.index}, {u.memory_leak}. Look for tensors kept across steps "
                "(a growing list, a loss kept with its graph, a cache without a bound)",
                None,
                None,
            )
        )
    return out


def _idle(a: _Advice) -> Recommendation | None:
    """A GPU that did (almost) nothing: release it, or stop what holds it."""
    u = a.u
    if u.efficiency is None or u.efficiency >= ACTIVE_THRESHOLD:
        return None
    held = u.held_hours > 0.5 * u.allocated_hours
    return a.rec(
        "stop-idle-workload" if held else "release",
        f"GPU {u.index} was active {u.active_hours:.1f} of {u.allocated_hours:.1f} h"
        + (
            " while processes held its memory (allocated but idle)"
            if held
            else " and nothing ran on it"
        ),
        None,
        _mul(a.month, a.price),
    )


def _held_idle(a: _Advice) -> Recommendation | None:
    """Workloads that held memory for an hour or more while the GPU was idle."""
    u = a.u
    held_idle_h = sum(st.hours for st in u.idle_stretches if st.held_by)
    if held_idle_h < 1.0:
        return None
    names = sorted({w for st in u.idle_stretches for w in st.held_by})
    per_month = held_idle_h * HOURS_PER_MONTH / a.window_hours if a.window_hours else None
    return a.rec(
        "stop-idle-workload",
        f"on GPU {u.index}, {', '.join(names)} held memory for {held_idle_h:.1f} h "
        "with the GPU idle (allocated but idle): stop it when done, or add an idle timeout",
        ", ".join(names),
        None if per_month is None else _mul(per_month, a.price),
    )


def _unallocated_idle(a: _Advice) -> Recommendation | None:
    """Stretches of an hour or more with nothing running on a rented GPU: release the node then."""
    u = a.u
    empty_h = sum(st.hours for st in u.idle_stretches if not st.held_by)
    if empty_h < 1.0:
        return None
    per_month = empty_h * HOURS_PER_MONTH / a.window_hours if a.window_hours else None
    return a.rec(
        "scale-to-zero",
        f"GPU {u.index} sat rented with nothing running for {empty_h:.1f} h of "
        f"{u.allocated_hours:.1f} h: let the node go when no job needs it (a cluster autoscaler "
        "scale-down or a node pool with a minimum of 0; outside Kubernetes, stop the instance "
        "between jobs), or run the work on a smaller node",
        None,
        None if per_month is None else _mul(per_month, a.price),
    )


def _mig_in_use(a: _Advice) -> Recommendation | None:
    """A GPU already in MIG mode with idle slices."""
    u, price = a.u, a.price
    if u.mig_active_share is None or u.mig_active_share >= 1 - ACTIVE_THRESHOLD or price is None:
        return None
    return a.rec(
        "mig",
        f"MIG GPU {u.index}: only {u.mig_active_share:.0%} of its slices did work (empty instances "
        "and unallocated slices are idle): put more work on its free slices, or move its instances "
        "onto fewer GPUs",
        None,
        price * (1 - u.mig_active_share) * a.month,
    )


def _memory(a: _Advice, low: bool) -> list[Recommendation]:
    """Peak memory near full: upsize; small and little activity: a cheaper GPU that holds it."""
    u, price, out = a.u, a.price, []
    peak = u.peak_memory_fraction
    if peak is not None and peak > MEMORY_FULL:
        own = _own_tflops(u)
        bigger = [
            c
            for c in a.candidates()
            if u.peak_memory_gib
            and c[2] > u.peak_memory_gib * MEMORY_BUFFER
            and (own is None or c[4] is None or c[4] >= own)  # more memory, not a slower GPU
        ]
        target = (
            f"{bigger[0][1]} ({bigger[0][2]:g} GiB, ${bigger[0][0]:.2f}/GPU-h on {bigger[0][3]})"
            if bigger
            else None
        )
        out.append(
            a.rec(
                "upsize",
                f"peak memory {peak:.0%} of GPU {u.index} is above {MEMORY_FULL:.0%}: one longer "
                "sequence or bigger batch and it runs out of memory; move to a GPU with more memory"
                + (f" such as {target}" if target else "")
                + ", or cut memory with the estimator's fixes (`gpuwise estimate`: activation "
                "checkpointing, ZeRO/FSDP sharding, a smaller micro-batch)",
                target,
                0.0,
            )
        )
    if (
        peak is None
        or u.peak_memory_gib is None
        or peak >= MEMORY_SMALL
        or not low
        or price is None
    ):
        return out
    need = u.peak_memory_gib * MEMORY_BUFFER
    # compute too: the work done (mean activity × this GPU's peak) plus 15 % must fit the target
    own = _own_tflops(u)
    work = None if own is None or u.mean_activity_ratio is None else own * u.mean_activity_ratio
    fits = [
        c
        for c in a.candidates()
        if c[2] >= need
        and c[0] < price * 0.95
        and c[1] != u.gpu
        and (work is None or (c[4] is not None and c[4] >= work * MEMORY_BUFFER))
    ]
    if fits:
        p, name, mem, where, tflops = fits[0]
        compute = (
            f" and its {tflops:g} TFLOP/s hold the {work:.0f} TFLOP/s of work done"
            if work is not None and tflops is not None
            else ""
        )
        out.append(
            a.rec(
                "downsize",
                f"GPU {u.index} peaked at {u.peak_memory_gib:.1f} GiB ({peak:.0%}) with mean activity "
                f"{u.mean_activity_ratio:.0%}: a {name} ({mem:g} GiB) holds the peak plus 15 %"
                f"{compute}, for ${p:.2f}/GPU-h instead of ${price:.2f} (same cloud and CPU "
                "architecture)",
                f"{name} on {where}",
                (price - p) * a.month,
            )
        )
    return out


def _share(a: _Advice) -> Recommendation | None:
    """Little activity: a MIG slice that holds the peak, or time-slicing where there is no MIG."""
    u, price = a.u, a.price
    if u.gpu is None or price is None or u.peak_memory_gib is None:
        return None
    from gpuwise.hardware import find_gpu

    spec = find_gpu(u.gpu)
    profiles = []
    for prof in spec.mig_profiles:
        m = _MIG.match(prof)
        # profile "GB" are 10^9 B: 1.0737 GB per GiB
        if m and float(m.group(2)) >= u.peak_memory_gib * MEMORY_BUFFER * 1.0737:
            profiles.append((int(m.group(1)), float(m.group(2)), prof))
    profiles = [p for p in profiles if p[0] < 7]
    if profiles:
        g, _, prof = min(profiles)
        return a.rec(
            "mig",
            f"GPU {u.index} ({u.gpu}) averaged {u.mean_activity_ratio:.0%} activity and peaked at "
            f"{u.peak_memory_gib:.1f} GiB: a MIG {prof} slice ({g}/7 of the GPU) fits it; the other "
            "slices can serve other work",
            prof,
            price * (1 - g / 7) * a.month,
        )
    if spec.mig_profiles:
        return None
    return a.rec(
        "share",
        f"GPU {u.index} averaged {u.mean_activity_ratio:.0%} activity: share it between jobs "
        "(time-slicing or MPS) instead of one job per GPU; the saving depends on what else runs",
        None,
        None,
    )


def recommend(
    u: GpuUsage,
    window_hours: float,
    candidates: Callable[[], Sequence[Candidate]],
) -> list[Recommendation]:
    """Right-sizing advice for one GPU (see the module docstring for the rules).

    ``window_hours``: the span of the data observed (the report's ``observed_hours``), which
    turns hours seen into a monthly rate.

    ``candidates`` gives :func:`_candidates` of the catalog; it is called only when a rule needs
    another GPU, so a report that recommends none never loads the catalog.
    """
    a = _Advice(u, window_hours, candidates)
    recs = _health(a)
    if u.lost:
        return recs
    idle = _idle(a)
    if idle is not None:
        return [*recs, idle]
    recs += [r for r in (_held_idle(a), _unallocated_idle(a)) if r is not None]
    if u.mig_active_share is not None:  # already in MIG mode: the other rules do not apply
        return recs + [r for r in (_mig_in_use(a),) if r is not None]
    low = u.mean_activity_ratio is not None and u.mean_activity_ratio < LOW_ACTIVITY
    recs += _memory(a, low)
    if low:
        recs += [r for r in (_share(a),) if r is not None]
    return recs


def build_report(
    history: History,
    prices: PriceBook,
    *,
    active_threshold: float = ACTIVE_THRESHOLD,
    min_idle_stretch_hours: float = 0.5,
) -> EfficiencyReport:
    """The report over ``history`` with ``prices``."""
    window_h = (history.end_s - history.start_s) / 3600
    starts = [float(s.timestamp_s.min()) for s in history.gpus if len(s)]
    ends = [float((s.timestamp_s + s.duration_s).max()) for s in history.gpus if len(s)]
    obs_start = min(starts) if starts else None
    obs_end = min(max(ends), history.end_s) if ends else None
    observed_h = (
        (obs_end - obs_start) / 3600 if obs_start is not None and obs_end is not None else 0.0
    )
    observed_h = max(
        observed_h,
        max((float(s.duration_s.max()) / 3600 for s in history.gpus if len(s)), default=0.0),
    )
    priced = {id(s): sample_prices(s, prices) for s in history.gpus}
    usages = tuple(
        sorted(
            (
                gpu_usage(
                    s,
                    prices,
                    active_threshold=active_threshold,
                    min_idle_stretch_hours=min_idle_stretch_hours,
                    priced=priced[id(s)],
                )
                for s in history.gpus
            ),
            key=lambda u: (u.host, u.index),
        )
    )
    by_uuid = {(s.host, s.uuid): s for s in history.gpus}
    placed = {k: where_it_ran(v, prices) for k, v in by_uuid.items()}
    usages = tuple(
        dataclasses.replace(
            u, cloud=placed[(u.host, u.uuid)][0], cpu_arch=placed[(u.host, u.uuid)][1]
        )
        for u in usages
    )
    pool = functools.cache(lambda cloud, arch: _candidates(prices.offers, cloud, arch))
    recs = [
        r
        for u in usages
        for r in recommend(u, observed_h, functools.partial(pool, u.cloud, u.cpu_arch))
    ]
    recs.sort(key=lambda r: -(r.saving_usd_per_month or 0.0))
    costs = [u.cost_usd for u in usages if u.cost_usd is not None]
    wastes = [u.wasted_usd for u in usages if u.wasted_usd is not None]
    cost = sum(costs) if costs else None
    wasted = sum(wastes) if wastes else None
    return EfficiencyReport(
        start_s=history.start_s,
        end_s=history.end_s,
        window_hours=window_h,
        observed_start_s=obs_start,
        observed_end_s=obs_end,
        observed_hours=observed_h,
        source=history.source,
        gpus=usages,
        workloads=workload_usage(history, prices, active_threshold, priced),
        recommendations=tuple(recs),
        allocated_hours=sum(u.allocated_hours for u in usages),
        active_hours=sum(u.active_hours for u in usages),
        idle_hours=sum(u.idle_hours for u in usages),
        cost_usd=cost,
        wasted_usd=wasted,
        waste_fraction=wasted / cost if cost and wasted is not None else None,
        active_threshold=active_threshold,
        warnings=overlap_warnings(history, usages),
        unpriced_hours=sum(u.unpriced_hours for u in usages),
        plans=plan_usage(history, priced, usages),
    )


def report_to_dict(report: EfficiencyReport) -> dict[str, object]:
    """The ``--json`` document: plain types, NaN never written."""
    import dataclasses

    def clean(v: object) -> object:
        if isinstance(v, float):
            return v if math.isfinite(v) else None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    doc = clean(dataclasses.asdict(report))
    assert isinstance(doc, dict)
    return doc
