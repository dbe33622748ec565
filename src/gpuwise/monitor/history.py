"""GPU history as the report sees it: per-GPU time series, whatever store they came from.

Three sources yield a :class:`History`: the SQLite store (:mod:`gpuwise.monitor.store`), a
Prometheus server (:mod:`gpuwise.monitor.prometheus`), and a fake trace replayed over a window
(:func:`replay_history`). Every sample carries its own duration, so raw 10 s samples, 5-minute
downsampled rows and stretched trace frames add up the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuwise.monitor.snapshot import ACTIVE_THRESHOLD, GpuSample, Snapshot

WorkloadShares = tuple[tuple[str, float, bool], ...]


@dataclass(frozen=True)
class SampleContext:
    """What a sample ran on and for: recorded by ``gpuwise monitor`` with each sample (the
    ``contexts`` table of the history database), so a report prices every sample from its own
    node and splits dollars by plan. None where not known."""

    instance_type: str | None = None
    """Cloud instance type, e.g. ``p5.48xlarge``."""
    cloud: str | None = None
    """gpuwise's cloud name (aws, gcp, azure, ...)."""
    region: str | None = None
    """Cloud region."""
    capacity_type: str | None = None
    """``on-demand``, ``spot`` or ``reserved``."""
    plan_id: str | None = None
    """The plan id of the job on the GPU (``GPUWISE_PLAN_ID``, set by ``plan --export``)."""


@dataclass(frozen=True)
class GpuSeries:
    """One GPU's samples in time order. Float arrays hold NaN where a value was not read."""

    host: str
    """Host name."""
    uuid: str
    """GPU UUID."""
    index: int
    """NVML index at the time of recording."""
    model: str
    """NVML name, e.g. ``NVIDIA H100 80GB HBM3``."""
    memory_total_bytes: float
    """Device memory size (NaN if never read)."""
    timestamp_s: np.ndarray
    """Unix time of each sample (start of the period it stands for)."""
    duration_s: np.ndarray
    """Seconds each sample stands for."""
    utilization_ratio: np.ndarray
    """NVML utilization.gpu as a fraction (duty cycle)."""
    sm_active_ratio: np.ndarray
    """GPM SM-active fraction (NaN where the GPU has no GPM)."""
    memory_used_bytes: np.ndarray
    """Used device memory (the peak of the period for downsampled rows)."""
    power_w: np.ndarray
    """Board power."""
    temperature_c: np.ndarray
    """GPU temperature."""
    workloads: tuple[tuple[str, ...], ...]
    """Workloads holding memory on the GPU in each sample (empty tuple = no process)."""
    mig_active_share: np.ndarray | None = None
    """MIG GPUs: share of the slices in active instances per sample (unallocated slices idle; see
    :attr:`~gpuwise.monitor.snapshot.GpuSample.mig_active_share`); NaN where not in MIG mode."""
    lost: np.ndarray | None = None
    """1.0 where the GPU was lost (fell off the bus) in that sample, else 0.0."""
    xid_codes: tuple[int, ...] = ()
    """XID codes the GPU reported in the window."""
    workload_shares: tuple[WorkloadShares | None, ...] | None = None
    """MIG GPUs: per sample, (workload, share of the GPU, active) for each workload in an instance
    (share = instance slices / GPU slices, split among the instance's workloads); None per sample
    where the GPU is not in MIG mode (then a sample is split evenly among its workloads)."""
    usd_per_hour: np.ndarray | None = None
    """Per sample, the price per GPU-hour the source itself carried (the exporter's
    ``gpuwise_gpu_cost_usd_per_hour`` read from Prometheus); NaN where it had none. None: the
    source carries no prices (the report prices the samples itself)."""
    context_index: np.ndarray | None = None
    """Per sample, an index into :attr:`contexts` (-1: nothing recorded); None without any."""
    contexts: tuple[SampleContext, ...] = ()
    """The distinct contexts (node, plan) the samples were recorded with."""

    def __len__(self) -> int:
        return int(self.timestamp_s.size)

    def _most_hours(self, field: str) -> str | None:
        if self.context_index is None:
            return None
        hours: dict[str, float] = {}
        for ci, ctx in enumerate(self.contexts):
            value = getattr(ctx, field)
            if value:
                rows = self.context_index == ci
                hours[value] = hours.get(value, 0.0) + float(self.duration_s[rows].sum())
        return max(hours, key=lambda k: hours[k]) if hours else None

    @property
    def capacity_type(self) -> str | None:
        """The capacity type recorded for most of this GPU's hours (``spot``, ``on-demand``,
        ``reserved``); None where none was recorded. Per sample: :attr:`contexts`."""
        return self._most_hours("capacity_type")

    @property
    def plan_id(self) -> str | None:
        """The plan id recorded for most of this GPU's hours; None where none was."""
        return self._most_hours("plan_id")

    @property
    def activity_ratio(self) -> np.ndarray:
        """SM-active where read, else utilization (see docs/monitoring.md: why utilization misleads)."""
        return np.where(
            np.isnan(self.sm_active_ratio), self.utilization_ratio, self.sm_active_ratio
        )


@dataclass(frozen=True)
class History:
    """All GPUs over one window ``[start_s, end_s)``."""

    start_s: float
    """Window start (Unix time)."""
    end_s: float
    """Window end (Unix time)."""
    gpus: tuple[GpuSeries, ...]
    """One series per GPU seen in the window."""
    source: str = field(default="")
    """Where it came from: ``sqlite:PATH``, ``prometheus:URL``, ``fake:NAME``."""


class SeriesBuilder:
    """Collects rows for one GPU, then freezes them into a :class:`GpuSeries`."""

    def __init__(
        self, host: str, uuid: str, index: int, model: str, memory_total_bytes: float
    ) -> None:
        self.meta = (host, uuid, index, model, memory_total_bytes)
        self.rows: list[tuple[float, ...]] = []
        self.workloads: list[tuple[str, ...]] = []
        self.shares: list[WorkloadShares | None] = []
        self.xids: set[int] = set()
        self.prices: list[float] = []
        self.context_ids: list[int] = []
        self.contexts: dict[SampleContext, int] = {}

    def add(
        self,
        ts: float,
        dur: float,
        util: float | None,
        sm: float | None,
        mem: float | None,
        power: float | None,
        temp: float | None,
        workloads: tuple[str, ...],
        *,
        mig_share: float | None = None,
        lost: bool = False,
        xids: tuple[int, ...] = (),
        shares: WorkloadShares | None = None,
        usd_per_hour: float | None = None,
        context: SampleContext | None = None,
    ) -> None:
        nan = float("nan")
        self.prices.append(nan if usd_per_hour is None else usd_per_hour)
        self.context_ids.append(
            -1 if context is None else self.contexts.setdefault(context, len(self.contexts))
        )
        self.rows.append(
            (
                ts,
                dur,
                nan if util is None else util,
                nan if sm is None else sm,
                nan if mem is None else mem,
                nan if power is None else power,
                nan if temp is None else temp,
                nan if mig_share is None else mig_share,
                1.0 if lost else 0.0,
            )
        )
        self.workloads.append(workloads)
        self.shares.append(shares)
        self.xids.update(xids)

    def build(self) -> GpuSeries:
        a = np.array(self.rows, dtype=float).reshape(-1, 9)
        order = np.argsort(a[:, 0], kind="stable")
        a = a[order]
        host, uuid, index, model, total = self.meta
        return GpuSeries(
            host,
            uuid,
            index,
            model,
            total,
            a[:, 0],
            a[:, 1],
            a[:, 2],
            a[:, 3],
            a[:, 4],
            a[:, 5],
            a[:, 6],
            tuple(self.workloads[i] for i in order),
            mig_active_share=a[:, 7],
            lost=a[:, 8],
            xid_codes=tuple(sorted(self.xids)),
            workload_shares=tuple(self.shares[i] for i in order) if any(self.shares) else None,
            usd_per_hour=np.array(self.prices, dtype=float)[order]
            if not np.isnan(np.array(self.prices, dtype=float)).all()
            else None,
            context_index=np.array(self.context_ids, dtype=int)[order] if self.contexts else None,
            contexts=tuple(self.contexts),
        )


def mig_workload_shares(g: GpuSample) -> WorkloadShares | None:
    """(workload, share of the GPU, active) per workload running in a MIG instance of ``g``; None
    when ``g`` is not in MIG mode. Shares of empty instances and unallocated slices belong to no
    workload (they are the GPU's waste)."""
    if not g.mig_enabled or not g.mig_slices_total:
        return None
    out: list[tuple[str, float, bool]] = []
    for m in g.mig_devices:
        names = sorted({p.workload for p in m.processes})
        if not names:
            continue
        busy = m.sm_active_ratio >= ACTIVE_THRESHOLD if m.sm_active_ratio is not None else True
        share = (m.slices or 1) / g.mig_slices_total / len(names)
        out.extend((w, share, busy) for w in names)
    return tuple(out)


def add_snapshot(
    builders: dict[tuple[str, str], SeriesBuilder],
    snap: Snapshot,
    duration_s: float,
    context: SampleContext | None = None,
) -> None:
    """Append one snapshot to per-GPU builders (keyed by host and UUID)."""
    for g in snap.gpus:
        key = (snap.host, g.uuid)
        b = builders.get(key)
        if b is None:
            total = (
                float(g.memory_total_bytes) if g.memory_total_bytes is not None else float("nan")
            )
            b = builders[key] = SeriesBuilder(snap.host, g.uuid, g.index, g.name, total)
        b.add(
            snap.timestamp_s,
            duration_s,
            g.utilization_gpu_ratio,
            g.sm_active_ratio,
            None if g.memory_used_bytes is None else float(g.memory_used_bytes),
            g.power_w,
            g.temperature_c,
            tuple(sorted({p.workload for p in g.processes})),
            mig_share=g.mig_active_share,
            lost=g.lost,
            xids=tuple(code for code, _ in g.xid_counts),
            shares=mig_workload_shares(g),
            context=context,
        )


def replay_history(reader: Any, window_s: float, end_s: float) -> History:
    """Replay a :class:`~gpuwise.monitor.fake.FakeGpuReader`'s trace as the history of the window
    ``[end_s - window_s, end_s)``: the frames are stretched evenly over the window."""
    from gpuwise.monitor.fake import FakeGpuReader

    if not isinstance(reader, FakeGpuReader):
        raise TypeError("replay_history needs a FakeGpuReader")
    trace = reader.fake.trace
    start = end_s - window_s
    per_frame = window_s / reader.fake.frame_count
    builders: dict[tuple[str, str], SeriesBuilder] = {}
    reader.read()  # prime: GPM SM-active needs a previous sample, as on a real GPU
    reader.fake.frame, reader._first = 0, True
    k = 0
    for repeat, _ in trace.frames:
        snap = reader.read()  # serves expanded frame k; later repeats of it are identical
        from dataclasses import replace

        add_snapshot(builders, replace(snap, timestamp_s=start + k * per_frame), per_frame * repeat)
        reader.fake.advance(repeat - 1)
        k += repeat
    return History(
        start, end_s, tuple(b.build() for b in builders.values()), source=f"fake:{trace.name}"
    )
