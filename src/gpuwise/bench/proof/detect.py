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


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _try(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    # one unsupported field (MIG on a consumer GPU, power on a VM) must not hide the rest
    except Exception:
        return None


def read_nvml() -> NvmlFacts | str:
    """The facts, or one line saying why there is no NVIDIA GPU here."""
    try:
        import pynvml
    except ImportError:
        return _nvidia_smi_reason()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"NVML could not start ({exc}): no NVIDIA driver is loaded"
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            return "the NVIDIA driver is loaded but sees no GPU"
        cuda = _try(pynvml.nvmlSystemGetCudaDriverVersion_v2) or _try(
            pynvml.nvmlSystemGetCudaDriverVersion
        )
        gpus = []
        for i in range(count):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = _try(pynvml.nvmlDeviceGetMemoryInfo, h)
            mig = _try(pynvml.nvmlDeviceGetMigMode, h)
            power = _try(pynvml.nvmlDeviceGetPowerManagementLimit, h)
            gpus.append(
                {
                    "index": i,
                    "name": _text(pynvml.nvmlDeviceGetName(h)),
                    "memory_gib": round(mem.total / 1024**3, 1) if mem else None,
                    "mig_mode": None if mig is None else int(mig[0]),
                    "persistence_mode": _try(pynvml.nvmlDeviceGetPersistenceMode, h),
                    "power_limit_w": None if power is None else power / 1000,
                    "pcie_gen": _try(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
                    "pcie_width": _try(pynvml.nvmlDeviceGetCurrPcieLinkWidth, h),
                }
            )
        return NvmlFacts(
            driver=_text(pynvml.nvmlSystemGetDriverVersion()),
            cuda_driver=None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}",
            nvml=_try(lambda: _text(pynvml.nvmlSystemGetNVMLVersion())),
            gpus=tuple(gpus),
        )
    except pynvml.NVMLError as exc:
        return f"NVML failed while listing GPUs ({exc})"
    finally:
        _try(pynvml.nvmlShutdown)


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
