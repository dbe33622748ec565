"""Spot interruption rates from your own runs: ``gpuwise plan --spot-mtbf auto --runs DIR``.

Every run record says where its attempt ran (cloud, region, instance type, capacity type), for
how long (start and end) on how many nodes, and whether it ended by preemption. Per site, the
observed mean time between interruptions of one instance is node-hours on spot ÷ preemptions:
the maximum-likelihood estimate of a constant hazard, the same model the planner prices
(:func:`gpuwise.planner.spot.spot_outcome`).

A site needs :data:`SPOT_MIN_PREEMPTIONS` preemptions before its figure replaces the bundled one; with
fewer, the plan keeps the bundled placeholder or provider band and says how much history there
was. Pure: the records are read by :mod:`gpuwise.base.runlog`.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from gpuwise.base.recipe import RunRecord
from gpuwise.planner.spot import SpotDefaults

SPOT_MIN_PREEMPTIONS = 3
"""Preemptions a site needs before its observed rate is used. A Poisson rate counted from n
events has a relative standard error of 1/√n: 100 % at one event, 58 % at three. gpuwise's own
threshold (not a published figure): below it the bundled figure, whose bands span a similar
factor, is kept."""
HOURS_PER_MONTH = 730.0
"""The month the spot data file's interruption probabilities are per (8,760 h ÷ 12)."""
MAX_MONTHLY_PROBABILITY = 0.999999
"""The largest monthly probability :func:`gpuwise.base.interval.monthly_probability_to_rate`
takes."""


@dataclass(frozen=True)
class SiteHistory:
    """Spot time observed on one cloud, region and instance type."""

    cloud: str
    region: str
    instance_type: str
    node_hours: float
    """Instance-hours on spot capacity (attempt wall time × nodes)."""
    preemptions: int
    attempts: int
    last_end: str | None
    """When the latest attempt ended (ISO 8601): how recent the figure is."""

    @property
    def enough(self) -> bool:
        """Whether the history is long enough to replace the bundled figure."""
        return self.preemptions >= SPOT_MIN_PREEMPTIONS

    @property
    def mtbf_hours(self) -> float | None:
        """Node-hours ÷ preemptions (None without a preemption)."""
        return self.node_hours / self.preemptions if self.preemptions else None

    @property
    def source(self) -> str:
        """The figure in words, as the plan prints it."""
        head = f"{self.cloud} {self.instance_type} in {self.region}: "
        seen = (
            f"{self.preemptions} preemption{'s' * (self.preemptions != 1)} in "
            f"{self.node_hours:,.1f} node-hours of {self.attempts} run attempt"
            f"{'s' * (self.attempts != 1)}"
            + (f" (to {self.last_end[:10]})" if self.last_end else "")
        )
        if self.enough and self.mtbf_hours is not None:
            return head + f"observed MTBF {self.mtbf_hours:,.1f} h from {seen}"
        return (
            head + f"too little history ({seen}; needs {SPOT_MIN_PREEMPTIONS} preemptions): "
            "the bundled figure stays"
        )


def spot_history(records: Iterable[RunRecord]) -> tuple[SiteHistory, ...]:
    """Observed spot time per site, from ended attempts on spot capacity with a known site."""
    acc: dict[tuple[str, str, str], list[float | int | str | None]] = {}
    for r in records:
        if r.capacity_type != "spot" or not (r.cloud and r.region and r.instance_type):
            continue
        hours = _hours(r.started, r.ended)
        if hours is None:
            continue
        a = acc.setdefault((r.cloud, r.region, r.instance_type), [0.0, 0, 0, None])
        a[0] = float(a[0] or 0) + hours * max(1, r.nodes)
        a[1] = int(a[1] or 0) + (1 if r.preemptions > 0 or r.outcome == "preempted" else 0)
        a[2] = int(a[2] or 0) + 1
        a[3] = max(str(a[3] or ""), r.ended or "") or None
    return tuple(
        SiteHistory(c, g, i, float(a[0] or 0), int(a[1] or 0), int(a[2] or 0), _text(a[3]))
        for (c, g, i), a in sorted(acc.items())
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _hours(start: str, end: str | None) -> float | None:
    if end is None:
        return None
    try:
        t0 = dt.datetime.fromisoformat(start.replace("Z", "+00:00"))
        t1 = dt.datetime.fromisoformat(end.replace("Z", "+00:00"))
    except ValueError:
        return None
    if t0.tzinfo is None or t1.tzinfo is None:
        return None
    hours = (t1 - t0).total_seconds() / 3600
    return hours if hours > 0 else None


def observed_sites(
    history: Iterable[SiteHistory],
) -> tuple[tuple[str, str, str, float, str], ...]:
    """The sites with enough history, as :attr:`PlanRequest.spot_mtbf_by_site` takes them."""
    return tuple(
        (s.cloud, s.region, s.instance_type, s.mtbf_hours, s.source)
        for s in history
        if s.enough and s.mtbf_hours is not None
    )


def with_observed(
    spot: SpotDefaults, sites: Iterable[tuple[str, str, str, float, str]]
) -> SpotDefaults:
    """``spot`` with each observed site's own risk (so the planner prices it per site)."""
    instances = dict(spot.instances)
    for cloud, region, instance, mtbf, source in sites:
        base = spot.for_instance(cloud, region, instance)
        instances[(cloud, region, instance)] = replace(
            base,
            # for display and grouping only: the planner prices the site at 1 / MTBF exactly
            # (pricing._spot); a month's probability rounds to 1 for an MTBF of hours
            monthly_interruption_probability=min(
                -math.expm1(-HOURS_PER_MONTH / mtbf), MAX_MONTHLY_PROBABILITY
            ),
            confidence="observed",
            source=source,
            instance_type=instance,
            region=region,
            band=None,
        )
    return replace(spot, instances=instances)
