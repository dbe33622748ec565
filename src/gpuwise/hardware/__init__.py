"""GPU datasheets: dense peak FLOP/s by precision, memory, bandwidth, interconnect, MIG.

Pure data and lookup; no prices (see :mod:`gpuwise.catalog`) and no device access (see
:mod:`gpuwise.monitor` and :mod:`gpuwise.bench`).
"""

from gpuwise.hardware.specs import (
    PRECISIONS,
    GpuSpec,
    GpuTable,
    Precision,
    canonical_gpu_name,
    find_gpu,
    gpu_table,
    load_gpu_table,
    normalize_gpu_name,
)

__all__ = [
    "PRECISIONS",
    "GpuSpec",
    "GpuTable",
    "Precision",
    "canonical_gpu_name",
    "find_gpu",
    "gpu_table",
    "load_gpu_table",
    "normalize_gpu_name",
]
