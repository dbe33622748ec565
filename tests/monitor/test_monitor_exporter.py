"""The exporter over loopback: metric names and labels, absent-not-sentinel, lost GPUs, health,
serving through NVML errors, and a lint by promtool."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuwise.errors import InputError
from gpuwise.monitor.exporter import Exporter, GpuCollector
from gpuwise.monitor.fake import FakeGpuReader
from gpuwise.monitor.pricing import PriceBook


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _samples(text: str) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


@pytest.fixture
def exporter_for() -> Iterator[Any]:
    started: list[Exporter] = []

    def start(reader: Any, **kwargs: Any) -> Exporter:
        exp = Exporter(
            reader, port=0, interval_s=3600, **kwargs
        )  # one read at start; tests step by hand
        exp.start()
        started.append(exp)
        return exp

    yield start
    for exp in started:
        exp.stop()


def test_metrics_names_labels_and_values(exporter_for: Any) -> None:
    exp = exporter_for(
        FakeGpuReader.from_scenario("idle"), prices=PriceBook(price_usd_per_hour=3.5)
    )
    exp.sampler.read_once()  # second read: GPM SM-active needs two samples
    code, text = _get(exp.url + "/metrics")
    assert code == 200
    s = _samples(text)
    util = {x.labels["gpu"]: x for x in s["gpuwise_gpu_utilization_ratio"]}
    assert util["0"].value == pytest.approx(0.97)
    assert set(util["0"].labels) == {"gpu", "uuid", "model", "host"}
    assert (
        util["0"].labels["model"] == "NVIDIA H100 80GB HBM3"
        and util["0"].labels["host"] == "fake-idle"
    )
    assert {x.labels["gpu"]: x.value for x in s["gpuwise_gpu_sm_active_ratio"]} == {
        "0": 0.62,
        "1": 0.0,
    }
    assert {x.labels["gpu"]: x.value for x in s["gpuwise_gpu_cost_usd_per_hour"]} == {
        "0": 3.5,
        "1": 3.5,
    }
    assert s["gpuwise_gpu_memory_total_bytes"][0].value == 81559 * 1024**2
    assert {x.labels["gpu"]: x.value for x in s["gpuwise_gpu_processes"]} == {"0": 1, "1": 0}
    alloc = s["gpuwise_gpu_allocation_info"]
    assert [(a.labels["gpu"], a.labels["workload"]) for a in alloc] == [("0", "alice/train")]
    proc = s["gpuwise_process_gpu_memory_bytes"][0]
    assert (
        proc.labels["pid"] == "4242"
        and proc.labels["user"] == "alice"
        and proc.value == 60000 * 1024**2
    )
    assert {x.labels["reason"] for x in s["gpuwise_gpu_clock_event_active"] if x.value == 1} == {
        "gpu_idle"
    }
    assert s["gpuwise_gpu_sm_clock_hertz"][0].value == 1980e6


def test_unsupported_metrics_are_absent_not_sentinels(exporter_for: Any) -> None:
    exp = exporter_for(FakeGpuReader.from_scenario("mig"))
    exp.sampler.read_once()  # GPM rates need two samples
    s = _samples(_get(exp.url + "/metrics")[1])
    assert "gpuwise_gpu_utilization_ratio" not in s  # MIG mode: NVML has no whole-GPU utilization
    assert "gpuwise_gpu_sm_active_ratio" not in s  # MIG mode: no whole-GPU GPM
    assert len(s["gpuwise_mig_memory_used_bytes"]) == 5  # 3 instances on GPU 0, 2 on GPU 1
    assert {x.labels["gpu"] for x in s["gpuwise_mig_sm_active_ratio"]} == {
        "1"
    }  # A100: no GPM; H100 per instance
    assert s["gpuwise_gpu_memory_used_bytes"][0].value == 15000 * 1024**2


def test_lost_gpu_and_xid_counter(exporter_for: Any) -> None:
    exp = exporter_for(FakeGpuReader.from_scenario("xid"))
    for _ in range(5):
        exp.sampler.read_once()
    s = _samples(_get(exp.url + "/metrics")[1])
    assert {x.labels["gpu"]: x.value for x in s["gpuwise_gpu_up"]} == {"0": 1.0, "1": 0.0}
    xid = s["gpuwise_gpu_xid_errors_total"]
    assert [(x.labels["gpu"], x.labels["xid"], x.value) for x in xid] == [("1", "79", 1.0)]
    assert {x.labels["gpu"] for x in s["gpuwise_gpu_power_watts"]} == {
        "0"
    }  # nothing from the lost GPU


class _Flaky:
    """A reader that works once, then fails every read (a driver hiccup)."""

    def __init__(self) -> None:
        self.inner = FakeGpuReader.from_scenario("idle")
        self.reads = 0

    def read(self) -> Any:
        self.reads += 1
        if self.reads > 1:
            raise RuntimeError("driver went away")
        return self.inner.read()

    def close(self) -> None:
        self.inner.close()


def test_keeps_serving_through_read_errors(exporter_for: Any) -> None:
    exp = exporter_for(_Flaky())
    exp.sampler.read_once()
    exp.sampler.read_once()
    code, text = _get(exp.url + "/metrics")
    assert code == 200
    s = _samples(text)
    assert s["gpuwise_exporter_read_errors_total"][0].value == 2
    assert s["gpuwise_gpu_utilization_ratio"]  # the last good snapshot is still served
    code, body = _get(exp.url + "/healthz")
    health = json.loads(body)
    assert code == 200 and health["read_errors"] == 2 and "driver went away" in health["last_error"]


def test_healthz_and_not_found(exporter_for: Any) -> None:
    exp = exporter_for(FakeGpuReader.from_scenario("idle"))
    code, body = _get(exp.url + "/healthz")
    assert code == 200 and json.loads(body)["status"] == "ok"
    assert _get(exp.url + "/nope")[0] == 404
    assert exp.url.startswith("http://127.0.0.1:")  # loopback unless asked otherwise


def test_injectable_registry() -> None:
    registry = CollectorRegistry(auto_describe=False)
    exp = Exporter(FakeGpuReader.from_scenario("idle"), port=0, registry=registry)
    try:
        exp.sampler.read_once()
        assert (
            registry.get_sample_value(
                "gpuwise_gpu_processes",
                {
                    "gpu": "0",
                    "uuid": exp.collector.snapshot.gpus[0].uuid,  # type: ignore[union-attr]
                    "model": "NVIDIA H100 80GB HBM3",
                    "host": "fake-idle",
                },
            )
            == 1
        )
    finally:
        exp.server.server_close()


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"port": 70000}, "^port must be"),  # a library error names the argument, not a CLI flag
        ({"interval_s": 0}, "^interval_s must be positive"),
        ({"interval_s": float("nan")}, "^interval_s must be positive"),
    ],
)
def test_bad_settings(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        Exporter(FakeGpuReader.from_scenario("idle"), **{"port": 0, **kwargs})


def test_port_in_use_is_a_clear_error(exporter_for: Any) -> None:
    exp = exporter_for(FakeGpuReader.from_scenario("idle"))
    port = int(exp.url.rsplit(":", 1)[1])
    with pytest.raises(InputError, match="cannot listen"):
        Exporter(FakeGpuReader.from_scenario("idle"), port=port)


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)"
)
@pytest.mark.parametrize("name", ["idle", "leak", "thermal", "xid", "mig"])
def test_exposition_passes_promtool_lint(exporter_for: Any, name: str) -> None:
    exp = exporter_for(FakeGpuReader.from_scenario(name), prices=PriceBook(price_usd_per_hour=2))
    exp.sampler.read_once()
    text = _get(exp.url + "/metrics")[1]
    r = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, r.stdout + r.stderr


GOLDEN = Path(__file__).parent / "golden" / "exposition_thermal.txt"


def test_exposition_golden() -> None:
    """The exact /metrics text for the thermal scenario (3 reads). Rerun with GPUWISE_UPDATE_GOLDEN=1
    after a deliberate change of names, labels or help texts."""
    collector = GpuCollector(
        PriceBook(price_usd_per_hour=2.5, offers=()), start_time_s=1_799_999_000.0
    )
    reader = FakeGpuReader.from_scenario("thermal", clock=lambda: 1_800_000_000.0)
    for _ in range(3):
        collector.update(reader.read())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    if os.environ.get("GPUWISE_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
