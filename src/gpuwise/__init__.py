"""gpuwise: choose, pay less for, run safely on, and see cloud GPUs for PyTorch work.

The public API is re-exported here lazily so ``import gpuwise`` stays light; the names are
pinned by ``tests/test_public_api.py``.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    # name: module that defines it
    "GpuwiseError": "gpuwise.errors",
    "InputError": "gpuwise.errors",
    "GpuSpec": "gpuwise.hardware",
    "find_gpu": "gpuwise.hardware",
    "Offer": "gpuwise.catalog",
    "Catalog": "gpuwise.catalog",
    "load_catalog": "gpuwise.catalog",
    "query_offers": "gpuwise.catalog",
    # `gpuwise.estimate` is a package whose module object is callable (see its __init__):
    # `gpuwise.estimate(workload, "H100")` runs estimate_workload.
    "estimate": "gpuwise.estimate",
    "Workload": "gpuwise.estimate",
    "Estimate": "gpuwise.estimate",
    "estimate_workload": "gpuwise.estimate",
    "workload_from_options": "gpuwise.estimate",
    # `gpuwise.plan` is callable the same way: `gpuwise.plan(workload, PlanRequest(...))`.
    "plan": "gpuwise.plan",
    "Plan": "gpuwise.plan",
    "PlanOption": "gpuwise.plan",
    "PlanRequest": "gpuwise.plan",
    "run_doctor": "gpuwise.doctor",
    "DoctorOptions": "gpuwise.doctor",
    "CheckResult": "gpuwise.doctor",
    "run_bench": "gpuwise.bench",
    "BenchOptions": "gpuwise.bench",
    "BenchReport": "gpuwise.bench",
    "plan_fleet": "gpuwise.fleet",
    "tco": "gpuwise.fleet",
    "score_vendors": "gpuwise.fleet",
    "NvmlGpuReader": "gpuwise.monitor.nvml",
    "FakeGpuReader": "gpuwise.monitor.fake",
    "Exporter": "gpuwise.monitor.exporter",
    "HistoryStore": "gpuwise.monitor.store",
    "Checkpointer": "gpuwise.train",
    "PreemptionWatcher": "gpuwise.train",
    "resilient": "gpuwise.train",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuwise' has no attribute {name!r}")
    imported = importlib.import_module(module)
    # a name that is itself a subpackage (``estimate``) resolves to the module object
    value = imported if module == f"gpuwise.{name}" else getattr(imported, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
