"""Which GPU model a catalog row really carries.

Clouds name accelerators their own way (``A100-80GB``, ``nvidia-tesla-t4``, ``H100-MEGA``) and
sometimes one name covers two models (Lambda's ``A100`` is a PCIe card on ``gpu_1x_a100`` and an
SXM4 module on ``gpu_1x_a100_sxm4``). Aliases in the GPU table handle the first;
``data/instance_gpus.csv`` (each row with its source) handles the second.
"""

from __future__ import annotations

import fnmatch
import functools
from dataclasses import dataclass
from importlib import resources

from gpuwise.base.datafiles import commented_csv
from gpuwise.hardware import gpu_table


@dataclass(frozen=True)
class InstanceOverride:
    cloud: str
    pattern: str
    gpu: str
    gpu_count: float | None
    source: str


@functools.lru_cache(maxsize=1)
def instance_overrides() -> tuple[InstanceOverride, ...]:
    text = resources.files("gpuwise.catalog").joinpath("data/instance_gpus.csv").read_text("utf-8")
    return tuple(
        InstanceOverride(
            row["cloud"],
            row["pattern"],
            row["gpu"],
            float(row["gpu_count"]) if row["gpu_count"] else None,
            row["source"],
        )
        for row in commented_csv(text)
    )


def instance_override(cloud: str, instance_type: str) -> InstanceOverride | None:
    for override in instance_overrides():
        if override.cloud == cloud and fnmatch.fnmatchcase(instance_type, override.pattern):
            return override
    return None


def resolve_gpu(accelerator_name: str) -> str:
    """gpuwise's canonical model name for a cloud's accelerator name; unknown names pass through."""
    spec = gpu_table().get(accelerator_name)
    return spec.name if spec is not None else accelerator_name
