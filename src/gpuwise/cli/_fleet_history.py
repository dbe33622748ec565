"""``gpuwise fleet --demand-from-history DB | --demand-from-prometheus URL``: demand that monitoring saw.

Reads the window (``--since``) from the monitor's SQLite history or the exporter's series in
Prometheus, turns it into hourly demand (:func:`gpuwise.fleet.demand_from_history`), and renders
what was seen beside the plan: rented, allocated and active GPU-hours and the idle share.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gpuwise.cli._output import make_table, number


def history_demand(
    db: Path | None, prometheus: str | None, since: str, other_demand: bool = False
) -> tuple[Any, Any]:
    """(Demand, usage per GPU model) from one history source over the last ``since``;
    ``other_demand``: --demand or --profile was given too (refused)."""
    from gpuwise.errors import InputError
    from gpuwise.fleet import demand_from_history
    from gpuwise.units import parse_duration_seconds

    if other_demand:
        raise InputError(
            "give one demand: --demand FILE, --profile or --demand-from-history/-prometheus",
            hint="drop the others",
        )
    if db is not None and prometheus is not None:
        raise InputError(
            "give only one of --demand-from-history and --demand-from-prometheus",
            hint="pick one history source",
        )
    window_s = parse_duration_seconds(since, "--since")
    end = time.time()
    if prometheus is not None:
        from gpuwise.monitor import PrometheusHistory

        history = PrometheusHistory(prometheus).read(end - window_s, end)
    else:
        from gpuwise.monitor import HistoryStore

        if db is None or not db.is_file():
            raise InputError(
                f"no monitor history at {db}",
                hint="give the SQLite file `gpuwise monitor --db` writes",
            )
        with HistoryStore(db, create=False, flag="--demand-from-history") as store:
            history = store.read(end - window_s, end)
    return demand_from_history(history)


def usage_json(usage: Any) -> list[dict[str, Any]]:
    return [
        {
            "gpu": u.gpu,
            "gpus_seen": u.gpus_seen,
            "rented_gpu_hours": u.rented_gpu_hours,
            "allocated_gpu_hours": u.allocated_gpu_hours,
            "active_gpu_hours": u.active_gpu_hours,
            "interruptible_gpu_hours": u.interruptible_gpu_hours,
            "idle_share": u.idle_share,
            "active_share": u.active_share,
        }
        for u in usage
    ]


def print_usage(usage: Any, out: Any) -> None:
    t = make_table(
        ("GPU", "GPUs seen", "rented GPU-h", "allocated", "active", "on spot", "idle share"),
        title="What monitoring saw (demand = allocated GPU-hours; idle rented hours are not reserved)",
        left=("GPU",),
    )
    for u in usage:
        idle = "—" if u.idle_share is None else f"{u.idle_share:.0%}"
        t.add_row(
            u.gpu,
            str(u.gpus_seen),
            number(u.rented_gpu_hours, ",.1f"),
            number(u.allocated_gpu_hours, ",.1f"),
            number(u.active_gpu_hours, ",.1f"),
            number(u.interruptible_gpu_hours, ",.1f"),
            idle,
        )
    out.print(t)
    idle_hours = sum(u.rented_gpu_hours - u.allocated_gpu_hours for u in usage)
    if idle_hours > 0:
        out.print(
            f"[yellow]{idle_hours:,.1f} rented GPU-hours held no job: release or scale those "
            "nodes to zero rather than reserve them (`gpuwise report` prices them).[/yellow]"
        )
