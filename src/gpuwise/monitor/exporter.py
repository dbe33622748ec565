"""The Prometheus exporter: a sampler thread, a custom collector, and a small HTTP server.

The sampler reads the GPUs every ``interval_s`` into an immutable :class:`Snapshot`; a scrape
only renders the latest snapshot, so scrape cost does not depend on NVML latency. NVML errors
never stop the server: a failed read keeps the previous snapshot, counts the error and shows
in ``/healthz``. Metric names follow Prometheus conventions (``gpuwise_`` prefix, base units in
the name, ``_ratio`` for 0–1 fractions, ``_total`` counters); docs/monitoring.md lists them.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import ipaddress
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any, Literal

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from gpuwise.base.version import __version__
from gpuwise.errors import InputError
from gpuwise.monitor.httpserver import BoundedHTTPServer
from gpuwise.monitor.metrics import DCGM_LABELS, DCGM_MIG_LABELS, GPU_METRICS, MIG_METRICS
from gpuwise.monitor.nvml import GpuReader
from gpuwise.monitor.podresources import PodDevice, PodResourcesClient, resolve_devices
from gpuwise.monitor.pricing import PriceBook
from gpuwise.monitor.snapshot import GpuSample, ProcessSample, Snapshot

log = logging.getLogger(__name__)

GPU_LABELS = ("gpu", "uuid", "model", "host")
MIG_LABELS = ("mig_uuid", "gpu_instance", "profile")
K8S_LABELS = ("namespace", "pod", "container", "pod_uid", "container_id")
PROC_LABELS = ("pid", "user", "command", "workload", *K8S_LABELS, "mig_uuid")
DCGM_ALL_LABELS = (
    *DCGM_LABELS,
    "DCGM_FI_DRIVER_VERSION",
    *DCGM_MIG_LABELS,
    "namespace",
    "pod",
    "container",
)
"""dcgm-exporter's labels; with its --kubernetes mode (here: --pod-resources-socket) a device
assigned to containers gets one series per container, labelled namespace/pod/container."""
PRICE_LABELS = ("price_source", "instance_type", "region", "capacity_type")
WRITE_TIMEOUT_S = 10.0
"""How long a reply may take to write before the connection is dropped."""
MAX_PROCESS_SERIES = 64
"""Per-process series kept per GPU (largest memory first); the rest are counted in
``gpuwise_exporter_process_series_dropped`` so a fork bomb cannot blow up Prometheus."""
ProcessCommand = Literal["off", "executable", "hash"]
PROCESS_COMMANDS: tuple[str, ...] = ("off", "executable", "hash")


def command_label(command: str | None, mode: ProcessCommand) -> str:
    """The ``command`` label of a process: empty by default (a command line can hold tokens and
    whoever sees Grafana sees labels); ``executable`` keeps the program's base name only,
    ``hash`` a short SHA-256 of the whole line, to tell runs apart without showing them."""
    if mode == "off" or not command:
        return ""
    if mode == "executable":
        return command.split(maxsplit=1)[0].rsplit("/", 1)[-1][:64]
    return "sha256:" + hashlib.sha256(command.encode()).hexdigest()[:12]


class _ExactFamily(Metric):
    """A family whose samples carry exactly its name: dcgm-exporter's counters have no
    ``_total`` suffix (``DCGM_FI_DEV_PCIE_REPLAY_COUNTER``), which prometheus_client's
    CounterMetricFamily would add; its dashboards query the bare names."""

    def __init__(self, name: str, doc: str, kind: str, labels: Sequence[str]) -> None:
        super().__init__(name, doc, kind)
        self.name = name  # Metric() strips a counter's _total; DCGM names have none anyway
        self._labelnames = tuple(labels)

    def add_metric(self, labels: Sequence[str], value: float) -> None:
        self.add_sample(self.name, dict(zip(self._labelnames, labels, strict=True)), value)


def _family(name: str, kind: str, doc: str, labels: Sequence[str]) -> Metric:
    if kind == "counter":
        return CounterMetricFamily(name, doc, labels=list(labels))
    return GaugeMetricFamily(name, doc, labels=list(labels))


class GpuCollector(Collector):
    """Renders the latest snapshot as metric families; register it in any registry.

    The per-GPU and per-MIG families come from the table in :mod:`gpuwise.monitor.metrics`;
    ``dcgm_compat`` adds the dcgm-exporter names of the same rows (DCGM units and labels).
    """

    def __init__(
        self,
        prices: PriceBook | None = None,
        max_process_series: int = MAX_PROCESS_SERIES,
        *,
        process_command: ProcessCommand = "off",
        dcgm_compat: bool = False,
        start_time_s: float | None = None,
        plan_id: str | None = None,
    ) -> None:
        """``plan_id``: the plan of the job on this machine (``GPUWISE_PLAN_ID`` where the
        exporter runs inside the job); a GPU whose processes carry their own is labelled with
        theirs."""
        if process_command not in PROCESS_COMMANDS:
            raise InputError(
                f"process command mode must be one of {', '.join(PROCESS_COMMANDS)}, "
                f"got {process_command!r}",
                hint="give --process-command off, executable or hash",
            )
        self.prices = prices
        self.max_process_series = max_process_series
        self.process_command: ProcessCommand = process_command
        self.dcgm_compat = dcgm_compat
        self.plan_id = plan_id
        self.start_time_s = time.time() if start_time_s is None else start_time_s
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._pods: Mapping[str, tuple[PodDevice, ...]] | None = None
        self.read_errors_total = 0
        self.reads_total = 0
        self.last_read_s: float | None = None
        self.last_error: str | None = None
        self.nvml_errors: dict[str, int] = {}

    def update(
        self,
        snap: Snapshot,
        nvml_errors: dict[str, int] | None = None,
        pods: Mapping[str, tuple[PodDevice, ...]] | None = None,
    ) -> None:
        """Store a new read; ``pods`` maps device ids (GPU or MIG UUIDs) to the pods the kubelet
        assigned them to (None: no pod-resources socket, so no assignment is known)."""
        resolved = None if pods is None else resolve_devices(pods, snap)
        with self._lock:
            self._snapshot = snap
            self._pods = resolved
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
            snap, pods = self._snapshot, self._pods
            reads, errors, nvml_errors = (
                self.reads_total,
                self.read_errors_total,
                dict(self.nvml_errors),
            )
        yield from self._exporter_families(reads, errors, nvml_errors)
        if snap is None:
            return
        ts = GaugeMetricFamily(
            "gpuwise_exporter_last_read_timestamp_seconds", "Unix time of the latest GPU read."
        )
        ts.add_metric([], snap.timestamp_s)
        yield ts
        twins = self._dcgm_families() if self.dcgm_compat else {}
        yield from self._gpu_families(snap, twins, pods or {})
        yield from self._mig_families(snap, twins, pods or {})
        yield from twins.values()
        yield from self._process_families(snap)
        yield from self._plan_families(snap)
        yield from self._assignment_families(snap, pods)
        yield from self._cost_families(snap)

    def _exporter_families(
        self, reads: int, errors: int, nvml_errors: dict[str, int]
    ) -> Iterator[Metric]:
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
        start = GaugeMetricFamily(
            "gpuwise_exporter_start_time_seconds",
            "Unix time this exporter process started: counters that count events it saw "
            "(XIDs) start from 0 then.",
        )
        start.add_metric([], self.start_time_s)
        yield from (exp_reads, exp_err, nvml_err, start)

    def _dcgm_families(self) -> dict[str, Metric]:
        """One family per DCGM name, shared by whole-GPU and MIG samples (a MIG sample fills
        GPU_I_ID / GPU_I_PROFILE; a whole-GPU sample leaves them empty, i.e. absent)."""
        fams: dict[str, Metric] = {}
        rows = [(d.help, d.dcgm) for d in GPU_METRICS] + [(d.help, d.dcgm) for d in MIG_METRICS]
        for doc, twins in rows:
            for t in twins:
                if t.name not in fams:
                    # a counter is declared untyped: prometheus_client would name a counter's
                    # TYPE/HELP lines `…_total`, and DCGM's names have no suffix
                    fams[t.name] = _ExactFamily(
                        t.name,
                        f"{doc} In {t.unit} (dcgm-exporter name).",
                        "gauge" if t.kind == "gauge" else "unknown",
                        DCGM_ALL_LABELS,
                    )
        return fams

    def _gpu_families(
        self,
        snap: Snapshot,
        twins: dict[str, Metric],
        pods: Mapping[str, tuple[PodDevice, ...]],
    ) -> Iterator[Metric]:
        info = InfoMetricFamily(
            "gpuwise_gpu", "Static facts about each GPU.", labels=[*GPU_LABELS, "driver_version"]
        )
        fams = [_family(d.name, d.kind, d.help, (*GPU_LABELS, *d.labels)) for d in GPU_METRICS]
        for g in snap.gpus:
            lv = [str(g.index), g.uuid, g.name, snap.host]
            info.add_metric([*lv, snap.driver_version or ""], {})
            dls = _dcgm_label_sets([*_dcgm_gpu(g, snap), "", ""], pods.get(g.uuid, ()))
            for d, fam in zip(GPU_METRICS, fams, strict=True):
                for extra, value in d.read(g):  # unsupported → no sample, never a sentinel
                    fam.add_metric([*lv, *extra], value)  # type: ignore[attr-defined]
                    for t in d.dcgm if twins else ():
                        if t.when == extra:
                            for dl in dls:
                                twins[t.name].add_metric(dl, value * t.scale)  # type: ignore[attr-defined]
        yield info
        yield from fams

    def _mig_families(
        self,
        snap: Snapshot,
        twins: dict[str, Metric],
        pods: Mapping[str, tuple[PodDevice, ...]],
    ) -> Iterator[Metric]:
        fams = [_family(d.name, d.kind, d.help, (*GPU_LABELS, *MIG_LABELS)) for d in MIG_METRICS]
        for g in snap.gpus:
            lv = [str(g.index), g.uuid, g.name, snap.host]
            for m in g.mig_devices:
                gi = "" if m.gpu_instance_id is None else str(m.gpu_instance_id)
                ml = [*lv, m.uuid, gi, m.profile or ""]
                dls = _dcgm_label_sets(
                    [*_dcgm_gpu(g, snap), gi, m.profile or ""], pods.get(m.uuid, ())
                )
                for d, fam in zip(MIG_METRICS, fams, strict=True):
                    value = d.read(m)
                    if value is None:
                        continue
                    fam.add_metric(ml, float(value))  # type: ignore[attr-defined]
                    for t in d.dcgm if twins else ():
                        for dl in dls:
                            twins[t.name].add_metric(dl, value * t.scale)  # type: ignore[attr-defined]
        yield from fams

    def _process_families(self, snap: Snapshot) -> Iterator[Metric]:
        alloc = GaugeMetricFamily(
            "gpuwise_gpu_allocation_info",
            "1 per workload running on the GPU (and MIG instance, mig_uuid); join on uuid to "
            "attribute GPU metrics to pods and jobs.",
            labels=[*GPU_LABELS, "workload", *K8S_LABELS, "mig_uuid"],
        )
        proc_mem = GaugeMetricFamily(
            "gpuwise_process_gpu_memory_bytes",
            "GPU memory held by a process (nvidia-smi --query-compute-apps=used_memory). The "
            "command label is empty unless the exporter runs with --process-command.",
            labels=[*GPU_LABELS, *PROC_LABELS],
        )
        proc_sm = GaugeMetricFamily(
            "gpuwise_process_sm_utilization_ratio",
            "Share of time a process had a kernel on the SMs (nvidia-smi pmon: sm / 100; NVML "
            "process utilization).",
            labels=[*GPU_LABELS, *PROC_LABELS],
        )
        dropped = GaugeMetricFamily(
            "gpuwise_exporter_process_series_dropped",
            "Processes left out of the per-process series this read (more than the per-GPU cap).",
            labels=list(GPU_LABELS),
        )
        for g in snap.gpus:
            lv = [str(g.index), g.uuid, g.name, snap.host]
            mig_of = {m.gpu_instance_id: m.uuid for m in g.mig_devices}
            seen: set[tuple[str, ...]] = set()
            for p in g.processes:
                key = (p.workload, *_k8s(p), mig_of.get(p.gpu_instance_id, ""))
                if key not in seen:
                    seen.add(key)
                    alloc.add_metric([*lv, *key], 1.0)
            ranked = sorted(g.processes, key=lambda p: -(p.gpu_memory_bytes or 0))
            for p in ranked[: self.max_process_series]:
                pl = [
                    *lv,
                    str(p.pid),
                    p.user or "",
                    command_label(p.command, self.process_command),
                    p.workload,
                    *_k8s(p),
                    mig_of.get(p.gpu_instance_id, ""),
                ]
                if p.gpu_memory_bytes is not None:
                    proc_mem.add_metric(pl, p.gpu_memory_bytes)
                if p.sm_utilization_ratio is not None:
                    proc_sm.add_metric(pl, p.sm_utilization_ratio)
            dropped.add_metric(lv, max(0, len(ranked) - self.max_process_series))
        yield from (alloc, proc_mem, proc_sm, dropped)

    def _plan_families(self, snap: Snapshot) -> Iterator[Metric]:
        """Which plan each GPU works for: its processes' GPUWISE_PLAN_ID, else the exporter's."""
        plan = GaugeMetricFamily(
            "gpuwise_gpu_plan_info",
            "1 per GPU running a job with a plan id (GPUWISE_PLAN_ID of its processes, set by "
            "`gpuwise plan --export`; else the exporter's own); join on uuid to split dollars "
            "and idle time by plan.",
            labels=[*GPU_LABELS, "plan_id"],
        )
        for g in snap.gpus:
            plan_id = g.plan_id or self.plan_id
            if plan_id:
                plan.add_metric([str(g.index), g.uuid, g.name, snap.host, plan_id], 1.0)
        yield plan

    def _assignment_families(
        self, snap: Snapshot, pods: Mapping[str, tuple[PodDevice, ...]] | None
    ) -> Iterator[Metric]:
        """What the scheduler decided, from the kubelet's pod-resources API: a GPU (or one of its
        MIG instances) is allocated while a pod holds it, whether or not a process runs."""
        if pods is None:
            return
        assigned = GaugeMetricFamily(
            "gpuwise_gpu_assigned",
            "1 while the kubelet has assigned the GPU (or one of its MIG instances) to a pod "
            "(pod-resources API), 0 otherwise.",
            labels=list(GPU_LABELS),
        )
        pod_info = GaugeMetricFamily(
            "gpuwise_gpu_pod_info",
            "1 per pod and container the kubelet assigned the GPU (or MIG instance, mig_uuid) "
            "to; join on uuid to attribute GPU metrics to pods.",
            labels=[*GPU_LABELS, "namespace", "pod", "container", "resource", "mig_uuid"],
        )
        for g in snap.gpus:
            lv = [str(g.index), g.uuid, g.name, snap.host]
            held = [(d, "") for d in pods.get(g.uuid, ())]
            for m in g.mig_devices:
                held += [(d, m.uuid) for d in pods.get(m.uuid, ())]
            assigned.add_metric(lv, 1.0 if held else 0.0)
            for d, mig in held:
                pod_info.add_metric([*lv, d.namespace, d.pod, d.container, d.resource, mig], 1.0)
        yield from (assigned, pod_info)

    def _cost_families(self, snap: Snapshot) -> Iterator[Metric]:
        if self.prices is None:
            return
        cost = GaugeMetricFamily(
            "gpuwise_gpu_cost_usd_per_hour",
            "What this GPU costs per hour: configured, or the catalog price of this node's "
            "instance type (region, capacity type); no sample where the instance is unknown.",
            labels=[*GPU_LABELS, *PRICE_LABELS],
        )
        node = GaugeMetricFamily(
            "gpuwise_node_price_info",
            "1 per GPU model on this node, with where its price comes from; price_source "
            "starts with 'unknown' where no price is known (the GPU is then not priced).",
            labels=["host", "model", *PRICE_LABELS],
        )
        seen: set[str] = set()
        for g in snap.gpus:
            lv = [str(g.index), g.uuid, g.name, snap.host]
            price = self.prices.price(g.name)
            pl = [
                price.source,
                price.instance_type or "",
                price.region or "",
                price.capacity_type or "",
            ]
            if price.usd_per_gpu_hour is not None:
                cost.add_metric([*lv, *pl], price.usd_per_gpu_hour)
            if g.name not in seen:
                seen.add(g.name)
                node.add_metric([snap.host, g.name, *pl], 1.0)
        yield from (cost, node)


def _dcgm_gpu(g: GpuSample, snap: Snapshot) -> list[str]:
    """dcgm-exporter's label values for a GPU: gpu, UUID, pci_bus_id, device, modelName,
    Hostname, driver."""
    return [
        str(g.index),
        g.uuid,
        g.pci_bus_id or "",
        f"nvidia{g.index}",
        g.name,
        snap.host,
        snap.driver_version or "",
    ]


def _dcgm_label_sets(base: list[str], held: tuple[PodDevice, ...]) -> list[list[str]]:
    """One label set per container holding the device (dcgm-exporter repeats the device's value
    for each), or one without pod labels when none does."""
    if not held:
        return [[*base, "", "", ""]]
    return [[*base, d.namespace, d.pod, d.container] for d in held]


def _k8s(p: ProcessSample) -> list[str]:
    return [
        p.namespace or "",
        p.pod or "",
        p.container or "",
        p.pod_uid or "",
        p.container_id or "",
    ]


class Sampler:
    """Reads the GPUs every ``interval_s`` on a daemon thread and feeds a :class:`GpuCollector`."""

    def __init__(
        self,
        reader: GpuReader,
        collector: GpuCollector,
        interval_s: float,
        pods: PodResourcesClient | None = None,
    ) -> None:
        self.reader, self.collector, self.interval_s = reader, collector, interval_s
        self.pods = pods
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
        pods = self.pods.gpu_assignments() if self.pods is not None else None
        self.collector.update(snap, getattr(session, "error_counts", None), pods)

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
            # headers are in (their deadline is the server's); the reply gets its own timeout
            self.connection.settimeout(WRITE_TIMEOUT_S)
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


_HOST_HINT = (
    "give --host as an address of this machine: 127.0.0.1 (this machine only), "
    "0.0.0.0 (every interface), ::1 or a host name that resolves here"
)


def _check_host(host: str) -> None:
    """Refuse ``999.1.1.1`` before binding: digits and dots (or a colon) must be an IP address.

    Without this, the resolver is asked for it as a host name (a network lookup) and the failure
    read like a busy port.
    """
    looks_numeric = host.replace(".", "").isdigit() or ":" in host
    if looks_numeric:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise InputError(f"--host {host!r} is not an IP address", hint=_HOST_HINT) from None


def _listen_hint(exc: OSError) -> str:
    """How to fix a failed bind: a name that does not resolve is not a busy port."""
    if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
        return _HOST_HINT
    if exc.errno == errno.EACCES:
        return "ports below 1024 need root: pick --port 1024 or above (default 9835)"
    return "pick another --port or stop what uses it"


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
        collector: GpuCollector | None = None,
        pods: PodResourcesClient | None = None,
        http_workers: int = 8,
    ) -> None:
        """``collector`` carries the rendering options (process command mode, DCGM names);
        ``pods`` reads the kubelet's GPU assignments on every GPU read."""
        if not 0 <= port <= 65535:
            raise InputError(
                f"port must be 0-65535, got {port}", hint="give a free TCP port, e.g. 9835"
            )
        if not interval_s > 0:
            raise InputError(
                f"interval_s must be positive, got {interval_s}", hint="give e.g. interval_s=1.0"
            )
        _check_host(host)
        self.reader = reader
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
        self.collector = collector if collector is not None else GpuCollector(prices)
        if prices is not None:
            self.collector.prices = prices
        self.registry.register(self.collector)
        self.pods = pods
        self.sampler = Sampler(reader, self.collector, interval_s, pods)
        try:
            self.server = BoundedHTTPServer(
                (host, port),
                _handler(self.registry, self.collector, interval_s),
                workers=http_workers,
            )
        except OSError as exc:
            raise InputError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}", hint=_listen_hint(exc)
            ) from exc
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
        if self.pods is not None:
            self.pods.close()
