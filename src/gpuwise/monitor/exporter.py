"""The Prometheus exporter: a sampler thread, a custom collector, and a small HTTP server.

The sampler reads the GPUs every ``interval_s`` into an immutable :class:`Snapshot`; a scrape
only renders the latest snapshot, so scrape cost does not depend on NVML latency. NVML errors
never stop the server: a failed read keeps the previous snapshot, counts the error and shows
in ``/healthz``. Metric names follow Prometheus conventions (``gpuwise_`` prefix, base units in
the name, ``_ratio`` for 0–1 fractions, ``_total`` counters); docs/monitoring.md lists them.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from gpuwise import __version__
from gpuwise.errors import InputError
from gpuwise.monitor.nvml import GpuReader
from gpuwise.monitor.pricing import PriceBook
from gpuwise.monitor.snapshot import THROTTLE_REASONS, Snapshot

log = logging.getLogger(__name__)

GPU_LABELS = ("gpu", "uuid", "model", "host")
_MHZ = 1e6


class GpuCollector(Collector):
    """Renders the latest snapshot as metric families; register it in any registry."""

    def __init__(self, prices: PriceBook | None = None) -> None:
        self.prices = prices
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self.read_errors_total = 0
        self.reads_total = 0
        self.last_read_s: float | None = None
        self.last_error: str | None = None
        self.nvml_errors: dict[str, int] = {}

    def update(self, snap: Snapshot, nvml_errors: dict[str, int] | None = None) -> None:
        with self._lock:
            self._snapshot = snap
            self.reads_total += 1
            self.last_read_s = time.time()
            if nvml_errors is not None:
                self.nvml_errors = dict(nvml_errors)

    def record_error(self, error: str) -> None:
        with self._lock:
            self.read_errors_total += 1
            self.last_error = error

    @property
    def snapshot(self) -> Snapshot | None:
        return self._snapshot

    def describe(self) -> Iterator[Metric]:
        return iter(())  # unchecked collector: families vary with what the GPUs support

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            snap = self._snapshot
            reads, errors, nvml_errors = self.reads_total, self.read_errors_total, dict(self.nvml_errors)
        exp_reads = CounterMetricFamily("gpuwise_exporter_reads", "GPU reads done by the sampler.")
        exp_reads.add_metric([], reads)
        exp_err = CounterMetricFamily("gpuwise_exporter_read_errors", "GPU reads that failed as a whole.")
        exp_err.add_metric([], errors)
        nvml_err = CounterMetricFamily("gpuwise_exporter_nvml_errors", "NVML call errors by metric (not "
                                       "counting unsupported fields).", labels=["metric"])
        for metric, n in sorted(nvml_errors.items()):
            nvml_err.add_metric([metric], n)
        yield from (exp_reads, exp_err, nvml_err)
        if snap is None:
            return
        ts = GaugeMetricFamily("gpuwise_exporter_last_read_timestamp_seconds", "Unix time of the latest GPU read.")
        ts.add_metric([], snap.timestamp_s)
        yield ts

        def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=[*GPU_LABELS, *extra])

        info = InfoMetricFamily("gpuwise_gpu", "Static facts about each GPU.", labels=[*GPU_LABELS, "driver_version"])
        up = gauge("gpuwise_gpu_up", "1 if the GPU answers NVML, 0 once it is lost (fell off the bus).")
        util = gauge("gpuwise_gpu_utilization_ratio", "Fraction of time any kernel ran (nvidia-smi utilization.gpu/100).")
        mutil = gauge("gpuwise_gpu_memory_utilization_ratio", "Fraction of time memory was read or written (utilization.memory/100).")
        sm = gauge("gpuwise_gpu_sm_active_ratio", "Fraction of SMs with a warp resident (GPM SM_UTIL, Hopper+).")
        tensor = gauge("gpuwise_gpu_tensor_active_ratio", "Fraction of cycles a tensor pipe was busy (GPM ANY_TENSOR_UTIL).")
        used = gauge("gpuwise_gpu_memory_used_bytes", "Used device memory (memory.used).")
        total = gauge("gpuwise_gpu_memory_total_bytes", "Device memory size (memory.total).")
        power = gauge("gpuwise_gpu_power_watts", "Board power draw (power.draw).")
        limit = gauge("gpuwise_gpu_power_limit_watts", "Enforced power limit (enforced.power.limit).")
        temp = gauge("gpuwise_gpu_temperature_celsius", "GPU temperature (temperature.gpu).")
        smclk = gauge("gpuwise_gpu_sm_clock_hertz", "SM clock (clocks.sm).")
        memclk = gauge("gpuwise_gpu_memory_clock_hertz", "Memory clock (clocks.mem).")
        thr = gauge("gpuwise_gpu_clock_event_active", "1 while a clock-event (throttle) reason is active "
                    "(clocks_event_reasons.*).", ("reason",))
        tx = gauge("gpuwise_gpu_pcie_tx_bytes_per_second", "PCIe transmit throughput.")
        rx = gauge("gpuwise_gpu_pcie_rx_bytes_per_second", "PCIe receive throughput.")
        ecc = CounterMetricFamily("gpuwise_gpu_ecc_errors", "ECC errors since driver load "
                                  "(ecc.errors.*.volatile.total).", labels=[*GPU_LABELS, "type"])
        xid = CounterMetricFamily("gpuwise_gpu_xid_errors", "XID critical errors seen since the exporter "
                                  "started, by XID code (NVML events).", labels=[*GPU_LABELS, "xid"])
        nproc = gauge("gpuwise_gpu_processes", "Compute processes holding memory on the GPU.")
        alloc = gauge("gpuwise_gpu_allocation_info", "1 per workload running on the GPU; join on uuid to "
                      "attribute GPU metrics to pods and jobs.", ("workload", "pod", "container"))
        proc_mem = gauge("gpuwise_process_gpu_memory_bytes", "GPU memory held by a process.",
                         ("pid", "user", "command", "workload", "pod", "container"))
        mig_used = gauge("gpuwise_mig_memory_used_bytes", "Used memory of a MIG instance.", ("mig_uuid", "gpu_instance"))
        mig_total = gauge("gpuwise_mig_memory_total_bytes", "Memory size of a MIG instance.", ("mig_uuid", "gpu_instance"))
        cost = gauge("gpuwise_gpu_cost_usd_per_hour", "What this GPU costs per hour (configured, or the "
                     "catalog price of the instance / GPU model).", ("price_source",))

        for g in snap.gpus:
            lv = [str(g.index), g.uuid, g.name, snap.host]
            info.add_metric([*lv, snap.driver_version or ""], {})
            up.add_metric(lv, 0.0 if g.lost else 1.0)
            for fam, value in ((util, g.utilization_gpu_ratio), (mutil, g.utilization_memory_ratio),
                               (sm, g.sm_active_ratio), (tensor, g.tensor_active_ratio),
                               (used, g.memory_used_bytes), (total, g.memory_total_bytes), (power, g.power_w),
                               (limit, g.power_limit_w), (temp, g.temperature_c),
                               (smclk, None if g.sm_clock_mhz is None else g.sm_clock_mhz * _MHZ),
                               (memclk, None if g.memory_clock_mhz is None else g.memory_clock_mhz * _MHZ),
                               (tx, g.pcie_tx_bytes_per_s), (rx, g.pcie_rx_bytes_per_s)):
                if value is not None:  # unsupported → no sample, never a sentinel
                    fam.add_metric(lv, float(value))
            if g.throttle_reasons_mask is not None:
                for reason, bit in THROTTLE_REASONS.items():
                    thr.add_metric([*lv, reason], 1.0 if g.throttle_reasons_mask & bit else 0.0)
            if g.ecc_corrected_total is not None:
                ecc.add_metric([*lv, "corrected"], g.ecc_corrected_total)
            if g.ecc_uncorrected_total is not None:
                ecc.add_metric([*lv, "uncorrected"], g.ecc_uncorrected_total)
            for code, n in g.xid_counts:
                xid.add_metric([*lv, str(code)], n)
            if not g.lost:
                nproc.add_metric(lv, len(g.processes))
            seen: set[tuple[str, str, str]] = set()
            for p in g.processes:
                pod, ctr = p.pod_uid or "", p.container_id or ""
                if (p.workload, pod, ctr) not in seen:
                    seen.add((p.workload, pod, ctr))
                    alloc.add_metric([*lv, p.workload, pod, ctr], 1.0)
                if p.gpu_memory_bytes is not None:
                    proc_mem.add_metric([*lv, str(p.pid), p.user or "", (p.command or "")[:80], p.workload, pod, ctr],
                                        p.gpu_memory_bytes)
            for m in g.mig_devices:
                ml = [*lv, m.uuid, "" if m.gpu_instance_id is None else str(m.gpu_instance_id)]
                if m.memory_used_bytes is not None:
                    mig_used.add_metric(ml, m.memory_used_bytes)
                if m.memory_total_bytes is not None:
                    mig_total.add_metric(ml, m.memory_total_bytes)
            if self.prices is not None:
                price = self.prices.price(g.name)
                if price.usd_per_gpu_hour is not None:
                    cost.add_metric([*lv, price.source], price.usd_per_gpu_hour)
        yield from (info, up, util, mutil, sm, tensor, used, total, power, limit, temp, smclk, memclk, thr, tx, rx,
                    ecc, xid, nproc, alloc, proc_mem, mig_used, mig_total, cost)


class Sampler:
    """Reads the GPUs every ``interval_s`` on a daemon thread and feeds a :class:`GpuCollector`."""

    def __init__(self, reader: GpuReader, collector: GpuCollector, interval_s: float) -> None:
        self.reader, self.collector, self.interval_s = reader, collector, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuwise-sampler", daemon=True)

    def read_once(self) -> None:
        try:
            snap = self.reader.read()
        except Exception as exc:  # keep serving the last snapshot; /healthz and a counter show it
            log.warning("GPU read failed: %s", exc)
            self.collector.record_error(f"{type(exc).__name__}: {exc}")
            return
        session = getattr(self.reader, "session", None)
        self.collector.update(snap, getattr(session, "error_counts", None))

    def _run(self) -> None:  # start() has done the first read
        next_t = time.monotonic() + self.interval_s
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            self.read_once()
            next_t += self.interval_s

    def start(self) -> None:
        self.read_once()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)


def _handler(registry: CollectorRegistry, collector: GpuCollector, interval_s: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = f"gpuwise-exporter/{__version__}"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                body, ctype, code = generate_latest(registry), CONTENT_TYPE_LATEST, 200
            elif path == "/healthz":
                age = None if collector.last_read_s is None else time.time() - collector.last_read_s
                ok = age is not None and age < max(10 * interval_s, 30)
                body = json.dumps({"status": "ok" if ok else "stale", "last_read_age_s": age,
                                   "reads": collector.reads_total, "read_errors": collector.read_errors_total,
                                   "last_error": collector.last_error}).encode()
                ctype, code = "application/json", 200 if ok else 503
            elif path == "/":
                body, ctype, code = b'<html><body><a href="/metrics">/metrics</a></body></html>', "text/html", 200
            else:
                body, ctype, code = b"not found\n", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.address_string(), *args)

    return Handler


class Exporter:
    """``gpuwise exporter`` as a library object: start, serve, stop.

    >>> exp = Exporter(FakeGpuReader.from_scenario("idle"), port=0)  # doctest: +SKIP
    >>> exp.start(); exp.url; exp.stop()                              # doctest: +SKIP
    """

    def __init__(self, reader: GpuReader, *, host: str = "127.0.0.1", port: int = 9835, interval_s: float = 1.0,
                 prices: PriceBook | None = None, registry: CollectorRegistry | None = None) -> None:
        if not 0 <= port <= 65535:
            raise InputError(f"port must be 0-65535, got {port}", hint="give a free TCP port, e.g. 9835")
        if not interval_s > 0:
            raise InputError(f"interval_s must be positive, got {interval_s}", hint="give e.g. interval_s=1.0")
        self.reader = reader
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
        self.collector = GpuCollector(prices)
        self.registry.register(self.collector)
        self.sampler = Sampler(reader, self.collector, interval_s)
        try:
            self.server = ThreadingHTTPServer((host, port), _handler(self.registry, self.collector, interval_s))
        except OSError as exc:
            raise InputError(f"cannot listen on {host}:{port}: {exc.strerror}",
                             hint="pick another --port or stop what uses it") from exc
        self.server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self._prepared = False

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}" if isinstance(host, str) else f"http://{host.decode()}:{port}"

    def _check_prices(self) -> None:
        """Resolve every GPU's price now, so a bad --instance-type fails at start, not in a scrape."""
        snap, prices = self.collector.snapshot, self.collector.prices
        if snap is not None and prices is not None:
            try:
                for g in snap.gpus:
                    prices.price(g.name)
            except Exception:
                self.stop()
                raise

    def prepare(self) -> None:
        """First read, sampler thread started, prices resolved; errors here stop the exporter."""
        if not self._prepared:
            self._prepared = True
            self.sampler.start()
            self._check_prices()

    def start(self) -> None:
        """Start sampling and serving in background threads."""
        self.prepare()
        self._thread = threading.Thread(target=self.server.serve_forever, name="gpuwise-http", daemon=True)
        self._thread.start()

    def serve_forever(self) -> None:
        """Start sampling and serve in this thread until interrupted."""
        self.prepare()
        try:
            self.server.serve_forever()
        finally:
            self.stop()

    def stop(self) -> None:
        self.sampler.stop()
        if self._thread is not None:  # serve_forever() runs in our thread: it has already returned
            self.server.shutdown()
            self._thread = None
        self.server.server_close()
        self.reader.close()
