"""`fleet --demand-from-history`: demand is what jobs used (allocated GPU-hours per hour), idle
rented hours are shown, not reserved, and work on spot nodes is interruptible."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuwise.fleet import demand_from_history
from gpuwise.monitor.fake import FakeGpuReader, scenario
from gpuwise.monitor.history import GpuSeries, History
from gpuwise.monitor.store import HistoryStore

H = 3600.0
T0 = 1_700_002_800.0  # on the hour


def _series(uuid: str, ts: list[float], dur: list[float], held: list[bool], sm: float) -> GpuSeries:
    n = len(ts)
    nan = np.full(n, np.nan)
    return GpuSeries(
        host="node-a",
        uuid=uuid,
        index=0,
        model="NVIDIA H100 80GB HBM3",
        memory_total_bytes=80e9,
        timestamp_s=np.array(ts),
        duration_s=np.array(dur),
        utilization_ratio=np.full(n, sm),
        sm_active_ratio=nan,
        memory_used_bytes=nan,
        power_w=nan,
        temperature_c=nan,
        workloads=tuple(("alice/train",) if h else () for h in held),
    )


def test_demand_is_allocated_hours_and_idle_rented_hours_are_counted_apart() -> None:
    busy = _series("GPU-a", [T0, T0 + H], [H, H], [True, True], 0.9)  # a job for 2 h
    idle = _series("GPU-b", [T0, T0 + H, T0 + 2 * H], [H, H, H], [False] * 3, 0.0)  # rented, empty
    demand, usage = demand_from_history(History(T0, T0 + 3 * H, (busy, idle), source="t"))
    assert demand.gpus == ("H100",) and demand.hours == 3
    assert list(demand.firm[0]) == [1.0, 1.0, 0.0]  # one GPU for two hours, nothing after
    assert not demand.interruptible.any()
    (u,) = usage
    assert (u.gpus_seen, u.rented_gpu_hours, u.allocated_gpu_hours) == (2, 5.0, 2.0)
    assert u.active_gpu_hours == 2.0 and u.idle_share == pytest.approx(3 / 5)


def test_a_sample_that_crosses_an_hour_is_split_between_them() -> None:
    s = _series("GPU-a", [T0 + 0.75 * H], [0.5 * H], [True], 0.9)  # 45 min past → 15 min past
    demand, _ = demand_from_history(History(T0, T0 + 2 * H, (s,)))
    assert list(demand.firm[0]) == pytest.approx([0.25, 0.25])


def test_work_on_spot_nodes_is_interruptible() -> None:
    s = _series("GPU-a", [T0], [H], [True], 0.9)
    demand, usage = demand_from_history(History(T0, T0 + H, (s,)), capacity_type=lambda _: "spot")
    assert list(demand.interruptible[0]) == [1.0] and not demand.firm.any()
    assert usage[0].interruptible_gpu_hours == 1.0


def test_a_history_with_no_known_gpu_is_refused() -> None:
    s = _series("GPU-a", [T0], [H], [True], 0.9)
    odd = GpuSeries(**{**s.__dict__, "model": "Mystery Accelerator 9000"})
    with pytest.raises(Exception, match="Mystery Accelerator 9000"):
        demand_from_history(History(T0, T0 + H, (odd,)))


def _recorded_day(path: Path, context: Any = None) -> None:
    """The `idle` scenario (one busy GPU, one idle) read every 10 minutes over the last day."""
    start = time.time() - 86_400 + 600
    clock = iter(start + k * 600 for k in range(143))
    reader = FakeGpuReader(scenario("idle"), clock=lambda: next(clock))
    with HistoryStore(path) as store:
        for _ in range(143):
            store.append(reader.read(), 600, context)


def test_work_the_monitor_recorded_on_a_spot_node_is_interruptible(
    cli: Any, tmp_path: Path
) -> None:
    from gpuwise.monitor.history import SampleContext

    db = tmp_path / "spot.sqlite"
    _recorded_day(db, SampleContext(instance_type="p5.48xlarge", cloud="aws", capacity_type="spot"))
    r = cli("fleet", "--demand-from-history", db, "--since", "2d", "--json")
    assert r.code == 0, r.stderr
    (h,) = r.json()["history"]
    assert h["allocated_gpu_hours"] > 0
    assert h["interruptible_gpu_hours"] == pytest.approx(h["allocated_gpu_hours"])


def test_fleet_plans_from_the_monitor_database(cli: Any, tmp_path: Path) -> None:
    db = tmp_path / "monitor.sqlite"
    _recorded_day(db)
    saved = tmp_path / "demand.csv"
    r = cli("fleet", "--demand-from-history", db, "--since", "2d", "--save-demand", saved, "--json")
    assert r.code == 0, r.stderr
    doc = r.json()
    by_gpu = {h["gpu"]: h for h in doc["history"]}
    assert by_gpu, doc["history"]
    for h in by_gpu.values():
        assert h["allocated_gpu_hours"] <= h["rented_gpu_hours"]
        assert h["idle_share"] == pytest.approx(
            1 - h["allocated_gpu_hours"] / h["rented_gpu_hours"]
        )
    assert any(h["idle_share"] > 0.2 for h in by_gpu.values())  # the scenario's idle GPU
    # the demand the fleet planned for is exactly the allocated hours, hour by hour
    rows = saved.read_text().splitlines()[1:]
    planned = sum(float(row.split(",")[2]) for row in rows)
    assert planned == pytest.approx(sum(h["allocated_gpu_hours"] for h in by_gpu.values()))
    assert doc["demand"]["source"].startswith("history sqlite:")
    assert doc["demand"]["hours"] <= 25  # the day the history covers, not the 2-day window


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (("--demand-from-history", "missing.sqlite"), "no monitor history"),
        (
            ("--demand-from-history", "x", "--demand-from-prometheus", "http://127.0.0.1:1"),
            "only one",
        ),
        (("--demand-from-history", "x", "--profile"), "give one demand"),
        (("--demand-from-history", "x", "--since", "-1d"), "--since"),
    ],
)
def test_bad_history_flags_are_usage_errors(
    cli: Any, tmp_path: Path, extra: Any, says: str
) -> None:
    (tmp_path / "x").write_text("")
    import os

    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        r = cli("fleet", *extra)
    finally:
        os.chdir(here)
    assert r.code == 2 and says in r.stderr and "Traceback" not in r.stderr
