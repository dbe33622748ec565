"""``--calibrate``: what is written to calibration.json, merging, atomicity, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwise.base.paths import config_dir
from gpuwise.bench import BenchReport, BenchResult, DeviceInfo, calibration_entry, write_calibration
from gpuwise.errors import DataFileError, InputError


def _report(gpu: str | None = "H100", **ratios: float) -> BenchReport:
    device = DeviceInfo(
        "cuda", "NVIDIA H100 80GB HBM3", gpu, 8, "2.13.0", "12.8", "570.86.15", "9.0"
    )
    results = tuple(
        BenchResult(name.replace("_", "."), 100.0 * r, "TFLOP/s", 100.0, r)
        for name, r in ratios.items()
    )
    return BenchReport(device, False, results, extras={"cuda_context_gib": 0.52})


def test_entry_has_the_estimators_keys() -> None:
    entry = calibration_entry(
        _report(matmul_bf16=0.8, matmul_fp8=0.6, memory_copy=0.9, train_gpt_amp=0.41)
    )
    assert entry["matmul_efficiency"] == {"bf16": 0.8, "fp8": 0.6}
    assert entry["memory_bandwidth_efficiency"] == 0.9
    assert entry["mfu"] == 0.41
    assert entry["cuda_context_gib"] == 0.52


def test_ratio_above_one_is_capped() -> None:
    assert calibration_entry(_report(matmul_bf16=1.04))["matmul_efficiency"] == {"bf16": 1.0}


def test_write_merges_and_keeps_other_gpus(tmp_path: Path) -> None:
    path = config_dir() / "calibration.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "gpus": {"A100-80GB": {"mfu": 0.5}, "H100": {"mfu_by_model": {"llama-2-7b": 0.48}}},
            }
        )
    )
    written = write_calibration(_report(matmul_bf16=0.8, train_gpt_amp=0.4))
    assert written == path
    doc = json.loads(path.read_text())
    assert (
        doc["version"] == 1
        and doc["device"] == "NVIDIA H100 80GB HBM3"
        and doc["measured_at"].endswith("Z")
    )
    assert doc["gpus"]["A100-80GB"] == {"mfu": 0.5}
    h100 = doc["gpus"]["H100"]
    assert h100["mfu_by_model"] == {"llama-2-7b": 0.48} and h100["mfu"] == 0.4
    assert [p.name for p in path.parent.iterdir()] == ["calibration.json"]  # no temporary file left


def test_refuses_to_overwrite_a_broken_file() -> None:
    path = config_dir() / "calibration.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{not json")
    with pytest.raises(DataFileError, match="move it aside"):
        write_calibration(_report(matmul_bf16=0.8))
    assert path.read_text() == "{not json"


def test_needs_a_gpu_model() -> None:
    with pytest.raises(InputError, match="--gpu"):
        write_calibration(_report(gpu=None, matmul_bf16=0.8))


@pytest.mark.slow
def test_calibrate_changes_what_estimate_reports(cli) -> None:  # type: ignore[no-untyped-def]
    """The loop closed: a full run on the H100 writes the file, gpuwise estimate then uses the measured MFU."""
    before = cli("estimate", "--params", "1B", "--gpu", "H100", "--json")
    assert before.code == 0, before.stderr
    path = write_calibration(_report(matmul_bf16=0.7, memory_copy=0.85, train_gpt_amp=0.2))
    assert path == config_dir() / "calibration.json"

    from gpuwise.estimate.calibration import load_calibration

    cal = load_calibration()
    assert cal is not None
    h100 = cal.for_gpu("H100")
    assert (
        h100 is not None
        and h100.mfu == pytest.approx(0.2)
        and h100.matmul_efficiency == {"bf16": 0.7}
    )

    after = cli("estimate", "--params", "1B", "--gpu", "H100", "--json")
    assert after.code == 0, after.stderr
    b, a = before.json(), after.json()
    assert "calibrated" in a["mfu_basis"] and "calibrated" not in b["mfu_basis"]
    assert a["mfu"] < b["mfu"] and a["wall_hours"] > b["wall_hours"]
    ignored = cli("estimate", "--params", "1B", "--gpu", "H100", "--json", "--no-calibration")
    assert ignored.json()["wall_hours"] == pytest.approx(b["wall_hours"])


def test_quick_run_never_writes_calibration(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("bench", "--quick", "--only", "matmul", "--gpu", "H100", "--calibrate")
    assert r.code == 2
    assert "never written from `bench --quick`" in r.stderr and "To fix" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (config_dir() / "calibration.json").exists()


def _report_on(
    kind: str, name: str, gpu: str | None, *, quick: bool = False, **ratios: float
) -> BenchReport:
    device = DeviceInfo(kind, name, gpu, 1 if kind == "cuda" else 0, "2.13.0", None)
    results = tuple(
        BenchResult(n.replace("_", "."), 100.0 * r, "TFLOP/s", 100.0, r) for n, r in ratios.items()
    )
    return BenchReport(device, quick, results)


@pytest.mark.parametrize(
    ("report", "message"),
    [
        (
            _report_on("cpu", "AMD EPYC 7R13 Processor", "H100", matmul_fp32=0.01),
            "CPU run cannot calibrate H100",
        ),
        (_report_on("cuda", "NVIDIA A100-SXM4-80GB", "H100", matmul_bf16=0.8), "not H100"),
        (
            _report_on("cuda", "NVIDIA H100 80GB HBM3", "H100", quick=True, matmul_bf16=0.8),
            "--quick",
        ),
    ],
)
def test_calibration_is_written_only_from_a_full_run_on_the_gpu_it_names(
    report: BenchReport, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        write_calibration(report)
    assert not (config_dir() / "calibration.json").exists()


def test_a_run_on_the_named_gpu_writes() -> None:
    path = write_calibration(
        _report_on("cuda", "NVIDIA A100-SXM4-80GB", "A100-80GB", matmul_bf16=0.85)
    )
    assert json.loads(path.read_text())["gpus"]["A100-80GB"]["matmul_efficiency"] == {"bf16": 0.85}


def test_implausible_figures_are_not_written() -> None:
    """A measurement far above the datasheet (wrong GPU, broken timer) is refused before writing."""
    device = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", "H100", 8, "2.13.0", "12.8")
    report = BenchReport(
        device, False, (BenchResult("matmul.bf16", 1500.0, "TFLOP/s", 989.5, 1.52),)
    )
    with pytest.raises(DataFileError, match="above the datasheet peak"):
        write_calibration(report)
    assert not (config_dir() / "calibration.json").exists()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ((), "needs a GPU, and torch sees none on this machine"),
        (("--device", "cpu"), "calibration is measured on a GPU"),
        (("--quick",), "never written from `bench --quick`"),
    ],
)
def test_calibrate_without_a_gpu_is_refused_before_any_benchmark(  # type: ignore[no-untyped-def]
    cli, monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...], says: str
) -> None:
    """It used to run the whole CPU benchmark (minutes) and only then refuse to write."""
    import torch

    if torch.cuda.is_available() and not flags:
        pytest.skip("this machine has a GPU")
    import gpuwise.bench

    def no_benchmark(*args: object, **kwargs: object) -> None:
        raise AssertionError("a benchmark ran")

    monkeypatch.setattr(gpuwise.bench, "run_bench", no_benchmark)
    r = cli("bench", "--calibrate", *flags)
    assert r.code == 2, r.stderr
    assert r.stderr.startswith("error: ") and says in r.stderr and r.stderr.count("\n") == 1
    assert not (config_dir() / "calibration.json").exists()
