"""Checkpoint-interval maths: Young's and Daly's optimum, and the time they leave on the table.

Shared by the planner's spot model, the fleet optimizer and the training loop; pure functions of
their arguments, no data files, nothing computed at import.

- Young (1974), "A first order approximation to the optimum checkpoint interval", CACM 17(9):
  τ ≈ √(2·C·M), C = checkpoint cost, M = mean time between failures.
- Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart dumps",
  FGCS 22(3), doi:10.1016/j.future.2004.11.016, eq. 37: for C < 2M,
  τ = √(2CM)·[1 + ⅓·√(C/2M) + ⅑·(C/2M)] − C, otherwise τ = M.
"""

from __future__ import annotations

import math

from gpuwise.units import HOURS_PER_MONTH, check_finite

DEFAULT_MONTHLY_INTERRUPTION_PROBABILITY = 0.20
"""The chance one spot instance is reclaimed within a month when nothing better is known: the top
edge of the AWS Spot Instance Advisor bands (<5% … >20%, "frequency of interruption during the
trailing month", https://aws.amazon.com/ec2/spot/instance-advisor/), a conservative stand-in that
the planner's ``spot.yaml`` also uses as ``clouds.default`` (a test keeps the two equal)."""


def monthly_probability_to_rate(p: float) -> float:
    """λ per hour for an interruption probability ``p`` per 730-hour month (constant hazard)."""
    check_finite(p, "monthly interruption probability", maximum=0.999999)
    return -math.log1p(-p) / HOURS_PER_MONTH


def node_mtbf_hours(monthly_probability: float = DEFAULT_MONTHLY_INTERRUPTION_PROBABILITY) -> float:
    """Mean hours between interruptions of one instance (inf when it is never interrupted)."""
    rate = monthly_probability_to_rate(monthly_probability)
    return math.inf if rate == 0 else 1 / rate


def young_interval_hours(checkpoint_hours: float, mtbf_hours: float) -> float:
    """Young (1974): τ ≈ √(2·C·M)."""
    return math.sqrt(2 * checkpoint_hours * mtbf_hours)


def daly_interval_hours(checkpoint_hours: float, mtbf_hours: float) -> float:
    """Daly (2006) higher-order optimum: √(2δM)[1 + ⅓√(δ/2M) + ⅑(δ/2M)] − δ for δ < 2M, else M.

    Returns inf when M is infinite (no interruptions: one segment, no periodic checkpoint needed).
    """
    delta, m = checkpoint_hours, mtbf_hours
    if math.isinf(m):
        return math.inf
    if delta <= 0:
        return 0.0
    if delta >= 2 * m:
        return m
    x = delta / (2 * m)
    return math.sqrt(2 * delta * m) * (1 + math.sqrt(x) / 3 + x / 9) - delta


def young_daly_waste(checkpoint_hours: float, mtbf_hours: float) -> float:
    """First-order share of time lost at the optimum interval: √(2C/M) (Young 1974; Daly 2006 §3)."""
    if math.isinf(mtbf_hours):
        return 0.0
    return math.sqrt(2 * checkpoint_hours / mtbf_hours)
