"""gpuwise: choose, pay less for, run safely on, and see cloud GPUs for PyTorch work.

The public API is re-exported here lazily so ``import gpuwise`` stays light (no numpy, scipy,
torch, typer or rich until a name that needs them is used). A type checker sees every name
with its real type: the ``TYPE_CHECKING`` block below mirrors ``_LAZY`` name for name
(``tests/test_public_api_types.py`` checks that they agree).

Subpackages are reached the usual way (``import gpuwise.fleet``); ``gpuwise.<subpackage>``
also resolves lazily. No public name is both a function and a subpackage: the planner lives in
:mod:`gpuwise.planner` so that ``gpuwise.plan(...)`` can be a plain function (importing a
subpackage named ``plan`` would rebind ``gpuwise.plan`` to the module).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gpuwise.base import lazy
from gpuwise.base.version import __version__ as __version__
from gpuwise.errors import GpuwiseError as GpuwiseError
from gpuwise.errors import InputError as InputError

if TYPE_CHECKING:
    from gpuwise.bench import BenchOptions as BenchOptions
    from gpuwise.bench import BenchReport as BenchReport
    from gpuwise.bench import run_bench as run_bench
    from gpuwise.catalog import Catalog as Catalog
    from gpuwise.catalog import Offer as Offer
    from gpuwise.catalog import load_catalog as load_catalog
    from gpuwise.catalog import query_offers as query_offers
    from gpuwise.doctor import CheckResult as CheckResult
    from gpuwise.doctor import DoctorOptions as DoctorOptions
    from gpuwise.doctor import run_doctor as run_doctor
    from gpuwise.estimate import Estimate as Estimate
    from gpuwise.estimate import Workload as Workload
    from gpuwise.estimate import estimate_workload as estimate_workload
    from gpuwise.estimate import workload_from_options as workload_from_options
    from gpuwise.fleet import compute_tco as compute_tco
    from gpuwise.fleet import plan_fleet as plan_fleet
    from gpuwise.fleet import score_vendors as score_vendors
    from gpuwise.hardware import GpuSpec as GpuSpec
    from gpuwise.hardware import find_gpu as find_gpu
    from gpuwise.monitor.exporter import Exporter as Exporter
    from gpuwise.monitor.fake import FakeGpuReader as FakeGpuReader
    from gpuwise.monitor.nvml import NvmlGpuReader as NvmlGpuReader
    from gpuwise.monitor.store import HistoryStore as HistoryStore
    from gpuwise.planner import Plan as Plan
    from gpuwise.planner import PlanOption as PlanOption
    from gpuwise.planner import PlanRequest as PlanRequest
    from gpuwise.planner import plan as plan
    from gpuwise.train import Checkpointer as Checkpointer
    from gpuwise.train import PreemptionWatcher as PreemptionWatcher
    from gpuwise.train import resilient as resilient

_LAZY: dict[str, str] = {
    # name: module that defines it (keep the TYPE_CHECKING imports above in step)
    "GpuSpec": "gpuwise.hardware",
    "find_gpu": "gpuwise.hardware",
    "Offer": "gpuwise.catalog",
    "Catalog": "gpuwise.catalog",
    "load_catalog": "gpuwise.catalog",
    "query_offers": "gpuwise.catalog",
    "Workload": "gpuwise.estimate",
    "Estimate": "gpuwise.estimate",
    "estimate_workload": "gpuwise.estimate",
    "workload_from_options": "gpuwise.estimate",
    # `plan` is the plain function gpuwise.planner.plan
    "plan": "gpuwise.planner",
    "Plan": "gpuwise.planner",
    "PlanOption": "gpuwise.planner",
    "PlanRequest": "gpuwise.planner",
    "run_doctor": "gpuwise.doctor",
    "DoctorOptions": "gpuwise.doctor",
    "CheckResult": "gpuwise.doctor",
    "run_bench": "gpuwise.bench",
    "BenchOptions": "gpuwise.bench",
    "BenchReport": "gpuwise.bench",
    "plan_fleet": "gpuwise.fleet",
    "compute_tco": "gpuwise.fleet",
    "score_vendors": "gpuwise.fleet",
    "NvmlGpuReader": "gpuwise.monitor.nvml",
    "FakeGpuReader": "gpuwise.monitor.fake",
    "Exporter": "gpuwise.monitor.exporter",
    "HistoryStore": "gpuwise.monitor.store",
    "Checkpointer": "gpuwise.train",
    "PreemptionWatcher": "gpuwise.train",
    "resilient": "gpuwise.train",
}

_SUBPACKAGES = frozenset(
    {
        "bench",
        "catalog",
        "doctor",
        "estimate",
        "fleet",
        "hardware",
        "monitor",
        "planner",
        "train",
        "units",
    }
)

__all__ = ["GpuwiseError", "InputError", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:  # `gpuwise.fleet` without `import gpuwise.fleet` first
        return importlib.import_module(f"gpuwise.{name}")
    return lazy.resolve(__name__, _LAZY, globals(), name)


def __dir__() -> list[str]:
    return sorted({*__all__, *_SUBPACKAGES})
