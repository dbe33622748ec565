"""A planned job runs what was planned or refuses before its first step; every attempt leaves a
record beside its checkpoints (gpuwise.train.recipe_apply, gpuwise.train.records)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpuwise.base.recipe import RUNS_FOLDER, PlanFile, load_plan_file, parse_run_record
from gpuwise.train.recipe_apply import (
    Applied,
    PlanMismatchError,
    apply_plan,
    check_micro_batch,
    same_gpu,
)
from gpuwise.train.records import RunLog, plan_name, record_name
from gpuwise.train.storage import Storage
from tests.base.test_recipe import PLAN
from tests.train.conftest import run_records


def plan_for(world: int, micro: int = 4, accumulation: int = 2, seq_len: int = 32) -> PlanFile:
    """PLAN's recipe laid out for ``world`` data-parallel ranks on one node."""
    recipe = replace(
        PLAN.recipe,
        world_size=world,
        data_parallel=world,
        gpus_per_node=world,
        nodes=1,
        micro_batch=micro,
        accumulation=accumulation,
        global_batch=micro * accumulation * world,
        seq_len=seq_len,
    )
    return replace(PLAN, recipe=recipe)


def _apply(
    plan: PlanFile,
    *,
    world_size: int = 2,
    dp_size: int = 2,
    grad_accum: int | None = None,
    gpu_name: str | None = None,
    allow: bool = False,
) -> Applied:
    return apply_plan(
        plan,
        world_size=world_size,
        dp_size=dp_size,
        grad_accum=grad_accum,
        gpu_name=gpu_name,
        allow=allow,
    )


# -- checking and applying ---------------------------------------------------------------------


def test_a_matching_job_gets_the_planned_batch() -> None:
    applied = _apply(plan_for(2, micro=4, accumulation=3))
    assert (applied.micro_batch, applied.accumulation, applied.global_batch) == (4, 3, 24)
    assert applied.mismatches == ()


def test_the_wrong_world_size_is_refused_in_one_line() -> None:
    with pytest.raises(PlanMismatchError) as err:
        _apply(plan_for(8), world_size=2, dp_size=2)
    line = err.value.one_line()
    assert "world size 2 is not the plan's 8" in line and "--nproc-per-node 8" in line
    assert "\n" not in line and "--allow-plan-mismatch" in line


def test_allowed_mismatch_keeps_the_global_batch_and_lists_what_differs() -> None:
    plan = plan_for(8, micro=4, accumulation=2)  # global batch 64
    applied = _apply(plan, world_size=2, dp_size=2, allow=True)
    assert applied.accumulation == 8 and applied.global_batch == plan.recipe.global_batch == 64
    assert applied.mismatches == ("world size 2 is not the plan's 8 (1 node(s) × 8 A100-80GB)",)


def test_fewer_replicas_than_planned_on_the_same_world_is_a_mismatch() -> None:
    with pytest.raises(PlanMismatchError, match="1 data-parallel replica"):
        _apply(plan_for(2), world_size=2, dp_size=1)


def test_grad_accum_that_contradicts_the_plan_is_a_mismatch() -> None:
    plan = plan_for(2, accumulation=2)
    assert _apply(plan, grad_accum=2).mismatches == ()  # the same value given: fine
    with pytest.raises(PlanMismatchError, match="grad_accum=4 was given, the plan runs 2"):
        _apply(plan, grad_accum=4)
    allowed = _apply(plan, grad_accum=4, allow=True)
    assert allowed.accumulation == 4 and allowed.global_batch == 32


def test_the_gpu_model_is_checked_where_cuda_names_one() -> None:
    plan = plan_for(2)  # A100-80GB
    assert _apply(plan, gpu_name="NVIDIA A100-SXM4-80GB").mismatches == ()
    with pytest.raises(PlanMismatchError, match="this GPU is 'NVIDIA H100 80GB HBM3'"):
        _apply(plan, gpu_name="NVIDIA H100 80GB HBM3")
    assert same_gpu("NVIDIA H100 80GB HBM3", "H100")
    assert not same_gpu("NVIDIA L4", "H100")


def test_the_loaders_batch_size_is_checked_against_the_micro_batch() -> None:
    applied = _apply(plan_for(2, micro=4))
    assert check_micro_batch(applied, 4, allow=False) is applied
    with pytest.raises(PlanMismatchError, match="batch size is 8, the plan's micro-batch is 4"):
        check_micro_batch(applied, 8, allow=False)
    allowed = check_micro_batch(applied, 8, allow=True)
    assert allowed.global_batch == 8 * 2 * 2 and len(allowed.mismatches) == 1


# -- records -----------------------------------------------------------------------------------


def _log(storage: Storage, monkeypatch: pytest.MonkeyPatch, **env: str) -> RunLog:
    for name in ("GPUWISE_RUN_ID", "GPUWISE_ATTEMPT", "GPUWISE_PILOT_STEPS", "GPUWISE_CLOUD"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return RunLog(storage, rank=0, world_size=2, nodes=1, plan=plan_for(2))


def test_attempts_never_overwrite_each_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = Storage(str(tmp_path))
    first = _log(storage, monkeypatch, GPUWISE_RUN_ID="job-1", GPUWISE_ATTEMPT="0")
    first.begin(0)
    again = _log(storage, monkeypatch, GPUWISE_RUN_ID="job-1", GPUWISE_ATTEMPT="0")
    again.begin(5)  # e.g. the scheduler started the same job again with the same id
    assert again.attempt == 1
    names = sorted(p.name for p in (tmp_path / RUNS_FOLDER).iterdir())
    plan = first.plan
    assert plan is not None  # the run keeps the plan it ran beside its records, once
    assert names == [record_name("job-1", 0), record_name("job-1", 1), plan_name(plan.plan_id)]
    assert load_plan_file(tmp_path / RUNS_FOLDER / plan_name(plan.plan_id)) == plan
    got = run_records(str(tmp_path))
    assert [(r.attempt, r.step_start, r.outcome, r.restarts) for r in got] == [
        (0, 0, "running", 0),
        (1, 5, "running", 1),
    ]


def test_a_record_has_the_plan_the_place_and_the_price(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _log(Storage(str(tmp_path)), monkeypatch, GPUWISE_CLOUD="aws", GPUWISE_PILOT_STEPS="2")
    log.begin(0)
    for _ in range(4):  # 2 warm-up steps, then 2 timed
        log.add_tokens(100)
        log.stepped()
    assert log.pilot_over
    rec = log.record(outcome="pilot", step=4, ended=True, committed=4, micro_batch=4,
                     accumulation=2, dp_size=2)  # fmt: skip
    assert (rec.cloud, rec.region, rec.instance_type) == (
        "aws",  # the machine's setting wins over the plan
        PLAN.recipe.region,
        PLAN.recipe.instance_type,
    )
    assert rec.capacity_type == "spot" and rec.plan_id == PLAN.plan_id and rec.pilot
    assert (rec.steps_measured, rec.warmup_steps, rec.global_batch) == (2, 2, 16)
    assert rec.tokens_per_step == 200  # what this rank reported × 2 replicas, not the plan's
    assert rec.step_s is not None and rec.tokens_per_s_per_gpu == pytest.approx(
        200 / rec.step_s / 2
    )
    price = PLAN.expected.price_usd_per_hour / 2  # the plan's nodes ÷ its 2 GPUs
    assert rec.cost_usd == pytest.approx(rec.gpu_hours * price)
    assert rec.peak_memory_gib is None  # no CUDA here


def test_without_a_plan_or_settings_the_place_is_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GPUWISE_CAPACITY_TYPE", "GPUWISE_INSTANCE_TYPE", "GPUWISE_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("GPUWISE_CLOUD", raising=False)
    log = RunLog(Storage(str(tmp_path)), rank=0, world_size=1, nodes=1, plan=None)
    rec = log.record(outcome="done", step=3, ended=True)
    assert (rec.cloud, rec.region, rec.instance_type, rec.capacity_type) == (
        None,
        None,
        None,
        "unknown",
    )
    assert rec.cost_usd is None and rec.tokens_per_s_per_gpu is None


def test_only_rank_0_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUWISE_RUN_ID", "job-2")
    log = RunLog(Storage(str(tmp_path)), rank=1, world_size=2, nodes=1, plan=None)
    log.begin(0)
    assert not (tmp_path / RUNS_FOLDER).exists()


@pytest.mark.slow
def test_records_go_to_s3(s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Beside S3 checkpoints (moto on loopback), through the checkpoint storage."""
    storage = Storage("s3://ckpt/run", s3.options)
    log = _log(storage, monkeypatch, GPUWISE_RUN_ID="s3-job", GPUWISE_ATTEMPT="3")
    log.begin(7)
    log.write(log.record(outcome="done", step=9, ended=True, committed=9))
    (got,) = run_records("s3://ckpt/run", s3.options)
    assert (got.run_id, got.attempt, got.step_start, got.step_end, got.outcome) == (
        "s3-job",
        3,
        7,
        9,
        "done",
    )
    raw = storage.get(storage.join(RUNS_FOLDER, record_name("s3-job", 3)))
    assert parse_run_record(raw) == got and json.loads(raw)["schema"] == "gpuwise.run/1"


# -- resilient() in a planned job (one process) --------------------------------------------------


def _planned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plan: PlanFile, **env: str) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    monkeypatch.setenv("GPUWISE_PLAN", str(path))
    for name in ("GPUWISE_RUN_ID", "GPUWISE_ATTEMPT", "GPUWISE_PILOT_STEPS", "GPUWISE_RUN_DIR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return tmp_path / "ckpt"


def _train(ckpt: Path, max_steps: int) -> tuple[Any, list[int]]:
    import torch

    from gpuwise.train import resilient

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    sizes: list[int] = []
    with resilient(
        model, opt, checkpoint_dir=str(ckpt), max_steps=max_steps, watcher=False,
        async_write=False,
    ) as run:  # fmt: skip
        assert run.micro_batch is not None and run.recipe is not None
        loader = torch.utils.data.DataLoader(data, batch_size=run.micro_batch, drop_last=True)
        for x, y in run.batches(loader):
            sizes.append(len(x))
            run.step(torch.nn.functional.mse_loss(model(x), y))
    return run, sizes


@pytest.mark.slow  # about 3 s: two short trainings (torch on the CPU)
def test_resilient_applies_the_plans_batch_and_a_pilot_stops_after_its_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = plan_for(1, micro=4, accumulation=3)
    ckpt = _planned(tmp_path, monkeypatch, plan, GPUWISE_PILOT_STEPS="2", GPUWISE_RUN_ID="p")
    run, sizes = _train(ckpt, max_steps=50)
    # warm-up 2 + 2 measured optimizer steps, each of 3 micro-batches of the planned 4
    assert run.accumulation == 3 and run.global_step == 4 and sizes == [4] * 12
    (rec,) = run_records(str(ckpt))
    assert (rec.outcome, rec.pilot, rec.steps_measured, rec.step_end) == ("pilot", True, 2, 4)
    assert (rec.micro_batch, rec.accumulation, rec.global_batch) == (4, 3, 12)
    assert rec.tokens_per_step == plan.recipe.tokens_per_step == 12 * 32  # global batch × seq_len
    assert rec.tokens_per_s_per_gpu is not None and rec.tokens_per_s_per_gpu > 0
    assert rec.ended is not None and rec.plan_id == plan.plan_id

    monkeypatch.delenv("GPUWISE_PILOT_STEPS")
    monkeypatch.setenv("GPUWISE_ATTEMPT", "1")
    run, _ = _train(ckpt, max_steps=6)  # the real run: resumes from the pilot, to its end
    assert run.resumed_from == 4 and run.global_step == 6
    first, second = run_records(str(ckpt))
    assert first == rec
    assert (second.outcome, second.pilot, second.step_start, second.step_end) == (
        "done",
        False,
        4,
        6,
    )


def test_resilient_refuses_the_wrong_world_size_before_any_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = _planned(tmp_path, monkeypatch, plan_for(8), GPUWISE_RUN_DIR=str(tmp_path))
    # the library raises (a usage error); `gpuwise run`'s worker bootstrap turns it into exit 2
    with pytest.raises(PlanMismatchError, match="world size 1 is not the plan's 8"):
        _train(ckpt, max_steps=5)
    assert not ckpt.exists()  # no step, no checkpoint, no record
    progress = json.loads((tmp_path / "progress-rank0.json").read_text())
    assert progress["exit"] == "usage" and "world size 1 is not the plan's 8" in progress["error"]


def test_an_allowed_mismatch_runs_and_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = plan_for(4, micro=4, accumulation=1)  # global batch 16 on 4 ranks
    ckpt = _planned(tmp_path, monkeypatch, plan, GPUWISE_ALLOW_PLAN_MISMATCH="1")
    run, sizes = _train(ckpt, max_steps=2)
    assert run.accumulation == 4 and sizes == [4] * 8  # one rank runs the planned global batch
    (rec,) = run_records(str(ckpt))
    assert rec.global_batch == 16 and rec.plan_mismatch == (
        "world size 1 is not the plan's 4 (1 node(s) × 4 A100-80GB)",
    )


def test_a_preempted_and_a_failed_attempt_leave_their_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a plan too: every run leaves a record (outcome, notice, steps lost)."""
    import torch

    from gpuwise.train import PreemptionWatcher, resilient

    for name in ("GPUWISE_PLAN", "GPUWISE_RUN_DIR", "GPUWISE_PILOT_STEPS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUWISE_RUN_ID", "job")
    ckpt = str(tmp_path / "c")
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=4
    )
    watcher = PreemptionWatcher(cloud="none", signals=())
    monkeypatch.setenv("GPUWISE_ATTEMPT", "0")
    with resilient(
        model, opt, checkpoint_dir=ckpt, max_steps=50, every_steps=100, watcher=watcher,
        exit_on_preemption=False, async_write=False,
    ) as run:  # fmt: skip
        for x, y in run.batches(loader):
            run.step(torch.nn.functional.mse_loss(model(x), y))
            if run.global_step == 3:
                watcher.trigger("test")
    monkeypatch.setenv("GPUWISE_ATTEMPT", "1")
    with (
        pytest.raises(RuntimeError, match="boom"),
        resilient(
            model, opt, checkpoint_dir=ckpt, max_steps=50, every_steps=100, watcher=False,
            async_write=False,
        ) as run,
    ):  # fmt: skip
        for x, y in run.batches(loader):
            run.step(torch.nn.functional.mse_loss(model(x), y))
            if run.global_step == 7:
                raise RuntimeError("boom")
    preempted, failed = run_records(ckpt)
    assert (preempted.outcome, preempted.notices, preempted.preemptions) == ("preempted", 1, 1)
    assert (preempted.step_end, preempted.steps_lost, preempted.restarts) == (4, 0, 0)
    assert (failed.outcome, failed.attempt, failed.restarts) == ("failed", 1, 1)
    assert (failed.step_start, failed.step_end, failed.steps_lost) == (4, 7, 3)
    assert (failed.micro_batch, failed.accumulation, failed.global_batch) == (4, 1, 4)
    assert failed.plan_id is None and failed.cost_usd is None


def test_gpu_names_in_records_are_gpuwises() -> None:
    from gpuwise.train.records import _gpu_model

    assert _gpu_model("NVIDIA H100 80GB HBM3") == "H100"
    assert _gpu_model("Some Future GPU") == "Some Future GPU" and _gpu_model(None) is None


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--pilot", "0"), "error: --pilot 0 must be at least 1"),
        (("--pilot", "2", "--pilot-warmup", "-1"), "error: --pilot-warmup -1 must be 0 or more"),
    ],
)
def test_pilot_flags_are_checked_before_any_worker(  # type: ignore[no-untyped-def]
    cli, tmp_path: Path, flags: tuple[str, ...], says: str
) -> None:
    import sys

    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    r = cli("run", *flags, "--no-torchrun", "--", sys.executable, script)
    assert r.code == 2 and r.stderr.startswith(says), r.stderr
    assert not marker.exists()


def test_a_bad_pilot_variable_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuwise.errors import InputError

    monkeypatch.setenv("GPUWISE_PILOT_STEPS", "ten")
    with pytest.raises(InputError, match="GPUWISE_PILOT_STEPS='ten' is not a whole number"):
        RunLog(Storage(str(tmp_path)), rank=0, world_size=1, nodes=1, plan=None)


def test_a_recovered_skypilot_job_keeps_its_run_id(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuwise.train.records import job_run_id

    monkeypatch.delenv("GPUWISE_RUN_ID", raising=False)
    monkeypatch.setenv("SKYPILOT_TASK_ID", "sky-managed-2026-11-27-10-00-00-000000_train_7-0")
    assert job_run_id() == "sky-managed-2026-11-27-10-00-00-000000_train_7-0"
    monkeypatch.setenv("GPUWISE_RUN_ID", "mine")
    assert job_run_id() == "mine"
    monkeypatch.delenv("GPUWISE_RUN_ID")
    monkeypatch.delenv("SKYPILOT_TASK_ID")
    assert job_run_id().startswith("run-") and job_run_id() != job_run_id()
