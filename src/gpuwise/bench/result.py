"""What ``gpuwise bench`` reports: one :class:`BenchResult` per measurement, beside its datasheet peak."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuwise.errors import InputError


@dataclass(frozen=True)
class BenchResult:
    """One measured figure and the datasheet figure it is compared with."""

    name: str
    """Stable name, e.g. ``matmul.bf16``, ``memory.copy``, ``train.gpt.amp``, ``storage.seq_read``."""
    value: float
    """What was measured, in ``unit``."""
    unit: str
    """``TFLOP/s``, ``GB/s`` (10^9 bytes/s), ``IOPS``, ``samples/s``."""
    peak: float | None
    """The datasheet figure in the same unit; None where unknown (CPU, storage, DataLoader)."""
    ratio: float | None
    """``value / peak`` (for training runs: the achieved MFU); None when ``peak`` is."""
    note: str = ""
    """How it was measured (size, iterations) and side figures (tokens/s)."""

    def __post_init__(self) -> None:
        if not math.isfinite(self.value) or self.value < 0:
            raise InputError(
                f"bench result {self.name}: {self.value!r} is not a finite number ≥ 0",
                hint="this is a bug in the benchmark; rerun with --debug",
            )


def compare(name: str, value: float, unit: str, peak: float | None, note: str = "") -> BenchResult:
    """A result with its ratio to ``peak`` (None when the peak is unknown)."""
    ratio = value / peak if peak else None
    return BenchResult(name=name, value=value, unit=unit, peak=peak, ratio=ratio, note=note)


@dataclass(frozen=True)
class Skipped:
    """A measurement that did not run here, and why."""

    name: str
    """The result name it would have had."""
    reason: str
    """Why it could not run (no GPU, one GPU, unsupported precision)."""


@dataclass(frozen=True)
class DeviceInfo:
    """What the benchmarks ran on."""

    kind: str
    """``cuda`` or ``cpu``."""
    name: str
    """Device name as torch reports it (CPU: the processor model from /proc/cpuinfo)."""
    gpu: str | None
    """gpuwise's canonical GPU model whose datasheet peaks are used (None on CPU without --gpu)."""
    count: int
    """GPUs visible (0 on CPU)."""
    torch_version: str
    """``torch.__version__``."""
    cuda_version: str | None
    """``torch.version.cuda``."""
    driver_version: str | None = None
    """NVIDIA driver version, when NVML answers."""
    compute_capability: str | None = None
    """``major.minor`` of GPU 0."""


@dataclass(frozen=True)
class BenchReport:
    """All results of one ``gpuwise bench`` run."""

    device: DeviceInfo
    """What it ran on."""
    quick: bool
    """Small sizes (``--quick``): checks the code, not the hardware."""
    results: tuple[BenchResult, ...]
    """The measurements, in run order."""
    skipped: tuple[Skipped, ...] = field(default_factory=tuple)
    """What could not be measured here, with the reason."""
    extras: dict[str, float] = field(default_factory=dict)
    """Side measurements for calibration (``cuda_context_gib``)."""

    def get(self, name: str) -> BenchResult | None:
        return next((r for r in self.results if r.name == name), None)
