"""What the doctor reads from a machine, as plain values: disk usage, command output, the GPUs and
torch. A module of its own so the readers (``nvml``, ``nvsmi``) and the probe that calls them
share these types without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DiskUsage:
    """Size of the filesystem holding a path."""

    total_bytes: int
    """Filesystem size in bytes."""
    free_bytes: int
    """Bytes available to an unprivileged user."""


@dataclass(frozen=True)
class CommandOutput:
    """What a command printed and how it exited."""

    returncode: int
    """Exit status; non-zero for e.g. ``dmesg`` without permission."""
    stdout: str
    """Standard output text."""
    stderr: str = ""
    """Standard error text."""


@dataclass(frozen=True)
class GpuDevice:
    """One GPU's health figures, as NVML (or ``nvidia-smi -q``) reports them; None = not reported."""

    index: int
    """NVML index (the order ``nvidia-smi`` lists; not necessarily CUDA's order)."""
    name: str
    """Product name, e.g. ``NVIDIA H100 80GB HBM3``."""
    uuid: str | None = None
    """``GPU-...`` UUID, usable in ``CUDA_VISIBLE_DEVICES``."""
    pci_bus_id: str | None = None
    """PCI bus id, e.g. ``00000000:18:00.0``."""
    persistence_mode: bool | None = None
    """``nvidia-smi --query-gpu=persistence_mode``."""
    mig_current: bool | None = None
    """MIG mode now (``mig.mode.current``); None where MIG is not supported."""
    mig_pending: bool | None = None
    """MIG mode after the next GPU reset (``mig.mode.pending``)."""
    mig_device_count: int | None = None
    """MIG devices (GPU instances with a compute instance) created on this GPU."""
    ecc_enabled: bool | None = None
    """ECC mode now (``ecc.mode.current``); None on GPUs without ECC."""
    ecc_volatile_uncorrected: int | None = None
    """Uncorrectable ECC errors since the last driver load (``ecc.errors.uncorrected.volatile.total``)."""
    ecc_volatile_corrected: int | None = None
    """Corrected ECC errors since the last driver load."""
    ecc_aggregate_uncorrected: int | None = None
    """Uncorrectable ECC errors over the GPU's lifetime."""
    retired_pages_sbe: int | None = None
    """Pages retired for repeated single-bit errors (pre-Ampere page retirement)."""
    retired_pages_dbe: int | None = None
    """Pages retired for double-bit errors."""
    retired_pages_pending: bool | None = None
    """A page retirement waits for the next driver reload / GPU reset."""
    remapped_rows_uncorrectable: int | None = None
    """Rows remapped for uncorrectable errors (Ampere and newer row remapping)."""
    remapped_rows_pending: bool | None = None
    """A row remap waits for the next GPU reset."""
    remapping_failed: bool | None = None
    """Row remapping failed: the GPU has run out of spare rows."""
    pcie_gen_current: int | None = None
    """PCIe link generation now (``pcie.link.gen.current``)."""
    pcie_gen_max: int | None = None
    """Highest PCIe generation this GPU and its slot support (``pcie.link.gen.max``)."""
    pcie_width_current: int | None = None
    """PCIe lanes now (``pcie.link.width.current``)."""
    pcie_width_max: int | None = None
    """Most PCIe lanes the link supports (``pcie.link.width.max``)."""
    performance_state: int | None = None
    """P-state: 0 = full performance, 8 and up = idle."""
    utilization_gpu_ratio: float | None = None
    """``utilization.gpu`` / 100: share of time a kernel ran (0–1, as everywhere in gpuwise)."""
    clock_event_reasons: tuple[str, ...] = ()
    """Active clock event (throttle) reasons, named as in :data:`gpuwise.monitor.snapshot.THROTTLE_REASONS`,
    e.g. ``("sw_power_cap", "hw_thermal")``."""


@dataclass(frozen=True)
class GpuInfo:
    """What the NVIDIA driver reports; ``nvml_error`` set when it could not be asked."""

    nvml_error: str | None = None
    """Why NVML could not be used (library missing, driver/library mismatch); None when it worked."""
    driver_version: str | None = None
    """User-space driver version, e.g. ``550.54.15``."""
    cuda_driver_version: str | None = None
    """Highest CUDA version the driver supports, ``major.minor`` (``nvidia-smi``'s "CUDA Version")."""
    devices: tuple[GpuDevice, ...] = ()
    """The GPUs NVML sees."""

    @property
    def available(self) -> bool:
        return self.nvml_error is None


@dataclass(frozen=True)
class TorchInfo:
    """What torch says about CUDA; ``installed`` False when torch cannot be imported."""

    installed: bool
    """torch imports."""
    version: str | None = None
    """``torch.__version__``."""
    cuda_runtime: str | None = None
    """``torch.version.cuda``: the CUDA runtime torch was built for; None for CPU builds."""
    cuda_available: bool = False
    """``torch.cuda.is_available()``."""
    device_count: int = 0
    """``torch.cuda.device_count()``."""
    cuda_error: str | None = None
    """The warning or error torch gave when CUDA initialisation failed."""
    nccl_version: str | None = None
    """``torch.cuda.nccl.version()`` as ``2.21.5``; None when torch has no NCCL."""
    import_error: str | None = None
    """Why torch did not import."""
