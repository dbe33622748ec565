"""Run the doctor's checks: the registry (a plain dict, in display order) and :func:`run_doctor`."""

from __future__ import annotations

import logging
from collections.abc import Callable

from gpuwise.doctor import checks_cuda, checks_gpu, checks_host, checks_nccl
from gpuwise.doctor.context import Context, DoctorOptions
from gpuwise.doctor.probe import Probe, SystemProbe
from gpuwise.doctor.result import CheckResult, skip
from gpuwise.errors import check_choice

log = logging.getLogger(__name__)

Check = Callable[[Context], CheckResult]

CHECKS: dict[str, Check] = {
    "nvidia-driver": checks_cuda.check_driver,
    "cuda-compat": checks_cuda.check_cuda_compat,
    "torch-cuda": checks_cuda.check_torch,
    "cuda-visible-devices": checks_cuda.check_visible_devices,
    "nccl": checks_nccl.check_nccl,
    "nccl-socket-ifname": checks_nccl.check_socket_ifname,
    "infiniband": checks_nccl.check_infiniband,
    "shm": checks_host.check_shm,
    "cpu-workers": checks_host.check_cpu_workers,
    "disk": checks_host.check_disk,
    "memory": checks_host.check_memory,
    "cgroup": checks_host.check_cgroup,
    "gpu-persistence": checks_gpu.check_persistence,
    "gpu-ecc": checks_gpu.check_ecc,
    "gpu-xid": checks_gpu.check_xid,
    "gpu-mig": checks_gpu.check_mig,
    "gpu-pcie": checks_gpu.check_pcie,
    "gpu-throttle": checks_gpu.check_throttle,
}


def run_doctor(probe: Probe | None = None, options: DoctorOptions | None = None,
               only: tuple[str, ...] = ()) -> tuple[CheckResult, ...]:
    """Run the checks (all, or those named in ``only``) against ``probe`` (default: this machine).

    A check that crashes reports ``skip`` with the exception instead of hiding the others.
    """
    for n in only:
        check_choice(n, CHECKS, "check")
    ctx = Context(probe if probe is not None else SystemProbe(), options or DoctorOptions())
    results = []
    for name, check in CHECKS.items():
        if only and name not in only:
            continue
        try:
            results.append(check(ctx))
        except Exception as exc:  # one broken reading must not hide the other checks
            log.debug("check %s crashed", name, exc_info=True)
            results.append(skip(name, f"could not run: {type(exc).__name__}: {exc}",
                                "rerun with --debug and report it"))
    return tuple(results)
