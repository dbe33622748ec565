"""A replayable fake NVML, for tests, demos and users without a GPU.

:class:`FakeNvml` implements the part of the ``pynvml`` module gpuwise calls, scripted by a
trace, and raises the real ``pynvml.NVMLError_*`` classes where a real GPU would (a MIG GPU
raises ``NVMLError_NotSupported`` for utilization; a GPU that fell off the bus raises
``NVMLError_GpuIsLost``). :class:`FakeGpuReader` is the real :class:`NvmlGpuReader` driven by
it, so the choke point, the error mapping and the snapshot code run unchanged.

The trace format (JSON or YAML: static GPU facts, then frames of readings) is documented in
:mod:`~gpuwise.base.nvml_trace`, with its parser. ``gpuwise monitor --fake TRACE`` advances one
frame per read (looping); ``gpuwise report --fake`` stretches the frames over the asked window.

The pieces live in :mod:`~gpuwise.base.nvml_trace` (format and parser),
:mod:`~gpuwise.base.nvml_fake` (the fake library) and :mod:`~gpuwise.monitor.fake_scenarios`
(the built-in scenarios); this module holds the reader and re-exports their public names.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuwise.base.nvml_fake import FakeHandle, FakeNvml
from gpuwise.base.nvml_trace import MAX_FRAMES, Trace, load_trace, parse_trace
from gpuwise.monitor.fake_scenarios import SCENARIOS, scenario
from gpuwise.monitor.nvml import NvmlGpuReader, ProcInfo
from gpuwise.monitor.snapshot import ProcessSample, Snapshot

__all__ = [
    "MAX_FRAMES",
    "SCENARIOS",
    "FakeGpuReader",
    "FakeHandle",
    "FakeNvml",
    "Trace",
    "load_trace",
    "parse_trace",
    "resolve_fake",
    "scenario",
]


class FakeGpuReader(NvmlGpuReader):
    """The real NVML reader over :class:`FakeNvml`; each :meth:`read` serves the next frame."""

    def __init__(self, trace: Trace, *, host: str | None = None, clock: Any = None) -> None:
        self.fake = FakeNvml(trace)
        kwargs: dict[str, Any] = {}
        if clock is not None:
            kwargs["clock"] = clock
        super().__init__(
            self.fake,
            host=host or trace.host,
            process_info=self._fake_proc_info,
            process_start=self._fake_proc_start,
            **kwargs,
        )
        self._first = True

    def _fake_proc(self, pid: int) -> Mapping[str, Any] | None:
        for g in self.fake.values():
            for p in g.get("processes", ()):
                if int(p["pid"]) == pid:
                    found: Mapping[str, Any] = p
                    return found
        return None

    def _fake_proc_start(self, pid: int) -> int | None:
        p = self._fake_proc(pid)
        return None if p is None else int(p.get("start", 0))

    def _fake_proc_info(self, pid: int) -> ProcInfo:
        p = self._fake_proc(pid)
        if p is None:
            return ProcInfo(None, None, None, None)
        return ProcInfo(
            p.get("user"),
            p.get("command"),
            p.get("container_id"),
            p.get("pod_uid"),
            p.get("namespace"),
            p.get("pod"),
            p.get("container"),
            p.get("plan_id"),
        )

    @classmethod
    def from_trace(cls, path: str | Path, **kwargs: Any) -> FakeGpuReader:
        """Replay a recorded or hand-written trace file (JSON/YAML)."""
        return cls(load_trace(path), **kwargs)

    @classmethod
    def from_scenario(cls, name: str, **kwargs: Any) -> FakeGpuReader:
        """One of the built-in scenarios: see :data:`SCENARIOS`."""
        return cls(scenario(name), **kwargs)

    def read(self) -> Snapshot:
        if not self._first:
            self.fake.advance()
        self._first = False
        snap = super().read()
        workloads = {
            int(p["pid"]): str(p["workload"])
            for g in self.fake.values()
            for p in g.get("processes", ())
            if p.get("workload")
        }
        if not workloads:
            return snap
        from dataclasses import replace

        def named(p: ProcessSample) -> ProcessSample:
            return replace(p, workload=workloads.get(p.pid, p.workload))

        gpus = tuple(
            replace(
                g,
                processes=tuple(named(p) for p in g.processes),
                mig_devices=tuple(
                    replace(m, processes=tuple(named(p) for p in m.processes))
                    for m in g.mig_devices
                ),
            )
            for g in snap.gpus
        )
        return replace(snap, gpus=gpus)


def resolve_fake(spec: str, **kwargs: Any) -> FakeGpuReader:
    """``--fake SCENARIO|TRACE``: a scenario name, or a path to a trace file."""
    if spec in SCENARIOS:
        return FakeGpuReader.from_scenario(spec, **kwargs)
    if Path(spec).suffix in (".json", ".yaml", ".yml") or Path(spec).exists():
        return FakeGpuReader.from_trace(spec, **kwargs)
    return FakeGpuReader.from_scenario(spec, **kwargs)  # raises with did-you-mean
