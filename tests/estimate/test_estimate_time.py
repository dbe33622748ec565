"""FLOPs, MFU, communication and time, pinned against hand-computed cases."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import gpuwise
from gpuwise.errors import DataFileError, EstimateError
from gpuwise.estimate import estimate_workload, load_calibration, workload_from_options
from gpuwise.estimate.measured import default_efficiency
from gpuwise.estimate.model import get_preset
from gpuwise.estimate.steptime import DEFAULT_BANDWIDTH_FRACTION
from gpuwise.estimate.throughput import (
    Network,
    allreduce_seconds,
    fit_mfu_model,
    load_published_runs,
    mfu_model,
    recompute_factor,
    training_flops_per_token,
)
from gpuwise.hardware import find_gpu


def test_palm_flops_per_token_llama2_7b() -> None:
    m = get_preset("llama-2-7b")
    n = 6_738_415_616 - 32000 * 4096  # matmul params: input embedding is a lookup
    attn = 12 * 32 * 32 * 128 * 4096  # 12·L·H·Q·T (PaLM App. B)
    assert training_flops_per_token(m, 4096, "pretrain") == 6 * n + attn


def test_lora_flops_skip_frozen_weight_gradients() -> None:
    m = get_preset("llama-2-7b")
    adapters = m.lora_params(16, "all-linear")
    expected = 4 * m.matmul_params + 12 * 32 * 32 * 128 * 2048 + 6 * adapters
    assert training_flops_per_token(m, 2048, "lora", adapters) == expected


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("none", 1.0),  # no recompute
        # full: one more forward (2N + 4·L·H·Q·T) on top of 6N + 12·L·H·Q·T → exactly 6/8 = 0.75
        ("full", 0.75),
        (
            "selective",
            1 / (1 + 0.1 / 3),
        ),  # a tenth of full recompute's overhead (Korthikanti abstract)
    ],
)
def test_recompute_lowers_mfu_by_the_extra_forward(mode: str, expected: float) -> None:
    assert recompute_factor(get_preset("llama-2-7b"), 4096, "pretrain", mode) == pytest.approx(
        expected
    )


@pytest.mark.parametrize(
    ("size", "n", "gpn", "expected_s"),
    [
        (1e9, 1, 8, 0.0),  # one GPU: nothing to reduce
        (1e9, 8, 8, 2 * 7 / 8 * 1e9 / 300e9),  # one node of 8 over 300 GB/s: 2(n-1)/n·S/B
        (
            1e9,
            16,
            8,
            2 * 7 / 8 * 1e9 / 300e9 + 2 * 1 / 2 * 1e9 / 50e9,
        ),  # + 2 nodes over 50 GB/s each
    ],
)
def test_hierarchical_ring_allreduce(size: float, n: int, gpn: int, expected_s: float) -> None:
    net = Network(
        gpus_per_node=gpn, intra_node_gb_s=300.0, inter_node_gb_s=50.0, intra_kind="NVLink"
    )
    assert allreduce_seconds(size, n, net) == pytest.approx(expected_s)


def test_time_is_flops_over_gpus_peak_and_mfu_divided_by_goodput() -> None:
    wl = workload_from_options(
        model="llama-2-7b", task="pretrain", tokens="1e11", zero=1, micro_batch=2
    )
    est = estimate_workload(wl, "H100", 64, calibration=None)
    stepping = est.flops_total / (64 * est.peak_tflops * 1e12 * est.mfu) / 3600
    assert 0.5 < est.goodput < 1.0
    assert est.wall_hours == pytest.approx(stepping / est.goodput)
    assert est.gpu_hours == pytest.approx(est.wall_hours * 64)
    assert est.wall_hours_p10 is not None and est.wall_hours_p90 is not None
    assert est.wall_hours_p10 < est.wall_hours < est.wall_hours_p90


def test_mfu_model_fits_the_published_runs_and_penalises_newer_gpus() -> None:
    runs = load_published_runs()
    assert len(runs) >= 10 and all(r.source for r in runs)
    fit = mfu_model()
    a100 = fit.predict(153.0, 4096)
    assert 0.35 < a100 < 0.55  # LLaMA/Llama 2 on A100-80GB: 38-54% (data file)
    assert fit.b_balance < 0  # H100 (balance 295) gets a lower MFU than A100 (153)
    assert fit_mfu_model(runs).b0 == fit.b0  # deterministic


def test_pcie_scales_worse_than_nvlink_and_nodes_worse_than_one_node() -> None:
    # DDP with short sequences: the gradient all-reduce outlasts the backward pass on PCIe
    wl = workload_from_options(
        model="llama-2-7b", task="pretrain", tokens="1e10", seq_len=512, global_batch=8
    )
    sxm = estimate_workload(wl, "A100-80GB", 8, calibration=None)
    pcie = estimate_workload(wl, "A100-80GB-PCIE", 8, calibration=None)
    assert sxm.scaling_efficiency > pcie.scaling_efficiency
    assert pcie.comm_time_s > 0
    one = estimate_workload(wl, "H100", 8, calibration=None)
    four = estimate_workload(
        wl, "H100", 32, gpus_per_node=8, inter_node_gbit_s=100, calibration=None
    )
    assert four.scaling_efficiency < one.scaling_efficiency
    assert four.nodes == 4 and "Gbit/s" in four.interconnect


def test_calibration_file_overrides_the_fitted_mfu(tmp_path: Path, isolated_env: Path) -> None:
    wl = workload_from_options(model="llama-2-7b", task="lora", tokens="1e10")
    before = estimate_workload(wl, "H100", calibration=None)
    cfg = isolated_env / "config"
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "calibration.json").write_text(
        json.dumps(
            {
                "version": 1,
                "measured_at": "2026-11-21T06:00:00Z",
                "device": "NVIDIA H100 80GB HBM3",
                "gpus": {
                    "H100": {
                        "mfu": 0.2,
                        "cuda_context_gib": 1.5,
                        "memory_bandwidth_efficiency": 0.8,
                    }
                },
            }
        )
    )
    after = estimate_workload(wl, "H100")  # default: reads <config dir>/calibration.json
    assert after.mfu_compute == pytest.approx(0.2)
    assert "calibrated" in after.mfu_basis and "calibrated" not in before.mfu_basis
    assert after.wall_hours > before.wall_hours
    assert after.memory.breakdown["cuda_context"] == 1.5
    other_gpu = estimate_workload(wl, "A100-80GB")  # only the calibrated GPU changes
    assert "calibrated" not in other_gpu.mfu_basis
    by_model = tmp_path / "cal.json"
    by_model.write_text(
        json.dumps(
            {"version": 1, "gpus": {"h100-sxm": {"mfu": 0.2, "mfu_by_model": {"llama-2-7b": 0.5}}}}
        )
    )
    assert estimate_workload(wl, "H100", calibration=str(by_model)).mfu_compute == pytest.approx(
        0.5
    )


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"version": 2, "gpus": {}}, "unsupported calibration version"),  # future schema
        ({"version": 1, "gpus": {"Z100": {}}}, "unknown GPU"),  # not a GPU gpuwise knows
        ({"version": 1, "gpus": {"H100": {"mfuu": 0.4}}}, "unknown key"),  # typo
        ({"version": 1, "gpus": {"H100": {"mfu": 1.7}}}, "in (0, 1)"),  # impossible fraction
        ({"version": 1, "gpus": {"H100": {"mfu": float("nan")}}}, "in (0, 1)"),  # NaN
        ({"version": 1, "gpus": {"H100": {"mfu": 0}}}, "in (0, 1)"),  # no work done
        (
            {"version": 1, "gpus": {"H100": {"mfu": 1.0}}},
            "in (0, 1)",
        ),  # every FLOP useful: implausible
        (
            {"version": 1, "gpus": {"H100": {"matmul_tflops": {"bf16": 2000}}}},
            "above the datasheet peak",
        ),
        (
            {"version": 1, "gpus": {"H100": {"memory_bandwidth_tb_s": 9.0}}},
            "above the datasheet peak",
        ),
        ([], "expected a JSON object"),  # wrong shape
    ],
)
def test_bad_calibration_files_are_refused(tmp_path: Path, doc: object, message: str) -> None:
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(DataFileError) as info:
        load_calibration(path)
    assert message in str(info.value)


def test_no_calibration_file_means_none() -> None:
    assert load_calibration() is None


def test_inference_decode_is_bandwidth_bound_at_batch_one() -> None:
    wl = workload_from_options(model="llama-2-7b", task="inference", prompt_len=128, output_len=128)
    est = estimate_workload(wl, "A100-80GB", calibration=None)
    inf = est.inference
    assert inf is not None and inf.decode_bound == "memory"
    weights = 6_738_415_616 * 2
    kv_avg = (
        2 * 2 * 32 * 32 * 128 * (128 + 64)
    )  # KV bytes at the average context of the decode phase
    overhead = default_efficiency().layer_overhead_s * 32  # per layer per forward pass (fitted)
    bw = 2.039e12 * DEFAULT_BANDWIDTH_FRACTION  # achievable, not the datasheet
    assert inf.latency_per_output_token_ms == pytest.approx(
        ((weights + kv_avg) / bw + overhead) * 1000
    )
    assert est.tokens_per_second == pytest.approx(1000 / inf.latency_per_output_token_ms)
    assert inf.prefill_tokens_per_second > 50 * est.tokens_per_second  # prefill is compute-bound


def test_inference_max_batch_fills_memory_left_after_weights() -> None:
    wl = workload_from_options(
        model="llama-3.1-8b", task="inference", prompt_len=2048, output_len=2048
    )
    est = estimate_workload(wl, "H100", calibration=None)
    inf = est.inference
    assert inf is not None
    assert inf.kv_cache_gib_per_sequence == pytest.approx(4096 * 131072 / 2**30)
    assert 100 < inf.max_batch_that_fits < 200  # (80 − ~17 GiB) / 0.5 GiB


def test_suggestions_fit_and_are_ranked_by_speed_cost() -> None:
    wl = workload_from_options(model="llama-2-13b", task="finetune", micro_batch=8, seq_len=2048)
    est = estimate_workload(wl, "A100-80GB", 8, calibration=None)
    assert not est.memory.fits
    assert est.suggestions, "expected fixes"
    assert all(s.fits and s.per_gpu_gib <= 80 for s in est.suggestions)
    slowdowns = [s.slowdown for s in est.suggestions]
    assert slowdowns == sorted(slowdowns)
    fixes = " | ".join(s.fix for s in est.suggestions)
    assert "--zero 3" in fixes  # no single change fits: ZeRO-3 plus a smaller micro-batch
    assert "--task" not in fixes  # switching to LoRA changes what is trained: only as a last resort


def test_a_smaller_micro_batch_keeps_the_global_batch() -> None:
    wl = workload_from_options(
        model="gpt2-xl", task="finetune", micro_batch=64, seq_len=1024, global_batch=256
    )
    est = estimate_workload(wl, "A100-80GB", 4, calibration=None)
    mb = [s for s in est.suggestions if "micro_batch" in s.changes]
    assert mb and all(s.changes["global_batch"] == 256 for s in mb)


def test_fitting_workloads_get_no_suggestions() -> None:
    wl = workload_from_options(model="gpt2", task="finetune")
    est = estimate_workload(wl, "A100-80GB", calibration=None)
    assert est.memory.fits and est.suggestions == ()


def test_fp8_needs_a_gpu_with_fp8() -> None:
    wl = workload_from_options(model="llama-2-7b", task="pretrain", precision="fp8")
    with pytest.raises(EstimateError, match="no FP8"):
        estimate_workload(wl, "A100-80GB", calibration=None)
    assert estimate_workload(wl, "H100", calibration=None).peak_tflops == 1979


def test_gpuwise_estimate_workload_is_the_library_call() -> None:
    wl = workload_from_options(model="gpt2", task="finetune", samples="10k")
    a = gpuwise.estimate_workload(wl, "L4", calibration=None)
    b = estimate_workload(wl, find_gpu("L4"), calibration=None)
    assert a == b
    from gpuwise.estimate import Estimate

    assert isinstance(a, Estimate) and gpuwise.Workload is type(wl)


def test_estimate_json_has_the_issue_fields() -> None:
    wl = workload_from_options(model="llama-2-7b", task="pretrain", tokens="2e12")
    d = estimate_workload(wl, "A100-80GB", 64, calibration=None).to_dict()
    for key in ("per_gpu_gib", "capacity_gib", "fits", "breakdown"):
        assert key in d["memory"]
    for key in (
        "flops_total",
        "mfu",
        "mfu_basis",
        "tokens_per_second",
        "wall_hours",
        "gpu_hours",
        "suggestions",
    ):
        assert key in d
    assert all(math.isfinite(v) for v in d["memory"]["breakdown"].values())


@pytest.mark.slow
def test_core_modules_import_no_torch_typer_or_rich() -> None:
    import subprocess
    import sys

    code = (
        "import sys, gpuwise.estimate as e; from gpuwise.estimate import workload_from_options as w;"
        "e.estimate_workload(w(model='gpt2'), 'H100', calibration=None);"
        "print(sorted(m for m in ('torch','typer','rich','requests','httpx','click') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_encoder_vit_and_cnn_inference_is_one_forward_pass() -> None:
    bert = estimate_workload(
        workload_from_options(model="bert-large", task="inference", prompt_len=128, micro_batch=32),
        "T4",
        calibration=None,
    )
    assert bert.inference is not None and bert.inference.decode_tokens_per_second == 0.0
    assert bert.memory.breakdown["kv_cache"] == 0.0
    assert bert.tokens_per_second == pytest.approx(bert.samples_per_second * 128)
    vit = estimate_workload(
        workload_from_options(model="vit-b-16", task="inference", micro_batch=8, requests="1M"),
        "L4",
        calibration=None,
    )
    assert (
        vit.workload.effective_seq_len == 197
    )  # 14 x 14 patches + [CLS], whatever --prompt-len says
    assert vit.wall_hours == pytest.approx(1e6 / vit.samples_per_second / 3600)


def test_cnn_mfu_comes_from_published_resnet_runs() -> None:
    from gpuwise.estimate.throughput import cnn_mfu

    mfu, rows = cnn_mfu()
    assert rows == 5 and 0.15 < mfu < 0.3  # DeepLearningExamples ResNet-50: 15-24% of the fp16 peak
    est = estimate_workload(
        workload_from_options(
            model="resnet-50", task="inference", precision="fp16", micro_batch=256
        ),
        "V100",
        calibration=None,
    )
    # V100 AMP inference, batch 256: 3,382 images/s published
    assert est.samples_per_second == pytest.approx(3382, rel=0.1)
    train = estimate_workload(
        workload_from_options(
            model="resnet-50", task="finetune", precision="fp16", micro_batch=256, samples="1.28M"
        ),
        "V100",
        calibration=None,
    )
    # activations measured on the CPU (82.1 MiB/sample fp32) halve in 16 bit: 256 x 41 MiB
    assert train.memory.breakdown["activations"] == pytest.approx(256 * 82.1 / 2 / 1024)


def test_bf16_on_a_gpu_without_bf16_is_estimated_in_fp16() -> None:
    est = estimate_workload(
        workload_from_options(model="gpt2", task="finetune"), "V100", calibration=None
    )
    assert est.workload.precision == "fp16" and est.peak_tflops == 125  # V100 fp16 tensor peak
    assert any("no bf16" in n for n in est.notes)


def test_fp32_that_does_not_fit_is_offered_mixed_precision() -> None:
    wl = workload_from_options(
        model="gpt2-xl", task="finetune", precision="fp32", micro_batch=4, seq_len=1024
    )
    est = estimate_workload(wl, "A10", calibration=None)
    assert not est.memory.fits
    # no single change fits 24 GiB: the combination starts with mixed precision (it is faster)
    combo = [s for s in est.suggestions if " + " in s.fix]
    assert (
        combo
        and combo[0].fix.startswith("mixed precision")
        and combo[0].changes["precision"] == "bf16"
    )
    assert any("--gpu" in s.fix for s in est.suggestions)  # and a bigger GPU


def test_calibrated_bandwidth_slows_decode_by_its_efficiency(tmp_path: Path) -> None:
    wl = workload_from_options(model="llama-2-7b", task="inference", prompt_len=128, output_len=128)
    path = tmp_path / "cal.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "gpus": {
                    "A100-80GB": {
                        "memory_bandwidth_efficiency": 0.8,
                        "matmul_efficiency": {"bf16": 0.7},
                    }
                },
            }
        )
    )
    plain = estimate_workload(wl, "A100-80GB", calibration=None)
    cal = estimate_workload(wl, "A100-80GB", calibration=load_calibration(path))
    assert plain.inference is not None and cal.inference is not None
    overhead = default_efficiency().layer_overhead_s * 32 * 1000  # not a bandwidth term
    assert cal.inference.latency_per_output_token_ms - overhead == pytest.approx(
        (plain.inference.latency_per_output_token_ms - overhead) * DEFAULT_BANDWIDTH_FRACTION / 0.8
    )
    assert "calibrated" in cal.inference.bandwidth_basis
    # prefill uses the measured matmul efficiency (0.7) instead of the A100's MAMF fraction (0.869)
    assert cal.mfu_compute / plain.mfu_compute == pytest.approx(0.7 / 0.869)
    # a long prompt is compute-bound: the first-token time scales with the matmul efficiency
    long = wl.with_changes(prompt_len=2048)
    p2 = estimate_workload(long, "A100-80GB", calibration=None).inference
    c2 = estimate_workload(long, "A100-80GB", calibration=load_calibration(path)).inference
    assert p2 is not None and c2 is not None
    assert c2.time_to_first_token_s - overhead / 1000 == pytest.approx(
        (p2.time_to_first_token_s - overhead / 1000) * plain.mfu_compute / cal.mfu_compute
    )


@pytest.mark.parametrize(
    ("global_batch", "micro_batch", "gpus", "used"),
    [
        (
            3,
            2,
            1,
            4,
        ),  # 1.5 micro-batches per step is impossible: rounded up to 2 (was estimated as 1.5 steps)
        (8, 1, 32, 32),  # fewer sequences than GPUs: every rank runs at least one micro-batch
        (10, 1, 8, 16),  # 8 GPUs × 1.25 accumulation steps → 2 steps
        (64, 2, 8, 64),  # already a multiple: unchanged, no note
    ],
)
def test_global_batch_is_whole_micro_batches_per_rank(
    global_batch: int, micro_batch: int, gpus: int, used: int
) -> None:
    wl = workload_from_options(
        model="llama-2-7b",
        task="pretrain",
        tokens="1e10",
        seq_len=512,
        micro_batch=micro_batch,
        global_batch=global_batch,
    )
    est = estimate_workload(wl, "H100", gpus, calibration=None, suggest=False)
    assert est.workload.global_batch == used
    noted = [n for n in est.notes if "--global-batch" in n]
    assert bool(noted) == (used != global_batch)


def test_published_runs_are_estimated_with_their_published_stack() -> None:
    """The ``options`` column reaches the estimate: BLOOM's TP4 PP12 with full recompute is slower
    per step than the FSDP defaults on the same 384 GPUs (more recompute, a pipeline bubble)."""
    from dataclasses import replace

    from gpuwise.estimate.measured import run_gpu_hours

    eff = default_efficiency()
    bloom = next(r for r in load_published_runs() if r.name == "bloom-176b")
    assert dict(bloom.options)["tensor_parallel"] == "4"
    assert dict(bloom.options)["grad_ckpt"] == "full"
    stated, _ = run_gpu_hours(bloom, eff)
    defaults, _ = run_gpu_hours(replace(bloom, options=()), eff)
    assert stated > defaults * 1.1


def test_the_whole_run_efficiency_is_fitted_only_on_runs_with_a_published_stack() -> None:
    from dataclasses import replace

    from gpuwise.estimate.measured import fit_run_efficiency

    eff = default_efficiency()
    runs = load_published_runs()
    stated = [r for r in runs if r.options]
    assert stated and len(stated) < len(runs)  # the Llama 2 runs publish no stack
    # a run without a stack, however far off, does not move the fit
    wild = replace(next(r for r in runs if not r.options), gpu_hours=1e12)
    assert fit_run_efficiency([*stated, wild], eff) == pytest.approx(
        fit_run_efficiency(stated, eff)
    )
    # a run with one does
    assert fit_run_efficiency([*stated, replace(stated[0], gpu_hours=1e12)], eff) < (
        fit_run_efficiency(stated, eff)
    )


def test_published_run_options_must_be_flag_value_pairs() -> None:
    from gpuwise.estimate.throughput import _flags

    assert _flags("--tensor-parallel 4 --grad-ckpt full") == (
        ("tensor_parallel", "4"),
        ("grad_ckpt", "full"),
    )
    assert _flags("") == ()
    with pytest.raises(ValueError, match="pairs"):
        _flags("--zero")
    with pytest.raises(ValueError, match="pairs"):
        _flags("zero 1")
