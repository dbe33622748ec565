"""The exporter step of the GPU proof: ``gpuwise exporter`` on real NVML, scraped by a real
Prometheus when one is installed (else by this module), with which metrics came and what a scrape
costs. Prometheus and the exporter run on loopback only."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from gpuwise.bench.proof.report import StepResult, Table, fmt, pct, rows
from gpuwise.bench.proof.steps import Context, StepTimeout, gpuwise_cmd, kill_group, run_for_step


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sample_names(exposition: str) -> set[str]:
    """Metric names that carry at least one sample in Prometheus text exposition."""
    names = set()
    for line in exposition.splitlines():
        if line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return names


def _get(url: str, timeout_s: float = 5.0) -> tuple[bytes, float]:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=timeout_s) as r:  # loopback only
        body = r.read()
    return body, time.perf_counter() - start


def _cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def exporter_step(ctx: Context) -> StepResult:
    """``gpuwise exporter`` on real NVML for 30 s (10 s with --quick), scraped every second by a
    real Prometheus when one is installed, else by this script; the metric names are compared
    with what the exporter serves from its fake GPU (which fills every metric it knows)."""
    seconds = ctx.exporter_seconds or (10.0 if ctx.quick else 30.0)
    expected: set[str] = set()
    for scenario in ("idle", "mig"):
        child = run_for_step(ctx, gpuwise_cmd("exporter", "--fake", scenario, "--once"), cap_s=30)
        expected |= sample_names(child.stdout) if child.returncode == 0 else set()
    port = free_port()
    log = (ctx.out / "exporter.log").open("w")
    fake = ["--fake", ctx.exporter_fake] if ctx.exporter_fake else []
    proc = subprocess.Popen(
        gpuwise_cmd("exporter", "--port", str(port), "--interval", "1s", *fake),
        stdout=log,
        stderr=subprocess.STDOUT,
        env=ctx.env or None,
        start_new_session=True,
    )
    prom: subprocess.Popen[bytes] | None = None
    try:
        base = f"http://127.0.0.1:{port}"
        log.flush()
        _wait_http(f"{base}/healthz", min(20.0, ctx.remaining()), proc, ctx.out / "exporter.log")
        cpu0, t0 = _cpu_seconds(proc.pid), time.monotonic()
        prometheus = shutil.which("prometheus")
        prom_port = free_port()
        if prometheus:
            prom = _start_prometheus(prometheus, ctx.scratch / "prometheus", port, prom_port)
            # Prometheus applies new targets after up to 5 s: the 30 s start at the first scrape
            _wait_until(
                lambda: _prometheus_stats(prom_port)["scrapes"] is not None,
                min(20.0, ctx.remaining() / 2),
            )
        scrapes: list[tuple[int, float]] = []
        end = time.monotonic() + min(seconds, max(ctx.remaining() - 10, 1))
        while time.monotonic() < end:
            if not prom:
                body, took = _get(f"{base}/metrics")
                scrapes.append((len(body), took))
            time.sleep(1.0)
        body, took = _get(f"{base}/metrics")
        scrapes.append((len(body), took))
        cpu1, t1 = _cpu_seconds(proc.pid), time.monotonic()
        (ctx.out / "exporter-metrics.txt").write_bytes(body)
        prom_stats = _prometheus_stats(prom_port) if prom else None
    finally:
        for p in (prom, proc):
            if p is not None:
                kill_group(p, signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    kill_group(p, signal.SIGKILL)
        log.close()
    present = sample_names(body.decode(errors="replace"))
    absent = sorted(expected - present)
    cpu_share = None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / (t1 - t0)
    scrape_ms = sorted(1000 * t for _, t in scrapes)
    cost: dict[str, Any] = {
        "scraper": "prometheus" if prom_stats else "direct",
        "scrape_bytes": len(body),
        "direct_scrape_ms_median": scrape_ms[len(scrape_ms) // 2],
        "exporter_cpu_share": cpu_share,
        "prometheus": prom_stats,
    }
    gpuwise_present = sorted(n for n in present if n.startswith("gpuwise_"))
    table = Table(
        f"exporter on {'the fake GPU ' + repr(ctx.exporter_fake) if ctx.exporter_fake else 'real NVML'}",
        ("figure", "value"),
        rows(
            [
                (
                    "scraped by",
                    cost["scraper"]
                    + (
                        f" ({fmt(prom_stats.get('scrapes'), '.0f')} scrapes, {pct(prom_stats.get('up_ratio'))} up)"
                        if prom_stats
                        else f" ({len(scrapes)} scrapes)"
                    ),
                ),
                (
                    "scrape duration, Prometheus mean / max (ms)",
                    f"{fmt(prom_stats.get('scrape_ms_mean'))} / {fmt(prom_stats.get('scrape_ms_max'))}"
                    if prom_stats
                    else "—",
                ),
                ("scrape duration, direct median (ms)", fmt(cost["direct_scrape_ms_median"])),
                ("exposition size (bytes)", len(body)),
                ("exporter CPU (share of one core)", pct(cpu_share)),
                (
                    "gpuwise metrics present",
                    f"{len(gpuwise_present)}: {', '.join(gpuwise_present)}",
                ),
                ("absent (served with the fake GPU, not here)", ", ".join(absent) or "none"),
            ]
        ),
    )
    data = {
        "present": sorted(present),
        "absent": absent,
        "expected_from_fake": sorted(expected),
        "cost": cost,
    }
    summary = f"{len(gpuwise_present)} gpuwise metrics present, {len(absent)} absent; scraped by {cost['scraper']}"
    if not any(n.startswith("gpuwise_gpu_") for n in present):
        return StepResult(
            "exporter",
            "fail",
            0.0,
            reason="the exporter served no per-GPU gpuwise_gpu_* metric (see exporter.log)",
            tables=(table,),
            data=data,
        )
    return StepResult("exporter", "ok", 0.0, summary, tables=(table,), data=data)


def _wait_http(
    url: str,
    timeout_s: float,
    proc: subprocess.Popen[Any],
    log: Path | None = None,
    what: str = "the exporter",
) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            lines = (
                [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
                if log and log.is_file()
                else []
            )
            said = f": {lines[-1][:300]}" if lines else ""
            raise RuntimeError(f"{what} exited {proc.returncode} before serving{said}")
        try:
            _get(url, 2)
            return
        except OSError:
            time.sleep(0.2)
    raise StepTimeout(f"{url} did not answer within {timeout_s:.0f} s")


def _wait_until(ready: Any, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and not ready():
        time.sleep(0.5)


def _start_prometheus(
    binary: str, folder: Path, target_port: int, port: int
) -> subprocess.Popen[bytes]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
        f"scrape_configs:\n  - job_name: gpuwise\n    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]\n"
    )
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _wait_http(f"http://127.0.0.1:{port}/-/ready", 20.0, proc, what="prometheus")
    return proc


def _prometheus_stats(port: int) -> dict[str, Any]:
    def query(q: str) -> float | None:
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
        try:
            result = json.loads(_get(url)[0])["data"]["result"]
            return float(result[0]["value"][1]) if result else None
        except (OSError, ValueError, KeyError, IndexError):
            return None

    window = 'job="gpuwise"}[10m]'
    mean, peak = (
        query(f"avg_over_time(scrape_duration_seconds{{{window})"),
        query(f"max_over_time(scrape_duration_seconds{{{window})"),
    )
    return {
        "scrapes": query(f"count_over_time(up{{{window})"),
        "up_ratio": query(f"avg_over_time(up{{{window})"),
        "scrape_ms_mean": None if mean is None else mean * 1000,
        "scrape_ms_max": None if peak is None else peak * 1000,
        "samples_scraped": query(f"max_over_time(scrape_samples_scraped{{{window})"),
    }
