"""The loop closes: a pilot's record → `calibrate --from-runs` → a `plan` that names the pilot in
its first lines and whose estimate for that GPU is the measured figure."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from gpuwise.base.recipe import PlanFile, load_plan_file
from tests.base.runs_data import PLAN_ARGS, record_for, write_record


def _tps(plan: PlanFile) -> float:
    band = plan.expected.tokens_per_s_per_gpu
    assert band is not None
    return band.expected


@pytest.fixture
def piloted(cli, tmp_path: Path) -> tuple[PlanFile, float, Path]:  # type: ignore[no-untyped-def]
    """A saved plan, a pilot record beside it that measured 60 % of its promise, and the folder."""
    r = cli(*PLAN_ARGS, "--save", tmp_path / "plan.json")
    assert r.code == 0, r.stderr
    plan = load_plan_file(tmp_path / "plan.json")
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(tmp_path / "plan.json", runs / "plan.json")
    measured = round(_tps(plan) * 0.6, 1)
    write_record(runs / "ckpt", record_for(plan, tokens_per_s_per_gpu=measured))
    r = cli("calibrate", "--from-runs", runs)
    assert r.code == 0, r.stderr
    assert "pilot-a/0" in r.stdout and "calibration written to" in r.stdout
    return plan, measured, runs


@pytest.mark.slow  # three plans in one process: about 5 s
def test_the_next_plan_names_the_pilot_first_and_moves_to_its_figure(
    cli, piloted, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    first, measured, _ = piloted
    r = cli(*PLAN_ARGS, "--save", tmp_path / "again.json")
    assert r.code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("Calibrated by ") and "H100" in lines[0]
    assert "llama-3.1-8b lora re-planned from 1 measured run (pilot-a/0)" in r.stdout.split("┏")[0]
    again = load_plan_file(tmp_path / "again.json")
    assert (again.recipe.gpu, again.recipe.world_size) == (first.recipe.gpu, 1)
    assert _tps(again) == pytest.approx(measured, rel=1e-3)
    assert _tps(first) == pytest.approx(measured / 0.6, rel=1e-3)  # it moved from the model
    assert again.calibration_runs == ("pilot-a/0",) and again.calibration is not None
    assert again.expected.hours.expected > first.expected.hours.expected  # slower: longer
    # --no-calibration: the bundled model again, and the plan says what it set aside
    r = cli(*PLAN_ARGS, "--no-calibration", "--save", tmp_path / "plain.json")
    assert r.stdout.startswith("Calibration ignored (--no-calibration): ")
    plain = load_plan_file(tmp_path / "plain.json")
    assert _tps(plain) == pytest.approx(_tps(first)) and plain.calibration is None


def test_plan_json_says_which_calibration_and_runs_it_used(cli, piloted) -> None:  # type: ignore[no-untyped-def]
    r = cli(*PLAN_ARGS, "--json")
    doc: dict[str, Any] = json.loads(r.stdout)
    assert next(iter(doc)) == "calibration"  # the first thing the document says
    cal = doc["calibration"]
    assert cal["path"].endswith("calibration.json") and cal["gpus"] == ["H100"]
    assert cal["runs"] == ["pilot-a/0"]
    [mine] = cal["this_job"]
    assert (mine["gpu"], mine["model"], mine["task"], mine["runs"]) == (
        "H100",
        "llama-3.1-8b",
        "lora",
        ["pilot-a/0"],
    )
    assert 0 < mine["mfu"] < 1 and mine["rehearsal"] is False


def test_a_plan_without_calibration_says_none(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli(*PLAN_ARGS, "--json")
    assert r.code == 0 and json.loads(r.stdout)["calibration"] is None
    r = cli(*PLAN_ARGS)
    assert "Calibrat" not in r.stdout


def test_calibration_and_no_calibration_contradict(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = cli(*PLAN_ARGS, "--calibration", tmp_path / "c.json", "--no-calibration")
    assert r.code == 2 and r.stderr.count("\n") == 1
    assert "contradict each other" in r.stderr and "To fix:" in r.stderr


def test_calibrating_from_runs_no_gpu_ran_is_refused(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tests.base.test_recipe import PLAN

    (tmp_path / "plan.json").write_text(PLAN.to_json())
    write_record(tmp_path, record_for(PLAN, "cpu", gpu=None, tokens_per_s_per_gpu=50.0))
    r = cli("calibrate", "--from-runs", tmp_path)
    assert r.code == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "can calibrate a GPU" in r.stderr and "cpu/0: ran without a GPU" in r.stderr


def test_calibrate_dry_run_json_writes_nothing(cli, tmp_path: Path, isolated_env: Path) -> None:  # type: ignore[no-untyped-def]
    from tests.base.test_recipe import PLAN

    (tmp_path / "plan.json").write_text(PLAN.to_json())
    write_record(tmp_path, record_for(PLAN, tokens_per_s_per_gpu=1000.0))
    r = cli("calibrate", "--from-runs", tmp_path, "--dry-run", "--json")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["calibration"] is None and doc["runs"] == ["pilot-a/0"]
    assert doc["gpus"]["A100-80GB"][0]["tokens_per_s_per_gpu"] == 1000.0
    assert not list(isolated_env.rglob("calibration.json"))


def test_a_cpu_rehearsal_is_taken_only_when_asked_and_said(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tests.base.test_recipe import PLAN

    (tmp_path / "plan.json").write_text(PLAN.to_json())
    write_record(tmp_path, record_for(PLAN, "cpu", gpu=None, tokens_per_s_per_gpu=500.0))
    r = cli("calibrate", "--from-runs", tmp_path, "--assume-gpu", "A100-80GB")
    assert r.code == 0, r.stderr
    assert "a rehearsal: runs without a GPU" in r.stdout
    r = cli(
        *PLAN_ARGS[:7], "--gpu", "A100-80GB", "--cloud", "azure", "--max-gpus", "8", "--limit", "1"
    )
    assert r.code == 0, r.stderr
    head = r.stdout.split("┏")[0]
    assert "re-planned from 1 measured run (cpu/0)" in head and "a rehearsal" in head


@pytest.mark.slow  # four plans in one process: about 6 s
def test_a_calibration_that_switches_the_winner_says_so(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    two = (*PLAN_ARGS[:7], "--gpu", "H100,A100-80GB", "--cloud", "gcp", "--max-gpus", "1")
    assert cli(*two, "--save", tmp_path / "plan.json").code == 0
    first = load_plan_file(tmp_path / "plan.json")
    runs = tmp_path / "runs"
    shutil.copy(tmp_path / "plan.json", tmp_path / "runs.plan.json")
    # the winner's GPU turns out five times slower than promised
    write_record(runs, record_for(first, tokens_per_s_per_gpu=_tps(first) / 5))
    assert cli("calibrate", "--from-runs", runs, "--plan", tmp_path / "runs.plan.json").code == 0
    r = cli(*two, "--json")
    doc = json.loads(r.stdout)
    without = doc["calibration"]["without"]
    assert without["same_winner"] is False and first.recipe.gpu in without["setup"]
    assert doc["options"][0]["gpu"] != first.recipe.gpu
    text = cli(*two).stdout.splitlines()
    assert text[1].startswith(
        f"  The calibration changed the winner: without it, 1×{first.recipe.gpu} "
    )
