"""Run history is read from any folder fsspec opens: records at any depth, each with its plan."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwise.base.recipe import parse_plan_file
from gpuwise.base.runlog import read_runs
from gpuwise.errors import InputError
from tests.base.runs_data import record_for, write_record
from tests.base.test_recipe import PLAN  # a plan as `plan --save` writes it


@pytest.fixture
def plan_text() -> str:
    return PLAN.to_json()


def test_records_at_any_depth_are_found_with_their_plan(tmp_path: Path, plan_text: str) -> None:
    plan = parse_plan_file(plan_text)
    (tmp_path / "jobs" / "a").mkdir(parents=True)
    (tmp_path / "jobs" / "a" / "job.plan.json").write_text(plan_text)
    write_record(tmp_path / "jobs" / "a" / "ckpt", record_for(plan, "a", attempt=1))
    write_record(tmp_path / "jobs" / "a" / "ckpt", record_for(plan, "a", attempt=0))
    write_record(tmp_path / "b", record_for(plan, "b", plan_id="plan-000000000000"))
    (tmp_path / "b" / "gpuwise-runs" / "broken.json").write_text('{"schema": "gpuwise.run/1"')
    (tmp_path / "b" / "gpuwise-runs" / "notes.txt").write_text("not a record")
    history = read_runs(tmp_path)
    assert [r.key for r in history.runs] == ["a/0", "a/1", "b/0"]
    assert [r.plan is not None for r in history.runs] == [True, True, False]
    assert history.missing_plans == ("plan-000000000000",)
    # the broken file is set aside with its name and the reason, not half-read
    assert len(history.skipped) == 1 and "broken.json is not valid JSON" in history.skipped[0]


def test_a_plan_file_given_wins_and_matches_records(tmp_path: Path, plan_text: str) -> None:
    plan = parse_plan_file(plan_text)
    write_record(tmp_path, record_for(plan))
    given = tmp_path.parent / f"{tmp_path.name}-given.json"
    given.write_text(plan_text)
    assert read_runs(tmp_path).runs[0].plan is None
    assert read_runs(tmp_path, plan_files=[given]).runs[0].plan == plan


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda p: p / "missing", "no folder at"),  # a typo in the path
        (lambda p: p, "no run records under"),  # a folder without gpuwise-runs/
    ],
)
def test_a_folder_without_records_is_one_clear_error(tmp_path: Path, make, expected: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match=expected) as exc:
        read_runs(make(tmp_path))
    assert "gpuwise-runs" in exc.value.hint


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    pytest.importorskip("s3fs")
    from tests.train.conftest import S3

    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    server = S3()
    server.start()
    server.reset()
    server.make_bucket("ckpt")
    yield server
    with contextlib.suppress(Exception):
        server.stop()


@pytest.mark.slow  # a moto server: about 4 s
def test_records_in_s3_are_read_like_local_ones(s3, tmp_path: Path, plan_text: str) -> None:  # type: ignore[no-untyped-def]
    import fsspec

    plan = parse_plan_file(plan_text)
    fs = fsspec.filesystem("s3", **s3.options)
    rec = record_for(plan, "remote")
    fs.pipe("ckpt/team/job1/gpuwise-runs/remote-0.json", rec.to_json().encode())
    fs.pipe("ckpt/team/job1/plan.json", plan_text.encode())
    history = read_runs("s3://ckpt/team", storage_options=s3.options)
    assert [(r.record, r.plan) for r in history.runs] == [(rec, plan)]
    assert history.runs[0].path == "s3://ckpt/team/job1/gpuwise-runs/remote-0.json"
