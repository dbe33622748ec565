"""The GPU datasheet table: figures, aliases, user overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwise.errors import DataFileError, HardwareError
from gpuwise.hardware import PRECISIONS, find_gpu, gpu_table, load_gpu_table

REQUIRED = [
    "T4",
    "A10",
    "A10G",
    "L4",
    "L40S",
    "V100",
    "V100-32GB",
    "A100",
    "A100-80GB",
    "A100-PCIE",
    "A100-80GB-PCIE",
    "H100",
    "H100-PCIE",
    "H100-NVL",
    "H200",
    "B200",
    "GB200",
    "MI250X",
    "MI300X",
    "TPU-v4",
    "TPU-v5e",
    "TPU-v5p",
]


@pytest.mark.parametrize("name", REQUIRED)
def test_required_models_have_memory_and_a_source(name: str) -> None:
    spec = find_gpu(name)
    assert spec.memory_gib > 0
    assert spec.source and spec.as_of


@pytest.mark.parametrize(
    ("alias", "model"),
    [
        ("A100-80GB", "A100-80GB"),
        ("a100-80gb", "A100-80GB"),
        ("nvidia-a100-80gb", "A100-80GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),  # NVML's name
        ("A100", "A100"),  # SkyPilot's A100 is the 40 GB SXM4
        ("nvidia-tesla-t4", "T4"),  # GKE accelerator label
        ("Tesla T4", "T4"),
        ("T4g", "T4"),  # AWS g5g carries the same T4
        ("H100-MEGA", "H100"),  # GCP a3-megagpu
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("h200", "H200"),
        ("tpu-v5e", "TPU-v5e"),
    ],
)
def test_aliases_resolve_to_one_model(alias: str, model: str) -> None:
    assert find_gpu(alias).name == model


@pytest.mark.parametrize(
    ("gpu", "precision", "tflops"),
    [
        ("H100", "bf16", 989.5),  # dense, not the 1979 sparse marketing figure
        ("H100", "fp8", 1979),
        ("A100", "tf32", 156),
        ("L4", "fp8", 242.5),
        ("T4", "bf16", None),  # Turing has no BF16
        ("V100", "fp16", 125),
        (
            "A10G",
            "bf16",
            70,
        ),  # no NVIDIA datasheet: a third-party published figure, labelled as such in gpus.csv
        ("MI300X", "bf16", 1307.4),
    ],
)
def test_dense_peaks(gpu: str, precision: str, tflops: float | None) -> None:
    assert find_gpu(gpu).peak_tflops(precision) == tflops


def test_no_row_stores_a_sparse_figure_as_dense() -> None:
    # Sparsity doubles tensor throughput; a dense fp8 peak is at most 2x the dense bf16 one.
    for spec in gpu_table().specs:
        bf16, fp8 = spec.peak_bf16_tflops, spec.peak_fp8_tflops
        if bf16 and fp8:
            assert fp8 <= 2.05 * bf16, (
                spec.name
            )  # datasheet rounding: L4 121 vs 242.5, L40S 362.05 vs 733
        if spec.peak_tf32_tflops and bf16:
            assert spec.peak_tf32_tflops <= 0.52 * bf16, spec.name


def test_unknown_name_suggests_close_ones() -> None:
    with pytest.raises(HardwareError) as info:
        find_gpu("H10")
    assert "H100" in info.value.suggestions


def test_unknown_precision() -> None:
    with pytest.raises(HardwareError, match="unknown precision"):
        find_gpu("H100").peak_tflops("fp4")
    assert "int8" in PRECISIONS


def test_user_file_fills_unknown_figures(tmp_path: Path) -> None:
    path = tmp_path / "gpus.csv"
    path.write_text(
        "name,memory_gib,peak_bf16_tflops,source\nA10G,24,70,my own bench\nX1,48,100,vendor sheet\n"
    )
    table = load_gpu_table(path)
    assert table.find("a10g").peak_bf16_tflops == 70
    assert (
        table.find("a10g").aliases == find_gpu("A10G").aliases
    )  # cells left empty keep bundled values
    assert table.find("X1").memory_gib == 48


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name,memory_gib\nX,-4\n", "column memory_gib: '-4' must be a positive number"),
        ("name,memory_gib\nX,lots\n", "column memory_gib: 'lots' is not a number"),
        ("name,memry_gib\nX,4\n", "missing column"),
        ("name,memory_gib,peak_bf16\nX,4,1\n", "unknown column"),
        ("", "no GPU rows"),
    ],
)
def test_malformed_user_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "gpus.csv"
    path.write_text(text)
    with pytest.raises(DataFileError, match=message):
        load_gpu_table(path)
