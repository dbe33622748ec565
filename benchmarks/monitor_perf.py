"""Monitoring speed and size goals (issue 7), measured on the fake NVML; prints a table.

    PYTHONPATH=src python benchmarks/monitor_perf.py [--days 30]

* exporter work per scrape of 8 GPUs with 50 processes (goal ≤ 5 ms): CPU time to render the
  latest snapshot to Prometheus text (383 lines), as /metrics does;
* CPU of sampling at 1 Hz (goal ≤ 1 % of a core): CPU seconds per read × 1/s, plus one scrape per
  15 s (the usual scrape interval). The fake NVML answers in microseconds; a real driver adds its
  own call latency (docs/monitoring.md);
* /metrics over loopback with 64 concurrent scrapers (goal: p99 ≤ 50 ms, no errors), the body
  size plain and gzipped (Prometheus asks for gzip);
* 30 days × 8 GPUs at 10 s in SQLite (goal ≤ 100 MB);
* a 24-hour report over that database (goal ≤ 1 s): read, analyse, and the HTML on top.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from gpuwise.monitor.exporter import GpuCollector
from gpuwise.monitor.fake import FakeGpuReader, parse_trace
from gpuwise.monitor.pricing import PriceBook
from gpuwise.monitor.report import build_report, report_to_dict
from gpuwise.monitor.store import HistoryStore


def eight_gpu_trace(processes: int = 50) -> dict[str, Any]:
    gpus = [
        {"name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-bench-{i}", "memory_total_mib": 81559}
        for i in range(8)
    ]
    frames = []
    for f in range(10):
        per_gpu: list[dict[str, Any]] = []
        for i in range(8):
            procs = [
                {
                    "pid": 10000 + p,
                    "memory_mib": 1000 + p,
                    "user": f"user{p % 5}",
                    "command": f"python job{p}.py",
                    "workload": f"team/job{p}",
                }
                for p in range(processes)
                if p % 8 == i
            ]
            per_gpu.append(
                {
                    "util": (f * 10 + i) % 100,
                    "sm_active": 0.5,
                    "tensor_active": 0.2,
                    "memory_used_mib": 40000 + i,
                    "power_w": 500,
                    "temperature_c": 60,
                    "pcie_tx_kb_s": 1000,
                    "pcie_rx_kb_s": 2000,
                    "processes": procs,
                }
            )
        frames.append({"gpus": per_gpu})
    return {"name": "bench", "interval_s": 1, "gpus": gpus, "frames": frames}


def bench_scrape_and_sampling(dcgm_compat: bool = False) -> tuple[float, float, float]:
    reader = FakeGpuReader(parse_trace(eight_gpu_trace(), "bench"))
    collector = GpuCollector(PriceBook(price_usd_per_hour=3.0, offers=()), dcgm_compat=dcgm_compat)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    for _ in range(3):
        collector.update(reader.read())
    # CPU time of the rendering thread: "exporter work", not disturbed by other processes on a busy host
    scrapes = []
    for _ in range(300):
        t = time.thread_time()
        generate_latest(registry)
        scrapes.append(time.thread_time() - t)
    cpu0 = time.process_time()
    n = 300
    for _ in range(n):
        collector.update(reader.read())
    read_cpu_s = (time.process_time() - cpu0) / n
    scrape_ms = statistics.median(scrapes) * 1000
    core_pct = (read_cpu_s * 1.0 + statistics.median(scrapes) / 15) * 100
    return scrape_ms, read_cpu_s * 1000, core_pct


def bench_concurrent_scrapes(
    scrapers: int = 64, per_scraper: int = 10, stalled: int = 0
) -> tuple[float, float, int, int, int]:
    """p50 and p99 latency (ms) of /metrics with ``scrapers`` threads scraping at once, errors, and
    the body size plain and gzipped (bytes). ``stalled`` connections that never send a byte are
    held open meanwhile (they must not take the exporter's workers)."""
    import gzip
    import http.client
    import json
    import subprocess
    import sys
    import threading
    import urllib.parse
    import urllib.request

    # the exporter in its own process, as deployed: the scraping threads here do not share its GIL
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "bench.json"
        trace.write_text(json.dumps(eight_gpu_trace()))
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuwise",
                "exporter",
                "--fake",
                str(trace),
                "--port",
                "0",
                "--interval",
                "1s",
                "--price-usd-per-hour",
                "3",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert proc.stdout is not None
        head, info = "", None
        try:
            while info is None:  # the --json object, printed before serving
                line = proc.stdout.readline()
                if not line:
                    raise RuntimeError("the exporter exited before serving")
                head += line
                if line.startswith("}"):
                    info = json.loads(head)
        except BaseException:  # never leave the exporter running behind a failed benchmark
            proc.terminate()
            proc.wait(timeout=20)
            raise
        url = info["metrics"]
        host, port = (
            urllib.parse.urlsplit(url).hostname or "127.0.0.1",
            urllib.parse.urlsplit(url).port or 9835,
        )
        import socket

        idle = [socket.create_connection((host, port), timeout=10) for _ in range(stalled)]
        latencies: list[float] = []
        errors = 0
        lock = threading.Lock()
        start = threading.Barrier(scrapers)

        def scrape() -> None:
            nonlocal errors
            start.wait()
            # http.client, one kept-alive connection per scraper, as Prometheus scrapes a target
            conn = http.client.HTTPConnection(host, port, timeout=10)
            for _ in range(per_scraper):
                t = time.perf_counter()
                try:
                    conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
                    conn.getresponse().read()
                    dt = time.perf_counter() - t
                    with lock:
                        latencies.append(dt)
                except (OSError, http.client.HTTPException):
                    with lock:
                        errors += 1
                    conn.close()
                    conn = http.client.HTTPConnection(host, port, timeout=10)
            conn.close()

        try:
            threads = [threading.Thread(target=scrape) for _ in range(scrapers)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            with urllib.request.urlopen(url, timeout=10) as r:
                plain = len(r.read())
            with urllib.request.urlopen(
                urllib.request.Request(url, headers={"Accept-Encoding": "gzip"}), timeout=10
            ) as r:
                zipped = r.read()
            assert gzip.decompress(zipped)
        finally:
            for s in idle:
                s.close()
            proc.terminate()
            proc.wait(timeout=20)
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000 if latencies else float("nan")
    p99 = (
        latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000
        if latencies
        else float("nan")
    )
    return p50, p99, errors, plain, len(zipped)


def fill_month(store: HistoryStore, days: float, end_s: float) -> int:
    rng = random.Random(7)
    gids = [
        store.register_gpu("node1", f"GPU-bench-{i}", i, "NVIDIA H100 80GB HBM3", 81559)
        for i in range(8)
    ]
    jobsets = [store._jobset_id((f"team/job{k}",)) for k in range(20)]
    step = 10
    t0 = int(end_s - days * 86400)
    t0 -= t0 % step
    batch: list[Any] = []
    rows = 0
    for ts in range(t0, int(end_s), step):
        hour = (ts - t0) // 3600
        for i, gid in enumerate(gids):
            busy = (hour + i) % 24 < 16  # 16 h a day busy, 8 h idle
            batch.append(
                (
                    gid,
                    ts,
                    step,
                    rng.randint(80, 100) * 10 if busy else rng.randint(0, 3) * 10,
                    rng.randint(400, 700) if busy else 0,
                    40000 + rng.randint(0, 30000) if busy else 500,
                    rng.randint(300, 700) if busy else 70,
                    rng.randint(50, 75) if busy else 30,
                    jobsets[(hour // 6 + i) % 20] if busy else None,
                )
            )
        if len(batch) >= 80_000:
            store.append_rows(batch)
            rows += len(batch)
            batch = []
    store.append_rows(batch)
    return rows + len(batch)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=30.0)
    args = ap.parse_args()
    scrape_ms, read_ms, core_pct = bench_scrape_and_sampling()
    dcgm_ms, _, _ = bench_scrape_and_sampling(dcgm_compat=True)
    p50, p99, errors, plain_b, gzip_b = bench_concurrent_scrapes()
    s50, s99, s_errors, _, _ = bench_concurrent_scrapes(stalled=500)
    end = 1_800_000_000.0
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "month.sqlite"
        with HistoryStore(db) as store:
            t = time.perf_counter()
            rows = fill_month(store, args.days, end)
            fill_s = time.perf_counter() - t
            store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            size_mb = store.size_bytes() / 1e6
            prices = PriceBook(price_usd_per_hour=3.0)
            _ = (
                prices.offers
            )  # load the catalog once, outside the timing (the CLI pays ~0.1 s for it)
            t = time.perf_counter()
            history = store.read(end - 86400, end)
            rep = build_report(history, prices)
            doc = report_to_dict(rep)
            report_s = time.perf_counter() - t
            from gpuwise.monitor.report_html import render_html

            t = time.perf_counter()
            render_html(rep, history, doc)
            html_s = time.perf_counter() - t
    print(f"{'measure':58s} {'value':>12s} {'goal':>10s}")
    print(
        f"{'render /metrics once per read, 8 GPUs + 50 processes (CPU ms)':58s} {scrape_ms:12.2f} {'≤ 5':>10s}"
    )
    print(f"{'  the same with --dcgm-compat (CPU ms)':58s} {dcgm_ms:12.2f} {'':>10s}")
    print(f"{'CPU per read of 8 GPUs, fake NVML (ms)':58s} {read_ms:12.2f} {'':>10s}")
    print(f"{'1 Hz sampling + 15 s scrapes, % of one core':58s} {core_pct:12.2f} {'≤ 1':>10s}")
    print(f"{'64 concurrent scrapers × 10, loopback: p50 (ms)':58s} {p50:12.1f} {'':>10s}")
    print(f"{'64 concurrent scrapers × 10, loopback: p99 (ms)':58s} {p99:12.1f} {'≤ 50':>10s}")
    print(f"{'64 concurrent scrapers × 10, loopback: errors':58s} {errors:12d} {'0':>10s}")
    print(f"{'the same beside 500 stalled connections: p50 (ms)':58s} {s50:12.1f} {'':>10s}")
    print(f"{'the same beside 500 stalled connections: p99 (ms)':58s} {s99:12.1f} {'':>10s}")
    print(f"{'the same beside 500 stalled connections: errors':58s} {s_errors:12d} {'0':>10s}")
    print(
        f"{'/metrics body, 8 GPUs + 50 processes: plain (KB)':58s} {plain_b / 1000:12.1f} {'':>10s}"
    )
    print(
        f"{'/metrics body, 8 GPUs + 50 processes: gzip (KB)':58s} {gzip_b / 1000:12.1f} {'':>10s}"
    )
    print(f"{f'{args.days:g} days × 8 GPUs at 10 s: rows':58s} {rows:12,d} {'':>10s}")
    print(
        f"{f'{args.days:g} days × 8 GPUs at 10 s: SQLite size (MB)':58s} {size_mb:12.1f} {'≤ 100':>10s}"
    )
    print(f"{'  (time to write them, s)':58s} {fill_s:12.1f} {'':>10s}")
    print(f"{'24-hour report: read + analyse (s)':58s} {report_s:12.3f} {'≤ 1':>10s}")
    print(f"{'24-hour report: HTML with charts on top (s)':58s} {html_s:12.3f} {'':>10s}")


if __name__ == "__main__":
    main()
