"""Monitoring: read GPUs through NVML (or a replayable fake), export to Prometheus, keep a local
SQLite history, and report efficiency, waste and right-sizing in dollars.

Modules: ``snapshot`` (data), ``nvml`` (the real reader over :mod:`gpuwise.base.nvml`), ``fake``
(scripted NVML + scenarios), ``exporter`` (Prometheus), ``store`` (SQLite history),
``prometheus`` (history from a Prometheus server), ``history`` (the series the report reads),
``report`` / ``report_html`` (the efficiency report), ``runs_report`` (plan vs actual from run
records), ``pricing`` ($/GPU-hour), ``metrics`` (the
exporter's metric table and DCGM names), ``node`` (the node's instance type for its price),
``podresources`` (GPU → pod from the kubelet), ``httpserver`` (the exporter's HTTP server),
``recording`` (what ``gpuwise monitor`` records with each sample), ``fake_scenarios`` (the scripted scenarios of ``fake``; the fake NVML library and its trace
format are in :mod:`gpuwise.base.nvml_fake` and :mod:`gpuwise.base.nvml_trace`, beside the NVML
choke point they stand in for).
Names are imported lazily so ``import gpuwise.monitor`` does not load prometheus-client or numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuwise.base import lazy

if TYPE_CHECKING:
    from gpuwise.base.nvml import NvmlSession as NvmlSession
    from gpuwise.base.nvml_trace import Trace as Trace
    from gpuwise.monitor.accounting import PlanUsage as PlanUsage
    from gpuwise.monitor.exporter import PROCESS_COMMANDS as PROCESS_COMMANDS
    from gpuwise.monitor.exporter import Exporter as Exporter
    from gpuwise.monitor.exporter import GpuCollector as GpuCollector
    from gpuwise.monitor.exporter import Sampler as Sampler
    from gpuwise.monitor.fake import SCENARIOS as SCENARIOS
    from gpuwise.monitor.fake import FakeGpuReader as FakeGpuReader
    from gpuwise.monitor.fake import FakeNvml as FakeNvml
    from gpuwise.monitor.fake import load_trace as load_trace
    from gpuwise.monitor.fake import resolve_fake as resolve_fake
    from gpuwise.monitor.history import GpuSeries as GpuSeries
    from gpuwise.monitor.history import History as History
    from gpuwise.monitor.history import SampleContext as SampleContext
    from gpuwise.monitor.history import replay_history as replay_history
    from gpuwise.monitor.metrics import GPU_METRICS as GPU_METRICS
    from gpuwise.monitor.metrics import MIG_METRICS as MIG_METRICS
    from gpuwise.monitor.metrics import MetricDef as MetricDef
    from gpuwise.monitor.node import NodeFacts as NodeFacts
    from gpuwise.monitor.node import detect_node as detect_node
    from gpuwise.monitor.nvml import GpuReader as GpuReader
    from gpuwise.monitor.nvml import NvmlGpuReader as NvmlGpuReader
    from gpuwise.monitor.podresources import FakeKubelet as FakeKubelet
    from gpuwise.monitor.podresources import PodDevice as PodDevice
    from gpuwise.monitor.podresources import PodResourcesClient as PodResourcesClient
    from gpuwise.monitor.pricing import PriceBook as PriceBook
    from gpuwise.monitor.prometheus import PrometheusHistory as PrometheusHistory
    from gpuwise.monitor.recording import next_read_time as next_read_time
    from gpuwise.monitor.recording import read_duration as read_duration
    from gpuwise.monitor.recording import sample_context as sample_context
    from gpuwise.monitor.report import EfficiencyReport as EfficiencyReport
    from gpuwise.monitor.report import build_report as build_report
    from gpuwise.monitor.report import report_to_dict as report_to_dict
    from gpuwise.monitor.report_html import render_html as render_html
    from gpuwise.monitor.runs_report import RunsReport as RunsReport
    from gpuwise.monitor.runs_report import build_runs_report as build_runs_report
    from gpuwise.monitor.runs_report import render_runs_html as render_runs_html
    from gpuwise.monitor.runs_report import runs_report_to_dict as runs_report_to_dict
    from gpuwise.monitor.snapshot import GpuSample as GpuSample
    from gpuwise.monitor.snapshot import MigDeviceSample as MigDeviceSample
    from gpuwise.monitor.snapshot import ProcessSample as ProcessSample
    from gpuwise.monitor.snapshot import Snapshot as Snapshot
    from gpuwise.monitor.store import HistoryStore as HistoryStore
    from gpuwise.monitor.store import default_db_path as default_db_path

_LAZY: dict[str, str] = {
    # name: module that defines it (keep the TYPE_CHECKING imports above in step)
    "Snapshot": "gpuwise.monitor.snapshot",
    "GpuSample": "gpuwise.monitor.snapshot",
    "ProcessSample": "gpuwise.monitor.snapshot",
    "MigDeviceSample": "gpuwise.monitor.snapshot",
    "GpuReader": "gpuwise.monitor.nvml",
    "NvmlGpuReader": "gpuwise.monitor.nvml",
    "NvmlSession": "gpuwise.base.nvml",
    "FakeGpuReader": "gpuwise.monitor.fake",
    "FakeNvml": "gpuwise.monitor.fake",
    "SCENARIOS": "gpuwise.monitor.fake",
    "load_trace": "gpuwise.monitor.fake",
    "resolve_fake": "gpuwise.monitor.fake",
    "Exporter": "gpuwise.monitor.exporter",
    "GpuCollector": "gpuwise.monitor.exporter",
    "Sampler": "gpuwise.monitor.exporter",
    "PROCESS_COMMANDS": "gpuwise.monitor.exporter",
    "HistoryStore": "gpuwise.monitor.store",
    "default_db_path": "gpuwise.monitor.store",
    "PrometheusHistory": "gpuwise.monitor.prometheus",
    "History": "gpuwise.monitor.history",
    "GpuSeries": "gpuwise.monitor.history",
    "SampleContext": "gpuwise.monitor.history",
    "sample_context": "gpuwise.monitor.recording",
    "read_duration": "gpuwise.monitor.recording",
    "next_read_time": "gpuwise.monitor.recording",
    "PlanUsage": "gpuwise.monitor.accounting",
    "replay_history": "gpuwise.monitor.history",
    "PriceBook": "gpuwise.monitor.pricing",
    "EfficiencyReport": "gpuwise.monitor.report",
    "build_report": "gpuwise.monitor.report",
    "report_to_dict": "gpuwise.monitor.report",
    "render_html": "gpuwise.monitor.report_html",
    "RunsReport": "gpuwise.monitor.runs_report",
    "build_runs_report": "gpuwise.monitor.runs_report",
    "runs_report_to_dict": "gpuwise.monitor.runs_report",
    "render_runs_html": "gpuwise.monitor.runs_report",
    "Trace": "gpuwise.base.nvml_trace",
    "GPU_METRICS": "gpuwise.monitor.metrics",
    "MIG_METRICS": "gpuwise.monitor.metrics",
    "MetricDef": "gpuwise.monitor.metrics",
    "NodeFacts": "gpuwise.monitor.node",
    "detect_node": "gpuwise.monitor.node",
    "PodDevice": "gpuwise.monitor.podresources",
    "PodResourcesClient": "gpuwise.monitor.podresources",
    "FakeKubelet": "gpuwise.monitor.podresources",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    return lazy.resolve(__name__, _LAZY, globals(), name)


def __dir__() -> list[str]:
    return sorted(__all__)
