"""Options shared by the commands that read run history (``calibrate``, ``report --runs``, ``plan``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from gpuwise.base.runlog import RunHistory
    from gpuwise.catalog import Offer
    from gpuwise.cli._workload import WorkloadRequest
    from gpuwise.estimate import Calibration, Workload
    from gpuwise.planner import Plan, PlanOption, PlanRequest

PlanFilesOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--plan",
        help="A plan file (`gpuwise plan --save`) to match records against by plan id, besides "
        "the plan.json / *.plan.json files found in the folder. Repeatable.",
    ),
]


def read_history(root: str, plans: list[Path] | None) -> RunHistory:
    """The run records under ``root`` (a folder or fsspec URL) with their plans."""
    from gpuwise.base.runlog import read_runs

    return read_runs(root, plan_files=plans or ())


CalibrationFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--calibration",
        help="Calibration file (default: calibration.json in the config dir, when present; "
        "`gpuwise calibrate --from-runs` and `gpuwise bench --calibrate` write it).",
        rich_help_panel="Calibration and history",
    ),
]
NoCalibrationOpt = Annotated[
    bool,
    typer.Option(
        "--no-calibration",
        help="Ignore any calibration file: every figure from the bundled model.",
        rich_help_panel="Calibration and history",
    ),
]
RunsOpt = Annotated[
    str | None,
    typer.Option(
        "--runs",
        metavar="PATH",
        help="Folder or URL of run records for --spot-mtbf auto (observed preemptions per cloud, "
        "region and instance type).",
        rich_help_panel="Calibration and history",
    ),
]


def plan_calibration(path: Path | None, ignore: bool) -> tuple[Calibration | None, Path | None]:
    """(the calibration ``plan`` uses, the file ``--no-calibration`` set aside) for its flags."""
    from gpuwise.estimate import default_calibration_path, load_calibration

    if ignore:  # with --calibration too: refused by PlanFlags.validate
        default = default_calibration_path()
        return None, default if default.is_file() else None
    return load_calibration(path), None


def calibration_head(
    cal: Calibration | None, ignored: Path | None, model: str, task: str
) -> tuple[dict[str, Any] | None, list[str]]:
    """(the plan's ``calibration`` JSON entry, its first lines of text).

    They say which file and which runs the estimate rests on, and for which GPUs, so a
    calibration never changes a plan silently; ``--no-calibration`` says what it set aside.
    """
    if cal is None:
        if ignored is None:
            return None, []
        return (
            {"path": None, "ignored": str(ignored), "gpus": [], "runs": [], "this_job": []},
            [f"Calibration ignored (--no-calibration): {ignored}; every figure is the model's."],
        )
    mine = [
        (gpu, m)
        for gpu, g in sorted(cal.gpus.items())
        for m in g.from_runs
        if (m.model, m.task) == (model.lower(), task)
    ]
    doc = {
        "path": cal.path,
        "measured_at": cal.measured_at,
        "gpus": sorted(cal.gpus),
        "runs": list(cal.runs),
        "this_job": [
            {
                "gpu": gpu,
                "model": m.model,
                "task": m.task,
                "mfu": m.mfu,
                "runs": list(m.runs),
                "rehearsal": m.rehearsal,
            }
            for gpu, m in mine
        ],
    }
    when = f", measured {cal.measured_at}" if cal.measured_at else ""
    lines = [
        f"Calibrated by {cal.path}{when}: figures for "
        f"{', '.join(sorted(cal.gpus)) or 'no GPU (workload defaults only)'} are measured, "
        "other GPUs modelled (--no-calibration ignores it)."
    ]
    for gpu, m in mine:
        n = len(m.runs)
        lines.append(
            f"  {gpu}: {m.model} {m.task} re-planned from {n} measured run{'s' * (n != 1)} "
            f"({', '.join(m.runs[:5])}{' …' if n > 5 else ''})"
            + (f", MFU {m.mfu:.1%}" if m.mfu is not None else "")
            + (f", memory × {m.memory_ratio:.2f}" if m.memory_ratio is not None else "")
            + (" — a rehearsal: runs without a GPU, not this GPU's figures" if m.rehearsal else "")
        )
    return doc, lines


def observed_spot(request: PlanRequest, runs: str) -> tuple[PlanRequest, dict[str, Any], list[str]]:
    """``--spot-mtbf auto --runs``: the request with the observed per-site rates, their JSON, their
    lines."""
    from dataclasses import replace

    from gpuwise.planner import SPOT_MIN_PREEMPTIONS, observed_sites, spot_history

    history = spot_history(r.record for r in read_history(runs, None).runs)
    used = observed_sites(history)
    doc = {
        "runs": runs,
        "min_preemptions": SPOT_MIN_PREEMPTIONS,
        "sites": [
            {
                "cloud": s.cloud,
                "region": s.region,
                "instance_type": s.instance_type,
                "node_hours": s.node_hours,
                "preemptions": s.preemptions,
                "attempts": s.attempts,
                "mtbf_hours": s.mtbf_hours,
                "used": s.enough,
                "last_end": s.last_end,
            }
            for s in history
        ],
    }
    lines = [
        f"Spot interruptions (--spot-mtbf auto): observed for {len(used)} of {len(history)} "
        f"site{'s' * (len(history) != 1)} with spot history in {runs}; every other site keeps "
        "the bundled figure."
    ]
    lines += [f"  {s.source}" for s in history]
    return replace(request, spot_mtbf_by_site=used), doc, lines


RunsReportOpt = Annotated[
    str | None,
    typer.Option(
        "--runs",
        metavar="PATH",
        help="Plan vs actual instead: read the run records under this folder or URL (s3://, "
        "gs://) and set each run beside its plan (plan.json / *.plan.json there, or --plan).",
    ),
]


def runs_report(
    runs: str | None,
    plans: list[Path] | None,
    *,
    html: Path | None,
    json: bool,
    other: tuple[object, ...],
) -> None:
    """``gpuwise report --runs DIR``: plan vs actual per run, and the estimator's error overall."""
    from gpuwise.base.paths import write_text_atomic
    from gpuwise.cli._output import console, emit_json
    from gpuwise.errors import InputError, StorageError
    from gpuwise.monitor import build_runs_report, render_runs_html, runs_report_to_dict

    if runs is None:
        raise InputError("--plan is read with --runs", hint="add --runs DIR (the run records)")
    if any(o is not None for o in other):
        raise InputError(
            "--runs reads run records, not monitoring history",
            hint="give --runs alone, or --db/--prometheus/--fake without --runs",
        )
    rep = build_runs_report(read_history(runs, plans))
    doc = runs_report_to_dict(rep)
    if html is not None:
        try:
            write_text_atomic(html, render_runs_html(doc))
        except OSError as exc:
            raise StorageError(
                f"cannot write {html}: {exc.strerror}", hint="give a writable --html path"
            ) from exc
    if json:
        emit_json(doc)
        return
    _print_runs_report(doc, console())
    if html is not None:
        console().print(f"HTML report: {html}")


_FIG_FORMAT = {
    "tokens_per_s_per_gpu": ("tokens/s/GPU", ",.0f"),
    "step_s": ("step s", ".2f"),
    "peak_memory_gib": ("peak GiB", ".1f"),
    "hours": ("hours", ".2f"),
    "cost_usd": ("dollars", ",.2f"),
}


def _print_runs_report(doc: dict[str, Any], out: Any) -> None:
    from gpuwise.cli._output import make_table, number

    table = make_table(
        ["run", "figure", "planned", "p10–p90", "actual", "error", "in range"],
        title=f"Plan vs actual: {len(doc['runs'])} runs under {doc['runs_root']}",
        left=("run", "figure"),
    )
    for r in doc["runs"]:
        head = (
            f"{r['run_id']}\n{r['gpu'] or 'no GPU'} × {r['world_size']} {r['capacity_type']}\n"
            f"{r['outcome']}{' (pilot)' if r['pilot'] and r['outcome'] != 'pilot' else ''}, {r['attempts']} attempt(s)\n"
            f"notices {r['notices']}, preemptions {r['preemptions']},\n"
            f"restarts {r['restarts']}, steps lost {r['steps_lost']}"
        )
        for i, (name, (label, fmt)) in enumerate(_FIG_FORMAT.items()):
            f = r["figures"][name]
            rng = (
                f"{number(f['p10'], fmt)}–{number(f['p90'], fmt)}" if f["p10"] is not None else "—"
            )
            table.add_row(
                head if i == 0 else "",
                label,
                number(f["planned"], fmt),
                rng,
                number(f["actual"], fmt),
                "—" if f["error"] is None else f"{f['error']:+.0%}",
                "—" if f["inside"] is None else ("yes" if f["inside"] else "no"),
            )
        table.add_section()
    out.print(table)
    for r in doc["runs"]:
        for note in r["notes"]:
            out.print(f"{r['run_id']}: {note}", markup=False)
    out.print("The estimator on these jobs (error = (planned − actual) ÷ actual):")
    for name, (label, _) in _FIG_FORMAT.items():
        s = doc["estimator_error"][name]
        if not s["runs"]:
            out.print(f"  {label}: no run to compare", markup=False)
            continue
        cover = (
            f", {s['coverage']:.0%} of {s['with_range']} inside p10–p90"
            if s["coverage"] is not None
            else ""
        )
        out.print(
            f"  {label}: median |error| {s['median_abs_error']:.0%}, signed median "
            f"{s['median_error']:+.0%} over {s['runs']} run{'s' * (s['runs'] != 1)}{cover}",
            markup=False,
        )
    for pid in doc["missing_plans"]:
        out.print(f"plan {pid} not found: give it with --plan FILE", style="yellow", markup=False)
    for line in doc["skipped"]:
        out.print(f"skipped {line}", style="yellow", markup=False)


def winner_without(result: Plan, again: Plan) -> tuple[str, dict[str, Any]] | None:
    """The line (and JSON) that says whether the calibration changed the winner: ``again`` is the
    same plan made without it. None when either plan has no winner."""
    from gpuwise.cli._output import money

    won, other = result.winner, again.winner
    if won is None or other is None:
        return None

    def key(o: PlanOption) -> tuple[object, ...]:
        return (o.gpu, o.gpu_count, o.nodes, o.cloud, o.instance_type, o.region, o.billing)

    same = key(won) == key(other)
    doc = {
        "same_winner": same,
        "setup": other.setup,
        "cloud": other.cloud,
        "instance_type": other.instance_type,
        "region": other.region,
        "billing": other.billing,
        "cost_usd": other.cost_usd,
        "hours": other.hours,
    }
    what = (
        f"{other.setup} {other.cloud} {other.instance_type} {other.billing} "
        f"({money(other.cost_usd)}, {other.hours:.1f} h)"
    )
    if same:
        return f"  Without it the winner is the same, at {what}.", doc
    return f"  The calibration changed the winner: without it, {what} would win.", doc


@dataclass
class PlanHead:
    """What ``plan`` says first: the calibration and run history its figures rest on."""

    calibration: Calibration | None
    ignored: Path | None
    """The calibration file ``--no-calibration`` set aside."""
    spot_mtbf: str | None
    """``--spot-mtbf`` as the request reads it (None for ``auto``)."""
    runs: str | None
    auto: bool
    """``--spot-mtbf auto``."""
    lines: list[str] = field(default_factory=list)
    doc: dict[str, Any] = field(default_factory=dict)
    """The same as JSON: ``calibration`` (and ``spot_history``), first in ``--json``."""

    @classmethod
    def read(
        cls, path: Path | None, ignore: bool, spot_mtbf: str | None, runs: str | None
    ) -> PlanHead:
        cal, ignored = plan_calibration(path, ignore)
        auto = spot_mtbf is not None and spot_mtbf.strip().lower() == "auto"
        return cls(cal, ignored, None if auto else spot_mtbf, runs, auto)

    def spot(self, request: PlanRequest) -> PlanRequest:
        """``request`` with the observed spot rates of ``--spot-mtbf auto --runs``."""
        if not self.auto or self.runs is None:  # one without the other: PlanFlags.validate
            return request
        request, self.doc["spot_history"], lines = observed_spot(request, self.runs)
        self.lines += lines
        return request

    def plan(
        self,
        plan: Any,
        workload: Workload,
        workload_request: WorkloadRequest,
        request: PlanRequest,
        offers: Sequence[Offer],
    ) -> Plan:
        """The plan; with a calibration, made once more without it to say whether it changed
        the winner."""
        from gpuwise.estimate import Calibration

        none = Calibration("", {})  # not the config dir's file: the planner would read it
        result: Plan = plan(workload, request, offers=offers, calibration=self.calibration or none)
        doc, lines = calibration_head(
            self.calibration, self.ignored, workload.model.name, workload.task
        )
        if self.calibration is not None and doc is not None:
            plain = workload_request.workload(None)
            said = winner_without(result, plan(plain, request, offers=offers, calibration=none))
            if said is not None:
                lines.insert(1, said[0])
                doc["without"] = said[1]
        self.lines[:0] = lines
        self.doc = {"calibration": doc, **self.doc}
        return result

    def runs_used(self, result: Plan, workload: Workload) -> tuple[str, ...]:
        """The runs behind the winner's figures for this model and task (the plan file's)."""
        won = result.winner
        g = self.calibration.for_gpu(won.gpu) if self.calibration and won else None
        m = g.measured_for(workload.model.name, workload.task) if g is not None else None
        return m.runs if m is not None else ()
