"""`plan --save` and the exports write the winner's recipe; the job reads it back unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from gpuwise.base.recipe import load_plan_file
from gpuwise.train import job_plan, plan_recipe

MAIN = ("plan", "--model", "llama-3.1-8b", "--task", "lora", "--tokens", "2B", "--deadline", "24h")


def test_save_writes_the_winners_recipe_and_figures(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "plan.json"
    r = cli(*MAIN, "--save", path, "--json", "--limit", "1")
    assert r.code == 0, r.stderr
    winner = r.json()["options"][0]
    saved = load_plan_file(path)
    s = winner["settings"]
    recipe = saved.recipe
    # the recipe is the winner's, field by field, with no value re-typed
    assert (recipe.cloud, recipe.instance_type, recipe.region) == (
        winner["cloud"],
        winner["instance_type"],
        winner["region"],
    )
    assert recipe.world_size == winner["gpu_count"] * winner["nodes"]
    assert (recipe.micro_batch, recipe.accumulation, recipe.global_batch) == (
        s["micro_batch"],
        s["accumulation"],
        s["global_batch"],
    )
    assert recipe.micro_batch * recipe.accumulation * recipe.data_parallel == recipe.global_batch
    assert recipe.capacity_type == winner["billing"]
    assert recipe.steps is not None and recipe.tokens_per_step is not None
    assert (
        recipe.steps * recipe.tokens_per_step >= 2e9 > (recipe.steps - 1) * recipe.tokens_per_step
    )
    # the figures are the plan's: its hours, dollars and memory, with their ranges
    assert saved.expected.cost_usd.expected == winner["cost_usd"]
    assert saved.expected.cost_usd.p10 == winner["cost_usd_p10"]
    assert saved.expected.hours.expected == winner["hours"]
    assert saved.expected.peak_memory_gib_per_gpu == winner["per_gpu_memory_gib"]
    tps = saved.expected.tokens_per_s_per_gpu
    assert tps is not None and tps.p10 is not None and tps.p10 > tps.expected  # p10 = optimistic
    assert r.json()["plan_file"]["plan_id"] == saved.plan_id


def test_the_same_plan_gets_the_same_id(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert cli(*MAIN, "--save", a).code == 0
    assert cli(*MAIN, "--save", b, "--gpu", "H100").code == 0
    assert cli(*MAIN, "--save", tmp_path / "c.json").code == 0
    ids = [load_plan_file(p).plan_id for p in (a, b, tmp_path / "c.json")]
    assert ids[0] == ids[2] != ids[1]


def test_skypilot_export_ships_the_plan_in_the_workdir(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "task.yaml"
    r = cli(*MAIN, "--export", "skypilot", "-o", out, "--workdir", tmp_path)
    assert r.code == 0, r.stderr
    task = yaml.safe_load(out.read_text())
    shipped = tmp_path / task["envs"]["GPUWISE_PLAN"]  # relative to the synced workdir
    assert shipped.read_text() == (tmp_path / "task.plan.json").read_text()
    assert task["envs"]["GPUWISE_PLAN_ID"] == json.loads(shipped.read_text())["plan_id"]
    assert task["run"].startswith(f"gpuwise run --plan {task['envs']['GPUWISE_PLAN']} ")
    # inside the job, the library reads exactly that recipe
    env = {"GPUWISE_PLAN": str(shipped)}
    assert plan_recipe(env) == load_plan_file(shipped).recipe
    assert job_plan({}) is None and plan_recipe({}) is None


def test_save_without_an_option_is_refused_with_the_reason(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "plan.json"
    r = cli(*MAIN, "--budget", "1", "--save", path)
    assert r.code == 3 and not path.exists()


def test_save_to_an_unwritable_place_is_a_usage_error(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = cli(*MAIN, "--save", blocker / "plan.json")
    assert r.code == 2 and "--save" in r.stderr and "Traceback" not in r.stderr
