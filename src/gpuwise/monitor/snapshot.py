"""What one read of the GPUs returns: immutable snapshots, one per read, values in SI-ish units.

A field is ``None`` when the GPU or driver does not support it (NVML ``NotSupported``), never a
sentinel number. Each field names its ``nvidia-smi --query-gpu=`` twin so a reading can be
checked by hand. This module holds data only: reading lives in :mod:`gpuwise.monitor.nvml`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwise.base.nvml import THROTTLE_REASONS as THROTTLE_REASONS
from gpuwise.base.nvml import throttle_reason_names as throttle_reason_names

ACTIVE_THRESHOLD = 0.05
"""Activity below which a sample is idle (5 %: issue 7; the same in the Prometheus rules)."""


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
    """The job this process belongs to: pod, else container id, else ``user/exe``."""
    gpu_instance_id: int | None = None
    """MIG GPU instance the process runs in (NVML process info ``gpuInstanceId``); None without MIG."""
    sm_utilization_ratio: float | None = None
    """Share of the sample period this process had a kernel on the SMs (NVML
    ``nvmlDeviceGetProcessUtilization`` smUtil/100; ``nvidia-smi pmon``: sm). None where unsupported."""
    namespace: str | None = None
    """Kubernetes namespace of its pod (kubelet pod-resources / cgroup → pod lookup), if known."""
    pod: str | None = None
    """Kubernetes pod name, if known (``pod_uid`` is always tried first)."""
    container: str | None = None
    """Kubernetes container name, if known."""
    plan_id: str | None = None
    """The plan id the process runs (its ``GPUWISE_PLAN_ID``, from ``/proc/<pid>/environ``;
    ``plan --export`` sets it), if known."""


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
    slices: int | None = None
    """Compute slices of the instance (NVML device attributes ``gpuInstanceSliceCount``; the ``1`` of
    ``1g.10gb``)."""
    profile: str | None = None
    """Profile name derived from slices and memory, e.g. ``1g.10gb`` (``nvidia-smi mig -lgi``)."""
    sm_active_ratio: float | None = None
    """SM-active of this instance (GPM per MIG instance, Hopper+; DCGM ``DCGM_FI_PROF_SM_ACTIVE``)."""
    processes: tuple[ProcessSample, ...] = ()
    """Compute processes running in this instance."""


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
    mig_slices_total: int | None = None
    """Compute slices of the whole GPU in MIG mode (NVML max MIG device count: 7 on A100/H100)."""
    energy_joules_total: float | None = None
    """Energy since the driver loaded (``nvmlDeviceGetTotalEnergyConsumption``, mJ;
    DCGM ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``)."""
    memory_temperature_c: float | None = None
    """HBM temperature (``temperature.memory``; DCGM ``DCGM_FI_DEV_MEMORY_TEMP``)."""
    remapped_rows_correctable: int | None = None
    """Rows remapped for correctable errors (``nvidia-smi -q -d ROW_REMAPPER``;
    DCGM ``DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS``)."""
    remapped_rows_uncorrectable: int | None = None
    """Rows remapped for uncorrectable errors (DCGM ``DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS``)."""
    remap_pending: bool | None = None
    """A row remap waits for a GPU reset (``Pending: Yes`` in ``nvidia-smi -q -d ROW_REMAPPER``)."""
    remap_failed: bool | None = None
    """Row remapping failed: no spare rows (DCGM ``DCGM_FI_DEV_ROW_REMAP_FAILURE``)."""
    pcie_replay_total: int | None = None
    """PCIe replay counter (``nvidia-smi -q``: Replays Since Reset; DCGM ``DCGM_FI_DEV_PCIE_REPLAY_COUNTER``)."""
    nvlink_tx_bytes_total: float | None = None
    """NVLink data transmitted, all links (NVML field ``NVLINK_THROUGHPUT_DATA_TX``, KiB;
    DCGM ``DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL`` is its rate)."""
    nvlink_rx_bytes_total: float | None = None
    """NVLink data received, all links (NVML field ``NVLINK_THROUGHPUT_DATA_RX``)."""
    nvlink_errors: tuple[tuple[str, int], ...] = ()
    """(kind, count) NVLink error totals: crc_flit, replay, recovery (NVML fields ``NVLINK_*_TOTAL``;
    DCGM ``DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL`` …)."""
    dram_active_ratio: float | None = None
    """Fraction of time device memory was busy (GPM ``DRAM_BW_UTIL``, Hopper+; DCGM ``DCGM_FI_PROF_DRAM_ACTIVE``)."""
    sm_occupancy_ratio: float | None = None
    """Resident warps / maximum warps per SM (GPM ``SM_OCCUPANCY``; DCGM ``DCGM_FI_PROF_SM_OCCUPANCY``)."""
    encoder_utilization_ratio: float | None = None
    """Video encoder utilization (``utilization.encoder``/100; DCGM ``DCGM_FI_DEV_ENC_UTIL``)."""
    decoder_utilization_ratio: float | None = None
    """Video decoder utilization (``utilization.decoder``/100; DCGM ``DCGM_FI_DEV_DEC_UTIL``)."""
    pci_bus_id: str | None = None
    """PCI bus id (``--query-gpu=pci.bus_id``, e.g. ``00000000:18:00.0``; dcgm-exporter's
    ``pci_bus_id`` label)."""
    last_xid: int | None = None
    """The latest XID code this reader saw (DCGM ``DCGM_FI_DEV_XID_ERRORS``: the value of the last
    XID); None before any."""

    @property
    def plan_id(self) -> str | None:
        """The plan id of the job on this GPU: its processes' ``GPUWISE_PLAN_ID`` (the first, in
        PID order, where several plans share a GPU), None where none has one."""
        ids = sorted((p.pid, p.plan_id) for p in self.processes if p.plan_id)
        return ids[0][1] if ids else None

    @property
    def memory_used_ratio(self) -> float | None:
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return self.memory_used_bytes / self.memory_total_bytes

    @property
    def activity_ratio(self) -> float | None:
        """The best activity figure available: SM-active where the GPU has it, else utilization."""
        return (
            self.sm_active_ratio if self.sm_active_ratio is not None else self.utilization_gpu_ratio
        )

    @property
    def mig_active_share(self) -> float | None:
        """MIG only: the share of the GPU's slices in active instances (0–1); unallocated slices
        and idle instances count as idle. An instance is active at ≥ 5 % SM-active, or, where
        GPM is absent, while a process runs in it. None for a GPU not in MIG mode."""
        if not self.mig_enabled or not self.mig_slices_total:
            return None
        active = 0
        for m in self.mig_devices:
            busy = (
                m.sm_active_ratio >= ACTIVE_THRESHOLD
                if m.sm_active_ratio is not None
                else bool(m.processes)
            )
            active += (m.slices or 1) if busy else 0
        return min(1.0, active / self.mig_slices_total)

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
