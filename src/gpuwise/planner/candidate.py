"""A priced way to run the job, as the planner passes it between its steps (module: core).

Immutable named tuples, not frozen dataclasses: tens of thousands are made per plan.
"""

from __future__ import annotations

from typing import NamedTuple

from gpuwise.catalog.offer import Billing
from gpuwise.planner.model import Evaluation
from gpuwise.planner.sites import Site, ZonePrice
from gpuwise.planner.spot import (
    SpotOutcome,
)
from gpuwise.planner.values import (
    PlanRequest,
    option_label,
)


class Candidate(NamedTuple):
    """One priced way to run the job (before the deadline and budget are applied).

    An immutable named tuple rather than a frozen dataclass: tens of thousands are made per plan,
    and a frozen dataclass pays ``object.__setattr__`` per field.
    """

    site: Site
    """The first region's site (same instance type and price in every region of ``regions``)."""
    regions: tuple[str, ...]
    zones: int
    nodes: int
    billing: Billing
    price: ZonePrice
    """Price of one instance and the zone that gives it (in ``site.region``)."""
    ev: Evaluation
    hours: float
    """Expected wall-clock hours, fixed costs included."""
    cost: float
    fixed_hours: float
    checkpoint_hours: float
    p: float | None = None
    """Probability to meet the deadline (None without one)."""
    outcome: SpotOutcome | None = None
    source: str | None = None

    @property
    def gpu(self) -> str:
        return self.site.gpu

    @property
    def gpn(self) -> int:
        return int(self.site.gpu_count)

    @property
    def label(self) -> str:
        return option_label(
            self.gpu, self.gpn, self.nodes, self.site.cloud, self.site.instance_type, self.billing
        )


class Evaluated(NamedTuple):
    """A site on ``nodes`` nodes with the settings that fit."""

    site: Site
    nodes: int
    ev: Evaluation


def meets_deadline(c: Candidate, request: PlanRequest) -> bool:
    if request.deadline_hours is None:
        return True
    if c.billing == "spot":
        return c.p is not None and c.p >= request.confidence
    return c.hours <= request.deadline_hours
