"""The GPU proof (benchmarks/gpu_proof.py) on the CPU: the no-GPU exit, report assembly from
recorded step results, the memory-table arithmetic, the GPT configurations and estimator command,
the step runner's isolation of failures, and the measuring code at a tiny size."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpuwise.bench.proof import gpt, report, runner, scrape, steps
from gpuwise.bench.proof.detect import read_nvml
from gpuwise.bench.proof.report import ProofRun, StepResult, Table, Target
from gpuwise.bench.proof.steps import Context, StepTimeout

REPO = Path(__file__).resolve().parents[2]
HAS_NVML = not isinstance(read_nvml(), str)
TINY = gpt.GptShape("tiny", hidden=32, layers=2, heads=2, vocab=64, max_seq_len=16)


# ------------------------------------------------------------------------------- no GPU


@pytest.mark.skipif(HAS_NVML, reason="an NVIDIA GPU is present: the script would run")
def test_without_a_gpu_the_script_exits_2_with_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/gpu_proof.py"), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith("error: gpu_proof needs an NVIDIA GPU")
        and "To fix:" in lines[0]
    )
    assert not (tmp_path / "out").exists()  # nothing written before the GPU check


@pytest.mark.skipif(HAS_NVML, reason="an NVIDIA GPU is present")
def test_the_gpu_check_does_not_import_torch() -> None:
    code = (
        "import sys; sys.path.insert(0, 'src'); from gpuwise.bench.proof.runner import main; "
        "code = main(['--out', 'unused']); print(code, 'torch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert done.stdout.split() == ["2", "False"]


# ------------------------------------------------------------------------------- report


def _run(*steps_: StepResult) -> ProofRun:
    meta = {
        "date": "2026-11-24T12:00:00+00:00",
        "gpu": "NVIDIA H100 80GB HBM3",
        "gpu_count": 1,
        "gpus": [
            {
                "index": 0,
                "name": "NVIDIA H100 80GB HBM3",
                "memory_gib": 79.6,
                "mig_mode": 0,
                "persistence_mode": 1,
                "power_limit_w": 700.0,
                "pcie_gen": 5,
                "pcie_width": 16,
            }
        ],
        "driver": "550.90.07",
        "cuda_driver": "12.4",
        "torch": "2.13.0+cu124",
        "torch_cuda": "12.4",
        "gpuwise_commit": "abc1234",
        "quick": False,
    }
    return ProofRun(meta, steps_)


RECORDED = (
    StepResult(
        "doctor",
        "ok",
        6.2,
        "ok: 12 ok, 0 warn, 0 fail, 2 skip",
        tables=(Table("doctor", ("check", "status"), (("nvidia-driver", "ok"),)),),
    ),
    StepResult(
        "bench",
        "ok",
        41.0,
        "9 results",
        targets=(
            Target("bf16 matmul vs best-known figure for this GPU", 0.96, "≥ 95 %", True),
            Target("device copy vs plain large tensor.copy_", 0.84, "≥ 90 %", False),
        ),
        tables=(Table("bench", ("result", "measured"), (("matmul.bf16", "762.7"),)),),
        data={"x": 1},
    ),
    StepResult(
        "exporter", "fail", 3.0, reason="RuntimeError: the exporter exited 2 before serving"
    ),
    StepResult(
        "memory-throughput",
        "timeout",
        150.0,
        reason="the worker ran past its time limit (150 s)",
        tables=(Table("memory", ("config", "error"), ()),),
    ),
    StepResult("pytest-gpu", "skip", 0.0, reason="no tests/ folder"),
)


def test_markdown_lists_every_step_with_status_and_why_it_failed() -> None:
    md = report.render_markdown(_run(*RECORDED))
    assert md.startswith("### 2026-11-24: NVIDIA H100 80GB HBM3 × 1\n")
    assert (
        "driver 550.90.07, CUDA (driver) 12.4, torch 2.13.0+cu124 (CUDA 12.4), gpuwise abc1234"
        in md
    )
    for s in RECORDED:
        assert f"| {s.name} | {s.status} | {s.seconds:.0f} |" in md
    assert "| exporter | fail | 3 | RuntimeError: the exporter exited 2 before serving |" in md
    assert "| bench | device copy vs plain large tensor.copy_ | ≥ 90 % | 0.84 | **missed** |" in md
    assert "| bench | bf16 matmul vs best-known figure for this GPU | ≥ 95 % | 0.96 | met |" in md
    assert "**memory**" not in md  # an empty table is left out
    assert "| 0 | NVIDIA H100 80GB HBM3 | 79.6 | 0 | 1 | 700.0 | 5 | 16 |" in md
    assert "| matmul.bf16 | 762.7 |" in md
    assert md.rstrip().endswith(
        "2 of 5 steps failed: exporter (RuntimeError: the exporter exited 2 before serving), "
        "memory-throughput (the worker ran past its time limit (150 s))"
    )


def test_markdown_of_a_clean_quick_run() -> None:
    run = ProofRun({**_run().meta, "quick": True}, RECORDED[:2])
    md = report.render_markdown(run)
    assert "(--quick)" in md.splitlines()[0] and md.rstrip().endswith("All 2 steps finished.")


def test_json_carries_meta_failures_targets_and_data() -> None:
    obj = json.loads(report.dumps(_run(*RECORDED)))
    assert set(obj) == {"meta", "failed", "steps"}
    assert {"date", "gpu", "driver", "cuda_driver", "torch", "gpuwise_commit"} <= set(obj["meta"])
    assert obj["failed"] == ["exporter", "memory-throughput"]
    assert [s["status"] for s in obj["steps"]] == ["ok", "ok", "fail", "timeout", "skip"]
    bench = obj["steps"][1]
    assert bench["data"] == {"x": 1} and bench["targets"][1] == {
        "name": "device copy vs plain large tensor.copy_",
        "value": 0.84,
        "goal": "≥ 90 %",
        "met": False,
    }


def test_cells_escape_pipes_and_bad_rows_are_refused() -> None:
    lines = report.markdown_table(Table("t", ("a", "b"), (("x|y", "line\nbreak"),)))
    assert "| x\\|y | line break |" in lines
    with pytest.raises(ValueError, match="2 cells"):
        Table("t", ("a",), (("1", "2"),))
    with pytest.raises(ValueError, match="status"):
        StepResult("x", "broken", 0.0)  # type: ignore[arg-type]


def test_written_files_are_dated(tmp_path: Path) -> None:
    md, js = runner.write_report(_run(*RECORDED), tmp_path)
    assert (
        md.name == "gpu_proof_20261124T120000Z.md" and js.name == "gpu_proof_20261124T120000Z.json"
    )
    assert json.loads(js.read_text())["meta"]["gpu"] == "NVIDIA H100 80GB HBM3"


# ------------------------------------------------------------------------------- memory arithmetic

ESTIMATE = {
    "memory": {
        "per_gpu_gib": 9.0,
        "breakdown": {
            "weights": 2.0,
            "activations": 5.5,
            "cuda_context": 0.5,
            "allocator_overhead": 1.0,
        },
    },
    "tokens_per_second": 100_000.0,
    "flops_per_token": 1e9,
    "peak_tflops": 1000.0,
    "mfu": 0.4,
}


@pytest.mark.parametrize(
    ("measured_gib", "error"),
    [
        (7.5, 0.0),  # like-for-like estimate (9 − 0.5 − 1.0 = 7.5) equals the measurement
        (6.0, 0.25),  # over-predicts by a quarter
        (10.0, -0.25),  # under-predicts: the risky side
    ],
)
def test_memory_row_compares_like_with_like(measured_gib: float, error: float) -> None:
    row = gpt.memory_row("c", ESTIMATE, int(measured_gib * gpt.GIB), int(8 * gpt.GIB))
    assert row.estimate_total_gib == 9.0 and row.estimate_allocated_gib == 7.5
    assert row.measured_reserved_gib == 8.0
    assert row.error == pytest.approx(error)


def test_summary_of_memory_rows() -> None:
    rows = [
        gpt.memory_row(str(i), ESTIMATE, int(m * gpt.GIB), 0)
        for i, m in enumerate((7.5, 6.0, 10.0))
    ]
    s = gpt.summarize(rows)
    assert (s.rows, s.under_predicted) == (3, 1)
    assert s.mean_abs_error == pytest.approx(0.5 / 3) and s.max_abs_error == pytest.approx(0.25)
    with pytest.raises(ValueError):
        gpt.summarize([])
    with pytest.raises(ValueError):
        gpt.relative_error(1.0, 0.0)


def test_memory_and_throughput_tables_from_recorded_results() -> None:
    measured = [
        {
            "label": "a",
            "params": 1,
            "tokens_per_s": 50_000.0,
            "peak_allocated_bytes": 6 * gpt.GIB,
            "peak_reserved_bytes": 7 * gpt.GIB,
        },
        {"label": "b", "error": "OutOfMemoryError: CUDA out of memory"},
        {
            "label": "c",
            "tokens_per_s": 1.0,
            "peak_allocated_bytes": gpt.GIB,
            "peak_reserved_bytes": gpt.GIB,
        },  # no estimate
    ]
    rows, memory, throughput = steps.memory_tables({"a": ESTIMATE, "b": ESTIMATE}, measured)
    assert [r.label for r in rows] == ["a"]
    assert memory.rows[0] == ("a", "9.00", "7.50", "6.00", "7.00", "+25.0 %")
    assert memory.rows[1][-1] == "not measured: OutOfMemoryError: CUDA out of memory"
    assert memory.rows[2][-1] == "not measured: no estimate"
    # 50k tokens/s × 1 GFLOP/token = 50 TFLOP/s of a 1000 TFLOP/s peak
    assert throughput.rows[0] == ("a", "50,000", "100,000", "50.0 %", "5.0 %", "40.0 %")


# ------------------------------------------------------------------------------- configurations


def test_configurations_cover_every_axis_the_issue_asks_for() -> None:
    for quick in (False, True):
        cs = gpt.configs(quick)
        assert len(cs) >= 6 and len({c.label for c in cs}) == len(cs)
        assert {c.shape.name for c in cs} == {"125M", "350M"}
        assert {c.precision for c in cs} == {"fp32", "bf16"}
        assert {c.recompute for c in cs} == {"none", "full"}
        assert {c.micro_batch for c in cs} == {1, 8}


@pytest.mark.parametrize(
    ("shape", "published"),
    [
        (gpt.GPT_125M, 124_439_808),  # GPT-2 small as Hugging Face counts it (tied head)
        (gpt.GPT_350M, 354_823_168),  # GPT-2 medium
    ],
)
def test_shape_parameter_counts(shape: gpt.GptShape, published: int) -> None:
    assert shape.params == published


def test_estimate_command_builds_and_the_estimator_reads_the_same_model(
    cli: Any, tmp_path: Path
) -> None:
    config = gpt.TrainConfig(gpt.GPT_350M, "bf16", "full", 8)
    path = tmp_path / "gpt.json"
    path.write_text(json.dumps(gpt.hf_config(config.shape)))
    args = gpt.estimate_args(config, "H100", path)
    assert args[0] == "estimate" and args[-1] == "--json"
    flags = dict(zip(args[1:-2:2], args[2:-1:2], strict=False))
    assert (
        flags["--micro-batch"] == flags["--global-batch"] == "8" and flags["--grad-ckpt"] == "full"
    )
    assert flags["--gpu"] == "H100" and flags["--gpus"] == "1" and "--no-calibration" in args
    result = cli(*args)
    assert result.code == 0, result.stderr
    est = result.json()
    assert est["params_total"] == config.shape.params
    assert est["workload"]["grad_ckpt"] == "full" and est["workload"]["micro_batch"] == 8
    assert est["workload"]["seq_len"] == 1024 and est["workload"]["flash_attention"] is True


def test_bad_configurations_are_refused() -> None:
    with pytest.raises(ValueError, match="heads must divide"):
        gpt.GptShape("x", hidden=30, layers=1, heads=4)
    with pytest.raises(ValueError, match="seq_len"):
        gpt.TrainConfig(TINY, "fp32", "none", 1, seq_len=17)


# ------------------------------------------------------------------------------- bench figures


def test_best_known_figures_have_sources() -> None:
    best = steps.load_best_known()
    value, source = best[("H100", "matmul.bf16")]
    assert 780 <= value <= 800 and "Maximum Achievable Matmul FLOPS" in source
    from gpuwise.hardware import find_gpu

    # every row names a GPU gpuwise knows, by its canonical name
    for gpu, _metric in best:
        assert find_gpu(gpu).name == gpu


def test_bench_rows_add_the_ratio_to_the_best_known_figure() -> None:
    results = [
        {"name": "matmul.bf16", "value": 755.0, "unit": "TFLOP/s", "peak": 989.5, "ratio": 0.763},
        {"name": "memory.copy", "value": 2900.0, "unit": "GB/s", "peak": 3350.0, "ratio": 0.866},
    ]
    rows = steps.bench_rows(results, "H100", {("H100", "matmul.bf16"): (794.5, "src")})
    assert (
        rows[0]["ratio_best_known"] == pytest.approx(755 / 794.5)
        and rows[0]["best_known_source"] == "src"
    )
    assert rows[1]["best_known"] is None and rows[1]["ratio_best_known"] is None
    assert (
        steps.bench_rows(results, None, {("H100", "matmul.bf16"): (794.5, "src")})[0]["best_known"]
        is None
    )


def test_exposition_sample_names() -> None:
    text = (
        '# HELP gpuwise_gpu_up 1 when read\n# TYPE gpuwise_gpu_up gauge\ngpuwise_gpu_up{gpu="0"} 1.0\n'
        "# TYPE gpuwise_mig_memory_used_bytes gauge\nplain_metric 3\n"
    )
    assert scrape.sample_names(text) == {"gpuwise_gpu_up", "plain_metric"}


def test_worker_json_lines_skip_noise() -> None:
    assert steps.json_lines('warning: x\n{"a": 1}\n{bad\n[1]\n{"b": 2}\n') == [{"a": 1}, {"b": 2}]


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="1" failures="1"
skipped="1" tests="4"><testcase classname="tests.bench.test_bench" name="test_ok"/><testcase classname="t" name="test_bad">
<failure message="assert 1 == 2&#10;more">x</failure></testcase><testcase classname="t" name="test_err"><error message="boom"/>
</testcase><testcase classname="t" name="test_skip"><skipped message="no gpu"/></testcase></testsuite></testsuites>"""


def test_junit_counts() -> None:
    counts = steps.junit_counts(JUNIT)
    assert (
        counts["tests"],
        counts["passed"],
        counts["failures"],
        counts["errors"],
        counts["skipped"],
    ) == (4, 1, 1, 1, 1)
    assert counts["failed"] == [
        {"test": "t::test_bad", "message": "assert 1 == 2"},
        {"test": "t::test_err", "message": "boom"},
    ]


# ------------------------------------------------------------------------------- runner


def _ctx(tmp_path: Path) -> Context:
    return Context(out=tmp_path, scratch=tmp_path, repo=REPO, env=dict(os.environ))


def test_every_step_runs_even_when_earlier_ones_break(tmp_path: Path) -> None:
    seen: list[str] = []

    def broken(ctx: Context) -> StepResult:
        seen.append("broken")
        raise KeyError("no 'memory' in the estimate")

    def slow(ctx: Context) -> StepResult:
        seen.append("slow")
        child = steps.run_child(
            [sys.executable, "-c", "import time; time.sleep(60)"], ctx.remaining()
        )
        assert child.timed_out
        raise StepTimeout("the worker ran past its time limit")

    def fine(ctx: Context) -> StepResult:
        seen.append("fine")
        assert ctx.remaining() > 0
        return StepResult("fine", "ok", 0.0, "done")

    plan = [
        runner.Step("broken", broken, 30, 30),
        runner.Step("slow", slow, 0.5, 0.5),
        runner.Step("fine", fine, 30, 30),
    ]
    results = runner.run_steps(_ctx(tmp_path), plan, budget_s=60)
    assert seen == ["broken", "slow", "fine"]
    assert [(r.name, r.status) for r in results] == [
        ("broken", "fail"),
        ("slow", "timeout"),
        ("fine", "ok"),
    ]
    assert results[0].reason == "KeyError: \"no 'memory' in the estimate\""
    assert results[1].reason.startswith("the worker ran past its time limit (")
    assert all(r.seconds >= 0 for r in results)


def test_step_limits_leave_time_for_the_steps_after() -> None:
    limits: list[float] = []
    clock = iter(range(0, 10_000, 1))  # a fake clock: each call advances one second

    def record(ctx: Context) -> StepResult:
        limits.append(ctx.deadline)
        return StepResult("x", "ok", 0.0)

    plan = [runner.Step(f"s{i}", record, 100, 10) for i in range(3)]
    runner.run_steps(
        Context(out=Path("."), scratch=Path("."), repo=REPO),
        plan,
        budget_s=60,
        clock=lambda: float(next(clock)),
    )
    # budget 60 from t=0; step 1 starts at t=1 and keeps 2 × 15 s for the others: deadline 1 + 29
    assert limits[0] == 30.0
    assert limits[2] <= 60.0
    quick: list[float] = []
    runner.run_steps(
        Context(out=Path("."), scratch=Path("."), repo=REPO),
        [
            runner.Step(
                "q", lambda c: quick.append(c.deadline) or StepResult("q", "ok", 0.0), 100, 10
            )
        ],
        budget_s=60,
        quick=True,
        clock=lambda: 0.0,
    )
    assert quick == [10.0]


def test_run_child_kills_the_whole_process_group() -> None:
    script = "import subprocess, sys, time; p = subprocess.Popen(['sleep', '60']); print(p.pid, flush=True); time.sleep(60)"
    child = steps.run_child([sys.executable, "-c", script], 2.0)
    assert child.timed_out and child.returncode is not None and child.returncode < 0
    grandchild = int(child.stdout.split()[0])
    end = time.monotonic() + 5
    while time.monotonic() < end and _alive(grandchild):
        time.sleep(0.05)
    assert not _alive(grandchild)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_canonical_gpu_name() -> None:
    assert runner.canonical_gpu("NVIDIA H100 80GB HBM3", None) == "H100"
    assert runner.canonical_gpu("Some Unknown GPU", None) is None
    assert runner.canonical_gpu("Some Unknown GPU", "A100-80GB") == "A100-80GB"
    from gpuwise.errors import GpuwiseError

    with pytest.raises(GpuwiseError):
        runner.canonical_gpu("NVIDIA H100 80GB HBM3", "H1000")


def test_git_commit_names_this_checkout() -> None:
    commit = runner.git_commit(REPO)
    if shutil.which("git") is None or not (REPO / ".git").exists():
        assert commit is None
    else:
        assert commit is not None and len(commit.removesuffix("+dirty")) >= 7


# ------------------------------------------------------------------------------- real steps on the CPU


@pytest.mark.slow
def test_doctor_step_reads_the_real_doctor(tmp_path: Path) -> None:
    import time as _time

    result = steps.doctor_step(
        Context(
            out=tmp_path,
            scratch=tmp_path,
            repo=REPO,
            env=dict(os.environ),
            deadline=_time.monotonic() + 120,
        )
    )
    assert result.status == "ok" and result.data["doctor"]["checks"]
    shown = {row[0] for row in result.tables[0].rows}
    assert {"nvidia-driver", "cuda-compat", "torch-cuda"} <= shown


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("prometheus") is None,
    reason="the prometheus binary is not installed (Debian package prometheus)",
)
def test_exporter_step_with_a_real_prometheus_on_the_fake_gpu(tmp_path: Path) -> None:
    ctx = Context(
        out=tmp_path,
        scratch=tmp_path / "scratch",
        repo=REPO,
        env=dict(os.environ),
        exporter_fake="idle",
        exporter_seconds=3,
        deadline=time.monotonic() + 120,
    )
    ctx.scratch.mkdir()
    result = scrape.exporter_step(ctx)
    assert result.status == "ok", result.reason
    assert "gpuwise_gpu_up" in result.data["present"]
    # the 'mig' scenario serves MIG series that the idle GPU has not: they are reported absent
    assert result.data["absent"] and all(
        name.startswith("gpuwise_mig_") for name in result.data["absent"]
    )
    cost = result.data["cost"]
    assert cost["scraper"] == "prometheus" and cost["prometheus"]["scrapes"] >= 1
    assert cost["scrape_bytes"] > 0 and (tmp_path / "exporter-metrics.txt").is_file()


# ------------------------------------------------------------------------------- measuring code (torch, CPU)


@pytest.mark.slow  # importing torch takes ~3 s
def test_torch_model_has_the_parameters_the_shape_says() -> None:
    pytest.importorskip("torch")
    from gpuwise.bench.proof import model

    assert model.count_params(model.build_gpt(TINY)) == TINY.params
    assert (
        model.count_params(model.build_gpt(gpt.GptShape("t2", 48, 3, 4, vocab=100, max_seq_len=8)))
        == gpt.GptShape("t2", 48, 3, 4, vocab=100, max_seq_len=8).params
    )


@pytest.mark.slow
@pytest.mark.parametrize(("precision", "recompute"), [("fp32", "none"), ("bf16", "full")])
def test_measure_training_on_the_cpu(precision: gpt.Precision, recompute: gpt.Recompute) -> None:
    pytest.importorskip("torch")
    from gpuwise.bench.proof import model

    result = model.measure_training(
        gpt.TrainConfig(TINY, precision, recompute, 2, seq_len=16), "cpu", warmup=1, steps=2
    )
    assert result["params"] == TINY.params
    assert result["tokens_per_s"] > 0 and result["step_s"] > 0
    assert result["tokens_per_s"] * result["step_s"] == pytest.approx(2 * 16)
    # random tokens from a near-uniform initial model: the loss starts near ln(vocab)
    assert abs(result["loss"] - math.log(TINY.vocab)) < 1.0
    assert result["peak_allocated_bytes"] is None and result["peak_reserved_bytes"] is None


@pytest.mark.slow
def test_checkpoint_stall_on_the_cpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from gpuwise.bench.proof import model

    r = model.checkpoint_stall(30_000, "cpu", tmp_path, repeats=1)
    assert r["params"] == 173 * 173 and r["state_bytes"] == 12 * r["params"]
    assert (
        min(r["sync_save_s"], r["async_first_stall_s"], r["async_stall_s"], r["async_durable_s"])
        > 0
    )
    assert list(tmp_path.iterdir()) == []  # the scratch checkpoints are removed


@pytest.mark.parametrize(
    ("shm_free", "params"),
    [
        (None, 1e9),  # no /dev/shm to ask: the full state
        (64 * 1024**3, 1e9),  # 64 GiB free holds 12 GB
        (15 * 10**9, 1e9),  # 0.8 × 15 GB = 12 GB: just fits
        (1.2 * 10**9, 8e7),  # 0.8 × 1.2 GB / 12 B per parameter
    ],
)
def test_checkpoint_state_fits_in_dev_shm(shm_free: float | None, params: float) -> None:
    free = None if shm_free is None else int(shm_free)
    assert steps.state_params(1e9, free) == pytest.approx(params)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_NVML, reason="needs an NVIDIA GPU")
def test_measured_peak_on_cuda_holds_at_least_the_training_state() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    from gpuwise.bench.proof import model

    shape = gpt.GptShape("small", hidden=256, layers=2, heads=4, vocab=1024, max_seq_len=64)
    r = model.measure_training(
        gpt.TrainConfig(shape, "fp32", "none", 2, seq_len=64), "cuda", warmup=1, steps=2
    )
    # fp32 weights + gradients + two AdamW moments are all alive during the optimizer step
    assert r["peak_allocated_bytes"] >= 16 * shape.params
    assert r["peak_reserved_bytes"] >= r["peak_allocated_bytes"]
