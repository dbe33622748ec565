"""How often to checkpoint: Young's and Daly's optimum, made to fit asynchronous saves.

- Young (1974): T ≈ √(2·C·M), C = checkpoint cost, M = mean time between failures.
- Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart dumps",
  FGCS 22(3), doi:10.1016/j.future.2004.11.016, eq. 37: for C < 2M,
  T = √(2CM)·[1 + ⅓·√(C/2M) + ⅑·(C/2M)] − C, otherwise T = M.
  Check against the paper's examples: M = 24 h, C = 5 min → 117 min (tests/train/test_interval.py).

With asynchronous saves C is the *stall* (the loop's blocked time), not the write time, and the
interval can be no shorter than the background write (one save in flight). M is the MTBF of
failures that come *without* a usable notice; announced preemptions get their own save.

The formulas and the spot interruption default live in one place, :mod:`gpuwise.planner.spot` and
its data file ``plan/data/spot.yaml`` (also used by ``gpuwise plan`` and the fleet optimizer);
this module only adapts them to seconds and checks its inputs. Default M: ``clouds.default`` of
that file (20 %/month, the top AWS Spot Advisor band edge, as a constant hazard:
M = 730 h / −ln(1 − 0.20) ≈ 3271 h per node). Pass your own ``mtbf_hours`` from your telemetry.
The interval is capped at 30 min (notes §5: "a wall-clock cap on the interval, e.g. ≤ 30 min").
"""

from __future__ import annotations

import math

from gpuwise.errors import InputError
from gpuwise.planner.spot import daly_interval_hours, default_mtbf_hours, young_interval_hours

DEFAULT_MTBF_HOURS = default_mtbf_hours()
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
    """Expected share of time lost: C/T + T/(2M) + R/M (first order, notes §5 [derived])."""
    return stall_s / interval_s + interval_s / (2 * mtbf_s) + restart_s / mtbf_s


def _check(cost_s: float, mtbf_s: float) -> None:
    for name, v in (("checkpoint cost", cost_s), ("MTBF", mtbf_s)):
        if not math.isfinite(v) or v <= 0:
            raise InputError(
                f"{name} must be a positive number of seconds, got {v}",
                hint="measure the save stall; take the MTBF from your failure history",
            )
