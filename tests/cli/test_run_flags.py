"""``gpuwise run`` flags that look like "not given" but were given: 0 is a value, not a default."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest


@pytest.mark.parametrize("torchrun", ["--torchrun", "--no-torchrun"])
def test_nproc_per_node_0_is_refused_not_run_as_1(cli: Any, tmp_path: Path, torchrun: str) -> None:
    # it used to be read as "not given" (`0 or default`) and ran one process
    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    r = cli("run", "--nproc-per-node", "0", torchrun, "--", sys.executable, script)
    assert r.code == 2, r.stderr
    assert r.stderr.startswith("error: --nproc-per-node 0 must be at least 1")
    assert not marker.exists()


def test_plan_is_handed_to_the_workers(cli: Any, tmp_path: Path) -> None:
    from tests.base.test_recipe import PLAN

    plan = tmp_path / "plan.json"
    plan.write_text(PLAN.to_json())
    seen = tmp_path / "seen"
    script = tmp_path / "train.py"
    script.write_text(
        "from gpuwise.train import job_plan\n"
        f"p = job_plan()\nopen({str(seen)!r}, 'w').write(p.plan_id + ' ' + str(p.recipe.micro_batch))\n"
    )
    r = cli("run", "--plan", plan, "--no-torchrun", "--", sys.executable, script)
    assert r.code == 0, r.stderr
    assert seen.read_text() == f"{PLAN.plan_id} {PLAN.recipe.micro_batch}"


@pytest.mark.parametrize("content", [None, "{not json", '{"schema": "gpuwise.run/1"}'])
def test_a_bad_plan_stops_the_run_before_any_worker(
    cli: Any, tmp_path: Path, content: str | None
) -> None:
    plan = tmp_path / "plan.json"
    if content is not None:
        plan.write_text(content)
    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    r = cli("run", "--plan", plan, "--no-torchrun", "--", sys.executable, script)
    assert r.code == 2 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    assert not marker.exists()


def test_run_takes_exactly_the_launch_spec_table_as_flags() -> None:
    # issue 36: a flag of `run` is a LaunchSpec field, defined there once; none is added by hand
    import typer.main

    from gpuwise.cli.main import app
    from gpuwise.train import LaunchSpec

    command = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    flags = [p for p in command.params if p.param_type_name == "option"]
    options = [p.opts[0] for p in flags]
    table = [flag.decls.split("/")[0] for _, flag in LaunchSpec.flags()]
    assert options == [*table, "--json"]
    # the table's defaults are the flags' (text flags show their text; environment ones none)
    defaults = {p.name: p.default for p in flags}
    assert defaults["max_restarts"] == 3 and defaults["restart_delay_s"] == "1s"
    assert defaults["nproc_per_node"] is None and defaults["torchrun"] is True


def test_the_spec_hands_plan_and_pilot_to_the_workers(tmp_path: Path) -> None:
    from gpuwise.train.launch_spec import LaunchSpec
    from tests.base.test_recipe import PLAN

    plan = tmp_path / "plan.json"
    plan.write_text(PLAN.to_json())
    cmd = (sys.executable, "-c", "pass")
    assert LaunchSpec(cmd).worker_env() == {}
    spec = LaunchSpec(cmd, plan=plan, pilot=3, pilot_warmup=0, allow_plan_mismatch=True)
    assert spec.worker_env() == {
        "GPUWISE_PLAN": str(plan.resolve()),
        "GPUWISE_PLAN_ID": PLAN.plan_id,
        "GPUWISE_PILOT_STEPS": "3",
        "GPUWISE_PILOT_WARMUP": "0",
        "GPUWISE_ALLOW_PLAN_MISMATCH": "1",
    }
