"""``gpuwise doctor``: environment checks that each return (status, finding, fix).

Checks read the machine only through a :class:`Probe` (``SystemProbe`` for this machine,
``FixtureProbe`` to replay captured ``/proc``, ``/sys`` and ``nvidia-smi -q`` text).
Nothing here imports torch at module level; the torch check imports it when run.
"""

from __future__ import annotations

from gpuwise.doctor.context import DoctorOptions
from gpuwise.doctor.cuda_compat import Compatibility, check_compatibility
from gpuwise.doctor.nvsmi import parse_nvidia_smi_q
from gpuwise.doctor.probe import (
    CommandOutput,
    DiskUsage,
    FixtureProbe,
    GpuDevice,
    GpuInfo,
    Probe,
    SystemProbe,
    TorchInfo,
)
from gpuwise.doctor.result import CheckResult, Status, worst
from gpuwise.doctor.run import CHECKS, gpu_present, run_doctor

__all__ = [
    "CHECKS",
    "CheckResult",
    "CommandOutput",
    "Compatibility",
    "DiskUsage",
    "DoctorOptions",
    "FixtureProbe",
    "GpuDevice",
    "GpuInfo",
    "Probe",
    "Status",
    "SystemProbe",
    "TorchInfo",
    "check_compatibility",
    "gpu_present",
    "parse_nvidia_smi_q",
    "run_doctor",
    "worst",
]
