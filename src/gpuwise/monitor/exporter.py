"""The Prometheus exporter: a sampler thread, a custom collector, and a small HTTP server.

The sampler reads the GPUs every ``interval_s`` into an immutable :class:`Snapshot`; a scrape
only renders the latest snapshot, so scrape cost does not depend on NVML latency. NVML errors
never stop the server: a failed read keeps the previous snapshot, counts the error and shows
in ``/healthz``. Metric names follow Prometheus conventions (``gpuwise_`` prefix, base units in
the name, ``_ratio`` for 0–1 fractions, ``_total`` counters); docs/monitoring.md lists them.
"""

from __future__ import annotations

import gzip
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

from gpuwise.base.version import __version__
from gpuwise.errors import InputError
from gpuwise.monitor.nvml import GpuReader
from gpuwise.monitor.pricing import PriceBook
from gpuwise.monitor.snapshot import THROTTLE_REASONS, Snapshot

log = logging.getLogger(__name__)

GPU_LABELS = ("gpu", "uuid", "model", "host")
MIG_LABELS = ("mig_uuid", "gpu_instance", "profile")
K8S_LABELS = ("namespace", "pod", "container", "pod_uid", "container_id")
MAX_PROCESS_SERIES = 64
"""Per-process series kept per GPU (largest memory first); the rest are counted in
``gpuwise_exporter_process_series_dropped`` so a fork bomb cannot blow up Prometheus."""
_MHZ = 1e6


class GpuCollector(Collector):
    """Renders the latest snapshot as metric families; register it in any registry."""

    def __init__(
        self, prices: PriceBook | None = None, max_process_series: int = MAX_PROCESS_SERIES
    ) -> None:
        self.prices = prices
        self.max_process_series = max_process_series
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
            reads, errors, nvml_errors = (
                self.reads_total,
                self.read_errors_total,
                dict(self.nvml_errors),
            )
        exp_reads = CounterMetricFamily("gpuwise_exporter_reads", "GPU reads done by the sampler.")
        exp_reads.add_metric([], reads)
        exp_err = CounterMetricFamily(
            "gpuwise_exporter_read_errors", "GPU reads that failed as a whole."
        )
        exp_err.add_metric([], errors)
        nvml_err = CounterMetricFamily(
            "gpuwise_exporter_nvml_errors",
            "NVML call errors by metric (not counting unsupported fields).",
            labels=["metric"],
        )
        for metric, n in sorted(nvml_errors.items()):
            nvml_err.add_metric([metric], n)
        yield from (exp_reads, exp_err, nvml_err)
        if snap is None:
            return
        ts = GaugeMetricFamily(
            "gpuwise_exporter_last_read_timestamp_seconds", "Unix time of the latest GPU read."
        )
        ts.add_metric([], snap.timestamp_s)
        yield ts

        def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=[*GPU_LABELS, *extra])

        info = InfoMetricFamily(
            "gpuwise_gpu", "Static facts about each GPU.", labels=[*GPU_LABELS, "driver_version"]
        )
        up = gauge(
            "gpuwise_gpu_up", "1 if the GPU answers NVML, 0 once it is lost (fell off the bus)."
        )
        util = gauge(
            "gpuwise_gpu_utilization_ratio",
            "Fraction of time any kernel ran (nvidia-smi utilization.gpu/100).",
        )
        mutil = gauge(
            "gpuwise_gpu_memory_utilization_ratio",
            "Fraction of time memory was read or written (utilization.memory/100).",
        )
        sm = gauge(
            "gpuwise_gpu_sm_active_ratio",
            "Fraction of SMs with a warp resident (GPM SM_UTIL, Hopper+).",
        )
        tensor = gauge(
            "gpuwise_gpu_tensor_active_ratio",
            "Fraction of cycles a tensor pipe was busy (GPM ANY_TENSOR_UTIL).",
        )
        used = gauge("gpuwise_gpu_memory_used_bytes", "Used device memory (memory.used).")
        total = gauge("gpuwise_gpu_memory_total_bytes", "Device memory size (memory.total).")
        power = gauge("gpuwise_gpu_power_watts", "Board power draw (power.draw).")
        limit = gauge(
            "gpuwise_gpu_power_limit_watts", "Enforced power limit (enforced.power.limit)."
        )
        temp = gauge("gpuwise_gpu_temperature_celsius", "GPU temperature (temperature.gpu).")
        smclk = gauge("gpuwise_gpu_sm_clock_hertz", "SM clock (clocks.sm).")
        memclk = gauge("gpuwise_gpu_memory_clock_hertz", "Memory clock (clocks.mem).")
        thr = gauge(
            "gpuwise_gpu_clock_event_active",
            "1 while a clock-event (throttle) reason is active (clocks_event_reasons.*).",
            ("reason",),
        )
        tx = gauge("gpuwise_gpu_pcie_tx_bytes_per_second", "PCIe transmit throughput.")
        rx = gauge("gpuwise_gpu_pcie_rx_bytes_per_second", "PCIe receive throughput.")
        ecc = CounterMetricFamily(
            "gpuwise_gpu_ecc_errors",
            "ECC errors since driver load (ecc.errors.*.volatile.total).",
            labels=[*GPU_LABELS, "type"],
        )
        xid = CounterMetricFamily(
            "gpuwise_gpu_xid_errors",
            "XID critical errors seen since the exporter started, by XID code (NVML events).",
            labels=[*GPU_LABELS, "xid"],
        )
        nproc = gauge("gpuwise_gpu_processes", "Compute processes holding memory on the GPU.")
        alloc = gauge(
            "gpuwise_gpu_allocation_info",
            "1 per workload running on the GPU (and MIG instance, "
            "mig_uuid); join on uuid to attribute GPU metrics to pods and jobs.",
            ("workload", *K8S_LABELS, "mig_uuid"),
        )
        proc_mem = gauge(
            "gpuwise_process_gpu_memory_bytes",
            "GPU memory held by a process (nvidia-smi --query-compute-apps=used_memory).",
            ("pid", "user", "command", "workload", *K8S_LABELS, "mig_uuid"),
        )
        proc_sm = gauge(
            "gpuwise_process_sm_utilization_ratio",
            "Share of time a process had a kernel on the "
            "SMs (nvidia-smi pmon: sm / 100; NVML process utilization).",
            ("pid", "user", "command", "workload", *K8S_LABELS, "mig_uuid"),
        )
        dropped = gauge(
            "gpuwise_exporter_process_series_dropped",
            "Processes left out of the per-process series this read (more than the per-GPU cap).",
        )
        mig_used = gauge(
            "gpuwise_mig_memory_used_bytes",
            "Used memory of a MIG instance (nvidia-smi "
            "--query-gpu=memory.used on the MIG device; DCGM_FI_DEV_FB_USED per instance).",
            MIG_LABELS,
        )
        mig_total = gauge(
            "gpuwise_mig_memory_total_bytes", "Memory size of a MIG instance.", MIG_LABELS
        )
        mig_slices = gauge(
            "gpuwise_mig_slices", "Compute slices of a MIG instance (the 1 of 1g.10gb).", MIG_LABELS
        )
        mig_procs = gauge(
            "gpuwise_mig_processes", "Compute processes running in a MIG instance.", MIG_LABELS
        )
        mig_sm = gauge(
            "gpuwise_mig_sm_active_ratio",
            "SM-active of a MIG instance (GPM per instance, Hopper+; "
            "DCGM_FI_PROF_SM_ACTIVE per GPU instance).",
            MIG_LABELS,
        )
        slices_total = gauge(
            "gpuwise_mig_gpu_slices",
            "Compute slices of a GPU in MIG mode (7 on A100/H100); "
            "slices in no instance are unallocated.",
        )
        energy = CounterMetricFamily(
            "gpuwise_gpu_energy_joules",
            "Energy since the driver loaded "
            "(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION; NVML total energy consumption).",
            labels=list(GPU_LABELS),
        )
        memtemp = gauge(
            "gpuwise_gpu_memory_temperature_celsius",
            "HBM temperature (temperature.memory; DCGM_FI_DEV_MEMORY_TEMP).",
        )
        remap = gauge(
            "gpuwise_gpu_remapped_rows",
            "Rows remapped, by cause (nvidia-smi -q -d ROW_REMAPPER; "
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS / _UNCORRECTABLE_REMAPPED_ROWS).",
            ("cause",),
        )
        remap_pending = gauge(
            "gpuwise_gpu_row_remap_pending",
            "1 while a row remap waits for a GPU reset (ROW_REMAPPER Pending).",
        )
        remap_failed = gauge(
            "gpuwise_gpu_row_remap_failure",
            "1 once row remapping failed: no spare rows (DCGM_FI_DEV_ROW_REMAP_FAILURE).",
        )
        replay = CounterMetricFamily(
            "gpuwise_gpu_pcie_replays",
            "PCIe replays since reset (nvidia-smi -q: "
            "Replays Since Reset; DCGM_FI_DEV_PCIE_REPLAY_COUNTER).",
            labels=list(GPU_LABELS),
        )
        nvl_tx = CounterMetricFamily(
            "gpuwise_gpu_nvlink_tx_bytes",
            "NVLink data sent, all links (NVML field "
            "NVLINK_THROUGHPUT_DATA_TX; rate() gives DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL's "
            "send half).",
            labels=list(GPU_LABELS),
        )
        nvl_rx = CounterMetricFamily(
            "gpuwise_gpu_nvlink_rx_bytes",
            "NVLink data received, all links (NVML field NVLINK_THROUGHPUT_DATA_RX).",
            labels=list(GPU_LABELS),
        )
        nvl_err = CounterMetricFamily(
            "gpuwise_gpu_nvlink_errors",
            "NVLink errors, all links, by kind: crc_flit, "
            "replay, recovery (DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, "
            "_REPLAY_ERROR_COUNT_TOTAL, _RECOVERY_ERROR_COUNT_TOTAL).",
            labels=[*GPU_LABELS, "kind"],
        )
        dram = gauge(
            "gpuwise_gpu_dram_active_ratio",
            "Fraction of time device memory was busy (GPM DRAM_BW_UTIL, "
            "Hopper+; DCGM_FI_PROF_DRAM_ACTIVE).",
        )
        occ = gauge(
            "gpuwise_gpu_sm_occupancy_ratio",
            "Resident warps / maximum per SM (GPM SM_OCCUPANCY; DCGM_FI_PROF_SM_OCCUPANCY).",
        )
        enc = gauge(
            "gpuwise_gpu_encoder_utilization_ratio",
            "Video encoder utilization (utilization.encoder/100; DCGM_FI_DEV_ENC_UTIL).",
        )
        dec = gauge(
            "gpuwise_gpu_decoder_utilization_ratio",
            "Video decoder utilization (utilization.decoder/100; DCGM_FI_DEV_DEC_UTIL).",
        )
        cost = gauge(
            "gpuwise_gpu_cost_usd_per_hour",
            "What this GPU costs per hour (configured, or the "
            "catalog price of the instance / GPU model).",
            ("price_source",),
        )

        for g in snap.gpus:
            lv = [str(g.index), g.uuid, g.name, snap.host]
            info.add_metric([*lv, snap.driver_version or ""], {})
            up.add_metric(lv, 0.0 if g.lost else 1.0)
            for fam, value in (
                (util, g.utilization_gpu_ratio),
                (mutil, g.utilization_memory_ratio),
                (sm, g.sm_active_ratio),
                (tensor, g.tensor_active_ratio),
                (used, g.memory_used_bytes),
                (total, g.memory_total_bytes),
                (power, g.power_w),
                (limit, g.power_limit_w),
                (temp, g.temperature_c),
                (smclk, None if g.sm_clock_mhz is None else g.sm_clock_mhz * _MHZ),
                (memclk, None if g.memory_clock_mhz is None else g.memory_clock_mhz * _MHZ),
                (tx, g.pcie_tx_bytes_per_s),
                (rx, g.pcie_rx_bytes_per_s),
                (energy, g.energy_joules_total),
                (memtemp, g.memory_temperature_c),
                (remap_pending, None if g.remap_pending is None else float(g.remap_pending)),
                (remap_failed, None if g.remap_failed is None else float(g.remap_failed)),
                (replay, g.pcie_replay_total),
                (nvl_tx, g.nvlink_tx_bytes_total),
                (nvl_rx, g.nvlink_rx_bytes_total),
                (dram, g.dram_active_ratio),
                (occ, g.sm_occupancy_ratio),
                (enc, g.encoder_utilization_ratio),
                (dec, g.decoder_utilization_ratio),
                (slices_total, g.mig_slices_total),
            ):
                if value is not None:  # unsupported → no sample, never a sentinel
                    fam.add_metric(lv, float(value))
            if g.throttle_reasons_mask is not None:
                for reason, bit in THROTTLE_REASONS.items():
                    thr.add_metric([*lv, reason], 1.0 if g.throttle_reasons_mask & bit else 0.0)
            if g.ecc_corrected_total is not None:
                ecc.add_metric([*lv, "corrected"], g.ecc_corrected_total)
            if g.ecc_uncorrected_total is not None:
                ecc.add_metric([*lv, "uncorrected"], g.ecc_uncorrected_total)
            if g.remapped_rows_correctable is not None:
                remap.add_metric([*lv, "correctable"], g.remapped_rows_correctable)
            if g.remapped_rows_uncorrectable is not None:
                remap.add_metric([*lv, "uncorrectable"], g.remapped_rows_uncorrectable)
            for kind, n in g.nvlink_errors:
                nvl_err.add_metric([*lv, kind], n)
            for code, n in g.xid_counts:
                xid.add_metric([*lv, str(code)], n)
            if not g.lost:
                nproc.add_metric(lv, len(g.processes))
            mig_of = {m.gpu_instance_id: m.uuid for m in g.mig_devices}
            seen: set[tuple[str, ...]] = set()
            for p in g.processes:
                k8s = [
                    p.namespace or "",
                    p.pod or "",
                    p.container or "",
                    p.pod_uid or "",
                    p.container_id or "",
                ]
                key = (p.workload, *k8s, mig_of.get(p.gpu_instance_id, ""))
                if key not in seen:
                    seen.add(key)
                    alloc.add_metric([*lv, *key], 1.0)
            ranked = sorted(g.processes, key=lambda p: -(p.gpu_memory_bytes or 0))
            for p in ranked[: self.max_process_series]:
                k8s = [
                    p.namespace or "",
                    p.pod or "",
                    p.container or "",
                    p.pod_uid or "",
                    p.container_id or "",
                ]
                pl = [
                    *lv,
                    str(p.pid),
                    p.user or "",
                    (p.command or "")[:80],
                    p.workload,
                    *k8s,
                    mig_of.get(p.gpu_instance_id, ""),
                ]
                if p.gpu_memory_bytes is not None:
                    proc_mem.add_metric(pl, p.gpu_memory_bytes)
                if p.sm_utilization_ratio is not None:
                    proc_sm.add_metric(pl, p.sm_utilization_ratio)
            dropped.add_metric(lv, max(0, len(ranked) - self.max_process_series))
            for m in g.mig_devices:
                ml = [
                    *lv,
                    m.uuid,
                    "" if m.gpu_instance_id is None else str(m.gpu_instance_id),
                    m.profile or "",
                ]
                if m.memory_used_bytes is not None:
                    mig_used.add_metric(ml, m.memory_used_bytes)
                if m.memory_total_bytes is not None:
                    mig_total.add_metric(ml, m.memory_total_bytes)
                if m.slices is not None:
                    mig_slices.add_metric(ml, m.slices)
                if m.sm_active_ratio is not None:
                    mig_sm.add_metric(ml, m.sm_active_ratio)
                mig_procs.add_metric(ml, len(m.processes))
            if self.prices is not None:
                price = self.prices.price(g.name)
                if price.usd_per_gpu_hour is not None:
                    cost.add_metric([*lv, price.source], price.usd_per_gpu_hour)
        yield from (
            info,
            up,
            util,
            mutil,
            sm,
            tensor,
            used,
            total,
            power,
            limit,
            temp,
            smclk,
            memclk,
            thr,
            tx,
            rx,
            ecc,
            xid,
            nproc,
            alloc,
            proc_mem,
            proc_sm,
            dropped,
            mig_used,
            mig_total,
            mig_slices,
            mig_procs,
            mig_sm,
            slices_total,
            energy,
            memtemp,
            remap,
            remap_pending,
            remap_failed,
            replay,
            nvl_tx,
            nvl_rx,
            nvl_err,
            dram,
            occ,
            enc,
            dec,
            cost,
        )


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


class _RenderCache:
    """The /metrics body, plain and gzipped, rendered once per GPU read: 64 scrapers at once cost
    one render, not 64 (the text changes only when the sampler stores a new snapshot)."""

    def __init__(self, registry: CollectorRegistry, collector: GpuCollector) -> None:
        self.registry, self.collector = registry, collector
        self._lock = threading.Lock()
        self._key: tuple[int, int] | None = None
        self._plain = b""
        self._gzip: bytes | None = None

    def body(self, want_gzip: bool) -> bytes:
        key = (self.collector.reads_total, self.collector.read_errors_total)
        with self._lock:
            if key != self._key:
                self._plain, self._gzip, self._key = generate_latest(self.registry), None, key
            if not want_gzip:
                return self._plain
            if self._gzip is None:
                self._gzip = gzip.compress(self._plain, compresslevel=1)
            return self._gzip


def _handler(
    registry: CollectorRegistry, collector: GpuCollector, interval_s: float
) -> type[BaseHTTPRequestHandler]:
    cache = _RenderCache(registry, collector)

    class Handler(BaseHTTPRequestHandler):
        server_version = f"gpuwise-exporter/{__version__}"
        protocol_version = (
            "HTTP/1.1"  # keep-alive: Prometheus reuses its connection (every reply has a length)
        )

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            gzipped = False
            if path == "/metrics":
                gzipped = "gzip" in self.headers.get(
                    "Accept-Encoding", ""
                )  # Prometheus asks for it
                body, ctype, code = cache.body(gzipped), CONTENT_TYPE_LATEST, 200
            elif path == "/healthz":
                age = None if collector.last_read_s is None else time.time() - collector.last_read_s
                ok = age is not None and age < max(10 * interval_s, 30)
                body = json.dumps(
                    {
                        "status": "ok" if ok else "stale",
                        "last_read_age_s": age,
                        "reads": collector.reads_total,
                        "read_errors": collector.read_errors_total,
                        "last_error": collector.last_error,
                    }
                ).encode()
                ctype, code = "application/json", 200 if ok else 503
            elif path == "/":
                body, ctype, code = (
                    b'<html><body><a href="/metrics">/metrics</a></body></html>',
                    "text/html",
                    200,
                )
            else:
                body, ctype, code = b"not found\n", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            if gzipped:
                self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.address_string(), *args)

    return Handler


class _Server(ThreadingHTTPServer):
    """The HTTP server with a listen backlog for many concurrent scrapers (the standard library's
    default of 5 dropped connections at 16 concurrent scrapers)."""

    request_queue_size = 1024
    daemon_threads = True


class Exporter:
    """``gpuwise exporter`` as a library object: start, serve, stop.

    >>> exp = Exporter(FakeGpuReader.from_scenario("idle"), port=0)  # doctest: +SKIP
    >>> exp.start(); exp.url; exp.stop()                              # doctest: +SKIP
    """

    def __init__(
        self,
        reader: GpuReader,
        *,
        host: str = "127.0.0.1",
        port: int = 9835,
        interval_s: float = 1.0,
        prices: PriceBook | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        if not 0 <= port <= 65535:
            raise InputError(
                f"port must be 0-65535, got {port}", hint="give a free TCP port, e.g. 9835"
            )
        if not interval_s > 0:
            raise InputError(
                f"interval_s must be positive, got {interval_s}", hint="give e.g. interval_s=1.0"
            )
        self.reader = reader
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
        self.collector = GpuCollector(prices)
        self.registry.register(self.collector)
        self.sampler = Sampler(reader, self.collector, interval_s)
        try:
            self.server = _Server((host, port), _handler(self.registry, self.collector, interval_s))
        except OSError as exc:
            raise InputError(
                f"cannot listen on {host}:{port}: {exc.strerror}",
                hint="pick another --port or stop what uses it",
            ) from exc
        self.server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self._prepared = False

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return (
            f"http://{host!s}:{port}" if isinstance(host, str) else f"http://{host.decode()}:{port}"
        )

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
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="gpuwise-http", daemon=True
        )
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
