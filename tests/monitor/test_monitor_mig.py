"""MIG as a first-class unit: per-instance memory, activity and processes from the reader, the
exporter and a real Prometheus server; the report counts empty instances and unallocated slices
as waste."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuwise.monitor.exporter import Exporter
from gpuwise.monitor.fake import FakeGpuReader
from gpuwise.monitor.history import replay_history
from gpuwise.monitor.pricing import PriceBook
from gpuwise.monitor.prometheus import PrometheusHistory
from gpuwise.monitor.report import build_report

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus")


def test_reader_attributes_processes_and_activity_to_instances() -> None:
    reader = FakeGpuReader.from_scenario("mig")
    reader.read()
    a100, h100 = reader.read().gpus
    assert a100.mig_slices_total == 7 and [m.profile for m in a100.mig_devices] == ["1g.10gb"] * 3
    assert [[p.pid for p in m.processes] for m in a100.mig_devices] == [[2001], [2002], []]
    assert [m.sm_active_ratio for m in a100.mig_devices] == [None, None, None]  # A100: no GPM
    assert a100.mig_active_share == pytest.approx(2 / 7)  # two busy 1-slice instances of 7 slices
    assert [m.profile for m in h100.mig_devices] == ["3g.40gb", "3g.40gb"]
    assert [m.sm_active_ratio for m in h100.mig_devices] == pytest.approx([0.55, 0.01])
    assert h100.mig_active_share == pytest.approx(3 / 7)  # the 1 % notebook instance is idle


def test_report_counts_empty_and_unallocated_slices_as_waste() -> None:
    history = replay_history(FakeGpuReader.from_scenario("mig"), 2 * 3600, 1_800_000_000.0)
    report = build_report(history, PriceBook(price_usd_per_hour=7.0, offers=()))
    a100, h100 = report.gpus
    assert a100.efficiency == pytest.approx(2 / 7) and a100.wasted_usd == pytest.approx(
        2 * 7 * 5 / 7
    )
    assert h100.efficiency == pytest.approx(3 / 7) and h100.wasted_usd == pytest.approx(
        2 * 7 * 4 / 7
    )
    assert report.wasted_usd == pytest.approx(18.0)
    # per workload: each gets its instance's slices; the idle notebook's share is idle
    by_name = {w.workload: w for w in report.workloads}
    assert (
        by_name["frank/serve"].allocated_hours == pytest.approx(2 / 7)
        and by_name["frank/serve"].efficiency == 1
    )
    assert by_name["ivan/notebook"].allocated_hours == pytest.approx(2 * 3 / 7)
    assert by_name["ivan/notebook"].efficiency == 0 and by_name["heidi/train"].efficiency == 1
    named = [w for w in report.workloads if w.workload != "(unallocated)"]
    assert sum(w.allocated_hours for w in named) == pytest.approx(2 * (2 / 7 + 6 / 7))
    # the empty instances and unallocated slices are a row of their own: the table adds up
    assert by_name["(unallocated)"].active_hours == 0
    assert sum(w.allocated_hours for w in report.workloads) == pytest.approx(4)
    assert sum(w.wasted_usd for w in report.workloads) == pytest.approx(report.wasted_usd)
    mig_recs = [r for r in report.recommendations if r.action == "mig"]
    assert {r.gpu_index for r in mig_recs} == {0, 1} and all(r.host == "fake-mig" for r in mig_recs)


def _api(base: str, path: str, **params: str) -> Any:
    url = f"{base}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.load(r)
    except OSError:
        return None


@pytest.fixture(scope="module")
def mig_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, float]]:
    if PROMETHEUS is None:
        pytest.skip(
            "the prometheus binary is not installed (Debian package prometheus); this test runs a real server"
        )
    from tests.monitor.conftest import free_port, wait_for

    tmp = tmp_path_factory.mktemp("prom-mig")
    exp = Exporter(
        FakeGpuReader.from_scenario("mig"),
        port=free_port(),
        interval_s=0.2,
        prices=PriceBook(price_usd_per_hour=7.0, offers=()),
    )
    exp.start()
    rules = (REPO / "deploy/prometheus/gpuwise-rules.yml").read_text()
    (tmp / "gpuwise-rules.yml").write_text(
        rules.replace("    interval: 1m\n", "    interval: 1s\n")
    )
    target = exp.url.removeprefix("http://")
    # a job name like a PodMonitor's: nothing in the rules may depend on it
    (tmp / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "rule_files: [gpuwise-rules.yml]\n"
        f"scrape_configs:\n  - job_name: monitoring/gpuwise-exporter\n    static_configs: [{{targets: ['{target}']}}]\n"
    )
    port = free_port()
    started = time.time()
    log = (tmp / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp / 'prometheus.yml'}",  # type: ignore[list-item]
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    base = f"http://127.0.0.1:{port}"
    try:

        def both_gpus_recorded() -> bool:
            doc = _api(base, "/api/v1/query", query="gpuwise:gpu_active:ratio")
            return bool(doc) and len(doc["data"]["result"]) == 2

        wait_for(
            both_gpus_recorded, 90, "Prometheus to scrape the MIG exporter and record its activity"
        )
        time.sleep(3)  # a few more scrapes for the history
        yield base, started
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
        log.close()
        exp.stop()


@pytest.mark.slow
def test_prometheus_has_per_instance_series(mig_prometheus: tuple[str, float]) -> None:
    base, _ = mig_prometheus
    mem = _api(base, "/api/v1/query", query="gpuwise_mig_memory_used_bytes")["data"]["result"]
    assert len(mem) == 5 and all(r["metric"]["mig_uuid"].startswith("MIG-") for r in mem)
    procs = {
        (r["metric"]["gpu"], r["metric"]["gpu_instance"]): float(r["value"][1])
        for r in _api(base, "/api/v1/query", query="gpuwise_mig_processes")["data"]["result"]
    }
    assert procs == {("0", "7"): 1, ("0", "8"): 1, ("0", "9"): 0, ("1", "1"): 1, ("1", "2"): 1}
    share = {
        r["metric"]["gpu"]: float(r["value"][1])
        for r in _api(base, "/api/v1/query", query="gpuwise:gpu_active:ratio")["data"]["result"]
    }
    assert share == pytest.approx({"0": 2 / 7, "1": 3 / 7})
    # MemoryHigh per instance: instance 7 of GPU 0 holds 9000 of 9856 MiB (91 %)
    high = _api(base, "/api/v1/query", query="gpuwise:mig_memory_used:ratio > 0.85")["data"][
        "result"
    ]
    assert [(r["metric"]["gpu"], r["metric"]["gpu_instance"]) for r in high] == [("0", "7")]


@pytest.mark.slow
def test_report_from_prometheus_counts_the_empty_slices(mig_prometheus: tuple[str, float]) -> None:
    base, started = mig_prometheus
    history = PrometheusHistory(base).read(started, time.time() + 1, step_s=1)
    report = build_report(history, PriceBook(price_usd_per_hour=7.0, offers=()))
    by_index = {g.index: g for g in report.gpus}
    # the first seconds may miss GPM's first sample on the H100; the A100's share is exact
    assert by_index[0].efficiency == pytest.approx(2 / 7, abs=1e-6)
    assert by_index[0].wasted_usd == pytest.approx(by_index[0].cost_usd * 5 / 7, rel=1e-6)
    assert by_index[1].efficiency == pytest.approx(3 / 7, abs=0.1)
    # per workload by MIG instance, as from the SQLite history
    by_name = {w.workload: w for w in report.workloads}
    assert by_name["frank/serve"].allocated_hours == pytest.approx(
        by_index[0].allocated_hours / 7, rel=0.05
    )
    assert by_name["ivan/notebook"].allocated_hours == pytest.approx(
        by_index[1].allocated_hours * 3 / 7, rel=0.05
    )
    assert by_name["ivan/notebook"].efficiency < 0.2 and by_name["heidi/train"].efficiency > 0.8


@pytest.mark.slow  # two monitors at 1 read a second
def test_sqlite_history_keeps_the_mig_share_and_health(cli: Any, tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    r = cli("monitor", "--fake", "mig", "--reads", "3", "--interval", "1s", "--db", db, "--json")
    assert r.code == 0, r.stderr
    r = cli("report", "--db", db, "--since", "1h", "--price-usd-per-hour", "7", "--json")
    assert r.code == 0, r.stderr
    a100 = r.json()["gpus"][0]
    assert a100["mig_active_share"] == pytest.approx(2 / 7, abs=1e-3)  # stored per mille
    assert a100["efficiency"] == pytest.approx(2 / 7, abs=1e-3)
    notebook = next(w for w in r.json()["workloads"] if w["workload"] == "ivan/notebook")
    # its MIG instance sat at 1 % (the first read has no GPM rate yet: held counts as active then)
    # (two reads in one second share a row: count-free check, robust on a loaded machine)
    assert notebook["idle_hours"] > 0 and notebook["idle_hours"] >= notebook["active_hours"]
    r = cli(
        "monitor",
        "--fake",
        "xid",
        "--reads",
        "6",
        "--interval",
        "1s",
        "--db",
        tmp_path / "x.sqlite",
        "--json",
    )
    assert r.code == 0, r.stderr
    r = cli("report", "--db", tmp_path / "x.sqlite", "--since", "1h", "--json")
    lost = r.json()["gpus"][1]
    assert lost["lost"] is True and lost["xid_codes"] == [79]
    assert any(
        x["action"] == "drain-and-reset" and x["host"] == "fake-xid"
        for x in r.json()["recommendations"]
    )
