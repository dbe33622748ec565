"""``gpuwise bench``: GPU, host and storage benchmarks beside the datasheet, and the calibration
file the estimator reads.

torch is imported only inside the functions that need it; ``import gpuwise.bench`` is light.
"""

from __future__ import annotations

from gpuwise.bench.calibration import calibration_entry, check_calibration_run, write_calibration
from gpuwise.bench.result import BenchReport, BenchResult, DeviceInfo, Skipped
from gpuwise.bench.runner import GROUPS, BenchOptions, run_bench, stage_names

__all__ = [
    "GROUPS",
    "BenchOptions",
    "BenchReport",
    "BenchResult",
    "DeviceInfo",
    "Skipped",
    "calibration_entry",
    "check_calibration_run",
    "run_bench",
    "stage_names",
    "write_calibration",
]
