"""A real Prometheus server scrapes the exporter (driven by the fake reader) on loopback, loads the
gpuwise rules, answers queries for the expected series, and serves history to the report."""

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

from gpuwise.monitor.exporter import Exporter, GpuCollector
from gpuwise.monitor.fake import FakeGpuReader
from gpuwise.monitor.pricing import PriceBook
from gpuwise.monitor.prometheus import PrometheusHistory
from gpuwise.monitor.report import build_report

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.skipif(
        PROMETHEUS is None,
        reason="the prometheus binary is not installed "
        "(Debian package prometheus); this test runs a real server",
    ),
    pytest.mark.slow,
]  # the server takes seconds to start and scrape


def _api(base: str, path: str, **params: str) -> Any:
    url = f"{base}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.load(r)
    except OSError:
        return None


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Exporter, float]]:
    from tests.monitor.conftest import free_port, wait_for

    tmp = tmp_path_factory.mktemp("prom")
    exp = Exporter(
        FakeGpuReader.from_scenario("idle"),
        port=free_port(),
        interval_s=0.2,
        collector=GpuCollector(PriceBook(price_usd_per_hour=3.0), dcgm_compat=True),
    )
    exp.start()
    # the shipped rules, evaluated every second instead of every minute so the test need not wait
    rules = (REPO / "deploy/prometheus/gpuwise-rules.yml").read_text()
    assert "    interval: 1m\n" in rules
    # and billing 2.5 s behind the clock, bridging 2 s, instead of 15m30s and 15 min
    for old, new in (
        ("    interval: 1m\n", "    interval: 1s\n"),
        ("[15m30s]", "[2500ms]"),
        ("offset 15m30s", "offset 2500ms"),
        ("[15m]", "[2s]"),
    ):
        rules = rules.replace(old, new)
    (tmp / "gpuwise-rules.yml").write_text(rules)
    target = exp.url.removeprefix("http://")
    (tmp / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "rule_files: [gpuwise-rules.yml]\n"
        f"scrape_configs:\n  - job_name: gpuwise\n    static_configs: [{{targets: ['{target}']}}]\n"
    )
    port = free_port()
    started = time.time()
    log = (tmp / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    base = f"http://127.0.0.1:{port}"
    try:

        def target_up() -> bool:
            doc = _api(base, "/api/v1/targets")
            active = doc["data"]["activeTargets"] if doc else []
            return any(t["health"] == "up" and t["labels"]["job"] == "gpuwise" for t in active)

        wait_for(target_up, 90, "Prometheus to scrape the exporter")

        def has_two_gpus() -> bool:
            doc = _api(base, "/api/v1/query", query="gpuwise_gpu_sm_active_ratio")
            return bool(doc) and len(doc["data"]["result"]) == 2

        wait_for(has_two_gpus, 30, "the SM-active series of both GPUs")
        yield base, exp, started
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
        log.close()
        exp.stop()


@pytest.mark.parametrize(
    ("query", "gpus"),
    [
        ("gpuwise_gpu_utilization_ratio", {"0", "1"}),
        ("gpuwise_gpu_memory_used_bytes", {"0", "1"}),
        ("gpuwise_gpu_power_watts", {"0", "1"}),
        ("gpuwise_gpu_temperature_celsius", {"0", "1"}),
        ("gpuwise_gpu_cost_usd_per_hour", {"0", "1"}),
        ("gpuwise_gpu_up == 1", {"0", "1"}),
        ("gpuwise_gpu_allocation_info", {"0"}),  # only GPU 0 runs a workload
        ("gpuwise_process_gpu_memory_bytes", {"0"}),
    ],
)
def test_query_api_returns_the_expected_series(
    scraped: tuple[str, Exporter, float], query: str, gpus: set[str]
) -> None:
    base, _, _ = scraped
    result = _api(base, "/api/v1/query", query=query)["data"]["result"]
    assert {r["metric"]["gpu"] for r in result} == gpus
    for r in result:
        assert r["metric"]["job"] == "gpuwise"
        assert r["metric"]["host"] == "fake-idle"
        assert r["metric"]["uuid"].startswith("GPU-")
        assert r["metric"]["model"] == "NVIDIA H100 80GB HBM3"


def test_cost_series_value(scraped: tuple[str, Exporter, float]) -> None:
    base, _, _ = scraped
    result = _api(base, "/api/v1/query", query="sum(gpuwise_gpu_cost_usd_per_hour)")["data"][
        "result"
    ]
    assert float(result[0]["value"][1]) == pytest.approx(6.0)


def test_rules_load_and_evaluate(scraped: tuple[str, Exporter, float]) -> None:
    from tests.monitor.conftest import wait_for

    base, _, _ = scraped
    groups = _api(base, "/api/v1/rules")["data"]["groups"]
    assert {g["name"] for g in groups} == {"gpuwise-recording", "gpuwise-alerts"}
    assert all(r["health"] != "err" for g in groups for r in g["rules"]), groups

    def recorded() -> bool:
        doc = _api(base, "/api/v1/query", query="gpuwise:gpu_memory_used:ratio")
        return bool(doc) and len(doc["data"]["result"]) == 2

    wait_for(recorded, 30, "the recording rule to produce a series")


def test_report_reads_history_from_prometheus(scraped: tuple[str, Exporter, float]) -> None:
    base, _, started = scraped
    from tests.monitor.conftest import wait_for

    # bill through gaps of 2 s instead of 15 min (the server has run for seconds only): wait
    # until billing, 2.5 s behind the clock, has both GPUs
    def both() -> Any:
        h = PrometheusHistory(base, bridge_s=2).read(started, time.time(), step_s=1)
        return h if len(h.gpus) == 2 else None

    history = wait_for(both, 30, "two billed GPUs")
    assert history.source == f"prometheus:{base}"
    assert {s.index for s in history.gpus} == {0, 1}
    report = build_report(history, PriceBook(price_usd_per_hour=3.0))
    by_index = {g.index: g for g in report.gpus}
    assert (
        by_index[1].active_hours == 0 and by_index[1].allocated_hours > 0
    )  # the empty GPU is all idle
    assert by_index[0].peak_memory_fraction == pytest.approx(61000 / 81559, rel=1e-3)
    assert report.wasted_usd == pytest.approx(report.idle_hours * 3.0)


def test_nvidia_dcgm_dashboard_queries_return_data(scraped: tuple[str, Exporter, float]) -> None:
    """The 8 panel queries of NVIDIA's dcgm-exporter dashboard (recorded verbatim) and its two
    variables answer with data from `gpuwise exporter --dcgm-compat`, in DCGM's units."""
    base, _, _ = scraped
    recorded = json.loads((REPO / "tests/monitor/fixtures/dcgm/dashboard_queries.json").read_text())
    for name, query in recorded["variables"].items():
        metric, label = query.removeprefix("label_values(").removesuffix(")").split(", ")
        doc = _api(base, f"/api/v1/label/{label}/values", **{"match[]": metric})
        assert doc and doc["data"], name
    for title, expr in recorded["panels"].items():
        q = expr.replace("$instance", ".+").replace("$gpu", ".+")
        doc = _api(base, "/api/v1/query", query=q)
        assert doc and doc["data"]["result"], (title, q)
    util = _api(
        base,
        "/api/v1/query",
        query="DCGM_FI_DEV_GPU_UTIL - on (gpu) (gpuwise_gpu_utilization_ratio * 100)",
    )
    assert util["data"]["result"]  # percent, not a ratio
    assert all(abs(float(r["value"][1])) < 1e-6 for r in util["data"]["result"])
    fb = _api(
        base,
        "/api/v1/query",
        query="DCGM_FI_DEV_FB_USED * 1048576 - on (gpu) gpuwise_gpu_memory_used_bytes",
    )
    assert fb["data"]["result"] and all(abs(float(r["value"][1])) < 1 for r in fb["data"]["result"])


def test_observed_share_and_every_dashboard_query_on_a_real_prometheus(
    scraped: tuple[str, Exporter, float],
) -> None:
    """Nothing failed here, so the observed share is 1 per GPU and fleet-wide (the join of `up`
    with the GPU series works on real target labels); every query of the gpuwise dashboard is
    valid PromQL, and the dollar and observed-share panels have data."""
    from tests.monitor.conftest import wait_for

    base, _, _ = scraped

    def shares() -> list[Any] | None:
        doc = _api(base, "/api/v1/query", query="gpuwise:gpu_observed_share:1d")
        result = doc["data"]["result"] if doc else []
        return result if len(result) == 2 else None

    for r in wait_for(shares, 30, "the observed share of both GPUs"):
        assert float(r["value"][1]) == pytest.approx(1.0)

    def billed() -> Any:  # billing runs 2.5 s (sped up from 15m30s) behind the clock
        doc = _api(base, "/api/v1/query", query="gpuwise:gpu_cost_usd:1d")
        return doc and len(doc["data"]["result"]) == 2

    wait_for(billed, 30, "the billed cost of both GPUs")
    groups = _api(base, "/api/v1/rules")["data"]["groups"]
    assert all(r.get("lastError", "") == "" for g in groups for r in g["rules"]), groups
    dash = json.loads((REPO / "deploy/grafana/gpuwise-dashboard.json").read_text())
    with_data = 0
    for panel in dash["panels"]:
        for target in panel["targets"]:
            q = target["expr"].replace("$host", ".*")
            doc = _api(base, "/api/v1/query", query=q)
            assert doc is not None and doc["status"] == "success", (panel["title"], q)
            if panel.get("fieldConfig", {}).get("defaults", {}).get("unit") == "currencyUSD":
                assert doc["data"]["result"], (panel["title"], q)
            with_data += bool(doc["data"]["result"])
    assert with_data >= 20
