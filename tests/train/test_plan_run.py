"""``gpuwise run --plan`` on 2 CPU ranks (gloo): a job unlike its plan is refused with exit 2 before
any step; ``--pilot N`` measures and records, then exits 0; a run to the end leaves its record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import EXAMPLE, NO_CLOUD_ENV, run_records, tiny_losses
from .test_plan_apply import plan_for

pytestmark = pytest.mark.slow


def _run(plan: Path, ckpt: Path, *flags: str, steps: int = 8) -> subprocess.CompletedProcess[str]:
    cmd = [
        *(sys.executable, "-m", "gpuwise", "run", "--plan", str(plan), "--json"),
        *("--nproc-per-node", "2", "--restart-delay", "0s", *flags, "--"),
        *(sys.executable, str(EXAMPLE), "--hidden", "32", "--steps", str(steps)),
        *("--checkpoint-dir", str(ckpt)),
    ]
    return subprocess.run(
        cmd, env=NO_CLOUD_ENV, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_wrong_world_size_is_refused_before_any_step(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(plan_for(8, micro=8, accumulation=2).to_json())
    ckpt = tmp_path / "ckpt"
    r = _run(plan, ckpt)
    assert r.returncode == 2, r.stderr
    assert "error: this job does not run plan" in r.stderr
    assert "world size 2 is not the plan's 8" in r.stderr and "Traceback" not in r.stderr
    doc = json.loads(r.stdout)
    assert [a["outcome"] for a in doc["attempts"]] == ["usage"]  # not retried as a crash
    assert not tiny_losses(r.stderr)  # no step ran
    assert not ckpt.exists()


def test_a_pilot_measures_and_records_then_the_run_goes_to_its_end(tmp_path: Path) -> None:
    planned = plan_for(2, micro=8, accumulation=2, seq_len=64)
    plan = tmp_path / "plan.json"
    plan.write_text(planned.to_json())
    ckpt = tmp_path / "ckpt"

    r = _run(plan, ckpt, "--pilot", "3", "--pilot-warmup", "1", steps=50)
    assert r.returncode == 0, r.stderr
    assert sorted(tiny_losses(r.stderr)) == [1, 2, 3, 4]  # warm-up 1 + 3 measured, not 50
    assert "batch 8 2 32" in r.stderr  # the plan's micro-batch and accumulation, 2 replicas
    (pilot,) = run_records(str(ckpt))
    assert (pilot.outcome, pilot.pilot, pilot.plan_id) == ("pilot", True, planned.plan_id)
    assert (pilot.warmup_steps, pilot.steps_measured, pilot.step_end) == (1, 3, 4)
    assert (pilot.world_size, pilot.global_batch) == (2, planned.recipe.global_batch)
    assert pilot.tokens_per_step == 32 * 64 and pilot.step_s is not None
    assert pilot.tokens_per_s_per_gpu == pytest.approx(32 * 64 / pilot.step_s / 2)
    assert pilot.checkpoint_stall_s > 0  # the first save, right after the first step
    assert pilot.cost_usd is not None and pilot.cost_usd > 0
    assert json.loads(r.stdout)["history"] == [
        {
            "attempt": 0,
            "outcome": "done",
            "exit_code": 0,
            "notice": None,
            "preempted": False,
            "steps_lost": 0,
            "wall_s": pytest.approx(json.loads(r.stdout)["attempts"][0]["wall_s"]),
        }
    ]

    r = _run(plan, ckpt, steps=6)  # to the end: resumes from the pilot's last step
    assert r.returncode == 0, r.stderr
    assert sorted(tiny_losses(r.stderr)) == [5, 6]
    first, done = run_records(str(ckpt))
    assert first == pilot and done.run_id != pilot.run_id
    assert (done.outcome, done.pilot, done.step_start, done.step_end) == ("done", False, 4, 6)
    assert done.ended is not None and done.steps_lost == 0 and done.global_batch == 32


SCRIPT = """
import os, sys, torch
from gpuwise.train import resilient
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
with resilient(model, opt, checkpoint_dir=sys.argv[1], max_steps=6, every_steps=2,
               watcher=False, async_write=False) as run:
    for x, y in run.batches(torch.utils.data.DataLoader(data, batch_size=run.micro_batch)):
        run.step(torch.nn.functional.mse_loss(model(x), y))
        if run.global_step == 3 and os.environ["GPUWISE_ATTEMPT"] == "0":
            raise RuntimeError("a crash in the first attempt")
"""


def test_each_attempt_of_a_restarted_run_has_its_record(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(plan_for(1, micro=4, accumulation=1).to_json())
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    ckpt = tmp_path / "ckpt"
    r = subprocess.run(
        [
            *(sys.executable, "-m", "gpuwise", "run", "--plan", str(plan), "--json"),
            *("--no-torchrun", "--restart-delay", "0s", "--", sys.executable, str(script)),
            str(ckpt),
        ],
        env=NO_CLOUD_ENV,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    history = json.loads(r.stdout)["history"]
    assert [(h["attempt"], h["outcome"], h["steps_lost"]) for h in history] == [
        (0, "crashed", 1),  # reached 3, committed 2
        (1, "done", 0),
    ]
    first, second = run_records(str(ckpt))
    assert first.run_id == second.run_id  # one run, two attempts
    assert (first.attempt, first.outcome, first.step_end, first.steps_lost) == (0, "failed", 3, 1)
    assert (second.attempt, second.outcome, second.restarts, second.step_start) == (1, "done", 1, 2)
