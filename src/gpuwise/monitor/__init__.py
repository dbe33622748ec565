"""Monitoring: read GPUs through NVML (or a replayable fake), export to Prometheus, keep a local
SQLite history, and report efficiency, waste and right-sizing in dollars.

Modules: ``snapshot`` (data), ``nvml`` (the real reader and its error choke point), ``fake``
(scripted NVML + scenarios), ``exporter`` (Prometheus), ``store`` (SQLite history),
``prometheus`` (history from a Prometheus server), ``history`` (the series the report reads),
``report`` / ``report_html`` (the efficiency report), ``pricing`` ($/GPU-hour).
Names are imported lazily so ``import gpuwise.monitor`` does not load prometheus-client or numpy.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY: dict[str, str] = {
    "Snapshot": "gpuwise.monitor.snapshot",
    "GpuSample": "gpuwise.monitor.snapshot",
    "ProcessSample": "gpuwise.monitor.snapshot",
    "MigDeviceSample": "gpuwise.monitor.snapshot",
    "GpuReader": "gpuwise.monitor.nvml",
    "NvmlGpuReader": "gpuwise.monitor.nvml",
    "NvmlSession": "gpuwise.monitor.nvml",
    "FakeGpuReader": "gpuwise.monitor.fake",
    "FakeNvml": "gpuwise.monitor.fake",
    "SCENARIOS": "gpuwise.monitor.fake",
    "load_trace": "gpuwise.monitor.fake",
    "Exporter": "gpuwise.monitor.exporter",
    "GpuCollector": "gpuwise.monitor.exporter",
    "HistoryStore": "gpuwise.monitor.store",
    "PrometheusHistory": "gpuwise.monitor.prometheus",
    "History": "gpuwise.monitor.history",
    "GpuSeries": "gpuwise.monitor.history",
    "replay_history": "gpuwise.monitor.history",
    "PriceBook": "gpuwise.monitor.pricing",
    "EfficiencyReport": "gpuwise.monitor.report",
    "build_report": "gpuwise.monitor.report",
    "report_to_dict": "gpuwise.monitor.report",
    "render_html": "gpuwise.monitor.report_html",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuwise.monitor' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
