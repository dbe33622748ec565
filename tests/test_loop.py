"""The whole loop on loopback, every number carried by a file, none re-typed (issue 30):

plan --save → a run on the wrong world size is refused before any step → run --plan --pilot on 2
CPU ranks → its record → calibrate --from-runs → a second plan that names the pilot and whose
estimate moved to the measured figure → run --plan to the end → report --runs with plan vs actual
→ fleet --demand-from-history on the monitor database of a job labelled with the plan id.

CPU ranks have no GPU, so the pilot's figures are calibrated as a rehearsal of the plan's GPU
(``calibrate --assume-gpu``), which the second plan says.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuwise.base.recipe import load_plan_file, parse_run_record
from gpuwise.catalog import Offer, offers_to_csv

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "examples" / "train_tiny.py"
pytestmark = pytest.mark.slow

# a tiny Llama-shaped model (HF config.json keys), so the CPU's speed is a plausible fraction
# of an L4's and the calibrated MFU stays in (0, 1)
CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 256,
    "max_position_embeddings": 512,
}


def _gpuwise(tmp: Path, *args: str | Path, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "gpuwise", *map(str, args)],
        cwd=tmp,
        env={
            **os.environ,
            "GPUWISE_HOME": str(tmp / "home"),
            "GPUWISE_CLOUD": "none",
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=600,
    )


def _records(folder: Path) -> list[Any]:
    return [
        parse_run_record(p.read_bytes(), str(p))
        for p in sorted(folder.glob("gpuwise-runs/*-attempt*.json"))
    ]


@pytest.fixture
def job(tmp_path: Path) -> Path:
    offer = Offer(
        cloud="gcp",
        region="us-central1",
        zone=None,
        instance_type="g2-standard-24",
        gpu="L4",
        gpu_count=2,
        gpu_memory_gib=None,
        vcpus=24.0,
        memory_gib=96.0,
        on_demand_usd_per_hour=2.0,
        spot_usd_per_hour=None,
        arch="x86_64",
        source="test: one 2-GPU offer",
        as_of="2026-11-27",
    )
    (tmp_path / "catalog.csv").write_text(offers_to_csv([offer]))
    (tmp_path / "tiny.json").write_text(json.dumps(CONFIG))
    return tmp_path


PLAN = (
    "plan", "--model", "tiny.json", "--task", "pretrain", "--tokens", "250K", "--seq-len", "128",
    "--global-batch", "64", "--catalog", "catalog.csv", "--max-nodes", "1",
)  # fmt: skip


def test_the_loop_closes(job: Path) -> None:
    # 1. the plan, saved as the recipe the job runs
    r = _gpuwise(job, *PLAN, "--no-calibration", "--save", "plan.json", "--json")
    assert r.returncode == 0, r.stderr
    first = load_plan_file(job / "plan.json")
    recipe = first.recipe
    assert (recipe.world_size, recipe.gpu, recipe.global_batch) == (2, "L4", 64)
    assert recipe.micro_batch * recipe.accumulation * recipe.data_parallel == 64
    train = ("--", sys.executable, TINY, "--hidden", "64")

    # 2. the wrong world size is refused before any step, and not retried
    r = _gpuwise(job, "run", "--plan", "plan.json", "--nproc-per-node", "1", *train,
                 "--checkpoint-dir", job / "wrong")  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "world size 1" in r.stderr and "Traceback" not in r.stderr
    assert not list((job / "wrong").glob("step*"))

    # 3. a pilot on 2 CPU ranks: measured, recorded, exit 0
    r = _gpuwise(job, "run", "--plan", "plan.json", "--pilot", "4", "--nproc-per-node", "2",
                 *train, "--checkpoint-dir", job / "runs" / "pilot")  # fmt: skip
    assert r.returncode == 0, r.stderr
    (pilot,) = _records(job / "runs" / "pilot")
    assert pilot.pilot and pilot.outcome == "pilot" and pilot.plan_id == first.plan_id
    assert pilot.world_size == 2 and pilot.steps_measured == 4
    assert pilot.tokens_per_s_per_gpu is not None and pilot.tokens_per_s_per_gpu > 0

    # 4. calibration from the record (a rehearsal: the ranks had no GPU)
    r = _gpuwise(job, "calibrate", "--from-runs", job / "runs", "--assume-gpu", "L4",
                 "-o", "calibration.json", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr

    # 5. the next plan names the pilot and moves to the measured throughput
    r = _gpuwise(job, *PLAN, "--calibration", "calibration.json", "--save", "plan2.json", "--json")
    assert r.returncode == 0, r.stderr
    cal = json.loads(r.stdout)["calibration"]
    assert any(pilot.run_id in str(run) for run in cal["runs"]), cal
    second = load_plan_file(job / "plan2.json")
    assert pilot.run_id in " ".join(second.calibration_runs)
    was, now = first.expected.tokens_per_s_per_gpu, second.expected.tokens_per_s_per_gpu
    assert was is not None and now is not None
    assert now.expected == pytest.approx(pilot.tokens_per_s_per_gpu, rel=1e-3)
    assert abs(was.expected - now.expected) > 0.05 * now.expected  # the estimate moved

    # 6. the calibrated plan, run to its end, with GPUs labelled by its id in the monitor
    r = _gpuwise(job, "run", "--plan", "plan2.json", "--nproc-per-node", "2", *train,
                 "--checkpoint-dir", job / "runs" / "full")  # fmt: skip
    assert r.returncode == 0, r.stderr
    (full,) = _records(job / "runs" / "full")
    assert full.outcome == "done" and full.step_end == second.recipe.steps
    assert full.global_batch == 64 and full.plan_id == second.plan_id

    # 7. plan against actual, per run and over the runs
    r = _gpuwise(job, "report", "--runs", job / "runs", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert {run["run_id"] for run in report["runs"]} == {pilot.run_id, full.run_id}
    text = _gpuwise(job, "report", "--runs", job / "runs")
    assert text.returncode == 0 and full.run_id in text.stdout and pilot.run_id in text.stdout
    (done,) = [run for run in report["runs"] if run["run_id"] == full.run_id]
    hours = done["figures"]["hours"]
    # the run is compared with the plan's hours less its start-up (the run's clock starts after)
    assert hours["planned"] == pytest.approx(
        second.expected.hours.expected - second.expected.startup_hours
    )

    # 8. the fleet's demand from what the monitor saw of the job
    db = job / "monitor.sqlite"
    r = _gpuwise(job, "monitor", "--fake", "idle", "--reads", "3", "--interval", "1s", "--db", db,
                 env={"GPUWISE_PLAN_ID": second.plan_id})  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = _gpuwise(job, "fleet", "--demand-from-history", db, "--since", "1h", "--json")
    assert r.returncode == 0, r.stderr
    history = json.loads(r.stdout)["history"]
    assert history and all(h["allocated_gpu_hours"] <= h["rented_gpu_hours"] for h in history)
