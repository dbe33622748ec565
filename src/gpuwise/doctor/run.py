"""Run the doctor's checks: the registry (a plain dict, in display order) and :func:`run_doctor`."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import replace

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
    "gpu-expected": checks_gpu.check_expected,
}


def run_doctor(
    probe: Probe | None = None, options: DoctorOptions | None = None, only: tuple[str, ...] = ()
) -> tuple[CheckResult, ...]:
    """Run the checks (all, or those named in ``only``) against ``probe`` (default: this machine).

    A check that crashes reports ``skip`` with the exception instead of hiding the others.
    """
    for n in only:
        check_choice(n, CHECKS, "check")
    ctx = Context(probe if probe is not None else SystemProbe(), options or DoctorOptions())
    results = [
        _run_one(name, check, ctx) for name, check in CHECKS.items() if not only or name in only
    ]
    if only:  # a fix that says "see the X check" must not point at a check the user did not run
        results = [_inline_referenced(r, ctx, only) for r in results]
    return tuple(results)


def gpu_present(probe: Probe | None = None) -> bool:
    """Whether ``probe`` (default: this machine) has an NVIDIA GPU or driver, whichever checks run.

    The same test as the ``nvidia-driver`` check's "no GPU" skip, asked on its own so that
    ``gpuwise doctor --only shm --json`` does not report a GPU it never looked for.
    """
    ctx = Context(probe if probe is not None else SystemProbe(), DoctorOptions(with_torch=False))
    return _run_one("nvidia-driver", CHECKS["nvidia-driver"], ctx).status != "skip"


def _run_one(name: str, check: Check, ctx: Context) -> CheckResult:
    try:
        return check(ctx)
    except Exception as exc:  # one broken reading must not hide the other checks
        log.debug("check %s crashed", name, exc_info=True)
        return skip(
            name, f"could not run: {type(exc).__name__}: {exc}", "rerun with --debug and report it"
        )


_REFERENCE = re.compile(r"the ([a-z0-9-]+)(?: and ([a-z0-9-]+))? checks?\b")


def _inline_referenced(result: CheckResult, ctx: Context, shown: tuple[str, ...]) -> CheckResult:
    """Append the fixes of checks that ``result.fix`` refers to but that were not run."""
    names = [
        n
        for m in _REFERENCE.finditer(result.fix)
        for n in m.groups()
        if n in CHECKS and n not in shown and n != result.name
    ]
    if not names:
        return result
    parts = []
    for n in dict.fromkeys(names):
        r = _run_one(n, CHECKS[n], ctx)
        parts.append(f"{n} ({r.status}): {r.fix or r.finding}")
    return replace(result, fix=f"{result.fix} [{'; '.join(parts)}]")
