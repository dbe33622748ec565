"""What `gpuwise monitor` records with each sample (node, capacity type, plan id), how `report`
prices it from there, and a stalled monitor that catches up without losing GPU-seconds."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from gpuwise.monitor.fake import FakeGpuReader, parse_trace
from gpuwise.monitor.history import SampleContext
from gpuwise.monitor.pricing import PriceBook
from gpuwise.monitor.recording import MAX_BRIDGE_S, next_read_time, read_duration
from gpuwise.monitor.report import build_report
from gpuwise.monitor.store import HistoryStore
from tests.monitor.conftest import day_trace
from tests.monitor.test_monitor_report import OFFERS, _offer

P5 = SampleContext("p5.48xlarge", "aws", "us-east-1", "on-demand", "plan-7f3a")


def test_monitor_records_node_and_plan_and_report_prices_from_them(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recorded on a p5 with GPUWISE_PLAN_ID set; reported elsewhere with nothing set: the p5's
    catalog price ($6.88/GPU-h in us-east-1), not the cheapest H100 in the catalog ($2.95)."""
    db = tmp_path / "h.sqlite"
    for name, value in {
        "GPUWISE_INSTANCE_TYPE": "p5.48xlarge",
        "GPUWISE_CLOUD": "aws",
        "GPUWISE_REGION": "us-east-1",
        "GPUWISE_CAPACITY_TYPE": "on-demand",
        "GPUWISE_PLAN_ID": "plan-7f3a",
    }.items():
        monkeypatch.setenv(name, value)
    r = cli("monitor", "--fake", "idle", "--reads", "3", "--interval", "1s", "--db", db, "--json")
    assert r.code == 0, r.stderr
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT DISTINCT instance_type, cloud, region, capacity_type, plan_id FROM gpu_samples"
        ).fetchall()
    assert rows == [("p5.48xlarge", "aws", "us-east-1", "on-demand", "plan-7f3a")]
    for name in ("GPUWISE_INSTANCE_TYPE", "GPUWISE_CLOUD", "GPUWISE_REGION", "GPUWISE_PLAN_ID"):
        monkeypatch.delenv(name)
    monkeypatch.delenv("GPUWISE_CAPACITY_TYPE")
    r = cli("report", "--db", db, "--since", "1h", "--json")
    assert r.code == 0, r.stderr
    rep = r.json()
    assert [g["usd_per_hour"] for g in rep["gpus"]] == pytest.approx([6.88, 6.88])
    assert all("p5.48xlarge" in g["price_source"] for g in rep["gpus"])
    assert rep["unpriced_hours"] == 0
    (plan,) = rep["plans"]
    assert plan["plan_id"] == "plan-7f3a" and plan["allocated_hours"] == pytest.approx(
        rep["allocated_hours"]
    )
    assert plan["cost_usd"] == pytest.approx(rep["cost_usd"])


def test_a_process_plan_id_labels_its_gpu_and_splits_dollars_by_plan(tmp_path: Path) -> None:
    """GPU 0 runs a job with GPUWISE_PLAN_ID=plan-a in its environment, GPU 1 one without: GPU 0's
    samples carry plan-a, GPU 1's the monitor's own (plan-m); dollars split by plan."""
    trace = day_trace()
    for frame in trace["frames"]:
        for p in frame["gpus"][0].get("processes", ()):
            p["plan_id"] = "plan-a"
    reader = FakeGpuReader(parse_trace(trace, "t"))
    with HistoryStore(tmp_path / "h.sqlite") as store:
        for k in range(24):
            snap = reader.read()
            from dataclasses import replace

            store.append(
                replace(snap, timestamp_s=1e9 + 3600 * k), 3600, replace(P5, plan_id="plan-m")
            )
        hist = store.read(0, 2e9)
    rep = build_report(hist, PriceBook(price_usd_per_hour=3.0, offers=OFFERS))
    plans = {p.plan_id: p for p in rep.plans}
    # GPU 0: 8 h training + 4 h notebook hold processes (plan-a); 12 h empty → the monitor's plan
    assert plans["plan-a"].allocated_hours == pytest.approx(12)
    assert plans["plan-a"].cost_usd == pytest.approx(36)
    assert plans["plan-m"].allocated_hours == pytest.approx(36)
    assert sum(p.cost_usd or 0 for p in rep.plans) == pytest.approx(rep.cost_usd)
    assert sum(p.wasted_usd or 0 for p in rep.plans) == pytest.approx(rep.wasted_usd)


def test_each_sample_is_priced_from_its_own_node(tmp_path: Path) -> None:
    """One GPU recorded 2 h on a spot a100-1, then 1 h on an unknown machine: the spot hours at
    the spot price, the unknown hour counted unpriced beside the total, never at $0."""
    from dataclasses import replace

    offers = (replace(_offer("A100-80GB", 2.50, instance="a100-1"), spot_usd_per_hour=0.75),)
    reader = FakeGpuReader(parse_trace(day_trace(), "t"))
    spot = SampleContext("a100-1", "testcloud", "r1", "spot", None)
    with HistoryStore(tmp_path / "h.sqlite") as store:
        for k, ctx in enumerate((spot, spot, None)):
            store.append(replace(reader.read(), timestamp_s=1e9 + 3600 * k), 3600, ctx)
        hist = store.read(0, 2e9)
    rep = build_report(hist, PriceBook(offers=offers))
    g0 = rep.gpus[0]
    assert g0.cost_usd == pytest.approx(2 * 0.75) and g0.unpriced_hours == pytest.approx(1)
    assert hist.gpus[0].capacity_type == "spot"  # what fleet --demand-from-history reads
    assert rep.unpriced_hours == pytest.approx(2) and rep.cost_usd == pytest.approx(4 * 0.75)
    # a price flag still prices everything
    rep = build_report(hist, PriceBook(price_usd_per_hour=1.0, offers=offers))
    assert rep.unpriced_hours == 0 and rep.cost_usd == pytest.approx(6)


def test_rows_for_the_same_second_add_up_instead_of_overwriting(tmp_path: Path) -> None:
    """Two reads landing in one second (a monitor catching up) keep both durations."""
    reader = FakeGpuReader.from_scenario("idle")
    snap = reader.read()
    with HistoryStore(tmp_path / "h.sqlite") as store:
        store.append(snap, 10)
        store.append(snap, 4)
        hist = store.read(0, 2e9)
    assert [float(s.duration_s.sum()) for s in hist.gpus] == [14.0, 14.0]


def test_a_stalled_loop_bills_the_stall_once_and_does_not_read_back_to_back() -> None:
    """A 10 s interval, a 25 s stall after the read at t=10: the next read at 35 s stands for
    25 s, and the one after it is scheduled at 45 s, not at 20 s and 30 s (already past)."""
    assert read_duration(10.0, None, 10.0) == 10.0
    assert read_duration(35.0, 10.0, 10.0) == 25.0
    assert next_read_time(20.0, 10.0, now_s=35.2) == pytest.approx(45.2)
    assert next_read_time(20.0, 10.0, now_s=21.0) == 30.0
    # a stall past the bridge is not billed beyond it
    assert read_duration(10.0 + 3 * MAX_BRIDGE_S, 10.0, 10.0) == MAX_BRIDGE_S


def test_old_history_files_gain_the_context_column(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    with sqlite3.connect(db) as con:
        con.executescript(
            "CREATE TABLE gpus (id INTEGER PRIMARY KEY, host TEXT NOT NULL, uuid TEXT NOT NULL,"
            " idx INTEGER, model TEXT, memory_total_mib INTEGER, UNIQUE(host, uuid));"
            "CREATE TABLE jobsets (id INTEGER PRIMARY KEY, names TEXT NOT NULL UNIQUE);"
            "CREATE TABLE samples (gpu INTEGER NOT NULL, ts INTEGER NOT NULL, dur INTEGER NOT NULL,"
            " util_pm INTEGER, sm_pm INTEGER, mem_mib INTEGER, power_w INTEGER, temp_c INTEGER,"
            " jobset INTEGER, PRIMARY KEY (gpu, ts)) WITHOUT ROWID;"
            "INSERT INTO gpus VALUES (1, 'h', 'GPU-1', 0, 'NVIDIA H100 80GB HBM3', 81559);"
            "INSERT INTO samples VALUES (1, 100, 10, 500, NULL, 1000, 300, 50, NULL);"
        )
    with HistoryStore(db, create=False) as store:
        hist = store.read(0, 1000)
    assert hist.gpus[0].context_index is None and len(hist.gpus[0]) == 1
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT instance_type, plan_id FROM gpu_samples").fetchall() == [
            (None, None)
        ]
    assert json.dumps([]) == "[]"


def test_the_exporter_labels_each_gpu_with_its_plan() -> None:
    """GPU 0's job carries GPUWISE_PLAN_ID=plan-a; GPU 1 runs nothing: it gets the exporter's
    own plan id (an exporter running inside the job), or none."""
    from gpuwise.monitor.exporter import GpuCollector

    trace = day_trace()
    for frame in trace["frames"]:
        for p in frame["gpus"][0].get("processes", ()):
            p["plan_id"] = "plan-a"
    reader = FakeGpuReader(parse_trace(trace, "t"))
    snap = reader.read()
    for own, want in ((None, {"0": "plan-a"}), ("plan-x", {"0": "plan-a", "1": "plan-x"})):
        collector = GpuCollector(plan_id=own)
        collector.update(snap)
        fams = {f.name: f for f in collector.collect()}
        got = {s.labels["gpu"]: s.labels["plan_id"] for s in fams["gpuwise_gpu_plan_info"].samples}
        assert got == want
