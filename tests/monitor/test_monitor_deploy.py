"""The deploy files: rules pass promtool's unit tests, the dashboard queries only series that exist,
the DaemonSet is well-formed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package prometheus)")


@pytest.mark.slow
@needs_promtool
def test_rules_pass_promtool_unit_tests() -> None:
    r = subprocess.run([PROMTOOL, "test", "rules", "gpuwise-rules.test.yml"], cwd=DEPLOY / "prometheus",  # type: ignore[list-item]
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout + r.stderr


@pytest.mark.slow
@needs_promtool
def test_promtool_unit_tests_catch_day_scaled_rules(tmp_path: Path) -> None:
    """The same unit tests fail on the old `avg_over_time(x[1d]) * 24` rules, which turned 2 hours
    at $10/h into $240 of waste."""
    shutil.copy(REPO / "tests/monitor/fixtures/rules_avg_over_time_1d.yml", tmp_path / "gpuwise-rules.yml")
    shutil.copy(DEPLOY / "prometheus/gpuwise-rules.test.yml", tmp_path)
    r = subprocess.run([PROMTOOL, "test", "rules", "gpuwise-rules.test.yml"], cwd=tmp_path,  # type: ignore[list-item]
                       capture_output=True, text=True, timeout=120, check=False)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "FAILED" in out
    assert 'gpuwise:gpu_wasted_usd:1d", time: 2h' in out and "2.4E+02" in out


@needs_promtool
def test_rules_and_example_config_check() -> None:
    for args in (["check", "rules", "gpuwise-rules.yml"], ["check", "config", "prometheus.example.yml"]):
        r = subprocess.run([PROMTOOL, *args], cwd=DEPLOY / "prometheus", capture_output=True, text=True,  # type: ignore[list-item]
                           timeout=60, check=False)
        assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_the_issue_asks_for_is_there() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus/gpuwise-rules.yml").read_text())
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}
    records = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    assert {"GpuwiseGpuMemoryHigh", "GpuwiseGpuAllocatedIdle", "GpuwiseGpuTemperatureHigh",
            "GpuwiseGpuThermalThrottling", "GpuwiseXidError", "GpuwiseExporterDown"} <= set(alerts)
    assert alerts["GpuwiseGpuMemoryHigh"]["for"] == "10m" and "0.85" in alerts["GpuwiseGpuMemoryHigh"]["expr"]
    assert alerts["GpuwiseGpuAllocatedIdle"]["for"] == "1h" and "0.05" in alerts["GpuwiseGpuAllocatedIdle"]["expr"]
    assert {"gpuwise:gpu_hours_active:1d", "gpuwise:gpu_hours_idle:1d", "gpuwise:gpu_cost_usd:1d",
            "gpuwise:gpu_wasted_usd:1d"} <= records


def _exported_names() -> set[str]:
    from gpuwise.monitor.exporter import GpuCollector
    from gpuwise.monitor.fake import FakeGpuReader
    from gpuwise.monitor.pricing import PriceBook

    names: set[str] = set()
    for scenario in ("idle", "xid", "mig", "thermal"):
        collector = GpuCollector(PriceBook(price_usd_per_hour=1))
        reader = FakeGpuReader.from_scenario(scenario)
        for _ in range(5):
            collector.update(reader.read())
        for fam in collector.collect():
            names.update(s.name for s in fam.samples)
    return names


def _metric_names(expr: str) -> set[str]:
    expr = re.sub(r'"[^"]*"', '""', expr)  # drop label values
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    words = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr))
    return {w for w in words if w.startswith("gpuwise")}


def test_dashboard_panels_query_series_that_exist() -> None:
    dash = json.loads((DEPLOY / "grafana/gpuwise-dashboard.json").read_text())
    rules = yaml.safe_load((DEPLOY / "prometheus/gpuwise-rules.yml").read_text())
    known = _exported_names() | {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    titles = " ".join(p["title"].lower() for p in dash["panels"])
    for topic in ("utilization", "memory", "power", "temperature", "cost", "wasted"):
        assert topic in titles, topic
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        for target in panel["targets"]:
            unknown = _metric_names(target["expr"]) - known
            assert not unknown, (panel["title"], unknown)


def test_rules_use_only_series_that_exist() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus/gpuwise-rules.yml").read_text())
    known = _exported_names() | {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    for g in rules["groups"]:
        for r in g["rules"]:
            assert not _metric_names(r["expr"]) - known, r


def test_daemonset_manifest() -> None:
    docs: list[dict[str, Any]] = list(yaml.safe_load_all((DEPLOY / "kubernetes/gpuwise-exporter-daemonset.yaml").read_text()))
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"Namespace", "DaemonSet", "Service"}
    ds = kinds["DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert pod["hostPID"] is True  # NVML reports host PIDs
    container = pod["containers"][0]
    assert container["command"][:2] == ["gpuwise", "exporter"] and "0.0.0.0" in container["command"]
    assert container["ports"][0]["containerPort"] == 9835
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert kinds["Service"]["spec"]["selector"] == ds["spec"]["selector"]["matchLabels"]
