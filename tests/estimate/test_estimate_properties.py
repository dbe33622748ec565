"""Properties that must hold for any workload: finite figures, monotone memory, consistent time."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwise.errors import EstimateError
from gpuwise.estimate import Estimate, estimate_workload, workload_from_options
from gpuwise.hardware import find_gpu

_MODELS = [
    "gpt2",
    "bert-base",
    "t5-3b",
    "llama-2-7b",
    "llama-3.1-8b",
    "mixtral-8x7b",
    "qwen2.5-7b",
    "vit-b-16",
    "resnet-50",
]
_GPUS = ["A100-80GB", "H100", "L4", "L40S", "T4", "MI300X", "A100-80GB-PCIE"]
_NOT_TRANSFORMERS = {"resnet-50"}  # a CNN: no attention layers for LoRA adapters


def _expected_refusal(model: str, task: str, precision: str, gpu: str) -> str | None:
    """The message an estimate must refuse with, or None when it must succeed."""
    if task in ("lora", "qlora") and model in _NOT_TRANSFORMERS:
        return "needs a transformer"
    if task == "qlora" and precision in ("fp32", "fp8"):
        return "QLoRA computes in 16 bit"
    if precision == "fp8" and find_gpu(gpu).peak_fp8_tflops is None:  # Ampere, Turing
        return "no FP8 tensor cores"
    return None


def _estimate(
    model: str, task: str, precision: str, zero: int, ckpt: str, mb: int, gpu: str, gpus: int
) -> Estimate:
    wl = workload_from_options(
        model=model,
        task=task,
        precision=precision,
        zero=zero,
        grad_ckpt=ckpt,
        micro_batch=mb,
        seq_len=128 if model in ("gpt2", "bert-base", "t5-3b") else None,
        tokens="1e9" if task != "inference" else None,
        requests="1000",
    )
    return estimate_workload(wl, gpu, gpus, calibration=None)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=st.sampled_from(_MODELS),
    task=st.sampled_from(["pretrain", "finetune", "lora", "qlora", "inference"]),
    precision=st.sampled_from(["fp32", "bf16", "fp8"]),
    zero=st.integers(0, 3),
    ckpt=st.sampled_from(["none", "selective", "full", "selective-op", "selective-layer"]),
    mb=st.sampled_from([1, 2, 8]),
    gpu=st.sampled_from(_GPUS),
    gpus=st.sampled_from([1, 2, 8, 16]),
)
@pytest.mark.slow
def test_any_estimate_is_finite_and_consistent(
    model: str, task: str, precision: str, zero: int, ckpt: str, mb: int, gpu: str, gpus: int
) -> None:
    refusal = _expected_refusal(model, task, precision, gpu)
    if (
        refusal is not None
    ):  # the only combinations allowed to fail, each with its message and a fix
        with pytest.raises(EstimateError, match=refusal) as info:
            est = _estimate(model, task, precision, zero, ckpt, mb, gpu, gpus)
        assert info.value.hint
        return
    est = _estimate(
        model, task, precision, zero, ckpt, mb, gpu, gpus
    )  # everything else must estimate
    mem = est.memory
    assert math.isfinite(mem.per_gpu_gib) and mem.per_gpu_gib > 0
    assert all(math.isfinite(v) and v >= 0 for v in mem.breakdown.values())
    assert abs(sum(mem.breakdown.values()) - mem.per_gpu_gib) < 1e-6 * mem.per_gpu_gib
    assert mem.fits == (mem.per_gpu_gib <= mem.capacity_gib)
    assert 0 < est.mfu <= 1.0 and 0 < est.scaling_efficiency <= 1.0 + 1e-9
    assert est.tokens_per_second > 0 and math.isfinite(est.tokens_per_second)
    if est.wall_hours is not None:
        assert est.wall_hours > 0 and est.gpu_hours == est.wall_hours * gpus
    for s in est.suggestions:
        assert s.fits and s.per_gpu_gib <= max(mem.capacity_gib, 1e9) and s.slowdown > 0


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from(["gpt2", "llama-2-7b", "mistral-7b"]),
    task=st.sampled_from(["pretrain", "lora"]),
    mb=st.integers(1, 16),
    ckpt=st.sampled_from(["none", "full"]),
)
def test_memory_grows_with_micro_batch_and_shrinks_with_checkpointing(
    model: str, task: str, mb: int, ckpt: str
) -> None:
    def gib(**kw: object) -> float:
        wl = workload_from_options(model=model, task=task, seq_len=512, **kw)  # type: ignore[arg-type]
        return estimate_workload(wl, "H100", calibration=None, suggest=False).memory.per_gpu_gib

    assert gib(micro_batch=mb + 1, grad_ckpt=ckpt) > gib(micro_batch=mb, grad_ckpt=ckpt)
    assert gib(micro_batch=mb, grad_ckpt="full") < gib(micro_batch=mb, grad_ckpt="none")
