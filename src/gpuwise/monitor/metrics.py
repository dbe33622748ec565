"""The exporter's metric table: one row per GPU and MIG metric family.

Each row names the family, its Prometheus type and base unit, its help text (which names the
``nvidia-smi --query-gpu=`` field or ``nvidia-smi -q`` section it matches, and the DCGM field),
how to read it from a :class:`~gpuwise.monitor.snapshot.GpuSample`, and its DCGM twins: the
names, units and types NVIDIA's dcgm-exporter uses for the same quantity. ``--dcgm-compat``
renders the twins from the same rows, so the two name sets cannot drift apart.

DCGM field names and units: NVIDIA/dcgm-exporter ``etc/default-counters.csv`` (Apache-2.0), the
help strings there ("SM clock frequency (in MHz)", "Framebuffer memory used (in MiB)", ...).
Per-process, allocation and cost families are not per-GPU readings; exporter.py builds them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from gpuwise.monitor.snapshot import THROTTLE_REASONS, GpuSample, MigDeviceSample

Kind = Literal["gauge", "counter"]
Samples = Iterable[tuple[tuple[str, ...], float]]
"""What a reader yields: (values of the row's extra labels, value) pairs; nothing = no sample."""

DCGM_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")
"""dcgm-exporter's per-GPU labels (NVIDIA/dcgm-exporter internal/pkg/rendermetrics)."""
DCGM_MIG_LABELS = ("GPU_I_ID", "GPU_I_PROFILE")
_MIB = 1024.0**2
_MHZ = 1e6


@dataclass(frozen=True)
class DcgmTwin:
    """The dcgm-exporter name of a gpuwise quantity."""

    name: str
    """DCGM field name, e.g. ``DCGM_FI_DEV_GPU_UTIL``."""
    scale: float
    """DCGM value = gpuwise value × scale (ratio → %: 100; bytes → MiB: 1/2^20; Hz → MHz: 1e-6)."""
    unit: str
    """DCGM's unit as its help string says it (%, MiB, W, C, MHz, mJ, B/s, ratio)."""
    kind: Kind
    """Prometheus type dcgm-exporter gives it."""
    when: tuple[str, ...] = ()
    """For a row with extra labels: the label values this twin takes (it drops those labels)."""


@dataclass(frozen=True)
class MetricDef:
    """One metric family of the exporter."""

    name: str
    """Family name without ``_total`` (prometheus_client adds it to counters)."""
    kind: Kind
    """``gauge`` or ``counter``."""
    unit: str
    """Base unit in the name (ratio, bytes, watts, celsius, hertz, joules, ...; ``1`` for counts)."""
    help: str
    """Help text, naming the nvidia-smi field (and DCGM field) it matches."""
    read: Callable[[GpuSample], Samples]
    """How to read it from one GPU's sample."""
    labels: tuple[str, ...] = ()
    """Labels beyond the GPU's (gpu, uuid, model, host)."""
    dcgm: tuple[DcgmTwin, ...] = ()
    """dcgm-exporter names of the same quantity, rendered with ``--dcgm-compat``."""


@dataclass(frozen=True)
class MigMetricDef:
    """One per-MIG-instance family: the same fields, read from a MIG device's sample."""

    name: str
    kind: Kind
    unit: str
    help: str
    read: Callable[[MigDeviceSample], float | None]
    dcgm: tuple[DcgmTwin, ...] = ()


def _one(get: Callable[[GpuSample], float | int | bool | None]) -> Callable[[GpuSample], Samples]:
    """A reader for a plain field: one sample without extra labels, none when unsupported."""

    def read(g: GpuSample) -> Samples:
        value = get(g)
        return () if value is None else (((), float(value)),)

    return read


def _pairs(
    get: Callable[[GpuSample], Iterable[tuple[str, int | None]]],
) -> Callable[[GpuSample], Samples]:
    def read(g: GpuSample) -> Samples:
        return [((label,), float(v)) for label, v in get(g) if v is not None]

    return read


def _throttle(g: GpuSample) -> Samples:
    mask = g.throttle_reasons_mask
    if mask is None:
        return ()
    return [((reason,), 1.0 if mask & bit else 0.0) for reason, bit in THROTTLE_REASONS.items()]


def _free_bytes(g: GpuSample) -> float | None:
    if g.memory_total_bytes is None or g.memory_used_bytes is None:
        return None
    return float(max(0, g.memory_total_bytes - g.memory_used_bytes))


def _mhz_to_hz(v: float | None) -> float | None:
    return None if v is None else v * _MHZ


def _pct(name: str, kind: Kind = "gauge") -> DcgmTwin:
    return DcgmTwin(name, 100.0, "%", kind)


def _same(name: str, unit: str, kind: Kind = "gauge", when: tuple[str, ...] = ()) -> DcgmTwin:
    return DcgmTwin(name, 1.0, unit, kind, when)


GPU_METRICS: tuple[MetricDef, ...] = (
    MetricDef(
        "gpuwise_gpu_up",
        "gauge",
        "1",
        "1 if the GPU answers NVML, 0 once it is lost (fell off the bus).",
        _one(lambda g: 0.0 if g.lost else 1.0),
    ),
    MetricDef(
        "gpuwise_gpu_utilization_ratio",
        "gauge",
        "ratio",
        "Fraction of time any kernel ran (nvidia-smi utilization.gpu/100; DCGM_FI_DEV_GPU_UTIL).",
        _one(lambda g: g.utilization_gpu_ratio),
        dcgm=(_pct("DCGM_FI_DEV_GPU_UTIL"),),
    ),
    MetricDef(
        "gpuwise_gpu_memory_utilization_ratio",
        "gauge",
        "ratio",
        "Fraction of time memory was read or written "
        "(utilization.memory/100; DCGM_FI_DEV_MEM_COPY_UTIL).",
        _one(lambda g: g.utilization_memory_ratio),
        dcgm=(_pct("DCGM_FI_DEV_MEM_COPY_UTIL"),),
    ),
    MetricDef(
        "gpuwise_gpu_sm_active_ratio",
        "gauge",
        "ratio",
        "Fraction of SMs with a warp resident (GPM SM_UTIL, Hopper+; DCGM_FI_PROF_SM_ACTIVE).",
        _one(lambda g: g.sm_active_ratio),
        dcgm=(_same("DCGM_FI_PROF_SM_ACTIVE", "ratio"),),
    ),
    MetricDef(
        "gpuwise_gpu_tensor_active_ratio",
        "gauge",
        "ratio",
        "Fraction of cycles a tensor pipe was busy "
        "(GPM ANY_TENSOR_UTIL, Hopper+; DCGM_FI_PROF_PIPE_TENSOR_ACTIVE).",
        _one(lambda g: g.tensor_active_ratio),
        dcgm=(_same("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "ratio"),),
    ),
    MetricDef(
        "gpuwise_gpu_memory_used_bytes",
        "gauge",
        "bytes",
        "Used device memory (memory.used; DCGM_FI_DEV_FB_USED in MiB).",
        _one(lambda g: g.memory_used_bytes),
        dcgm=(DcgmTwin("DCGM_FI_DEV_FB_USED", 1 / _MIB, "MiB", "gauge"),),
    ),
    MetricDef(
        "gpuwise_gpu_memory_free_bytes",
        "gauge",
        "bytes",
        "Device memory not used (memory.free = memory.total - memory.used; "
        "DCGM_FI_DEV_FB_FREE in MiB).",
        _one(_free_bytes),
        dcgm=(DcgmTwin("DCGM_FI_DEV_FB_FREE", 1 / _MIB, "MiB", "gauge"),),
    ),
    MetricDef(
        "gpuwise_gpu_memory_total_bytes",
        "gauge",
        "bytes",
        "Device memory size (memory.total).",
        _one(lambda g: g.memory_total_bytes),
    ),
    MetricDef(
        "gpuwise_gpu_power_watts",
        "gauge",
        "watts",
        "Board power draw (power.draw; DCGM_FI_DEV_POWER_USAGE).",
        _one(lambda g: g.power_w),
        dcgm=(_same("DCGM_FI_DEV_POWER_USAGE", "W"),),
    ),
    MetricDef(
        "gpuwise_gpu_power_limit_watts",
        "gauge",
        "watts",
        "Enforced power limit (enforced.power.limit).",
        _one(lambda g: g.power_limit_w),
    ),
    MetricDef(
        "gpuwise_gpu_temperature_celsius",
        "gauge",
        "celsius",
        "GPU temperature (temperature.gpu; DCGM_FI_DEV_GPU_TEMP).",
        _one(lambda g: g.temperature_c),
        dcgm=(_same("DCGM_FI_DEV_GPU_TEMP", "C"),),
    ),
    MetricDef(
        "gpuwise_gpu_memory_temperature_celsius",
        "gauge",
        "celsius",
        "HBM temperature (temperature.memory; DCGM_FI_DEV_MEMORY_TEMP).",
        _one(lambda g: g.memory_temperature_c),
        dcgm=(_same("DCGM_FI_DEV_MEMORY_TEMP", "C"),),
    ),
    MetricDef(
        "gpuwise_gpu_sm_clock_hertz",
        "gauge",
        "hertz",
        "SM clock (clocks.sm; DCGM_FI_DEV_SM_CLOCK in MHz).",
        _one(lambda g: _mhz_to_hz(g.sm_clock_mhz)),
        dcgm=(DcgmTwin("DCGM_FI_DEV_SM_CLOCK", 1 / _MHZ, "MHz", "gauge"),),
    ),
    MetricDef(
        "gpuwise_gpu_memory_clock_hertz",
        "gauge",
        "hertz",
        "Memory clock (clocks.mem; DCGM_FI_DEV_MEM_CLOCK in MHz).",
        _one(lambda g: _mhz_to_hz(g.memory_clock_mhz)),
        dcgm=(DcgmTwin("DCGM_FI_DEV_MEM_CLOCK", 1 / _MHZ, "MHz", "gauge"),),
    ),
    MetricDef(
        "gpuwise_gpu_clock_event_active",
        "gauge",
        "1",
        "1 while a clock-event (throttle) reason is active (clocks_event_reasons.*).",
        _throttle,
        labels=("reason",),
    ),
    MetricDef(
        "gpuwise_gpu_pcie_tx_bytes_per_second",
        "gauge",
        "bytes_per_second",
        "PCIe transmit throughput (DCGM_FI_PROF_PCIE_TX_BYTES).",
        _one(lambda g: g.pcie_tx_bytes_per_s),
        dcgm=(_same("DCGM_FI_PROF_PCIE_TX_BYTES", "B/s"),),
    ),
    MetricDef(
        "gpuwise_gpu_pcie_rx_bytes_per_second",
        "gauge",
        "bytes_per_second",
        "PCIe receive throughput (DCGM_FI_PROF_PCIE_RX_BYTES).",
        _one(lambda g: g.pcie_rx_bytes_per_s),
        dcgm=(_same("DCGM_FI_PROF_PCIE_RX_BYTES", "B/s"),),
    ),
    MetricDef(
        "gpuwise_gpu_ecc_errors",
        "counter",
        "1",
        "ECC errors since driver load (ecc.errors.*.volatile.total; "
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL / _DBE_VOL_TOTAL).",
        _pairs(
            lambda g: (
                ("corrected", g.ecc_corrected_total),
                ("uncorrected", g.ecc_uncorrected_total),
            )
        ),
        labels=("type",),
        dcgm=(
            _same("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "1", "counter", ("corrected",)),
            _same("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "1", "counter", ("uncorrected",)),
        ),
    ),
    MetricDef(
        "gpuwise_gpu_xid_errors",
        "counter",
        "1",
        "XID critical errors this exporter process saw, by XID code (NVML events; a restart "
        "starts from 0: see gpuwise_exporter_start_time_seconds).",
        lambda g: [((str(code),), float(n)) for code, n in g.xid_counts],
        labels=("xid",),
    ),
    MetricDef(
        "gpuwise_gpu_last_xid",
        "gauge",
        "1",
        "The latest XID code this exporter process saw on the GPU, 0 before any (the value "
        "dcgm-exporter's DCGM_FI_DEV_XID_ERRORS holds, so existing XID alerts keep working; count "
        "events with gpuwise_gpu_xid_errors_total instead).",
        _one(lambda g: g.last_xid or 0),
        dcgm=(_same("DCGM_FI_DEV_XID_ERRORS", "1"),),
    ),
    MetricDef(
        "gpuwise_gpu_processes",
        "gauge",
        "1",
        "Compute processes holding memory on the GPU.",
        _one(lambda g: None if g.lost else len(g.processes)),
    ),
    MetricDef(
        "gpuwise_mig_gpu_slices",
        "gauge",
        "1",
        "Compute slices of a GPU in MIG mode (7 on A100/H100); slices in no instance are unallocated.",
        _one(lambda g: g.mig_slices_total),
    ),
    MetricDef(
        "gpuwise_gpu_energy_joules",
        "counter",
        "joules",
        "Energy since the driver loaded (NVML total energy consumption; "
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION in mJ).",
        _one(lambda g: g.energy_joules_total),
        dcgm=(DcgmTwin("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 1000.0, "mJ", "counter"),),
    ),
    MetricDef(
        "gpuwise_gpu_remapped_rows",
        "gauge",
        "1",
        "Rows remapped, by cause (nvidia-smi -q -d ROW_REMAPPER; "
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS / _UNCORRECTABLE_REMAPPED_ROWS).",
        _pairs(
            lambda g: (
                ("correctable", g.remapped_rows_correctable),
                ("uncorrectable", g.remapped_rows_uncorrectable),
            )
        ),
        labels=("cause",),
        dcgm=(
            _same("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "1", "counter", ("correctable",)),
            _same("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "1", "counter", ("uncorrectable",)),
        ),
    ),
    MetricDef(
        "gpuwise_gpu_row_remap_pending",
        "gauge",
        "1",
        "1 while a row remap waits for a GPU reset (ROW_REMAPPER Pending).",
        _one(lambda g: g.remap_pending),
    ),
    MetricDef(
        "gpuwise_gpu_row_remap_failure",
        "gauge",
        "1",
        "1 once row remapping failed: no spare rows (DCGM_FI_DEV_ROW_REMAP_FAILURE).",
        _one(lambda g: g.remap_failed),
        dcgm=(_same("DCGM_FI_DEV_ROW_REMAP_FAILURE", "1"),),
    ),
    MetricDef(
        "gpuwise_gpu_pcie_replays",
        "counter",
        "1",
        "PCIe replays since reset (nvidia-smi -q: Replays Since Reset; "
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER).",
        _one(lambda g: g.pcie_replay_total),
        dcgm=(_same("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "1", "counter"),),
    ),
    MetricDef(
        "gpuwise_gpu_nvlink_tx_bytes",
        "counter",
        "bytes",
        "NVLink data sent, all links (NVML field NVLINK_THROUGHPUT_DATA_TX).",
        _one(lambda g: g.nvlink_tx_bytes_total),
    ),
    MetricDef(
        "gpuwise_gpu_nvlink_rx_bytes",
        "counter",
        "bytes",
        "NVLink data received, all links (NVML field NVLINK_THROUGHPUT_DATA_RX).",
        _one(lambda g: g.nvlink_rx_bytes_total),
    ),
    MetricDef(
        "gpuwise_gpu_nvlink_errors",
        "counter",
        "1",
        "NVLink errors, all links, by kind: crc_flit, replay, recovery "
        "(DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, _REPLAY_ERROR_COUNT_TOTAL, "
        "_RECOVERY_ERROR_COUNT_TOTAL).",
        lambda g: [((kind,), float(n)) for kind, n in g.nvlink_errors],
        labels=("kind",),
        dcgm=(
            _same("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "1", "counter", ("crc_flit",)),
            _same("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "1", "counter", ("replay",)),
            _same("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "1", "counter", ("recovery",)),
        ),
    ),
    MetricDef(
        "gpuwise_gpu_dram_active_ratio",
        "gauge",
        "ratio",
        "Fraction of time device memory was busy (GPM DRAM_BW_UTIL, Hopper+; "
        "DCGM_FI_PROF_DRAM_ACTIVE).",
        _one(lambda g: g.dram_active_ratio),
        dcgm=(_same("DCGM_FI_PROF_DRAM_ACTIVE", "ratio"),),
    ),
    MetricDef(
        "gpuwise_gpu_sm_occupancy_ratio",
        "gauge",
        "ratio",
        "Resident warps / maximum per SM (GPM SM_OCCUPANCY; DCGM_FI_PROF_SM_OCCUPANCY).",
        _one(lambda g: g.sm_occupancy_ratio),
        dcgm=(_same("DCGM_FI_PROF_SM_OCCUPANCY", "ratio"),),
    ),
    MetricDef(
        "gpuwise_gpu_encoder_utilization_ratio",
        "gauge",
        "ratio",
        "Video encoder utilization (utilization.encoder/100; DCGM_FI_DEV_ENC_UTIL).",
        _one(lambda g: g.encoder_utilization_ratio),
        dcgm=(_pct("DCGM_FI_DEV_ENC_UTIL"),),
    ),
    MetricDef(
        "gpuwise_gpu_decoder_utilization_ratio",
        "gauge",
        "ratio",
        "Video decoder utilization (utilization.decoder/100; DCGM_FI_DEV_DEC_UTIL).",
        _one(lambda g: g.decoder_utilization_ratio),
        dcgm=(_pct("DCGM_FI_DEV_DEC_UTIL"),),
    ),
)

MIG_METRICS: tuple[MigMetricDef, ...] = (
    MigMetricDef(
        "gpuwise_mig_memory_used_bytes",
        "gauge",
        "bytes",
        "Used memory of a MIG instance (nvidia-smi --query-gpu=memory.used on the MIG device; "
        "DCGM_FI_DEV_FB_USED per instance, in MiB).",
        lambda m: m.memory_used_bytes,
        dcgm=(DcgmTwin("DCGM_FI_DEV_FB_USED", 1 / _MIB, "MiB", "gauge"),),
    ),
    MigMetricDef(
        "gpuwise_mig_memory_total_bytes",
        "gauge",
        "bytes",
        "Memory size of a MIG instance.",
        lambda m: m.memory_total_bytes,
    ),
    MigMetricDef(
        "gpuwise_mig_slices",
        "gauge",
        "1",
        "Compute slices of a MIG instance (the 1 of 1g.10gb).",
        lambda m: m.slices,
    ),
    MigMetricDef(
        "gpuwise_mig_processes",
        "gauge",
        "1",
        "Compute processes running in a MIG instance.",
        lambda m: len(m.processes),
    ),
    MigMetricDef(
        "gpuwise_mig_sm_active_ratio",
        "gauge",
        "ratio",
        "SM-active of a MIG instance (GPM per instance, Hopper+; DCGM_FI_PROF_SM_ACTIVE per GPU "
        "instance).",
        lambda m: m.sm_active_ratio,
        dcgm=(_same("DCGM_FI_PROF_SM_ACTIVE", "ratio"),),
    ),
)


def dcgm_twins() -> dict[str, tuple[str, DcgmTwin]]:
    """Every DCGM name the exporter can render, with the gpuwise family it comes from."""
    out: dict[str, tuple[str, DcgmTwin]] = {}
    for d in GPU_METRICS:
        for t in d.dcgm:
            out.setdefault(t.name, (d.name, t))
    return out
