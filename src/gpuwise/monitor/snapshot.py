"""What one read of the GPUs returns: immutable snapshots, one per read, values in SI-ish units.

A field is ``None`` when the GPU or driver does not support it (NVML ``NotSupported``), never a
sentinel number. Each field names its ``nvidia-smi --query-gpu=`` twin so a reading can be
checked by hand. This module holds data only: reading lives in :mod:`gpuwise.monitor.nvml`.
"""

from __future__ import annotations

from dataclasses import dataclass

# Clock-event ("throttle") reason bits, from nvml.h / pynvml ``nvmlClocksEventReason*``
# (nvidia-ml-py 13.615.71). Name → bit. ``gpu_idle`` is not a slowdown and is reported apart.
THROTTLE_REASONS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clocks": 0x100,
}


def throttle_reason_names(mask: int) -> tuple[str, ...]:
    """The reason names set in an NVML clock-event bitmask, in table order."""
    return tuple(name for name, bit in THROTTLE_REASONS.items() if mask & bit)


@dataclass(frozen=True)
class ProcessSample:
    """One process holding memory on a GPU."""

    pid: int
    """Host process id (``nvidia-smi --query-compute-apps=pid``); NVML reports host PIDs."""
    gpu_memory_bytes: int | None
    """GPU memory the process holds (``--query-compute-apps=used_memory``); None under MIG/WDDM."""
    user: str | None
    """Owner of the process from ``/proc/<pid>/status`` (None if the process is not visible)."""
    command: str | None
    """Command line, first 200 characters (``--query-compute-apps=process_name`` is the exe only)."""
    container_id: str | None
    """Container id from ``/proc/<pid>/cgroup`` (docker/containerd/cri-o), if any."""
    pod_uid: str | None
    """Kubernetes pod UID from the cgroup path (``kubepods…pod<uid>``), if any."""
    workload: str
    """The job this process belongs to: pod UID, else container id, else ``user/exe``."""


@dataclass(frozen=True)
class MigDeviceSample:
    """One MIG instance of a GPU in MIG mode."""

    index: int
    """MIG device index within its parent GPU."""
    uuid: str
    """MIG device UUID (``nvidia-smi -L`` shows it as ``MIG-…``)."""
    gpu_instance_id: int | None
    """GPU instance id (``nvidia-smi mig -lgi``)."""
    memory_used_bytes: int | None
    """Used memory of this instance (``nvidia-smi --query-gpu=memory.used`` on the MIG device)."""
    memory_total_bytes: int | None
    """Memory size of this instance."""


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one instant. ``None`` = not supported or not readable on this GPU."""

    index: int
    """NVML device index (``--query-gpu=index``)."""
    uuid: str
    """GPU UUID (``--query-gpu=uuid``); the stable key across reboots and index reorderings."""
    name: str
    """Marketing name as NVML reports it (``--query-gpu=name``), e.g. ``NVIDIA H100 80GB HBM3``."""
    lost: bool
    """True when NVML said ``GpuIsLost`` (fell off the bus) during this read."""
    utilization_gpu_ratio: float | None
    """Fraction of the sample period (1/6–1 s) in which any kernel ran (``utilization.gpu``/100).
    A one-thread kernel reads 1.0: this is a duty cycle, not how much of the GPU is used."""
    utilization_memory_ratio: float | None
    """Fraction of the period device memory was read or written (``utilization.memory``/100)."""
    sm_active_ratio: float | None
    """Average fraction of SMs with at least one warp (GPM ``SM_UTIL``, Hopper+; no nvidia-smi
    query twin: ``nvidia-smi dmon --gpm-metrics 2``)."""
    tensor_active_ratio: float | None
    """Fraction of cycles a tensor pipe was busy (GPM ``ANY_TENSOR_UTIL``; ``dmon --gpm-metrics 5``)."""
    memory_used_bytes: int | None
    """Used device memory (``memory.used``)."""
    memory_total_bytes: int | None
    """Total device memory (``memory.total``)."""
    power_w: float | None
    """Board power draw (``power.draw``); NVML reports milliwatts."""
    power_limit_w: float | None
    """Enforced power limit (``enforced.power.limit``)."""
    temperature_c: float | None
    """GPU core temperature in °C (``temperature.gpu``)."""
    sm_clock_mhz: float | None
    """Current SM clock (``clocks.sm``)."""
    memory_clock_mhz: float | None
    """Current memory clock (``clocks.mem``)."""
    throttle_reasons_mask: int | None
    """Clock-event reason bitmask (``clocks_event_reasons.active``); see :data:`THROTTLE_REASONS`."""
    pcie_tx_bytes_per_s: float | None
    """PCIe transmit throughput (``nvidia-smi dmon -s t``: txpci); NVML reports KB/s."""
    pcie_rx_bytes_per_s: float | None
    """PCIe receive throughput (``dmon -s t``: rxpci)."""
    ecc_corrected_total: int | None
    """Corrected ECC errors since driver load (``ecc.errors.corrected.volatile.total``)."""
    ecc_uncorrected_total: int | None
    """Uncorrected ECC errors since driver load (``ecc.errors.uncorrected.volatile.total``)."""
    xid_counts: tuple[tuple[int, int], ...]
    """(XID code, count) of XID critical errors seen by this reader since it started (NVML events;
    no nvidia-smi twin: the kernel log ``NVRM: Xid`` lines)."""
    mig_enabled: bool
    """MIG mode is on (``mig.mode.current``)."""
    mig_devices: tuple[MigDeviceSample, ...]
    """MIG instances when MIG is on."""
    processes: tuple[ProcessSample, ...]
    """Compute processes on the GPU (``--query-compute-apps``)."""

    @property
    def memory_used_ratio(self) -> float | None:
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return self.memory_used_bytes / self.memory_total_bytes

    @property
    def activity_ratio(self) -> float | None:
        """The best activity figure available: SM-active where the GPU has it, else utilization."""
        return self.sm_active_ratio if self.sm_active_ratio is not None else self.utilization_gpu_ratio

    @property
    def throttle_reasons(self) -> tuple[str, ...]:
        return throttle_reason_names(self.throttle_reasons_mask or 0)


@dataclass(frozen=True)
class Snapshot:
    """Every GPU of one host, read in one batch."""

    timestamp_s: float
    """Unix time of the read."""
    host: str
    """Host name the GPUs belong to."""
    driver_version: str | None
    """NVIDIA driver version (``driver_version``)."""
    gpus: tuple[GpuSample, ...]
    """One sample per GPU, in index order."""
    unsupported: tuple[str, ...] = ()
    """Metrics this host does not support (logged once each), e.g. ``sm_active``."""
