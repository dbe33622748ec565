"""Plan against actual: ``gpuwise report --runs DIR``.

Each run (all attempts sharing a run id) is set beside the plan it ran, found by ``plan_id``
(:mod:`gpuwise.base.runlog`): tokens per second per GPU, step time, peak memory, hours and
dollars, planned and actual, the estimate's signed error ((planned − actual) ÷ actual) and
whether the actual fell inside the plan's p10–p90; and what interrupted it (notices,
preemptions, restarts, steps lost). Over all runs, the estimator's error on *your* jobs: the
median absolute error, the signed median (+: the estimate promised more speed, or less time and
money, than the runs got) and the share of runs inside the plan's range.

A pilot (``gpuwise run --pilot N``) compares speed, step time and memory only: its hours and
dollars are a few steps', not the job's. So does a run that has not finished. Pure: values in,
values out; :func:`render_runs_html` is the self-contained page.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any

from gpuwise.base.recipe import Band, PlanFile, RunRecord
from gpuwise.base.runlog import FoundRun, RunHistory

FIGURES = ("tokens_per_s_per_gpu", "step_s", "peak_memory_gib", "hours", "cost_usd")
"""The figures compared, in the order the report shows them."""
WHOLE_RUN = ("hours", "cost_usd")
"""Figures only a finished, non-pilot run can be compared on."""


@dataclass(frozen=True)
class Figure:
    """One figure of one run, planned and actual."""

    name: str
    planned: float | None
    p10: float | None
    p90: float | None
    actual: float | None
    error: float | None
    """(planned − actual) ÷ actual; None when either is missing (or not comparable)."""
    inside: bool | None
    """Whether the actual lies in the plan's [p10, p90]; None without a range or an actual."""


@dataclass(frozen=True)
class RunComparison:
    """One run: its attempts together, beside its plan."""

    run_id: str
    plan_id: str | None
    plan_found: bool
    pilot: bool
    outcome: str
    """The last attempt's outcome: done, pilot, preempted, failed or running."""
    attempts: int
    gpu: str | None
    world_size: int
    capacity_type: str
    started: str
    ended: str | None
    figures: tuple[Figure, ...]
    notices: int
    preemptions: int
    restarts: int
    steps_lost: int
    steps: int
    """The last step the run reached."""
    notes: tuple[str, ...]


@dataclass(frozen=True)
class ErrorSummary:
    """The estimator's error on one figure over the runs that can be compared on it."""

    name: str
    runs: int
    median_abs_error: float | None
    median_error: float | None
    """Signed: + = the plan was optimistic for a speed, pessimistic for a time or cost."""
    coverage: float | None
    """Share of the runs with a range whose actual fell inside p10–p90."""
    with_range: int


@dataclass(frozen=True)
class RunsReport:
    root: str
    runs: tuple[RunComparison, ...]
    summary: tuple[ErrorSummary, ...]
    skipped: tuple[str, ...]
    missing_plans: tuple[str, ...]


def build_runs_report(history: RunHistory) -> RunsReport:
    """Group the records per run and compare each run with its plan."""
    by_run: dict[str, list[FoundRun]] = {}
    for found in history.runs:
        by_run.setdefault(found.record.run_id, []).append(found)
    runs = tuple(
        _compare(sorted(group, key=lambda f: f.record.attempt)) for group in by_run.values()
    )
    runs = tuple(sorted(runs, key=lambda r: (r.started, r.run_id)))
    return RunsReport(
        root=history.root,
        runs=runs,
        summary=tuple(_summary(name, runs) for name in FIGURES),
        skipped=history.skipped,
        missing_plans=history.missing_plans,
    )


def _compare(group: Sequence[FoundRun]) -> RunComparison:
    recs = [f.record for f in group]
    last = recs[-1]
    plan = next((f.plan for f in group if f.plan is not None), None)
    pilot = any(r.pilot for r in recs)
    finished = last.outcome == "done" and not pilot
    hours = _wall_hours(recs[0].started, last.ended)
    costs = [r.cost_usd for r in recs]
    actual = {
        "tokens_per_s_per_gpu": _weighted(recs, "tokens_per_s_per_gpu"),
        "step_s": _weighted(recs, "step_s"),
        "peak_memory_gib": max(
            (m for r in recs if (m := r.peak_reserved_gib or r.peak_memory_gib) is not None),
            default=None,
        ),
        "hours": hours,
        "cost_usd": sum(c for c in costs if c is not None)
        if all(c is not None for c in costs)
        else None,
    }
    notes = []
    if last.plan_id and plan is None:
        notes.append(f"plan {last.plan_id} not found: give it with --plan FILE")
    elif not last.plan_id:
        notes.append("ran without a plan (gpuwise run --plan plan.json): nothing to compare")
    if pilot:
        notes.append("pilot: speed, step time and memory only")
    elif not finished:
        notes.append(f"{last.outcome}: hours and dollars not compared until the run is done")
    notes += [f"allowed mismatch: {m}" for r in recs for m in r.plan_mismatch]
    figures = tuple(
        _figure(name, plan, actual[name], comparable=finished or name not in WHOLE_RUN)
        for name in FIGURES
    )
    return RunComparison(
        run_id=last.run_id,
        plan_id=last.plan_id,
        plan_found=plan is not None,
        pilot=pilot,
        outcome=last.outcome,
        attempts=len(recs),
        gpu=last.gpu,
        world_size=last.world_size,
        capacity_type=last.capacity_type,
        started=recs[0].started,
        ended=last.ended,
        figures=figures,
        notices=sum(r.notices for r in recs),
        preemptions=sum(r.preemptions for r in recs),
        restarts=sum(r.restarts for r in recs),
        steps_lost=sum(r.steps_lost for r in recs),
        steps=max(r.step_end for r in recs),
        notes=tuple(dict.fromkeys(notes)),
    )


def _planned(name: str, plan: PlanFile | None) -> Band | None:
    if plan is None:
        return None
    e = plan.expected
    if name == "peak_memory_gib":
        return Band(e.peak_memory_gib_per_gpu)
    band: Band | None = getattr(e, name)
    if band is not None and name in WHOLE_RUN and e.startup_hours:
        # the run's clock starts once the node is up: compare without provisioning and downloads
        less = e.startup_hours * (e.price_usd_per_hour if name == "cost_usd" else 1.0)
        band = Band(
            band.expected - less,
            None if band.p10 is None else band.p10 - less,
            None if band.p90 is None else band.p90 - less,
        )
    return band


def _figure(name: str, plan: PlanFile | None, actual: float | None, comparable: bool) -> Figure:
    band = _planned(name, plan)
    ok = comparable and band is not None and actual is not None
    return Figure(
        name=name,
        planned=band.expected if band else None,
        p10=band.p10 if band else None,
        p90=band.p90 if band else None,
        actual=actual,
        error=band.error(actual) if ok and band and actual is not None else None,
        inside=band.holds(actual) if ok and band and actual is not None else None,
    )


def _weighted(recs: Sequence[RunRecord], name: str) -> float | None:
    """The attempts' figure weighted by the steps each timed (every attempt alike when none says)."""
    pairs = [(getattr(r, name), max(r.steps_measured, 0)) for r in recs]
    pairs = [(v, w) for v, w in pairs if v is not None]
    if not pairs:
        return None
    total = sum(w for _, w in pairs)
    if total == 0:
        return float(statistics.fmean(v for v, _ in pairs))
    return float(sum(v * w for v, w in pairs) / total)


def _wall_hours(start: str, end: str | None) -> float | None:
    if end is None:
        return None
    try:
        t0 = dt.datetime.fromisoformat(start.replace("Z", "+00:00"))
        t1 = dt.datetime.fromisoformat(end.replace("Z", "+00:00"))
    except ValueError:
        return None
    hours = (t1 - t0).total_seconds() / 3600
    return hours if hours >= 0 else None


def _summary(name: str, runs: Sequence[RunComparison]) -> ErrorSummary:
    figs = [f for r in runs for f in r.figures if f.name == name and f.error is not None]
    errors = [f.error for f in figs if f.error is not None]
    banded = [f.inside for f in figs if f.inside is not None]
    return ErrorSummary(
        name=name,
        runs=len(errors),
        median_abs_error=float(statistics.median(abs(e) for e in errors)) if errors else None,
        median_error=float(statistics.median(errors)) if errors else None,
        coverage=sum(banded) / len(banded) if banded else None,
        with_range=len(banded),
    )


def runs_report_to_dict(rep: RunsReport) -> dict[str, Any]:
    """The ``--json`` document (the HTML page shows exactly these numbers)."""
    return {
        "runs_root": rep.root,
        "runs": [
            {**asdict(r), "figures": {f.name: _fig_dict(f) for f in r.figures}} for r in rep.runs
        ],
        "estimator_error": {s.name: _sum_dict(s) for s in rep.summary},
        "missing_plans": list(rep.missing_plans),
        "skipped": list(rep.skipped),
    }


def _fig_dict(f: Figure) -> dict[str, Any]:
    d = asdict(f)
    d.pop("name")
    return d


def _sum_dict(s: ErrorSummary) -> dict[str, Any]:
    d = asdict(s)
    d.pop("name")
    return d


LABELS = {
    "tokens_per_s_per_gpu": "tokens/s per GPU",
    "step_s": "step time (s)",
    "peak_memory_gib": "peak memory (GiB)",
    "hours": "hours",
    "cost_usd": "dollars",
}
"""How the report names each figure."""


def render_runs_html(doc: dict[str, Any]) -> str:
    """The self-contained page of ``doc`` (:func:`runs_report_to_dict`): no script, no network."""
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    template = env.from_string(
        resources.files("gpuwise.monitor").joinpath("templates/runs_report.html.j2").read_text()
    )
    return str(template.render(doc=doc, labels=LABELS, figures=FIGURES))
