"""``gpuwise bench`` on the CPU (quick sizes), bad input, cleanup, and the GPU-only paths."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuwise.bench import BenchOptions, run_bench
from gpuwise.bench.storage import storage_run


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not _cuda(), reason="needs an NVIDIA GPU")


@pytest.mark.slow
def test_quick_json_on_cpu_is_one_document_with_every_result(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = cli("bench", "--quick", "--json", "--checkpoint-dir", tmp_path)
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["device"]["kind"] == "cpu" and doc["quick"] is True
    names = {x["name"] for x in doc["results"]}
    assert names == {
        "matmul.fp32",
        "matmul.bf16",
        "matmul.fp16",
        "memory.copy",
        "train.gpt.fp32",
        "train.gpt.amp",
        "train.resnet.fp32",
        "train.resnet.amp",
        "storage.seq_write",
        "storage.seq_read",
        "storage.rand_read",
        "dataloader",
    }
    for x in doc["results"]:
        assert set(x) >= {"name", "value", "unit", "peak", "ratio"}
        assert (
            x["value"] > 0 and x["peak"] is None and x["ratio"] is None
        )  # a CPU has no datasheet here
    skipped = {s["name"]: s["reason"] for s in doc["skipped"]}
    assert set(skipped) == {"matmul.tf32", "matmul.fp8", "transfer", "nccl.allreduce"}
    assert "GPU" in skipped["transfer"]
    assert doc["calibration"] is None
    assert list(tmp_path.iterdir()) == []  # the storage scratch folder is gone


@pytest.mark.slow
def test_gpu_override_gives_peaks_and_ratios() -> None:
    report = run_bench(BenchOptions(quick=True, gpu="H100", only=("matmul", "train")))
    fp32 = report.get("matmul.fp32")
    assert (
        fp32 is not None
        and fp32.peak == pytest.approx(66.9, rel=0.05)
        and fp32.ratio == pytest.approx(fp32.value / fp32.peak)
    )
    gpt = report.get("train.gpt.amp")
    assert (
        gpt is not None and gpt.peak is not None and gpt.ratio is not None and 0 < gpt.ratio < 0.01
    )
    assert report.device.gpu == "H100"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--gpu", "H1000"), "did you mean"),  # unknown GPU name for the peaks
        (("--checkpoint-dir", "/proc"), "cannot write in checkpoint directory /proc"),  # unwritable
        (("--checkpoint-dir", "/nonexistent/ckpt"), "does not exist"),
        (("--only", "matmull"), "did you mean 'matmul'"),
        (("--num-workers", "-2"), "negative"),
        (("--device", "tpu"), "not cuda or cpu"),
    ],
)
def test_bad_input_exits_2(cli, args: tuple[str, ...], message: str) -> None:  # type: ignore[no-untyped-def]
    r = cli("bench", "--quick", *args)
    assert r.code == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr


def test_without_torch_it_names_the_extra(tmp_path: Path) -> None:
    blocker = tmp_path / "torch"
    blocker.mkdir()
    (blocker / "__init__.py").write_text(
        "raise ImportError('No module named torch (blocked by the test)')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ["PYTHONPATH"]])}
    done = subprocess.run(
        [sys.executable, "-m", "gpuwise", "bench", "--quick", "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert done.returncode == 2
    assert "pip install 'gpuwise[train]'" in done.stderr and done.stdout == ""
    done = subprocess.run(
        [sys.executable, "-m", "gpuwise", "doctor", "--json", "--only", "torch-cuda"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    (check,) = json.loads(done.stdout)["checks"]
    assert check["status"] == "skip" and "gpuwise[train]" in check["fix"]


def test_storage_scratch_is_removed_when_interrupted(tmp_path: Path) -> None:
    calls = []

    def ctrl_c() -> None:
        calls.append(1)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        storage_run(tmp_path, 4 * 1024 * 1024, 10, tick=ctrl_c)
    assert calls == [1]
    assert list(tmp_path.iterdir()) == []


def test_storage_numbers(tmp_path: Path) -> None:
    run = storage_run(tmp_path, 8 * 1024 * 1024, 50)
    assert run.file_bytes == 8 * 1024 * 1024
    assert run.write_gb_s > 0 and run.read_gb_s > 0 and run.random_read_iops > 0
    assert list(tmp_path.iterdir()) == []


def test_progress_reports_each_stage() -> None:
    seen: list[str] = []
    run_bench(BenchOptions(quick=True, only=("memory", "transfer")), progress=seen.append)
    assert seen == ["memory.copy", "transfer"]


@gpu
@needs_gpu
def test_gpu_matmul_and_copy_reach_a_sane_fraction_of_peak() -> None:
    report = run_bench(BenchOptions(quick=True, only=("matmul", "memory", "transfer")))
    bf16 = report.get("matmul.bf16")
    assert bf16 is not None and bf16.ratio is not None and 0.2 < bf16.ratio <= 1.2
    copy = report.get("memory.copy")
    assert copy is not None and copy.ratio is not None and 0.2 < copy.ratio <= 1.1
    assert report.get("transfer.h2d.pinned") is not None


def test_importing_bench_and_doctor_does_not_import_torch() -> None:
    code = "import gpuwise.bench, gpuwise.doctor, sys; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.slow
def test_interrupted_bench_leaves_nothing_behind(tmp_path: Path, sig: int) -> None:
    """A real Ctrl-C (or SIGTERM) while the storage benchmark writes its file."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuwise",
            "bench",
            "--quick",
            "--only",
            "storage",
            "--storage-mib",
            "4096",
            "--checkpoint-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not any(tmp_path.iterdir()):  # wait until the scratch folder exists
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    time.sleep(0.2)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_allreduce_processes_and_bus_bandwidth_formula_on_cpu() -> None:
    """The multi-process all-reduce path (spawn, file rendezvous, rank 0 reports) with gloo on CPU."""
    from gpuwise.bench.compute import allreduce_bus_gb_s

    busbw = allreduce_bus_gb_s(2, 1024 * 1024, 3, backend="gloo")
    assert 0 < busbw < 1000
