"""MoE/MLA configs read from real config.json files; memory with SP, CP, EP, pure bf16, offload."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwise.errors import EstimateError
from gpuwise.estimate import estimate_workload, workload_from_options
from gpuwise.estimate.hf_config import parse_hf_config

DATA = Path(__file__).parent / "data" / "hf_configs"

# Published totals (README beside the files): total and active parameters in billions.
PUBLISHED = {
    "gpt-oss-20b": (20.91, None),  # the card's 3.61B active leaves out the embedding table
    "qwen3-30b-a3b": (30.5, 3.3),
    "deepseek-v3": (671.0, 37.0),
    "mixtral-8x7b": (46.7, 12.9),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_moe_and_mla_configs_read_as_published(name: str) -> None:
    m = parse_hf_config(DATA / f"{name}.json")
    total, active = PUBLISHED[name]
    assert m.experts > 0
    assert m.total_params / 1e9 == pytest.approx(total, rel=0.01)
    if active is not None:
        assert m.active_params / 1e9 == pytest.approx(active, rel=0.03)


def _mem(**options: object) -> dict[str, float]:
    gpu = str(options.pop("gpu", "H100"))
    gpus = int(options.pop("gpus", 8))  # type: ignore[call-overload]
    wl = workload_from_options(**options)  # type: ignore[arg-type]
    est = estimate_workload(wl, gpu, gpus, calibration=None, suggest=False)
    return {**est.memory.breakdown, "total": est.memory.per_gpu_gib}


def test_expert_parallel_splits_the_routed_experts() -> None:
    cfg = str(DATA / "qwen3-30b-a3b.json")
    one = _mem(model=cfg, task="finetune", zero="1", seq_len="4096")
    ep8 = _mem(model=cfg, task="finetune", zero="1", seq_len="4096", expert_parallel="8")
    from gpuwise.estimate.memory import routed_expert_params

    m = parse_hf_config(cfg)
    share = routed_expert_params(m) / m.total_params  # 95% of Qwen3-30B-A3B is routed experts
    assert 0.9 < share < 1.0
    # EP8 keeps 1/8 of the experts and all of the dense part on each GPU
    assert ep8["weights"] == pytest.approx(one["weights"] * (1 - share + share / 8), rel=1e-6)
    with pytest.raises(EstimateError, match="expert_parallel"):
        workload_from_options(model=cfg, expert_parallel="3")
    with pytest.raises(EstimateError, match="expert_parallel"):
        workload_from_options(model="llama-3.1-8b", expert_parallel="2")


def test_context_parallel_splits_activations_and_the_sequence() -> None:
    base = {"model": "llama-3.1-70b", "seq_len": "65536", "zero": "3", "gpus": 64}
    no_cp = _mem(**base, tensor_parallel="8")
    cp4 = _mem(**base, tensor_parallel="8", context_parallel="4")
    assert cp4["activations"] == pytest.approx(no_cp["activations"] / 4, rel=0.02)
    assert cp4["logits"] == pytest.approx(no_cp["logits"] / 4, rel=0.01)
    with pytest.raises(EstimateError, match="context_parallel"):
        workload_from_options(model="llama-3.1-8b", seq_len="4097", context_parallel="2")


def test_sequence_parallel_follows_tensor_parallel_by_default() -> None:
    base = {"model": "llama-3.1-70b", "seq_len": "8192", "zero": "3", "gpus": 64}
    sp = _mem(**base, tensor_parallel="8")  # auto: on with TP (Megatron-Core, torchtitan)
    no_sp = _mem(**base, tensor_parallel="8", sequence_parallel="off")
    assert sp["activations"] < 0.5 * no_sp["activations"]


def test_pure_bf16_and_bf16_states_drop_the_fp32_copies() -> None:
    base = {"model": "llama-3.1-8b", "task": "finetune", "seq_len": "2048", "gpus": 1}
    mixed = _mem(**base)
    pure = _mem(**base, master_weights="bf16")  # states follow the master weights (auto)
    assert pure["master_weights"] == 0 and mixed["master_weights"] > 0
    assert pure["optimizer_states"] == pytest.approx(mixed["optimizer_states"] / 2)
    fp32_states = _mem(**base, master_weights="bf16", optimizer_states="fp32")
    assert fp32_states["optimizer_states"] == pytest.approx(mixed["optimizer_states"])


def test_offload_levels_move_states_then_gradients_then_weights() -> None:
    base = {"model": "llama-3.1-70b", "task": "finetune", "zero": "3", "seq_len": "2048"}
    none = _mem(**base)
    opt = _mem(**base, offload="optimizer")
    grads = _mem(**base, offload="gradients")
    params = _mem(**base, offload="params")
    assert opt["optimizer_states"] == 0 and opt["gradients"] == none["gradients"]
    assert grads["gradients"] == 0 and grads["weights"] == none["weights"]
    assert (
        params["weights"] == 0 and params["total"] < grads["total"] < opt["total"] < none["total"]
    )
    assert _mem(**base, cpu_offload=True)["optimizer_states"] == 0  # the older switch
    with pytest.raises(EstimateError, match="offload"):
        workload_from_options(model="llama-3.1-8b", task="finetune", offload="params")


def test_grad_ckpt_auto_takes_the_least_recompute_that_fits_or_is_tight() -> None:
    wl = workload_from_options(
        model="llama-2-7b",
        task="pretrain",
        seq_len="4096",
        micro_batch="4",
        zero="3",
        grad_ckpt="auto",
    )
    est = estimate_workload(wl, "A100-80GB", 8, calibration=None, suggest=False)
    assert est.workload.grad_ckpt not in ("none", "auto")
    assert est.memory.verdict != "does not fit"
    assert any("--grad-ckpt auto" in n for n in est.notes)
    small = workload_from_options(model="gpt2", task="finetune", grad_ckpt="auto")
    est = estimate_workload(small, "A100-80GB", 1, calibration=None, suggest=False)
    assert est.workload.grad_ckpt == "none"


@pytest.mark.parametrize(("task", "stack"), [("qlora", "unknown"), ("lora", "hf")])
def test_grad_ckpt_auto_follows_recipes_that_checkpoint_by_default(task: str, stack: str) -> None:
    # issue 32: memory would allow no recompute, but QLoRA recipes (PEFT) and TRL checkpoint anyway
    wl = workload_from_options(
        model="llama-2-7b", task=task, stack=stack, seq_len="1024", grad_ckpt="auto"
    )
    est = estimate_workload(wl, "A100-80GB", 1, calibration=None, suggest=False)
    assert est.workload.grad_ckpt == "full"
    assert any("--grad-ckpt auto" in n for n in est.notes)
    plain = wl.with_changes(grad_ckpt="none")
    assert estimate_workload(plain, "A100-80GB", 1, calibration=None, suggest=False).memory.fits
    # LitGPT's QLoRA does not checkpoint, and neither does a LoRA without such a recipe
    lit = workload_from_options(model="llama-2-7b", task="qlora", stack="lit-gpt", seq_len="1024")
    assert lit.grad_ckpt == "none"
    other = workload_from_options(model="llama-2-7b", task="lora", seq_len="1024", grad_ckpt="auto")
    est = estimate_workload(other, "A100-80GB", 1, calibration=None, suggest=False)
    assert est.workload.grad_ckpt == "none"


def test_flash_attention_3_is_hopper_only_and_faster() -> None:
    wl = workload_from_options(model="llama-3.1-8b", seq_len="16384", zero="3")
    fa2 = estimate_workload(wl, "H100", 8, calibration=None, suggest=False)
    fa3 = estimate_workload(
        wl.with_changes(flash_attention_version=3), "H100", 8, calibration=None, suggest=False
    )
    assert fa3.step_parts["attention_s"] < fa2.step_parts["attention_s"] / 1.5
    with pytest.raises(EstimateError, match="Hopper"):
        estimate_workload(
            wl.with_changes(flash_attention_version=3), "A100-80GB", 8, calibration=None
        )


def _fixes(**options: object) -> list[dict[str, object]]:
    gpu = str(options.pop("gpu"))
    gpus = int(options.pop("gpus"))  # type: ignore[call-overload]
    wl = workload_from_options(**options)  # type: ignore[arg-type]
    est = estimate_workload(wl, gpu, gpus, calibration=None)
    return [{"fix": s.fix, **s.changes} for s in est.suggestions]


def test_the_first_fix_keeps_the_gpus_and_the_recipe() -> None:
    """Advice that fixes: the cheapest change that fits on the same GPUs (ZeRO, recompute, offload,
    TP/CP) comes before a bigger GPU, more GPUs or LoRA/QLoRA."""
    fixes = _fixes(model="llama-3.1-8b", task="finetune", gpu="A100-40GB", gpus=1)
    first = fixes[0]
    assert "gpu" not in first and "gpus" not in first and "task" not in first
    assert [("gpu" in f or "gpus" in f) for f in fixes] == sorted(
        ("gpu" in f or "gpus" in f) for f in fixes
    )


def test_405b_on_16384_gpus_is_offered_zero3_and_recompute() -> None:
    fixes = _fixes(params="405e9", gpu="H100", gpus=16384)
    assert fixes and fixes[0]["zero"] == 3 and fixes[0]["grad_ckpt"] == "full"
    assert "offload" not in fixes[0]  # on-GPU changes before CPU offload


def test_long_context_is_offered_context_parallelism() -> None:
    fixes = _fixes(model="llama-3.1-8b", seq_len="65536", zero="3", gpu="H100", gpus=8)
    assert any(f.get("context_parallel") for f in fixes)
    assert "gpu" not in fixes[0] and "gpus" not in fixes[0]


def test_moe_presets_match_their_config_files_and_published_totals() -> None:
    from gpuwise.estimate.model import get_preset

    for preset, config in (("gpt-oss-20b", "gpt-oss-20b"), ("qwen3-30b-a3b", "qwen3-30b-a3b")):
        a, b = get_preset(preset), parse_hf_config(DATA / f"{config}.json")
        assert a.total_params == b.total_params and a.active_params == b.active_params
    big = get_preset("gpt-oss-120b")
    assert big.total_params / 1e9 == pytest.approx(116.83, rel=0.001)  # model card, Table 1
    # the card's active count (5.13B) leaves out the input embedding table
    assert (big.active_params - big.embedding_params()) / 1e9 == pytest.approx(5.13, rel=0.01)
