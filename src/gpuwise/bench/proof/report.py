"""What one GPU proof run recorded, and its markdown and JSON renderings.

Every step yields a :class:`StepResult` whether it passed, failed, timed out or was skipped, so
the report always lists all steps and says why one did not finish. Rendering is pure (values in,
text out): the CPU tests build runs from recorded step results and check both renderings.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["ok", "fail", "timeout", "skip"]
STATUSES: tuple[Status, ...] = ("ok", "fail", "timeout", "skip")


@dataclass(frozen=True)
class Target:
    """A figure checked against a goal, e.g. bf16 matmul ≥ 95 % of the best-known figure."""

    name: str
    """What is checked, in words."""
    value: float | None
    """The measured figure (a ratio or a percentage, as ``goal``); None when not measured."""
    goal: str
    """The goal in words, e.g. ``≥ 95 %``."""
    met: bool | None
    """True/False once measured; None when the figure is missing."""


@dataclass(frozen=True)
class StepResult:
    """One step of the proof run: what it measured, or why it did not."""

    name: str
    """Stable step name: ``doctor``, ``bench``, ``exporter``, ``memory``, ``checkpoint``, ``pytest-gpu``."""
    status: Status
    """``ok``; ``fail`` (an error, see ``reason``); ``timeout`` (hit its time limit); ``skip``."""
    seconds: float
    """Wall-clock seconds the step took."""
    summary: str = ""
    """One line for the report's step table."""
    reason: str = ""
    """Why it failed, timed out or was skipped (empty when ``ok``)."""
    tables: tuple[Table, ...] = ()
    """Markdown tables for the report, in order."""
    targets: tuple[Target, ...] = ()
    """Goals this step checks."""
    data: dict[str, Any] = field(default_factory=dict)
    """Everything measured, JSON-serializable, for the JSON file."""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"step {self.name}: status {self.status!r} is not one of {STATUSES}")


@dataclass(frozen=True)
class Table:
    """A small table with a title; cells are already formatted strings."""

    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.header):
                raise ValueError(
                    f"table {self.title!r}: row {row} has {len(row)} cells, the header {len(self.header)}"
                )


@dataclass(frozen=True)
class ProofRun:
    """A whole run: where it ran and every step's result."""

    meta: dict[str, Any]
    """date (UTC ISO), gpu, gpu_count, driver, cuda_driver, nvml, torch, torch_cuda, gpuwise_commit,
    quick, host_python: whatever could be read; missing facts are None."""
    steps: tuple[StepResult, ...]

    @property
    def failed(self) -> tuple[StepResult, ...]:
        return tuple(s for s in self.steps if s.status in ("fail", "timeout"))


def _cell(value: Any) -> str:
    return (
        "—" if value is None or value == "" else str(value).replace("|", "\\|").replace("\n", " ")
    )


def markdown_table(table: Table) -> list[str]:
    lines = [
        f"**{table.title}**",
        "",
        "| " + " | ".join(table.header) + " |",
        "|" + "|".join(" --- " for _ in table.header) + "|",
    ]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in table.rows]
    return [*lines, ""]


def _target_cell(t: Target) -> str:
    return "unmeasured" if t.met is None else ("met" if t.met else "**missed**")


def render_markdown(run: ProofRun) -> str:
    """The report: a heading with the date and machine, the step table, the targets, then each
    step's tables. Short enough to paste into docs/benchmarks.md under a ``###`` heading."""
    m = run.meta
    date = str(m.get("date") or "")[:10] or "undated"
    title = f"### {date}: {_cell(m.get('gpu'))} × {_cell(m.get('gpu_count'))}" + (
        " (--quick)" if m.get("quick") else ""
    )
    facts = (
        f"driver {_cell(m.get('driver'))}, CUDA (driver) {_cell(m.get('cuda_driver'))}, "
        f"torch {_cell(m.get('torch'))} (CUDA {_cell(m.get('torch_cuda'))}), "
        f"gpuwise {_cell(m.get('gpuwise_commit'))}, run at {_cell(m.get('date'))}"
    )
    lines = [title, "", facts, ""]
    if m.get("gpus"):
        lines += markdown_table(machine_table(m["gpus"]))
    lines += markdown_table(
        Table(
            "Steps",
            ("step", "status", "seconds", "result"),
            tuple(
                (
                    s.name,
                    s.status,
                    f"{s.seconds:.0f}",
                    s.summary if s.status == "ok" else s.reason or s.summary,
                )
                for s in run.steps
            ),
        )
    )
    targets = [(s.name, t) for s in run.steps for t in s.targets]
    if targets:
        lines += markdown_table(
            Table(
                "Targets",
                ("step", "target", "goal", "measured", "verdict"),
                tuple(
                    (step, t.name, t.goal, _number(t.value), _target_cell(t)) for step, t in targets
                ),
            )
        )
    for s in run.steps:
        for table in s.tables:
            if table.rows:
                lines += markdown_table(table)
    failed = run.failed
    lines.append(
        f"{len(failed)} of {len(run.steps)} steps failed: "
        + ", ".join(f"{s.name} ({s.reason})" for s in failed)
        if failed
        else f"All {len(run.steps)} steps finished."
    )
    return "\n".join(lines) + "\n"


GPU_FACTS = (
    "index",
    "name",
    "memory_gib",
    "mig_mode",
    "persistence_mode",
    "power_limit_w",
    "pcie_gen",
    "pcie_width",
)


def machine_table(gpus: Sequence[dict[str, Any]]) -> Table:
    """One row per GPU with what NVML said (None → ``—``)."""
    return Table("GPUs (NVML)", GPU_FACTS, rows([[g.get(k) for k in GPU_FACTS] for g in gpus]))


def _number(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"


def to_json(run: ProofRun) -> dict[str, Any]:
    """The JSON file: meta, then every step with its status, reason, targets and data."""
    return {
        "meta": run.meta,
        "failed": [s.name for s in run.failed],
        "steps": [
            {
                "name": s.name,
                "status": s.status,
                "seconds": round(s.seconds, 3),
                "summary": s.summary,
                "reason": s.reason,
                "targets": [
                    {"name": t.name, "value": t.value, "goal": t.goal, "met": t.met}
                    for t in s.targets
                ],
                "data": s.data,
            }
            for s in run.steps
        ],
    }


def dumps(run: ProofRun) -> str:
    return json.dumps(to_json(run), indent=2, sort_keys=False, default=str) + "\n"


def fmt(value: float | None, spec: str = ".1f") -> str:
    """A number for a table cell; ``—`` for None."""
    return "—" if value is None else format(value, spec)


def pct(value: float | None) -> str:
    """A ratio as a percentage cell (0.953 → ``95.3 %``)."""
    return "—" if value is None else f"{value * 100:.1f} %"


def ratio(value: float | None, reference: float | None) -> float | None:
    """``value / reference``, None when either is missing or the reference is 0."""
    if value is None or not reference:
        return None
    return value / reference


def rows(items: Sequence[Sequence[Any]]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(_cell(c) for c in row) for row in items)
