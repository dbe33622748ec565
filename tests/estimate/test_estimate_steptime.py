"""Step time from named parts, the measured validation set, goodput and error bars."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from gpuwise.errors import InputError
from gpuwise.estimate import estimate_workload
from gpuwise.estimate.efficiency import UNIT_EFFICIENCY
from gpuwise.estimate.measured import (
    default_efficiency,
    fit_efficiency,
    load_measured_runs,
    residual_intervals,
)
from gpuwise.estimate.model import get_preset
from gpuwise.estimate.steptime import (
    DEFAULT_BANDWIDTH_FRACTION,
    FLASH1_SLOWDOWN,
    FP8_CAST_BYTES,
    QLORA_DEQUANT_FACTOR,
    achievable_matmul,
    goodput,
)
from gpuwise.estimate.workload import Workload, workload_from_options
from gpuwise.hardware import find_gpu


def _est(wl: Workload, gpu: str = "H100", gpus: int = 8, **kw: Any) -> Any:
    return estimate_workload(wl, gpu, gpus, calibration=None, suggest=False, **kw)


def test_validation_set_is_data_from_enough_independent_sources() -> None:
    runs = load_measured_runs()
    assert len(runs) >= 60
    assert len({r.source_id for r in runs}) >= 5
    gpus = {r.gpu for r in runs}
    assert len(gpus) >= 5 and gpus & {"T4", "L4", "A10", "A10G"}
    for r in runs:
        assert r.source and r.value > 0 and r.unit in ("tok", "img") and r.gpus >= 1
        find_gpu(r.gpu)  # every GPU resolves


def test_the_issues_fsdp_configurations_on_80gb_gpus_fit() -> None:
    """llm-foundry: FSDP full shard, no recompute, micro-batch 2-24 on 80 GB GPUs ran; gpuwise must agree."""
    rows = [
        r
        for r in load_measured_runs()
        if r.source_id == "foundry"
        and r.workload.grad_ckpt == "none"
        and r.workload.micro_batch >= 2
        and find_gpu(r.gpu).memory_gib == 80
    ]
    assert len(rows) >= 8
    for r in rows:
        est = _est(r.workload, r.gpu, r.gpus)
        assert est.memory.fits, (r.label, est.memory.per_gpu_gib)


def test_torchtitan_selective_ac_configurations_that_ran_fit() -> None:
    """torchtitan docs/performance.md: Llama 2 13B (selective layer / op AC, local batch 2) and
    Llama 2 70B (selective op AC, local batch 1) ran on 64 A100-80GB with FSDP2; 70B with selective
    op AC at local batch 2 went OOM."""
    rows = [
        r
        for r in load_measured_runs()
        if r.workload.grad_ckpt in ("selective-op", "selective-layer")
    ]
    assert len(rows) >= 5
    for r in rows:
        est = _est(r.workload, r.gpu, r.gpus)
        assert est.memory.fits, (r.label, est.memory.per_gpu_gib)
    oom = next(r for r in rows if "llama-2-70b" in r.label).workload.with_changes(micro_batch=2)
    assert _est(oom, "A100-80GB", 64).memory.verdict == "does not fit"


def test_no_measured_configuration_is_called_does_not_fit() -> None:
    """Every row ran; the one whose named terms fit only without the assumed fragmentation
    allowance is "tight" (strict ``fits`` stays False so the planner avoids it), never "does not fit"."""
    verdicts = {}
    for r in load_measured_runs():
        verdicts[(r.source_id, r.gpu, r.gpus, r.label)] = _est(r.workload, r.gpu, r.gpus).memory
    assert all(m.verdict != "does not fit" for m in verdicts.values())
    tight = [k for k, m in verdicts.items() if m.verdict == "tight"]
    # torchtitan's 13B at micro-batch 2 (stated: no recompute), and NeMo's 70B SFT, whose unstated
    # recompute is taken as the least that fits or is tight (--grad-ckpt auto)
    assert ("torchtitan", "A100-80GB", 64, "llama-2-13b pretrain s4096 mb2 bf16 none") in tight
    assert len(tight) <= 3  # + Megatron-Bridge's FSDP Llama 3 70B at micro-batch 2 on GB200
    for key in tight:
        mem = verdicts[key]
        assert not mem.fits
        frag = mem.breakdown["allocator_overhead"]
        assert mem.per_gpu_gib - frag <= mem.capacity_gib < mem.per_gpu_gib


def test_unstated_recompute_is_the_least_that_fits() -> None:
    """NeMo does not say which recompute its rows used: ``--grad-ckpt auto``, the least of
    the recompute modes that fits or is tight (the configuration ran). Llama 2 70B SFT on 16 H100
    (TP4 PP4, no data parallelism left to shard the optimizer) needs recompute; the 7B rows none."""
    from gpuwise.estimate.workload import AUTO_RECOMPUTE as RECOMPUTE_SEARCH

    nemo = {r.label: r for r in load_measured_runs() if r.source_id == "nemo"}
    sft70 = nemo["llama-2-70b sft s4096 mb1 fp8 unstated"]
    assert sft70.workload.grad_ckpt == "auto"
    est = _est(sft70.workload, sft70.gpu, sft70.gpus)
    chosen = est.workload.grad_ckpt
    assert chosen != "none" and est.memory.verdict != "does not fit"
    for lesser in RECOMPUTE_SEARCH[: RECOMPUTE_SEARCH.index(chosen)]:
        verdict = _est(sft70.workload.with_changes(grad_ckpt=lesser), sft70.gpu, sft70.gpus)
        assert verdict.memory.verdict == "does not fit"
    seven = nemo["llama-2-7b pretrain s4096 mb1 fp8 unstated"]
    assert _est(seven.workload, seven.gpu, seven.gpus).workload.grad_ckpt == "none"


def test_flash_attention_1_era_kernels_take_twice_the_attention_time() -> None:
    wl = Workload(model=get_preset("llama-2-7b"), seq_len=16384, zero=3)
    fa2 = _est(wl).step_parts
    fa1 = _est(wl.with_changes(flash_attention_version=1)).step_parts
    assert fa2 is not None and fa1 is not None
    assert fa1["attention_s"] == pytest.approx(FLASH1_SLOWDOWN * fa2["attention_s"])
    assert fa1["matmul_s"] == pytest.approx(fa2["matmul_s"])
    for bad in (4, True, 2.0):
        with pytest.raises(InputError, match="flash_attention_version"):
            wl.with_changes(flash_attention_version=bad)


def test_measured_rows_say_which_attention_kernel_ran() -> None:
    """llm-foundry's sweep ran `attn_impl: triton` (FlashAttention-1's Triton port) on torch 1.13;
    torchtitan, NeMo, TinyLlama and fms-fsdp ran FlashAttention-2-class kernels."""
    runs = load_measured_runs()
    assert {r.workload.flash_attention_version for r in runs if r.source_id == "foundry"} == {1}
    for src in ("torchtitan", "nemo", "tinyllama", "fms"):
        assert {r.workload.flash_attention_version for r in runs if r.source_id == src} == {2}


def test_fp8_speeds_up_only_the_matmuls_it_covers() -> None:
    bf16 = workload_from_options(model="llama-2-7b", seq_len=4096, zero=3, tokens="1e9")
    fp8 = bf16.with_changes(precision="fp8")
    a, b = _est(bf16), _est(fp8)
    speedup = b.tokens_per_second / a.tokens_per_second
    assert 1.1 < speedup < 1979 / 989.5  # faster, but never the 2x of the datasheet
    assert b.step_parts["matmul_s"] < a.step_parts["matmul_s"]
    assert b.step_parts["attention_s"] == pytest.approx(a.step_parts["attention_s"])
    assert b.step_parts["memory_bound_s"] == pytest.approx(a.step_parts["memory_bound_s"])


def test_linear_io_per_token_counts_each_projection_of_a_llama_block() -> None:
    """Llama 3 8B (hidden 4096, 8 KV heads of 128, MLP 14336, gated, 32 layers): per layer, inputs
    q, k, v, o = 3·4096 + 4096 and gate, up, down = 2·4096 + 14336; output gradients
    4096 + 2·1024 + 4096 and 2·14336 + 4096."""
    from gpuwise.estimate.parts import _linear_io_per_token

    inputs, outputs = _linear_io_per_token(get_preset("llama-3-8b"))
    assert inputs == 32 * (4 * 4096 + 2 * 4096 + 14336)
    assert outputs == 32 * (2 * 4096 + 2 * 1024 + 2 * 14336 + 4096)


def _fp8_torchtitan_8b() -> Workload:
    """Llama 3 8B in fp8 on torchtitan: 8 GPUs, one 8192-token micro-batch each, no recompute."""
    return workload_from_options(
        model="llama-3-8b",
        seq_len=8192,
        zero=3,
        global_batch=8,
        tokens="1e9",
        precision="fp8",
        stack="torchtitan",
    )


def test_torch_float8_pays_its_casts_and_transformer_engine_does_not() -> None:
    """torchao's float8 casts every linear's input, weight and gradient in kernels of its own
    (FP8_CAST_BYTES): torchtitan's fp8 is slower than Transformer Engine's on the same workload,
    rowwise slower than tensorwise; bf16 casts nothing."""
    base = _fp8_torchtitan_8b()
    assert base.float8_recipe == "tensorwise"  # torchtitan's recipe
    te, tw, rw = (_est(base.with_changes(fp8_recipe=r)) for r in ("te", "tensorwise", "rowwise"))
    assert te.step_parts["fp8_cast_s"] == 0.0
    assert 0 < tw.step_parts["fp8_cast_s"] < rw.step_parts["fp8_cast_s"]
    assert te.tokens_per_second > tw.tokens_per_second > rw.tokens_per_second
    assert _est(base.with_changes(precision="bf16")).step_parts["fp8_cast_s"] == 0.0
    assert any("fp8 recipe tensorwise" in n for n in tw.notes)
    assert tw.to_dict()["workload"]["fp8_recipe"] == "tensorwise"
    assert te.to_dict()["workload"]["fp8_recipe"] == "te"


@pytest.mark.parametrize(
    ("changes", "tokens_per_gpu", "weight_casts", "recast"),
    [
        ({}, 8192, 1.0, 0.0),  # 8 GPUs x 1 micro-batch of 8192 tokens
        ({"global_batch": 16}, 16384, 2.0, 0.0),  # 2 micro-batches: the weights cast twice
        ({"grad_ckpt": "full"}, 8192, 1.0, 1.0),  # the recomputed forward casts again
        ({"grad_ckpt": "selective-layer"}, 8192, 1.0, 0.5),  # every second block again
        # TP 2: each GPU's linears are half as wide and see the tokens of 2 GPUs; 2 micro-batches of
        # half the weights each
        ({"tensor_parallel": 2}, 8192, 1.0, 0.0),
    ],
)
def test_the_cast_count_follows_micro_batches_recompute_and_tensor_parallelism(
    changes: dict[str, Any], tokens_per_gpu: int, weight_casts: float, recast: float
) -> None:
    """The count: 4 bytes per element of every linear's input and output gradient, 8 per weight
    element per micro-batch, and what a recomputed forward casts again, at the time the step model
    gives memory traffic."""
    wl = _fp8_torchtitan_8b().with_changes(**changes)
    act, weight, weight_forward = FP8_CAST_BYTES["tensorwise"]
    inputs, outputs = 32 * (6 * 4096 + 14336), 32 * (3 * 4096 + 2 * 1024 + 2 * 14336)
    params = get_preset("llama-3-8b").linear_params
    expected = (
        act * (inputs + outputs) * tokens_per_gpu
        + weight * params * weight_casts
        + recast * (act * inputs * tokens_per_gpu + weight_forward * params)
    )
    bw = find_gpu("H100").memory_bandwidth_tb_s * 1e12 * DEFAULT_BANDWIDTH_FRACTION
    assert _est(wl).step_parts["fp8_cast_s"] == pytest.approx(expected / bw, rel=1e-9)


def test_fp8_on_a_stack_without_a_known_recipe_says_what_it_assumed() -> None:
    wl = workload_from_options(model="llama-3-8b", zero=3, tokens="1e9", precision="fp8")
    assert wl.stack == "unknown" and wl.float8_recipe == "te"
    notes = _est(wl).notes
    assert any("--fp8-recipe tensorwise" in n for n in notes)
    nemo = _est(wl.with_changes(stack="megatron")).notes
    assert any("fp8 recipe te" in n for n in nemo)
    assert not any("--fp8-recipe tensorwise" in n for n in nemo)


def test_validation_rows_run_the_fp8_recipe_their_source_states() -> None:
    """The outside check estimates each float8 row with the recipe its source names (torchao's
    tensorwise and rowwise tables, OLMo-core's torchao linears); rows that state none get the stack's."""
    runs = [
        r for r in load_measured_runs("validation_throughput.csv") if r.workload.precision == "fp8"
    ]
    by_recipe = {r.workload.float8_recipe for r in runs if "rowwise" in r.source}
    assert by_recipe == {"rowwise"}
    olmo = [r for r in runs if r.source_id == "olmo-core"]
    assert olmo and all(r.workload.float8_recipe == "tensorwise" for r in olmo)
    jax = [r for r in runs if r.source_id in ("paxml", "maxtext")]
    assert jax and all(r.workload.fp8_recipe == "auto" for r in jax)
    fitted = [r for r in load_measured_runs() if r.workload.precision == "fp8"]
    assert fitted and all(r.workload.float8_recipe == "te" for r in fitted)


def test_an_fp8_recipe_without_fp8_is_said_to_be_ignored() -> None:
    wl = workload_from_options(model="llama-3-8b", zero=3, tokens="1e9", fp8_recipe="rowwise")
    est = _est(wl)
    assert any("--fp8-recipe rowwise applies to fp8 training only" in n for n in est.notes)
    assert est.step_parts["fp8_cast_s"] == 0.0
    assert not any("applies to fp8" in n for n in _est(wl.with_changes(fp8_recipe="auto")).notes)
    serve = wl.with_changes(task="inference", precision="fp8")
    assert any("ignored for inference" in n for n in _est(serve).notes)
    cnn = workload_from_options(model="resnet-50", precision="fp8", fp8_recipe="tensorwise")
    notes = _est(cnn).notes
    assert any("transformer blocks only" in n for n in notes)
    assert not any("fp8 recipe tensorwise" in n for n in notes)


def test_unknown_fp8_recipe_is_refused_with_the_choices() -> None:
    with pytest.raises(InputError, match="tensorwise"):
        workload_from_options(model="llama-3-8b", precision="fp8", fp8_recipe="blockwise")


def test_selective_recompute_with_flash_attention_says_it_saves_nothing() -> None:
    """Megatron's selective recompute drops the attention scores FlashAttention never stores: same
    memory as no recompute, more time, and the estimate says so."""
    none = workload_from_options(model="llama-2-7b", seq_len=4096, zero=3, tokens="1e9")
    sel = none.with_changes(grad_ckpt="selective")
    a, b = _est(none, "A100-80GB"), _est(sel, "A100-80GB")
    assert b.memory.per_gpu_gib == pytest.approx(a.memory.per_gpu_gib)
    assert b.step_time_s > a.step_time_s
    assert any("saves no memory" in n for n in b.notes)
    assert not any("saves no memory" in n for n in a.notes)
    eager = _est(sel.with_changes(flash_attention=False), "A100-80GB")
    assert not any("saves no memory" in n for n in eager.notes)


def test_qlora_pays_its_dequantisation() -> None:
    lora = workload_from_options(
        model="llama-2-7b", task="lora", seq_len=2048, grad_ckpt="full", samples="1000"
    )
    qlora = lora.with_changes(task="qlora")
    a, b = _est(lora, "A100-80GB", 1), _est(qlora, "A100-80GB", 1)
    ratio = b.step_time_s / a.step_time_s
    # LitGPT's measured QLoRA/LoRA step ratios span 1.09 (phi-1.5) to 2.00 (Llama 2 13B)
    assert 1.05 < ratio < QLORA_DEQUANT_FACTOR * 1.4
    assert any("dequantised" in n for n in b.notes)


def test_qlora_overhead_shrinks_as_sequences_grow() -> None:
    """Dequantisation is paid per pass over the weights, not per token: QLoRA's extra time over
    LoRA falls from short to long sequences (it was a constant ×1.52 before)."""

    def ratio(seq: int) -> float:
        lora = workload_from_options(
            model="llama-2-7b", task="lora", seq_len=seq, grad_ckpt="full", samples="100"
        )
        a = _est(lora, "A100-80GB", 1)
        b = _est(lora.with_changes(task="qlora"), "A100-80GB", 1)
        return b.step_time_s / a.step_time_s

    short, mid, long = ratio(1024), ratio(4096), ratio(16384)
    assert short > mid > long > 1.0
    assert short - 1 > 3 * (long - 1)


def test_fp32_means_tf32_for_convolutions_and_says_so_for_matmuls() -> None:
    cnn = workload_from_options(model="resnet-50", precision="fp32", micro_batch=64, samples="1e6")
    est = _est(cnn, "A100-80GB", 1)
    assert est.peak_tflops == pytest.approx(156.0)  # TF32 peak, not the 19.5 FP32 one
    assert any("TF32" in n for n in est.notes)
    llm = workload_from_options(model="gpt2", precision="fp32", seq_len=1024, tokens="1e8")
    est = _est(llm, "A100-80GB", 1)
    assert est.peak_tflops == pytest.approx(19.5)
    assert any("set_float32_matmul_precision" in n for n in est.notes)
    # Turing has no TF32: fp32 stays fp32 and nothing is claimed
    t4 = _est(cnn, "T4", 1)
    assert t4.peak_tflops == pytest.approx(8.1) and not any("TF32" in n for n in t4.notes)


def test_achievable_matmul_fraction_is_sourced_or_says_it_is_not_measured() -> None:
    h100 = achievable_matmul(find_gpu("H100"), "bf16")
    assert h100.measured and h100.fraction == pytest.approx(0.803) and "MAMF" in h100.basis
    l4 = achievable_matmul(find_gpu("L4"), "bf16")
    assert not l4.measured and "no measured matmul rate" in l4.basis


def test_recompute_costs_time() -> None:
    base = workload_from_options(model="llama-2-7b", seq_len=4096, zero=3, tokens="1e9")
    none_, sel, full = (_est(base.with_changes(grad_ckpt=g)) for g in ("none", "selective", "full"))
    assert none_.step_time_s < sel.step_time_s < full.step_time_s
    op, layer = (_est(base.with_changes(grad_ckpt=g)) for g in ("selective-op", "selective-layer"))
    assert none_.step_time_s < op.step_time_s < full.step_time_s
    assert none_.step_time_s < layer.step_time_s < full.step_time_s
    assert full.step_time_s / none_.step_time_s < 4 / 3 + 0.05  # at most one more forward pass


def test_goodput_falls_with_gpus_and_short_jobs_pay_their_start_up() -> None:
    assert goodput(16384, 24 * 54) < goodput(1024, 24 * 54) < goodput(8, 24 * 54) < 1.0
    assert goodput(8, 0.5) < goodput(8, 100.0)  # start-up dominates a short job
    # Llama 3: 16,384 GPUs, ~90% effective training time (the figure the model is built from)
    assert goodput(16384, 24 * 54) == pytest.approx(0.9, abs=0.01)


def test_wall_hours_are_steps_times_step_time_over_goodput() -> None:
    wl = workload_from_options(model="llama-2-7b", seq_len=4096, zero=3, tokens="2e9")
    est = _est(wl)
    tokens_per_step = est.tokens_per_second * est.step_time_s
    steps = wl.total_tokens / tokens_per_step
    assert est.wall_hours == pytest.approx(steps * est.step_time_s / est.goodput / 3600)
    assert 0 < est.goodput < 1


def test_error_bars_come_from_the_cross_validated_residuals() -> None:
    q = residual_intervals()
    assert {"throughput", "throughput-thin-gpu", "pretraining-run"} <= set(q)
    lo, hi = q.get("throughput:Hopper", q["throughput"])  # H100 has >= 5 measured rows
    assert hi >= q["throughput"][1]  # a generation's range is never narrower than the pooled one
    assert q["throughput-thin-gpu"][1] > q["throughput"][1]  # thin data: wider
    assert lo < 1 < hi and math.log(lo) == pytest.approx(-math.log(hi))  # symmetric in log space
    wl = workload_from_options(model="llama-2-7b", seq_len=4096, zero=3, tokens="2e9")
    est = _est(wl)
    assert est.wall_hours_p10 == pytest.approx(est.wall_hours * lo)
    assert est.wall_hours_p90 == pytest.approx(est.wall_hours * hi)
    none = _est(wl, efficiency=UNIT_EFFICIENCY)
    assert none.wall_hours_p10 is None and none.wall_hours_p90 is None
    thin = _est(wl, "B200")  # no measured B200 row: the wider range
    assert thin.wall_hours_p90 == pytest.approx(thin.wall_hours * q["throughput-thin-gpu"][1])


def test_a_class_whose_rows_stray_gets_its_own_wider_range() -> None:
    """MoE's six fitted rows, each left out, miss by far more than the pooled range: an MoE estimate
    gets that wider range (and a dense one does not); a wider GPU or stack rule still wins."""
    from gpuwise.estimate.efficiency import EfficiencyModel

    q = residual_intervals()
    moe_lo, moe_hi = q["class:transformer-moe-train"]
    assert moe_hi > q["throughput"][1] and moe_lo * moe_hi == pytest.approx(1.0)
    assert "class:transformer-train" not in q  # the dense class keeps the pooled range
    wl = workload_from_options(
        model="qwen3-30b-a3b",
        seq_len=4096,
        zero=3,
        grad_ckpt="full",
        expert_parallel=8,
        tokens="1e9",
    )
    est = _est(wl)
    assert est.wall_hours_p90 == pytest.approx(est.wall_hours * moe_hi)
    toy = EfficiencyModel(
        rows=1,
        intervals={
            "throughput": (0.8, 1.25),
            "throughput-thin-gpu": (0.25, 4.0),
            "class:transformer-moe-train": (0.5, 2.0),
        },
        gpu_rows={"H100": 50},
    )
    assert toy.interval("transformer-moe-train", "H100") == (0.5, 2.0)
    assert toy.interval("transformer-train", "H100") == (0.8, 1.25)
    assert toy.interval("transformer-moe-train", "B200") == (0.25, 4.0)  # thin GPU: wider still


def test_framework_factor_is_fitted_only_to_the_rows_it_is_given() -> None:
    runs = list(load_measured_runs())
    full = fit_efficiency(runs)
    without = fit_efficiency([r for r in runs if r.source_id != "nemo"])
    f_full, _ = full.factor("H100", "transformer-train")
    f_wo, basis = without.factor("H100", "transformer-train")
    assert f_full != f_wo and "central" in basis
    # a measured stack gets its own factor; left out of the fit, it gets the central one
    f_mega, mega_basis = full.factor("H100", "transformer-train", "megatron")
    assert "fitted to" in mega_basis and "megatron" in mega_basis and f_mega != f_full
    f_gone, gone_basis = without.factor("H100", "transformer-train", "megatron")
    assert f_gone == f_wo and "no measured row from this stack" in gone_basis
    assert without.rows < full.rows
    # the shipped model: fitted to all rows, with the error bars and the whole-run efficiency
    shipped = default_efficiency()
    assert shipped.rows == full.rows and shipped.intervals and 0.3 < shipped.run_efficiency <= 1.0
    assert replace(shipped, run_efficiency=1.0).factor("H100", "transformer-train") == full.factor(
        "H100", "transformer-train"
    )


def test_fused_kernels_drop_the_fp32_copies() -> None:
    from gpuwise.estimate.memory import activation_bytes, logits_bytes

    wl = workload_from_options(model="llama-2-7b", seq_len=4096, micro_batch=2)
    fused = replace(wl, fused_kernels=True)
    s, b, v = 4096, 2, 32000
    assert logits_bytes(wl) == s * b * v * (4 + 4 + 4)
    assert logits_bytes(fused) == s * b * v * 2
    # each of the 2 RMSNorms per layer keeps its 16-bit input only (no fp32 copy): 4·h bytes less
    # per norm; the fused SwiGLU keeps gate+up and its output, not act(gate): 2·ffn bytes less
    h, ffn = 4096, 11008
    assert activation_bytes(wl) - activation_bytes(fused) == pytest.approx(
        32 * (2 * 4 * h + 2 * ffn) * s * b
    )


def test_sequence_parallel_splits_the_whole_block() -> None:
    from gpuwise.estimate.memory import layer_activation_bytes
    from gpuwise.estimate.model import get_preset

    m = get_preset("llama-2-70b")
    whole = layer_activation_bytes(m, 4096, 1, tp=1)
    tp_only = layer_activation_bytes(m, 4096, 1, tp=4)
    tp_sp = layer_activation_bytes(m, 4096, 1, tp=4, sequence_parallel=True)
    assert tp_sp == pytest.approx(whole / 4) and tp_sp < tp_only < whole


def test_json_keeps_its_fields_and_adds_the_new_ones(cli: Any) -> None:
    r = cli(
        "estimate",
        "--model",
        "llama-2-7b",
        "--gpu",
        "H100",
        "--gpus",
        "8",
        "--tokens",
        "1e9",
        "--no-calibration",
        "--json",
    )
    assert r.code == 0, r.stderr
    doc = r.json()
    for key in (
        "memory",
        "flops_total",
        "mfu",
        "mfu_compute",
        "mfu_basis",
        "scaling_efficiency",
        "comm_time_s",
        "samples_per_second",
        "gpu_hours",
        "suggestions",
        "notes",
        "step_time_s",
        "tokens_per_second",
        "goodput",
        "wall_hours",
        "wall_hours_p10",
        "wall_hours_p90",
        "step_parts",
    ):
        assert key in doc, key
    # 7B, plain data parallelism: 16 bytes of model state per parameter alone exceed 80 GB, so
    # no hours as if it ran (issue 32)
    assert doc["memory"]["verdict"] == "does not fit" and doc["memory"]["fits"] is False
    assert doc["wall_hours"] is None and doc["gpu_hours"] is None
    assert doc["wall_hours_p10"] is None and doc["wall_hours_p90"] is None
    assert doc["suggestions"]
    assert doc["workload"]["flash_attention_version"] == 2
    assert doc["workload"]["stack"] == "unknown" and doc["workload"]["fp8_recipe"] is None
    assert set(doc["step_parts"]) >= {
        "matmul_s",
        "attention_s",
        "memory_bound_s",
        "framework_factor",
    }


def test_published_runs_always_pay_the_whole_run_efficiency() -> None:
    """A published pretraining run is a whole run however small the step-time estimate makes it:
    its prediction must not jump by 1 / run_efficiency when a refit moves it across the threshold."""
    from gpuwise.estimate.measured import run_gpu_hours
    from gpuwise.estimate.throughput import load_published_runs

    eff = replace(default_efficiency(), run_efficiency=0.5)
    run = next(r for r in load_published_runs() if r.name.startswith("pythia"))
    tiny = replace(run, tokens=run.tokens / 100)  # far below a whole run, above start-up
    _, full_goodput = run_gpu_hours(run, eff)
    _, tiny_goodput = run_gpu_hours(tiny, eff)
    assert full_goodput < 0.5 and tiny_goodput < 0.5
    plain = _est(
        Workload(
            model=tiny.model, task="pretrain", tokens=tiny.tokens, seq_len=tiny.seq_len, zero=3
        ),
        tiny.gpu,
        tiny.gpus or 8,
        efficiency=eff,
    )
    assert plain.goodput > 0.5  # a user's small job is not a whole published run


def test_unstated_recompute_falls_back_to_the_least_memory_when_nothing_fits() -> None:
    wl = Workload(model=get_preset("llama-2-70b"), seq_len=4096, zero=0, grad_ckpt="auto")
    est = _est(wl, "T4", 1)
    assert est.workload.grad_ckpt == "full"
    assert est.memory.verdict == "does not fit"
