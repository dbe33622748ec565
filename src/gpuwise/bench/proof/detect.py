"""Is there an NVIDIA GPU, and what driver, CUDA and NVML does it have? Asked through NVML only,
so the answer comes in well under a second and without importing torch."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class NvmlFacts:
    """What NVML says about the machine."""

    driver: str | None
    """NVIDIA driver version, e.g. ``550.90.07``."""
    cuda_driver: str | None
    """Highest CUDA version the driver supports, e.g. ``12.4``."""
    nvml: str | None
    """NVML library version."""
    gpus: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    """Per GPU: index, name, memory_gib, mig_mode, persistence_mode, power_limit_w, pcie_gen, pcie_width."""

    @property
    def gpu_name(self) -> str | None:
        return str(self.gpus[0]["name"]) if self.gpus else None


def read_nvml(lib: Any = None) -> NvmlFacts | str:
    """The facts, or one line saying why there is no NVIDIA GPU here.

    Read through gpuwise's one NVML layer (:class:`gpuwise.base.nvml.NvmlSession`): one
    unsupported field (MIG on a consumer GPU, power on a VM) is None and never hides the rest.
    ``lib``: the NVML module (default ``pynvml``; tests pass :class:`gpuwise.base.nvml_fake.FakeNvml`).
    """
    if lib is None:
        try:
            import pynvml
        except ImportError:
            return _nvidia_smi_reason()
        lib = pynvml
    from gpuwise.base.nvml import GpuLostError, NvmlSession
    from gpuwise.base.nvml import nvml_text as _text
    from gpuwise.errors import DeviceError

    session = NvmlSession(lib)
    try:
        session.init()
    except DeviceError as exc:
        return f"NVML could not start ({exc.__cause__ or exc}): no NVIDIA driver is loaded"
    c = session.call
    try:
        count = c("device_count", "nvmlDeviceGetCount")
        if count is None:
            return "NVML failed while listing GPUs (it cannot count them)"
        if count == 0:
            return "the NVIDIA driver is loaded but sees no GPU"
        cuda = c("cuda_version", "nvmlSystemGetCudaDriverVersion_v2") or c(
            "cuda_version", "nvmlSystemGetCudaDriverVersion"
        )
        gpus = []
        for i in range(int(count)):
            h = c("handle", "nvmlDeviceGetHandleByIndex", i, gpu=i)
            mem = c("memory", "nvmlDeviceGetMemoryInfo", h, gpu=i)
            mig = c("mig", "nvmlDeviceGetMigMode", h, gpu=i)
            power = c("power_limit", "nvmlDeviceGetPowerManagementLimit", h, gpu=i)
            name = c("name", "nvmlDeviceGetName", h, gpu=i)
            gpus.append(
                {
                    "index": i,
                    "name": _text(name) if name is not None else "unknown",
                    "memory_gib": round(mem.total / 1024**3, 1) if mem else None,
                    "mig_mode": None if mig is None else int(mig[0]),
                    "persistence_mode": c("persistence", "nvmlDeviceGetPersistenceMode", h, gpu=i),
                    "power_limit_w": None if power is None else power / 1000,
                    "pcie_gen": c("pcie", "nvmlDeviceGetCurrPcieLinkGeneration", h, gpu=i),
                    "pcie_width": c("pcie", "nvmlDeviceGetCurrPcieLinkWidth", h, gpu=i),
                }
            )
        driver = c("driver_version", "nvmlSystemGetDriverVersion")
        version = c("nvml_version", "nvmlSystemGetNVMLVersion")
        return NvmlFacts(
            driver=None if driver is None else _text(driver),
            cuda_driver=None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}",
            nvml=None if version is None else _text(version),
            gpus=tuple(gpus),
        )
    except GpuLostError as exc:
        return f"NVML failed while listing GPUs ({exc or 'a GPU is lost'})"
    finally:
        session.shutdown()


def _nvidia_smi_reason() -> NvmlFacts | str:
    """Without the NVML bindings: ``nvidia-smi -L`` says whether a GPU is there (facts unknown)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "nvidia-smi is not installed and the NVML bindings (nvidia-ml-py) are missing"
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=4, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"nvidia-smi did not answer ({exc})"
    names = [
        line.split(":", 1)[1].split("(")[0].strip()
        for line in done.stdout.splitlines()
        if line.startswith("GPU ")
    ]
    if done.returncode or not names:
        return f"nvidia-smi lists no GPU (exit {done.returncode})"
    return NvmlFacts(None, None, None, tuple({"index": i, "name": n} for i, n in enumerate(names)))
