"""Collectives as α + n·β, hybrid sharding, the --stack input and no hours for what does not fit."""

from __future__ import annotations

from typing import Any

import pytest

from gpuwise.estimate import estimate_workload, workload_from_options
from gpuwise.estimate.measured import load_measured_runs
from gpuwise.estimate.throughput import (
    NCCL_BASE_US,
    NCCL_RING_STEP_US,
    Network,
    collective_latency_s,
    gradient_buckets,
)

_NVL = Network(gpus_per_node=8, intra_node_gb_s=300.0, inter_node_gb_s=50.0, intra_kind="NVLink")


def test_one_node_ring_latency_is_nccls_base_plus_a_step_per_hop() -> None:
    # 8 GPUs on NVLink: ring all-gather 7 steps, all-reduce 14 (tree: 2·7·28 µs, dearer)
    ag = NCCL_BASE_US["ring"] + 7 * NCCL_RING_STEP_US["nvlink"]
    ar = NCCL_BASE_US["ring"] + 14 * NCCL_RING_STEP_US["nvlink"]
    assert collective_latency_s("all-gather", 8, _NVL) == pytest.approx(ag * 1e-6)
    assert collective_latency_s("all-reduce", 8, _NVL) == pytest.approx(ar * 1e-6)
    assert collective_latency_s("all-reduce", 1, _NVL) == 0.0


def test_latency_grows_with_the_gpus_and_all_reduce_switches_to_the_tree() -> None:
    ag = [collective_latency_s("all-gather", n, _NVL) for n in (8, 64, 1024)]
    assert ag[0] < ag[1] < ag[2]
    assert ag[2] > 1e-3  # a ring over 1,024 GPUs: milliseconds per collective
    # all-reduce: the tree's log2(nodes) network steps beat the ring's 2·nodes at scale
    ar = collective_latency_s("all-reduce", 1024, _NVL)
    ring_us = (
        NCCL_BASE_US["ring"]
        + (2 * 1023 - 2 * 128) * NCCL_RING_STEP_US["nvlink"]
        + 2 * 128 * NCCL_RING_STEP_US["net"]
    )
    assert ar < ring_us * 1e-6


def test_stack_sets_the_gradient_buckets() -> None:
    params = 7e9
    ddp = gradient_buckets("unknown", 0, params, 2.0, 64)  # 25 MiB PyTorch DDP buckets
    mega = gradient_buckets("megatron", 1, params, 2.0, 64)  # max(40M, 64M) parameters
    ds = gradient_buckets("deepspeed", 2, params, 2.0, 64)  # 5e8 elements
    assert ddp == pytest.approx(7e9 * 2 / (25 * 2**20), abs=1)
    assert mega == 110 and ds == 14


def _fsdp_7b(n: int, **extra: str) -> Any:
    wl = workload_from_options(
        model="llama-2-7b", zero="3", micro_batch="1", seq_len="2048", global_batch="1024", **extra
    )
    return estimate_workload(
        wl, "A100-80GB", n, inter_node_gbit_s=100.0, calibration=None, suggest=False
    )


def test_full_sharding_over_many_nodes_exposes_communication_hybrid_sharding_less() -> None:
    one_node, many = _fsdp_7b(8), _fsdp_7b(512)
    assert one_node.comm_time_s == 0.0 and many.comm_time_s > 0.0
    assert many.tokens_per_second / 512 < one_node.tokens_per_second / 8
    hybrid = _fsdp_7b(512, shard_within_node="on")
    assert hybrid.tokens_per_second > many.tokens_per_second
    # the states are sharded over one node only: more memory per GPU than sharding over 512
    assert hybrid.memory.breakdown["optimizer_states"] == pytest.approx(
        many.memory.breakdown["optimizer_states"] * 512 / 8
    )


def test_a_stack_without_measured_rows_gets_the_central_factor() -> None:
    wl = workload_from_options(model="llama-2-7b", zero="3", tokens="1e9")
    runs = {s: estimate_workload(wl.with_changes(stack=s), "H100", 8) for s in ("unknown", "hf")}
    mega = estimate_workload(wl.with_changes(stack="megatron"), "H100", 8)
    assert runs["unknown"].step_time_s == runs["hf"].step_time_s
    assert mega.step_time_s != runs["unknown"].step_time_s
    assert "central" in runs["hf"].mfu_basis and "megatron" in mega.mfu_basis


def test_every_measured_row_names_its_stack() -> None:
    runs = load_measured_runs()
    assert all(r.stack != "unknown" for r in runs)
    hsdp = [r for r in runs if r.workload.shard_within_node]
    assert {r.stack for r in hsdp} == {"fms-fsdp"} and len(hsdp) == 2


def test_cli_takes_stack_and_hybrid_sharding(cli: Any) -> None:
    args = ("estimate", "--model", "llama-2-7b", "--gpu", "A100-80GB", "--gpus", "64")
    args += ("--zero", "3", "--tokens", "1e9", "--no-calibration", "--json")
    full = cli(*args, "--stack", "torchtitan").json()
    hybrid = cli(*args, "--stack", "torchtitan", "--shard-within-node").json()
    assert "torchtitan" in full["mfu_basis"]
    assert hybrid["memory"]["per_gpu_gib"] > full["memory"]["per_gpu_gib"]
    bad = cli(*args, "--stack", "megatronn")
    assert bad.code == 2 and "error:" in bad.stderr and "Traceback" not in bad.stderr


def test_no_hours_for_what_does_not_fit(cli: Any) -> None:
    r = cli(
        "estimate",
        "--model",
        "llama-2-70b",
        "--gpu",
        "A100-80GB",
        "--tokens",
        "1e9",
        "--no-calibration",
    )
    assert r.code == 0, r.stderr
    assert "does not fit: it would not run" in r.stdout
    wall = next(line for line in r.stdout.splitlines() if "wall-clock" in line)
    assert " h" not in wall and "min" not in wall


def test_hf_fine_tunes_checkpoint_by_default_as_trl_does() -> None:
    hf = workload_from_options(model="llama-2-7b", task="lora", stack="hf")
    plain = workload_from_options(model="llama-2-7b", task="lora")
    mega = workload_from_options(model="llama-2-7b", task="pretrain", stack="hf")
    assert hf.grad_ckpt == "full" and any("TRL" in n for n in hf.notes)
    assert plain.grad_ckpt == "none" and mega.grad_ckpt == "none"
    assert (
        workload_from_options(
            model="llama-2-7b", task="lora", stack="hf", grad_ckpt="none"
        ).grad_ckpt
        == "none"
    )


def test_validation_rows_stay_out_of_the_fit() -> None:
    from gpuwise.estimate.measured import default_efficiency

    fitted = load_measured_runs()
    held = load_measured_runs("validation_throughput.csv")
    assert held and not {(r.source, r.value) for r in held} & {(r.source, r.value) for r in fitted}
    assert default_efficiency().rows <= len(fitted)
    fms = [r for r in held if r.source_id == "fms-h100"]
    assert fms and all(r.inter_node_gbit_s == 800.0 and r.gpus_per_node == 8 for r in fms)


def test_a_measured_stack_gets_a_narrower_range_than_an_unknown_one() -> None:
    from gpuwise.estimate.measured import residual_intervals

    q = residual_intervals()
    assert q["throughput-known-stack"][1] < q["throughput"][1]
    wl = workload_from_options(model="llama-2-7b", zero="3", tokens="1e10")
    unknown = estimate_workload(wl, "H100", 64, calibration=None)
    mega = estimate_workload(wl.with_changes(stack="megatron"), "H100", 64, calibration=None)
    hf = estimate_workload(wl.with_changes(stack="hf"), "H100", 64, calibration=None)
    assert mega.wall_hours_p90 / mega.wall_hours == pytest.approx(q["throughput-known-stack"][1])
    assert unknown.wall_hours_p90 / unknown.wall_hours > mega.wall_hours_p90 / mega.wall_hours
    assert hf.wall_hours_p90 / hf.wall_hours == unknown.wall_hours_p90 / unknown.wall_hours


def test_a_stack_keeps_its_narrower_range_only_on_the_generation_it_was_measured_on() -> None:
    from gpuwise.estimate.measured import default_efficiency, residual_intervals

    q = residual_intervals()
    model = default_efficiency()
    assert model.stack_architectures["fms-fsdp"]["transformer-train"] == ("Ampere",)
    wl = workload_from_options(
        model="llama-2-7b", zero="3", tokens="1e10", stack="fms-fsdp", micro_batch=2
    )
    ampere = estimate_workload(wl, "A100-80GB", 64, calibration=None)
    hopper = estimate_workload(wl, "H100", 64, calibration=None)
    assert ampere.wall_hours_p90 / ampere.wall_hours == pytest.approx(
        q["throughput-known-stack"][1]
    )
    assert hopper.wall_hours_p90 / hopper.wall_hours == pytest.approx(q["throughput"][1])
    assert "none on Hopper" in hopper.mfu_basis and "none on" not in ampere.mfu_basis
    # the stack's own factor is still the best guess there
    assert "fitted to 4 measured fms-fsdp" in hopper.mfu_basis


def test_validation_series_are_command_lines_whose_first_row_is_the_base() -> None:
    import shlex
    from importlib import resources

    from gpuwise.base.datafiles import commented_csv
    from gpuwise.cli.estimate import estimate_inputs

    text = (
        resources.files("gpuwise.estimate")
        .joinpath("data/validation_scaling.csv")
        .read_text("utf-8")
    )
    seen: dict[str, int] = {}
    for r in commented_csv(text):
        argv = [*shlex.split(r["options"]), "--gpu", r["gpu"], "--gpus", r["gpus"]]
        wl = estimate_inputs([*argv, "--no-calibration"]).workload
        # one setting moves along a series: its first row has no context parallelism
        if r["series"] not in seen:
            assert wl.context_parallel == 1
        seen[r["series"]] = seen.get(r["series"], 0) + 1
        assert float(r["tokens_per_s_per_gpu"]) > 0 and r["source"]
    assert seen and all(n >= 2 for n in seen.values())


def test_data_parallel_series_fix_the_per_gpu_work_and_grow_the_gpus() -> None:
    held = load_measured_runs("validation_dp_scaling.csv")
    fitted = {(r.gpu, r.gpus, r.value) for r in load_measured_runs()}
    series: dict[str, list] = {}
    for r in held:
        series.setdefault(r.source_id, []).append(r)
    assert len(series) >= 5
    for rows in series.values():
        assert len(rows) >= 2
        assert [r.gpus for r in rows] == sorted({r.gpus for r in rows})  # one row per size, growing
        base = rows[0].workload
        for r in rows:
            wl = r.workload
            # weak scaling: one micro-batch per GPU per step, nothing else moves
            assert wl.global_batch == wl.micro_batch * r.gpus
            assert wl.with_changes(global_batch=base.global_batch) == base
            assert r.gpu == rows[0].gpu and r.inter_node_gbit_s == rows[0].inter_node_gbit_s
            assert ((r.gpu, r.gpus, r.value) in fitted) == ("also a fitted row" in r.source)
    assert any(r.workload.zero == 2 for r in held)  # SHARD_GRAD_OP rows read as ZeRO-2


def test_sharded_data_parallel_past_128_gpus_says_what_published_series_lose() -> None:
    wl = workload_from_options(model="llama-2-7b", zero="3", micro_batch=2, seq_len=2048)

    def noted(w: Any, gpus: int) -> bool:
        est = estimate_workload(w, "H100", gpus, calibration=None, suggest=False)
        return any("llm-foundry's published FSDP tables" in n for n in est.notes)

    assert noted(wl, 256)
    assert not noted(wl, 128)
    assert not noted(wl.with_changes(zero=1), 256)
    assert not noted(wl.with_changes(tensor_parallel=8), 512)  # 64 data-parallel ranks
