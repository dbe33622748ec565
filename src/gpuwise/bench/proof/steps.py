"""The steps of the GPU proof. Each calls gpuwise through its public CLI (``gpuwise doctor --json``,
``bench --json``, ``exporter``, ``estimate --json``) or the torch worker, in child processes with
a time limit, and returns a :class:`StepResult`; the runner turns an exception into a failed step.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuwise.bench.proof import gpt
from gpuwise.bench.proof.report import Status, StepResult, Table, Target, fmt, pct, ratio, rows


class StepTimeout(Exception):
    """A child process of the step ran past the step's time limit."""


@dataclass(frozen=True)
class Context:
    """What every step needs to know."""

    out: Path
    """Where the report and the step artifacts go."""
    scratch: Path
    """Where the storage and checkpoint steps write (removed afterwards)."""
    repo: Path
    """The checkout (its tests/ for the pytest step)."""
    quick: bool = False
    gpu: str | None = None
    """gpuwise's canonical GPU name (datasheet, best-known figures, estimates); None if unknown."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment of the child processes."""
    deadline: float = float("inf")
    """``time.monotonic()`` by which the current step must end."""
    exporter_fake: str | None = None
    """Serve this fake GPU scenario instead of NVML (lets the tests drive the exporter step on a CPU)."""
    exporter_seconds: float | None = None
    """How long Prometheus (or this script) scrapes; default 30 s, 10 s with ``quick``."""

    def remaining(self) -> float:
        return self.deadline - time.monotonic()


@dataclass(frozen=True)
class Child:
    """A finished (or killed) child process."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool

    def last_error(self) -> str:
        """The last non-empty stderr line (where a CLI puts ``error: ...`` and Python its exception)."""
        lines = [ln.strip() for ln in self.stderr.splitlines() if ln.strip()]
        return lines[-1][:300] if lines else f"exit {self.returncode}"


def run_child(
    cmd: Sequence[str],
    timeout_s: float,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Child:
    """Run ``cmd`` in its own process group; past ``timeout_s`` the whole group gets SIGTERM, then
    SIGKILL 10 s later (pytest's and torch's own children go with it)."""
    proc = subprocess.Popen(
        list(cmd),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env or None,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=max(timeout_s, 0.1))
        return Child(proc.returncode, out, err, False)
    except subprocess.TimeoutExpired:
        _kill_group(proc, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            _kill_group(proc, signal.SIGKILL)
            out, err = proc.communicate()
        return Child(proc.returncode, out, err, True)


def _kill_group(proc: subprocess.Popen[Any], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects a worker printed, one per line; other lines are ignored."""
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                found.append(obj)
    return found


def gpuwise_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpuwise", *args]


def worker_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpuwise.bench.proof.worker", *args]


def _run(
    ctx: Context, cmd: Sequence[str], cap_s: float | None = None, cwd: Path | None = None
) -> Child:
    limit = ctx.remaining() if cap_s is None else min(cap_s, ctx.remaining())
    return run_child(cmd, limit, env=ctx.env, cwd=cwd)


def _json_or_raise(child: Child, what: str) -> dict[str, Any]:
    if child.timed_out:
        raise StepTimeout(f"{what} ran past its time limit")
    try:
        obj = json.loads(child.stdout)
    except ValueError:
        raise RuntimeError(
            f"{what} exited {child.returncode} without JSON: {child.last_error()}"
        ) from None
    if not isinstance(obj, dict):
        raise RuntimeError(f"{what} printed JSON that is not an object")
    return obj


# ---------------------------------------------------------------------------------------- doctor

DOCTOR_FACT_CHECKS = ("nvidia-driver", "cuda-compat", "torch-cuda")


def doctor_step(ctx: Context) -> StepResult:
    """``gpuwise doctor --json`` (exit 0, or 3 when a check failed: both are answers)."""
    child = _run(ctx, gpuwise_cmd("doctor", "--json", "--checkpoint-dir", str(ctx.scratch)))
    report = _json_or_raise(child, "gpuwise doctor --json")
    checks = report.get("checks", [])
    shown = [
        c
        for c in checks
        if c.get("name") in DOCTOR_FACT_CHECKS or c.get("status") not in ("ok", "skip")
    ]
    counts = report.get("counts", {})
    summary = f"{report.get('status')}: " + ", ".join(
        f"{counts.get(k, 0)} {k}" for k in ("ok", "warn", "fail", "skip")
    )
    table = Table(
        "doctor: driver/CUDA/torch facts and every finding that is not ok",
        ("check", "status", "finding"),
        rows([(c.get("name"), c.get("status"), _short(c.get("finding", ""), 160)) for c in shown]),
    )
    return StepResult("doctor", "ok", 0.0, summary, tables=(table,), data={"doctor": report})


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# ---------------------------------------------------------------------------------------- bench

BENCH_GROUPS = ("matmul", "memory", "transfer", "storage")
QUICK_BENCH_GROUPS = ("matmul", "memory")


def load_best_known(path: Path | None = None) -> dict[tuple[str, str], tuple[float, str]]:
    """(gpu, bench result name) → (best-known value, source), from ``best_known.csv``."""
    path = path or Path(__file__).with_name("best_known.csv")
    with path.open(newline="") as f:
        reader = csv.DictReader(line for line in f if not line.startswith("#"))
        return {(r["gpu"], r["metric"]): (float(r["value"]), r["source"]) for r in reader}


def bench_rows(
    results: list[dict[str, Any]], gpu: str | None, best: dict[tuple[str, str], tuple[float, str]]
) -> list[dict[str, Any]]:
    """Each bench result with its ratio to the datasheet and to the best-known figure."""
    out = []
    for r in results:
        known = best.get((gpu or "", str(r.get("name"))))
        value = r.get("value")
        out.append(
            {
                **r,
                "best_known": known[0] if known else None,
                "best_known_source": known[1] if known else None,
                "ratio_best_known": ratio(value, known[0]) if known else None,
            }
        )
    return out


def bench_step(ctx: Context) -> StepResult:
    """``gpuwise bench --only GROUP --json`` per group (so a slow group cannot take the others with
    it), then a plain large ``tensor.copy_`` for the device-copy comparison."""
    groups = QUICK_BENCH_GROUPS if ctx.quick else BENCH_GROUPS
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    skipped: list[str] = []
    device: dict[str, Any] = {}
    for i, group in enumerate(groups):
        share = ctx.remaining() / (len(groups) - i + 0.5)  # leave time for the plain copy
        cmd = gpuwise_cmd(
            "bench",
            "--only",
            group,
            "--json",
            "--checkpoint-dir",
            str(ctx.scratch),
            *(["--gpu", ctx.gpu] if ctx.gpu else []),
        )
        child = _run(ctx, cmd, cap_s=max(share, 20.0))
        try:
            obj = _json_or_raise(child, f"bench {group}")
        except (StepTimeout, RuntimeError) as exc:
            errors.append(str(exc))
            continue
        device = obj.get("device") or device
        results += obj.get("results", [])
        skipped += [f"{s.get('name')}: {s.get('reason')}" for s in obj.get("skipped", [])]
    copy = _run(ctx, worker_cmd("copy", "--gib", "1"))
    plain = next((o.get("plain_copy_gb_s") for o in json_lines(copy.stdout)), None)
    if plain is None:
        errors.append(
            "plain tensor.copy_: " + ("timed out" if copy.timed_out else copy.last_error())
        )
    gpu = device.get("gpu") or ctx.gpu
    table_rows = bench_rows(results, gpu, load_best_known())
    table = Table(
        f"bench on {device.get('name', '?')} (datasheet: {gpu or 'unknown GPU'})",
        ("result", "measured", "unit", "datasheet", "of datasheet", "best known", "of best known"),
        rows(
            [
                (
                    r["name"],
                    fmt(r.get("value"), ",.1f"),
                    r.get("unit"),
                    fmt(r.get("peak"), ",.1f"),
                    pct(r.get("ratio")),
                    fmt(r["best_known"], ",.1f"),
                    pct(r["ratio_best_known"]),
                )
                for r in table_rows
            ]
        ),
    )
    bf16 = next((r for r in table_rows if r["name"] == "matmul.bf16"), None)
    copy_row = next((r for r in table_rows if r["name"] == "memory.copy"), None)
    copy_ratio = ratio(copy_row.get("value") if copy_row else None, plain)
    targets = (
        Target(
            "bf16 matmul vs best-known figure for this GPU",
            bf16["ratio_best_known"] if bf16 else None,
            "≥ 95 %",
            None
            if not bf16 or bf16["ratio_best_known"] is None
            else bf16["ratio_best_known"] >= 0.95,
        ),
        Target(
            "device copy vs plain large tensor.copy_",
            copy_ratio,
            "≥ 90 %",
            None if copy_ratio is None else copy_ratio >= 0.90,
        ),
    )
    data = {
        "device": device,
        "results": table_rows,
        "plain_copy_gb_s": plain,
        "errors": errors,
        "skipped": skipped,
    }
    if errors or not results:
        return StepResult(
            "bench",
            "fail",
            0.0,
            reason="; ".join(errors) or "no results",
            tables=(table,),
            targets=targets,
            data=data,
        )
    summary = (
        f"{len(results)} results"
        + (f"; bf16 matmul {bf16['value']:.0f} TFLOP/s" if bf16 else "")
        + (f"; skipped {'; '.join(skipped)}" if skipped else "")
    )
    return StepResult("bench", "ok", 0.0, summary, tables=(table,), targets=targets, data=data)


# ---------------------------------------------------------------------------------------- exporter


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
        child = _run(ctx, gpuwise_cmd("exporter", "--fake", scenario, "--once"), cap_s=30)
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
                _kill_group(p, signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    _kill_group(p, signal.SIGKILL)
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


# ---------------------------------------------------------------------------------------- GPT


def memory_tables(
    estimates: dict[str, dict[str, Any]], measured: list[dict[str, Any]]
) -> tuple[list[gpt.MemoryRow], Table, Table]:
    """The memory and throughput tables from estimates (by config label) and worker results."""
    memory_rows: list[gpt.MemoryRow] = []
    mem_cells, tput_cells = [], []
    for m in measured:
        est = estimates.get(str(m.get("label")))
        if "error" in m or est is None:
            why = m.get("error") or "no estimate"
            mem_cells.append((m.get("label"), "—", "—", "—", "—", f"not measured: {why}"))
            tput_cells.append((m.get("label"), "—", "—", "—", "—", "—"))
            continue
        if m.get("peak_allocated_bytes"):
            row = gpt.memory_row(
                str(m["label"]),
                est,
                int(m["peak_allocated_bytes"]),
                int(m["peak_reserved_bytes"] or 0),
            )
            memory_rows.append(row)
            mem_cells.append(
                (
                    row.label,
                    fmt(row.estimate_total_gib, ".2f"),
                    fmt(row.estimate_allocated_gib, ".2f"),
                    fmt(row.measured_allocated_gib, ".2f"),
                    fmt(row.measured_reserved_gib, ".2f"),
                    f"{row.error * 100:+.1f} %",
                )
            )
        tokens = float(m["tokens_per_s"])
        est_tokens = est.get("tokens_per_second")
        mfu = (
            tokens * float(est["flops_per_token"]) / (float(est["peak_tflops"]) * 1e12)
            if est.get("peak_tflops")
            else None
        )
        tput_cells.append(
            (
                m["label"],
                fmt(tokens, ",.0f"),
                fmt(est_tokens, ",.0f"),
                pct(ratio(tokens, est_tokens)),
                pct(mfu),
                pct(est.get("mfu")),
            )
        )
    memory = Table(
        "memory: estimate vs torch.cuda.max_memory_allocated (GiB; error = like-for-like column vs measured)",
        (
            "config",
            "estimate",
            "estimate − context − allocator",
            "max allocated",
            "max reserved",
            "error",
        ),
        rows(mem_cells),
    )
    throughput = Table(
        "throughput: measured vs gpuwise estimate (tokens/s, one GPU)",
        ("config", "measured", "estimate", "measured / estimate", "measured MFU", "estimated MFU"),
        rows(tput_cells),
    )
    return memory_rows, memory, throughput


def gpt_step(ctx: Context) -> StepResult:
    """The memory and throughput checks: each configuration estimated by ``gpuwise estimate``
    (from a config.json of the same shape) and trained for a few steps by the worker."""
    if not ctx.gpu:
        raise RuntimeError(
            "the GPU model is unknown to gpuwise, so nothing to estimate against: give --gpu NAME"
        )
    estimates: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    for config in gpt.configs(ctx.quick):
        path = ctx.scratch / f"gpt-{config.shape.name}.json"
        path.write_text(json.dumps(gpt.hf_config(config.shape)))
        child = _run(ctx, gpuwise_cmd(*gpt.estimate_args(config, ctx.gpu, path)), cap_s=30)
        try:
            estimates[config.label] = _json_or_raise(child, f"estimate {config.label}")
        except (StepTimeout, RuntimeError) as exc:
            errors.append(str(exc))
    child = _run(ctx, worker_cmd("train", *(["--quick"] if ctx.quick else [])))
    measured = json_lines(child.stdout)
    memory_rows, memory, throughput = memory_tables(estimates, measured)
    summary_data: dict[str, Any] = {}
    if memory_rows:
        s = gpt.summarize(memory_rows)
        summary_data = {
            "mean_abs_error": s.mean_abs_error,
            "max_abs_error": s.max_abs_error,
            "under_predicted": s.under_predicted,
        }
    data = {
        "estimates": estimates,
        "measured": measured,
        "errors": errors,
        "memory_summary": summary_data,
    }
    done = sum("error" not in m for m in measured)
    total = len(gpt.configs(ctx.quick))
    if child.timed_out or done < total or errors:
        why = (
            "timed out"
            if child.timed_out
            else child.last_error()
            if child.returncode
            else "; ".join(errors)
            if errors
            else "some configurations failed"
        )
        status: Status = "timeout" if child.timed_out else "fail"
        return StepResult(
            "memory-throughput",
            status,
            0.0,
            reason=f"{done}/{total} configurations measured: {why}",
            tables=(memory, throughput),
            data=data,
        )
    summary = (
        f"{done} configurations; memory error mean {summary_data['mean_abs_error'] * 100:.1f} %, "
        f"max {summary_data['max_abs_error'] * 100:.1f} %"
        if summary_data
        else f"{done} configurations"
    )
    return StepResult(
        "memory-throughput", "ok", 0.0, summary, tables=(memory, throughput), data=data
    )


# ---------------------------------------------------------------------------------------- checkpoint

SHM_USE = 0.8
"""Share of the free /dev/shm the staged state may take."""


def shm_free_bytes(path: str = "/dev/shm") -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def state_params(wanted: float, shm_free: int | None) -> float:
    """Parameters of the checkpointed state: ``wanted``, or fewer so that 12 bytes per parameter
    (fp32 weights + two AdamW moments) fit in ``SHM_USE`` of the free /dev/shm."""
    if shm_free is None:
        return wanted
    return float(min(wanted, SHM_USE * shm_free / 12))


def checkpoint_step(ctx: Context) -> StepResult:
    """Async checkpoint stall of a ~1B-parameter state (0.25B with --quick) on CUDA vs torch.save.

    The Checkpointer stages the state in /dev/shm (12 bytes per parameter with AdamW); where
    /dev/shm is smaller (a container's default is 64 MiB) the state shrinks to fit, and the report
    says so."""
    wanted = 2.5e8 if ctx.quick else 1e9
    params = state_params(wanted, shm_free_bytes())
    if params < 1e6:
        raise RuntimeError(
            f"/dev/shm has {shm_free_bytes() or 0:,} bytes free: too little to stage a checkpoint "
            "(in Docker run with --shm-size=16g)"
        )
    child = _run(
        ctx,
        worker_cmd(
            "checkpoint",
            "--params",
            str(params),
            "--scratch",
            str(ctx.scratch),
            "--repeats",
            "1" if ctx.quick else "2",
        ),
    )
    found = json_lines(child.stdout)
    if child.timed_out:
        raise StepTimeout("the checkpoint worker ran past its time limit")
    if not found:
        raise RuntimeError(f"the checkpoint worker failed: {child.last_error()}")
    r = found[-1]
    table = Table(
        f"checkpoint stall, {r['params'] / 1e9:.2f}B parameters + AdamW ({r['state_bytes'] / 1024**3:.1f} GiB) on {r['device']}",
        ("figure", "seconds"),
        rows(
            [
                (
                    "torch.save + fsync + rename (blocks for all of it)",
                    fmt(r["sync_save_s"], ".2f"),
                ),
                (
                    "Checkpointer.save, first (allocates the host buffer)",
                    fmt(r["async_first_stall_s"], ".2f"),
                ),
                ("Checkpointer.save, stall (median)", fmt(r["async_stall_s"], ".2f")),
                ("Checkpointer save → committed (median)", fmt(r["async_durable_s"], ".2f")),
            ]
        ),
    )
    target = Target(
        "async stall vs synchronous torch.save",
        ratio(r["async_stall_s"], r["sync_save_s"]),
        "< 100 %",
        r["async_stall_s"] < r["sync_save_s"],
    )
    summary = f"stall {r['async_stall_s']:.2f} s vs torch.save {r['sync_save_s']:.2f} s"
    if params < wanted:
        summary += (
            f" (state cut from {wanted / 1e9:g}B to {params / 1e9:.2f}B parameters to fit /dev/shm)"
        )
    r = {**r, "wanted_params": wanted}
    return StepResult("checkpoint", "ok", 0.0, summary, tables=(table,), targets=(target,), data=r)


# ---------------------------------------------------------------------------------------- pytest


def junit_counts(xml_text: str) -> dict[str, Any]:
    """tests/failures/errors/skipped and the failed test ids from a pytest JUnit XML report."""
    root = ElementTree.fromstring(xml_text)
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {
        k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")
    }
    failed = []
    for case in root.iter("testcase"):
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            message = (bad.get("message") or "").splitlines()
            failed.append(
                {
                    "test": f"{case.get('classname')}::{case.get('name')}",
                    "message": message[0][:200] if message else "",
                }
            )
    return {
        **counts,
        "passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
        "failed": failed,
    }


def pytest_step(ctx: Context) -> StepResult:
    """Every test marked ``@pytest.mark.gpu`` in the checkout's tests/."""
    tests = ctx.repo / "tests"
    if not tests.is_dir():
        return StepResult(
            "pytest-gpu",
            "skip",
            0.0,
            reason=f"no tests/ folder beside the script ({tests.name} missing)",
        )
    xml = ctx.out / "pytest-gpu.xml"
    child = _run(
        ctx,
        [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "gpu",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={xml}",
            "tests",
        ],
        cwd=ctx.repo,
    )
    if child.timed_out:
        raise StepTimeout("pytest -m gpu ran past its time limit")
    if not xml.is_file():
        raise RuntimeError(
            f"pytest exited {child.returncode} without a report: {child.last_error()}"
        )
    counts = junit_counts(xml.read_text())
    table = Table(
        "pytest -m gpu",
        ("passed", "failed", "errors", "skipped"),
        rows([(counts["passed"], counts["failures"], counts["errors"], counts["skipped"])]),
    )
    tables = [table]
    if counts["failed"]:
        tables.append(
            Table(
                "failed GPU tests",
                ("test", "message"),
                rows([(f["test"], f["message"]) for f in counts["failed"]]),
            )
        )
    summary = f"{counts['passed']} passed, {counts['failures'] + counts['errors']} failed, {counts['skipped']} skipped"
    if counts["failures"] or counts["errors"] or counts["passed"] == 0:
        reason = summary if counts["passed"] or counts["failed"] else f"no GPU test ran ({summary})"
        return StepResult(
            "pytest-gpu", "fail", 0.0, reason=reason, tables=tuple(tables), data=counts
        )
    return StepResult("pytest-gpu", "ok", 0.0, summary, tables=tuple(tables), data=counts)
