"""`gpuwise report --runs`: each run beside its plan (errors, p10–p90), and the estimator's error
on your jobs; text, JSON and a self-contained HTML page checked in headless Chromium."""

from __future__ import annotations

import re
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tests.base.runs_data import record_for, write_record
from tests.base.test_recipe import PLAN  # 32 × A100-80GB spot; tokens/s 1400 (1800–1000)


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """A finished run of two attempts (one preempted), a pilot, and a run whose plan is elsewhere."""
    root = tmp_path / "runs"
    (root / "job").mkdir(parents=True)
    (root / "job" / "job.plan.json").write_text(PLAN.to_json())
    full = dict(pilot=False, world_size=32)
    write_record(
        root / "job" / "ckpt",
        record_for(
            PLAN,
            "full",
            **full,
            outcome="preempted",
            started="2026-11-27T10:00:00Z",
            ended="2026-11-27T12:00:00Z",
            steps_measured=100,
            tokens_per_s_per_gpu=1300.0,
            step_s=12.0,
            peak_reserved_gib=66.0,
            notices=1,
            preemptions=1,
            steps_lost=7,
            cost_usd=20.0,
        ),
    )
    write_record(
        root / "job" / "ckpt",
        record_for(
            PLAN,
            "full",
            **full,
            attempt=1,
            outcome="done",
            started="2026-11-27T12:30:00Z",
            ended="2026-11-27T14:00:00Z",
            steps_measured=300,
            tokens_per_s_per_gpu=1200.0,
            step_s=12.5,
            peak_reserved_gib=68.0,
            restarts=1,
            cost_usd=30.0,
        ),
    )
    write_record(root / "pilot", record_for(PLAN, "pilot", tokens_per_s_per_gpu=2000.0))
    write_record(root / "other", record_for(PLAN, "orphan", plan_id="plan-0123456789ab"))
    write_record(
        root / "adhoc", record_for(PLAN, "adhoc", plan_id=None, started="2026-11-28T00:00:00Z")
    )
    return root


def _run(doc: dict[str, Any], run_id: str) -> dict[str, Any]:
    found: dict[str, Any] = next(r for r in doc["runs"] if r["run_id"] == run_id)
    return found


def test_a_run_is_set_beside_its_plan(cli, runs: Path) -> None:  # type: ignore[no-untyped-def]
    r = cli("report", "--runs", runs, "--json")
    assert r.code == 0, r.stderr
    doc = r.json()
    full = _run(doc, "full")
    assert (full["attempts"], full["outcome"], full["plan_found"]) == (2, "done", True)
    assert (full["notices"], full["preemptions"], full["restarts"], full["steps_lost"]) == (
        1,
        1,
        1,
        7,
    )
    f = full["figures"]
    # throughput weighted by the steps each attempt timed: (1300·100 + 1200·300) / 400
    assert f["tokens_per_s_per_gpu"]["actual"] == pytest.approx(1225.0)
    assert f["tokens_per_s_per_gpu"]["error"] == pytest.approx((1400 - 1225) / 1225)
    assert f["tokens_per_s_per_gpu"]["inside"] is True
    assert f["step_s"]["actual"] == pytest.approx(12.375)
    # hours: first start to last end, the restart gap included, as the plan counts them
    assert f["hours"]["actual"] == pytest.approx(4.0) and f["hours"]["planned"] == 3.7
    assert f["hours"]["error"] == pytest.approx(-0.075) and f["hours"]["inside"] is True
    assert f["cost_usd"]["actual"] == 50.0 and f["cost_usd"]["p90"] == 66.1
    assert f["peak_memory_gib"]["actual"] == 68.0 and f["peak_memory_gib"]["inside"] is None
    # a pilot is compared on speed, not on the whole job's hours and dollars
    pilot = _run(doc, "pilot")["figures"]
    assert pilot["tokens_per_s_per_gpu"]["error"] == pytest.approx(-0.3)
    assert pilot["tokens_per_s_per_gpu"]["inside"] is False
    assert pilot["hours"]["error"] is None and pilot["hours"]["actual"] is not None
    # a record whose plan was not found is shown, and named
    assert _run(doc, "orphan")["plan_found"] is False
    assert doc["missing_plans"] == ["plan-0123456789ab"]
    adhoc = _run(doc, "adhoc")
    assert (
        adhoc["plan_found"] is False and adhoc["figures"]["tokens_per_s_per_gpu"]["planned"] is None
    )
    assert [r["run_id"] for r in doc["runs"]] == ["full", "orphan", "pilot", "adhoc"]  # by start


def test_the_estimators_error_on_your_jobs(cli, runs: Path) -> None:  # type: ignore[no-untyped-def]
    doc = cli("report", "--runs", runs, "--json").json()
    tps = doc["estimator_error"]["tokens_per_s_per_gpu"]
    errors = [(1400 - 1225) / 1225, -0.3]  # the full run and the pilot
    assert tps["runs"] == 2 and tps["with_range"] == 2 and tps["coverage"] == 0.5
    assert tps["median_error"] == pytest.approx(sum(errors) / 2)
    assert tps["median_abs_error"] == pytest.approx((abs(errors[0]) + abs(errors[1])) / 2)
    assert doc["estimator_error"]["hours"]["runs"] == 1


def test_text_report_names_each_run_and_the_summary(cli, runs: Path) -> None:  # type: ignore[no-untyped-def]
    r = cli("report", "--runs", runs)
    assert r.code == 0, r.stderr
    assert "Plan vs actual: 4 runs" in r.stdout
    assert "adhoc: ran without a plan" in r.stdout
    assert "full" in r.stdout and "preemptions 1" in r.stdout and "steps lost 7" in r.stdout
    assert "pilot: pilot: speed, step time and memory only" in r.stdout
    assert re.search(r"tokens/s/GPU: median \|error\| 22%, signed median -8% over 2 runs", r.stdout)
    assert "plan plan-0123456789ab not found: give it with --plan FILE" in r.stdout


def test_a_plan_file_given_is_matched(cli, runs: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    other = replace(PLAN, plan_id="plan-0123456789ab")
    (tmp_path / "other.json").write_text(other.to_json())
    doc = cli("report", "--runs", runs, "--plan", tmp_path / "other.json", "--json").json()
    assert _run(doc, "orphan")["plan_found"] is True and doc["missing_plans"] == []


@pytest.mark.parametrize(
    "args, message",
    [
        (("--runs", "{runs}", "--fake", "idle"), "--runs reads run records, not monitoring"),
        (("--plan", "{runs}/job/job.plan.json"), "--plan is read with --runs"),
        (("--runs", "{runs}/nowhere"), "no folder at"),
    ],
)
def test_bad_runs_input_is_one_line(cli, runs: Path, args: tuple[str, ...], message: str) -> None:  # type: ignore[no-untyped-def]
    r = cli("report", *(a.format(runs=runs) for a in args))
    assert r.code == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr


def test_the_other_report_modes_still_work(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("report", "--fake", "idle", "--json")
    assert r.code == 0 and "allocated_hours" in r.json()


class _Spans(HTMLParser):
    """(table id, run, figure, data-field, data-value, shown text) of every number on the page."""

    def __init__(self) -> None:
        super().__init__()
        self.table: str | None = None
        self.row: dict[str, str] = {}
        self.current: dict[str, str] | None = None
        self.found: list[tuple[str | None, str, str, str, str, str]] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "table":
            self.table = a.get("id")
        elif tag == "tr":
            self.row = a
        elif tag == "span" and "data-field" in a:
            self.current = {"field": a["data-field"], "value": a["data-value"], "text": ""}
        elif tag == "script":
            self.scripts += 1

    def handle_data(self, data: str) -> None:
        if self.current is not None:
            self.current["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "span" and self.current is not None:
            c, row = self.current, self.row
            self.found.append(
                (
                    self.table,
                    row.get("data-run", ""),
                    row.get("data-figure", ""),
                    c["field"],
                    c["value"],
                    c["text"],
                )
            )
            self.current = None


@pytest.mark.slow  # starts Chromium
def test_html_renders_offline_with_the_json_numbers(cli, runs: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tests.monitor.test_monitor_html import CHROMIUM, _chromium

    if CHROMIUM is None:
        pytest.skip("the chromium binary is not installed (Debian package chromium)")
    page = tmp_path / "runs.html"
    r = cli("report", "--runs", runs, "--html", page, "--json")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert "https://" not in page.read_text()  # no CDN, no fonts: opens air-gapped
    dom, console = _chromium(page, tmp_path / "profile")
    assert console == [], console
    spans = _Spans()
    spans.feed(dom)
    assert spans.scripts == 0
    shown = {(t, run, fig, f): (v, text) for t, run, fig, f, v, text in spans.found}
    checked = 0
    for run in doc["runs"]:
        for name, fig in run["figures"].items():
            for field in ("planned", "p10", "p90", "actual", "error", "inside"):
                value, text = shown[("runs", run["run_id"], name, field)]
                want = fig[field]
                if want is None:
                    assert (value, text) == ("", "—"), (run["run_id"], name, field)
                elif isinstance(want, bool):
                    assert (value, text) == (str(want), "yes" if want else "no")
                else:
                    assert float(value) == pytest.approx(want, rel=1e-12), (name, field)
                    checked += 1
    assert checked >= 20
    value, text = shown[("runs", "full", "tokens_per_s_per_gpu", "error")]
    assert text == "+14%"  # (1400 − 1225) / 1225, as the JSON has it
    for name, s in doc["estimator_error"].items():
        value, text = shown[("summary", "", name, "median_error")]
        assert (float(value) if value else None) == (
            pytest.approx(s["median_error"]) if s["median_error"] is not None else None
        )
