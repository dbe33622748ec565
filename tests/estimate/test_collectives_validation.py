"""The nccl-tests check (benchmarks/estimate_accuracy.py): how a published row's size becomes
gpuwise's time, and that every row of the validation file is one the check can price."""

from __future__ import annotations

import importlib.util
import math
from importlib import resources
from pathlib import Path
from types import ModuleType

import pytest

from gpuwise.base.datafiles import commented_csv
from gpuwise.estimate.throughput import (
    Network,
    allreduce_seconds,
    collective_latency_s,
)
from gpuwise.hardware import find_gpu

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "estimate_accuracy.py"
_NVL = Network(gpus_per_node=8, intra_node_gb_s=300.0, inter_node_gb_s=50.0, intra_kind="NVLink")


@pytest.fixture(scope="module")
def check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("estimate_accuracy", _SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("kind", ["all-gather", "reduce-scatter"])
def test_gather_and_scatter_move_n_minus_1_over_n_of_the_array(
    check: ModuleType, kind: str
) -> None:
    size = 2**30
    # one node of 8: each GPU sends 7/8 of the whole array over its NVLink share
    wire, alpha = check.nccl_tests_seconds(kind, size, 8, _NVL)
    assert wire == pytest.approx(7 / 8 * size / 300e9)
    assert alpha == collective_latency_s(kind, 8, _NVL)
    # the same size as an all-reduce moves twice the bytes
    ar_wire, ar_alpha = check.nccl_tests_seconds("all-reduce", size, 8, _NVL)
    assert ar_wire == pytest.approx(2 * wire)
    assert ar_alpha == collective_latency_s("all-reduce", 8, _NVL) != alpha


def test_across_nodes_a_gather_is_half_the_all_reduce_wire(check: ModuleType) -> None:
    size = 64 * 2**20
    wire, _ = check.nccl_tests_seconds("all-gather", size, 32, _NVL)
    assert wire == pytest.approx(allreduce_seconds(size, 32, _NVL) / 2)
    # intra-node 7/8·S over NVLink plus across 4 nodes 3/4·S over the node's network
    assert wire == pytest.approx(7 / 8 * size / 300e9 + 3 / 4 * size / 50e9)


def test_an_unknown_collective_is_refused(check: ModuleType) -> None:
    with pytest.raises(ValueError, match="alltoall"):
        check.nccl_tests_seconds("alltoall", 2**20, 16, _NVL)


def test_every_published_row_can_be_priced_and_names_its_source(check: ModuleType) -> None:
    text = (
        resources.files("gpuwise.estimate")
        .joinpath("data/validation_collectives.csv")
        .read_text("utf-8")
    )
    header = "\n".join(ln for ln in text.splitlines() if ln.startswith("#"))
    rows = list(commented_csv(text))
    assert len(rows) >= 20
    for r in rows:
        find_gpu(r["gpu"])  # raises for a GPU the table does not know
        n, per_node = int(r["gpus"]), int(r["gpus_per_node"])
        assert n >= 2 and per_node >= 1 and float(r["inter_node_gbps"]) > 0
        assert float(r["bytes"]) > 0 and float(r["time_us"]) > 0
        assert f"# {r['source_id']}" in header or f" {r['source_id']}:" in header, r["source_id"]
        assert r["source"].strip(), r
        net = Network(per_node, 300.0, float(r["inter_node_gbps"]) / 8, "NVLink")
        wire, alpha = check.nccl_tests_seconds(r["collective"], float(r["bytes"]), n, net)
        assert math.isfinite(wire + alpha) and wire > 0
