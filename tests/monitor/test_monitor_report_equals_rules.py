"""`gpuwise report --prometheus` bills what the recording rules bill, on the same data.

Two hours of exporter series are written into a real Prometheus's database with `promtool tsdb
create-blocks-from openmetrics`: a GPU scraped by two jobs (a ServiceMonitor and a PodMonitor)
whose exporter crash-loops for 10 minutes, a GPU on a spot node with a fifth of its 60 s scrapes
missing, and a GPU with no price. The report (no price flag, no settings: it reads the exporter's
own price series) must give the dollars, wasted dollars, rented and unpriced hours that the
shipped rules' per-minute records add up to over the same minutes, evaluated by Prometheus
itself from the rules file's expressions.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuwise.monitor.pricing import PriceBook
from gpuwise.monitor.prometheus import (
    PrometheusHistory,
    mig_active_share_query,
    price_query,
    rented_query,
)
from gpuwise.monitor.report import build_report
from tests.monitor.conftest import free_port, wait_for

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy/prometheus/gpuwise-rules.yml"
PROMETHEUS, PROMTOOL = shutil.which("prometheus"), shutil.which("promtool")
T0 = (int(time.time()) // 3600 - 6) * 3600  # six hours ago, on the hour
HOURS = 2


def _records() -> dict[str, str]:
    doc = yaml.safe_load(RULES.read_text())
    return {r["record"]: r["expr"] for g in doc["groups"] for r in g["rules"] if "record" in r}


def _norm(expr: str) -> str:
    return re.sub(r"\s+", " ", expr).replace("( ", "(").replace(" )", ")").strip()


def _inline(name: str, records: dict[str, str]) -> str:
    """A record's expression with every record it reads replaced by its own expression."""
    expr = records[name]
    for other in sorted(records, key=len, reverse=True):
        if other != name and other in expr:
            expr = expr.replace(other, f"({_inline(other, records)})")
    return _norm(expr)


def test_the_report_queries_are_the_rules_expressions() -> None:
    """One definition: the strings the report sends are in the shipped rules, verbatim."""
    rec = {k: _norm(v) for k, v in _records().items()}
    assert _norm(rented_query("", "15m", "15m30s")) == rec["gpuwise:gpu_rented:bool"]
    assert _norm(price_query("", "15m", "15m30s")) in rec["gpuwise:gpu_cost_usd_per_hour:billed"]
    assert _norm(mig_active_share_query("")) in rec["gpuwise:gpu_active_billed:ratio"]


def _openmetrics() -> str:
    rng = random.Random(7)
    lines: dict[str, list[str]] = {}

    def add(name: str, labels: str, t: int, v: float) -> None:
        lines.setdefault(name, []).append(f"{name}{{{labels}}} {v} {t}")

    def gpu(host: str, uuid: str, job: str, times: list[int], price: float | None) -> None:
        lab = f'job="{job}",instance="{host}:9835",host="{host}",gpu="0",uuid="{uuid}",model="H100"'
        for t in times:
            busy = t < T0 + 3600
            add("gpuwise_gpu_up", lab, t, 1)
            add("gpuwise_gpu_utilization_ratio", lab, t, 0.9 if busy else 0.0)
            add("gpuwise_gpu_processes", lab, t, 1)
            if price is not None:
                add("gpuwise_gpu_cost_usd_per_hour", f'{lab},price_source="catalog"', t, price)
            if uuid == "GPU-a":  # the job on it was exported with plan id plan-q
                add("gpuwise_gpu_plan_info", f'{lab},plan_id="plan-q"', t, 1)

    end = T0 + HOURS * 3600
    crash = [t for t in range(T0, end + 1, 15) if not T0 + 1800 <= t < T0 + 2400]
    gpu("n1", "GPU-a", "gpuwise", crash, 6.88)  # a ServiceMonitor …
    gpu("n1", "GPU-a", "gpuwise-pods", crash, 6.88)  # … and a PodMonitor scrape it
    flaky = [t for t in range(T0, end + 1, 60) if t in (T0, end) or rng.random() > 0.2]
    gpu("n2", "GPU-b", "gpuwise", flaky, 1.28)  # a spot p5: the exporter's spot price
    gpu("n3", "GPU-c", "gpuwise", list(range(T0, end + 1, 15)), None)  # unpriced
    out = []
    for name, rows in lines.items():
        out += [f"# TYPE {name} gauge", *rows]
    return "\n".join([*out, "# EOF", ""])


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if PROMETHEUS is None or PROMTOOL is None:
        pytest.skip("needs prometheus and promtool (Debian package prometheus)")
    tmp = tmp_path_factory.mktemp("backfill")
    (tmp / "data.om").write_text(_openmetrics())
    subprocess.run(
        [
            PROMTOOL,
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            str(tmp / "data.om"),
            str(tmp / "db"),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (tmp / "prometheus.yml").write_text("global: {scrape_interval: 1m}\n")
    port = free_port()
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'db'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _query(base, "count(gpuwise_gpu_up)", T0 + 60), 60, "Prometheus")
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _query(base: str, expr: str, at: float) -> Any:
    q = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    try:
        with urllib.request.urlopen(f"{base}/api/v1/query?{q}", timeout=30) as r:
            result = json.load(r)["data"]["result"]
    except OSError:
        return None
    return float(result[0]["value"][1]) if result else None


@pytest.mark.slow
def test_report_prometheus_equals_the_recording_rules(backfilled: str) -> None:
    base, rec = backfilled, _records()
    start, end = float(T0), float(T0 + 3 * 3600)
    rep = build_report(PrometheusHistory(base).read(start, end), PriceBook(offers=()))
    # the rules, over the same minutes: evaluations 15 min behind, every minute of the window
    at = end + 15 * 60

    def rules_sum(record: str) -> float:
        value = _query(base, f"sum(sum_over_time(({_inline(record, rec)})[3h:1m])) / 60", at)
        assert value is not None, record
        return float(value)

    truth_rented = 3 * HOURS  # three GPUs, two hours each, every gap bridged, GPU-a once
    assert rules_sum("gpuwise:gpu_rented:bool") == pytest.approx(truth_rented)
    assert rep.allocated_hours == pytest.approx(truth_rented)
    cost = rules_sum("gpuwise:gpu_cost_usd_per_hour:billed")
    assert cost == pytest.approx(HOURS * (6.88 + 1.28))
    assert rep.cost_usd == pytest.approx(cost)
    assert rep.wasted_usd == pytest.approx(rules_sum("gpuwise:gpu_idle_cost_usd_per_hour:billed"))
    assert rep.unpriced_hours == pytest.approx(rules_sum("gpuwise:gpu_unpriced:bool"))
    assert rep.unpriced_hours == pytest.approx(HOURS)
    by_uuid = {g.uuid: g for g in rep.gpus}
    assert by_uuid["GPU-b"].usd_per_hour == pytest.approx(1.28)  # the exporter's spot price
    (plan,) = rep.plans  # dollars per plan: GPU-a's job, counted once though scraped twice
    assert (plan.plan_id, plan.cost_usd) == ("plan-q", pytest.approx(HOURS * 6.88))


@pytest.mark.slow
def test_fleet_takes_its_demand_from_the_same_prometheus(backfilled: str, cli: Any) -> None:
    """`fleet --demand-from-prometheus`: the GPUs the exporter served, each once however many
    jobs scrape it, with what monitoring saw of them (issue 30)."""
    r = cli("fleet", "--demand-from-prometheus", backfilled, "--since", "8h", "--json")
    assert r.code == 0, r.stderr
    (h100,) = r.json()["history"]
    assert h100["gpu"] == "H100" and h100["gpus_seen"] == 3  # GPU-a twice scraped, counted once
    # the rented hours the rules bill on the same data (crash loop and failed scrapes bridged)
    assert h100["rented_gpu_hours"] == pytest.approx(6.0)
    # no job held these GPUs (no allocation series): all idle, so nothing is reserved for them
    assert h100["allocated_gpu_hours"] == 0 and h100["idle_share"] == 1.0
    assert r.json()["commitments"] == []
    assert r.json()["demand"]["source"].startswith("history prometheus:")
