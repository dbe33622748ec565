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
import subprocess
import sys
import time
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
        kill_group(proc, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            kill_group(proc, signal.SIGKILL)
            out, err = proc.communicate()
        return Child(proc.returncode, out, err, True)


def kill_group(proc: subprocess.Popen[Any], sig: signal.Signals) -> None:
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


def run_for_step(
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
    child = run_for_step(ctx, gpuwise_cmd("doctor", "--json", "--checkpoint-dir", str(ctx.scratch)))
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
        child = run_for_step(ctx, cmd, cap_s=max(share, 20.0))
        try:
            obj = _json_or_raise(child, f"bench {group}")
        except (StepTimeout, RuntimeError) as exc:
            errors.append(str(exc))
            continue
        device = obj.get("device") or device
        results += obj.get("results", [])
        skipped += [f"{s.get('name')}: {s.get('reason')}" for s in obj.get("skipped", [])]
    copy = run_for_step(ctx, worker_cmd("copy", "--gib", "1"))
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
        child = run_for_step(ctx, gpuwise_cmd(*gpt.estimate_args(config, ctx.gpu, path)), cap_s=30)
        try:
            estimates[config.label] = _json_or_raise(child, f"estimate {config.label}")
        except (StepTimeout, RuntimeError) as exc:
            errors.append(str(exc))
    child = run_for_step(ctx, worker_cmd("train", *(["--quick"] if ctx.quick else [])))
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
    child = run_for_step(
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
    child = run_for_step(
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
