"""A tiny hand-made workload model for planner tests (a test double of a pure function).

Memory per GPU = ``state_gib / total_gpus + fixed_gib``; hours = ``gpu_hours / total_gpus`` divided
by a per-GPU speed factor and a multi-node efficiency — every answer can be worked out by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuwise.catalog import Offer
from gpuwise.errors import HardwareError
from gpuwise.planner.model import Evaluation
from gpuwise.planner.network import InstanceNetwork
from gpuwise.planner.startup import StartupCosts


def offer(
    cloud: str,
    region: str,
    itype: str,
    gpu: str,
    count: float,
    od: float | None,
    spot: float | None = None,
    zone: str | None = None,
    *,
    source: str = "test",
    as_of: str = "2026-11",
    vcpus: float | None = None,
    memory_gib: float | None = None,
) -> Offer:
    """A catalog offer with what the planner tests vary (by default no vCPU or memory figures)."""
    return Offer(
        cloud=cloud,
        region=region,
        zone=zone,
        instance_type=itype,
        gpu=gpu,
        gpu_count=count,
        gpu_memory_gib=None,
        vcpus=vcpus,
        memory_gib=memory_gib,
        on_demand_usd_per_hour=od,
        spot_usd_per_hour=spot,
        arch="x86_64",
        source=source,
        as_of=as_of,
    )


NO_STARTUP = StartupCosts(
    provision_hours=0.0, image_gib=0.0, download_gbit_s=1.0, startup_hours=0.0, scarce_gpus=()
)
"""No fixed costs: the toy tests' hours and costs are the model's own."""


@dataclass(frozen=True)
class ToyModel:
    state_gib: float = 100.0
    """Sharded state (weights + grads + optimizer), split evenly over all GPUs."""
    fixed_gib: float = 10.0
    """Unsharded memory per GPU (activations, buffers)."""
    gpu_hours: float = 100.0
    """GPU-hours on a speed-1.0 GPU."""
    speed: Mapping[str, float] = field(
        default_factory=lambda: {"H100": 3.0, "A100": 1.0, "A10G": 0.3, "L4": 0.25}
    )
    """Relative speed per GPU model; models not listed cannot be estimated."""
    capacity: Mapping[str, float] = field(
        default_factory=lambda: {"H100": 80.0, "A100": 40.0, "A10G": 24.0, "L4": 24.0}
    )
    node_efficiency: float = 0.9
    """Throughput factor per extra node (0.9 → 2 nodes run at 90%)."""
    checkpoint_gib: float = 50.0
    error_band: float | None = None
    """Relative p10/p90 half-width of ``hours`` (0.2 → hours × 0.8 … × 1.2); None = no range."""

    def evaluate(
        self, gpu: str, gpus_per_node: int, nodes: int, network: InstanceNetwork
    ) -> Evaluation:
        if gpu not in self.speed:
            raise HardwareError(f"unknown GPU {gpu!r}", hint="toy model")
        n = gpus_per_node * nodes
        need = self.state_gib / n + self.fixed_gib
        eff = self.node_efficiency ** (nodes - 1)
        hours = self.gpu_hours / (n * self.speed[gpu] * eff)
        return Evaluation(
            fits=need <= self.capacity[gpu],
            per_gpu_memory_gib=need,
            capacity_gib=self.capacity[gpu],
            hours=hours,
            checkpoint_gib=self.checkpoint_gib,
            hours_p10=None if self.error_band is None else hours * (1 - self.error_band),
            hours_p90=None if self.error_band is None else hours * (1 + self.error_band),
        )

    def describe(self) -> Mapping[str, Any]:
        return {"model": "toy", "state_gib": self.state_gib, "gpu_hours": self.gpu_hours}
