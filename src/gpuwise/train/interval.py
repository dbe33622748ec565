"""How often to checkpoint: Young's and Daly's optimum, made to fit asynchronous saves.

The formulas live in :mod:`gpuwise.base.interval` (shared with the planner and the fleet
optimizer); this module adapts them to seconds and checks its inputs. Check against Daly's
paper's example: M = 24 h, C = 5 min → 117 min (tests/train/test_interval.py).

With asynchronous saves C is the *stall* (the loop's blocked time), not the write time, and the
interval can be no shorter than the background write (one save in flight). M is the MTBF of
failures that come *without* a usable notice; announced preemptions get their own save.

Default M: one instance at 20 %/month interruption probability as a constant hazard
(:data:`gpuwise.base.interval.DEFAULT_MONTHLY_INTERRUPTION_PROBABILITY`:
M = 730 h / −ln(1 − 0.20) ≈ 3271 h per node). No configuration file is read: pass your own
``mtbf_hours`` from your telemetry. The interval is capped at 30 min, so that a wrong MTBF cannot
cost more than half an hour of work.
"""

from __future__ import annotations

import math

from gpuwise.base.interval import daly_interval_hours, node_mtbf_hours, young_interval_hours
from gpuwise.errors import InputError

DEFAULT_MTBF_HOURS = node_mtbf_hours()
DEFAULT_MAX_INTERVAL_S = 30 * 60.0


def young_interval_s(cost_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum √(2CM)."""
    _check(cost_s, mtbf_s)
    return young_interval_hours(cost_s / 3600.0, mtbf_s / 3600.0) * 3600.0


def daly_interval_s(cost_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum (FGCS 22(3), 2006, eq. 37)."""
    _check(cost_s, mtbf_s)
    return daly_interval_hours(cost_s / 3600.0, mtbf_s / 3600.0) * 3600.0


def checkpoint_interval_s(
    stall_s: float,
    *,
    mtbf_hours: float = DEFAULT_MTBF_HOURS,
    nodes: int = 1,
    write_s: float = 0.0,
    max_interval_s: float = DEFAULT_MAX_INTERVAL_S,
) -> float:
    """Seconds between periodic saves: Daly(stall, M/nodes), at least the write time, at most the cap."""
    if nodes < 1:
        raise InputError(
            f"nodes={nodes} must be at least 1", hint="pass the number of machines in the job"
        )
    t = daly_interval_s(max(stall_s, 1e-6), mtbf_hours * 3600.0 / nodes)
    return min(max(t, write_s), max_interval_s)


def waste_fraction(
    interval_s: float, stall_s: float, mtbf_s: float, restart_s: float = 0.0
) -> float:
    """Expected share of time lost: C/T + T/(2M) + R/M (first order: the three terms of Young 1974's waste)."""
    return stall_s / interval_s + interval_s / (2 * mtbf_s) + restart_s / mtbf_s


def _check(cost_s: float, mtbf_s: float) -> None:
    for name, v in (("checkpoint cost", cost_s), ("MTBF", mtbf_s)):
        if not math.isfinite(v) or v <= 0:
            raise InputError(
                f"{name} must be a positive number of seconds, got {v}",
                hint="measure the save stall; take the MTBF from your failure history",
            )
