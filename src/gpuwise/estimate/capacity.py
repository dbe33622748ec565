"""How much memory a GPU really gives a training or inference process, and the rule for "fits".

One figure serves ``estimate``, ``plan`` and ``gpus``: :func:`gpu_memory`.

- **Total**: the device memory the driver reports (nvidia-smi ``memory.total``). It is below the
  datasheet on most GPUs (an L40S sold as 48 GB reports 46,068 MiB = 45.0 GiB; an H100 80 GB
  reports 81,559 MiB = 79.6 GiB). In order of preference: measured on this GPU model by
  ``gpuwise bench --calibrate`` (``total_memory_gib`` in calibration.json), the published
  nvidia-smi figure in the GPU table (``reported_memory_mib``, each row with its source), or the
  datasheet figure where no reported one is known (said so: it is likely a few percent high).
- **Usable**: the total less the CUDA context (cuBLAS/NCCL workspaces; 0.5 GiB assumed, measured by
  ``bench --calibrate``).

**Headroom rule.** A setup fits when everything the estimator counts per GPU fits in the usable
memory: weights, gradients, optimizer states, activations, logits or KV cache, the communication
buffers (DDP gradient buckets, ZeRO buckets, FSDP gathered units), plus a caching-allocator
allowance of 5% of all of that (fragmentation; measured as ``allocator_fraction``). Those two
terms — communication buffers and the allocator allowance — are the headroom; nothing else is
added, so a setup within them of the usable memory is reported as tight by ``estimate``. NCCL's
own internal buffers beyond the collective buckets are not modelled: measure with ``bench``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from gpuwise.estimate.memory import Overheads

if TYPE_CHECKING:
    from gpuwise.estimate.calibration import GpuCalibration
    from gpuwise.hardware import GpuSpec

MemorySource = Literal["measured", "published", "datasheet"]


@dataclass(frozen=True)
class GpuMemory:
    """A GPU model's memory as a process sees it."""

    total_gib: float
    """Device memory the driver reports, GiB (see :attr:`source`)."""
    context_gib: float
    """CUDA context and library workspaces, GiB (assumed 0.5 unless measured)."""
    source: MemorySource
    """``measured`` (calibration.json), ``published`` (nvidia-smi figure in the GPU table) or
    ``datasheet`` (no reported figure known: likely a few percent high)."""
    datasheet_gib: float
    """The datasheet figure, for comparison."""

    @property
    def usable_gib(self) -> float:
        """What tensors can use: total less the CUDA context."""
        return max(0.0, self.total_gib - self.context_gib)

    def describe(self) -> str:
        """``45.0 GiB usable of 45.0 reported (datasheet 48)``."""
        where = {
            "measured": "measured",
            "published": "reported by nvidia-smi",
            "datasheet": "datasheet figure; no reported figure known",
        }[self.source]
        return (
            f"{self.usable_gib:.1f} GiB usable of {self.total_gib:.1f} ({where}; "
            f"datasheet {self.datasheet_gib:g}, CUDA context {self.context_gib:.2f})"
        )


def gpu_memory(spec: GpuSpec, cal: GpuCalibration | None = None) -> GpuMemory:
    """The memory of ``spec`` as a process sees it; ``cal``'s measured figures win (module docstring)."""
    context = (
        cal.cuda_context_gib
        if cal is not None and cal.cuda_context_gib is not None
        else Overheads().cuda_context_gib
    )
    source: MemorySource
    if cal is not None and cal.total_memory_gib is not None:
        total, source = cal.total_memory_gib, "measured"
    elif spec.total_memory_known:
        total, source = spec.total_memory_gib, "published"
    else:
        total, source = float(spec.memory_gib), "datasheet"
    return GpuMemory(
        total_gib=float(total),
        context_gib=float(context),
        source=source,
        datasheet_gib=float(spec.memory_gib),
    )
