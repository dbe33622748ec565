"""Memory formulas pinned against hand-computed and published cases."""

from __future__ import annotations

from typing import Any

import pytest

from gpuwise.estimate.memory import (
    QLORA_BITS_PER_PARAM,
    activation_bytes,
    comm_buffer_bytes,
    kv_cache_bytes,
    layer_activation_bytes,
    logits_bytes,
    memory_breakdown_bytes,
    model_state_bytes,
)
from gpuwise.estimate.model import ModelConfig, get_preset
from gpuwise.estimate.workload import Workload, workload_from_options


def _states(params: float, dp: int, **kw: object) -> float:
    wl = workload_from_options(params=params, task="pretrain", **kw)  # type: ignore[arg-type]
    return sum(model_state_bytes(wl, dp).values())


@pytest.mark.parametrize(
    ("zero", "expected_gb"),
    [
        # ZeRO paper (Rajbhandari et al. 2020) Fig. 1: Ψ = 7.5B, N_d = 64, K = 12, bytes in GB (10^9)
        (0, 120.0),  # baseline: (2 + 2 + 12)·Ψ
        (1, 31.4),  # P_os: 2Ψ + 2Ψ + 12Ψ/64
        (2, 16.6),  # P_os+g: 2Ψ + 14Ψ/64
        (3, 1.9),  # P_os+g+p: 16Ψ/64
    ],
)
def test_zero_model_states_match_the_zero_paper(zero: int, expected_gb: float) -> None:
    assert _states(7.5e9, 64, zero=zero) / 1e9 == pytest.approx(expected_gb, abs=0.06)


@pytest.mark.parametrize(
    ("kwargs", "bytes_per_param"),
    [
        (
            {"precision": "bf16", "optimizer": "adamw"},
            16.0,
        ),  # 2 + 2 + 4 master + 8 Adam (ZeRO K = 12)
        ({"precision": "fp32", "optimizer": "adamw"}, 16.0),  # 4 + 4 + 8, no master copy
        ({"precision": "bf16", "optimizer": "adamw8bit"}, 10.0),  # 2 + 2 + 4 + 2 (two 8-bit states)
        ({"precision": "bf16", "optimizer": "sgd"}, 12.0),  # 2 + 2 + 4 + 4 (momentum)
        ({"precision": "fp32", "optimizer": "sgd"}, 12.0),  # 4 + 4 + 4
        (
            {"precision": "bf16", "optimizer": "adamw", "cpu_offload": True},
            4.0,
        ),  # states + master on CPU
    ],
)
def test_model_state_bytes_per_parameter(kwargs: dict[str, object], bytes_per_param: float) -> None:
    assert _states(1e9, 1, **kwargs) == pytest.approx(bytes_per_param * 1e9)


def _gpt(h: int = 1024, a: int = 16, **kw: object) -> ModelConfig:
    """A GPT-3-style block: MHA, 4h GeLU MLP, dropout, biases — Korthikanti's setting."""
    return ModelConfig(
        name="gpt",
        arch="decoder",
        hidden=h,
        layers=24,
        heads=a,
        intermediate=4 * h,
        vocab=51200,
        gated_mlp=False,
        bias=True,
        norm="layernorm",
        dropout=True,
        **kw,
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("tp", "flash", "per_sbh"),
    [
        # Korthikanti et al. 2022, Table 2 (s = 2048, b = 4, h = 1024, a = 16 → 5as/h = 160)
        (1, False, 34 + 5 * 16 * 2048 / 1024),  # no parallelism: 34 + 5as/h
        (
            4,
            False,
            10 + 24 / 4 + 5 * 16 * 2048 / (1024 * 4),
        ),  # tensor parallel t: 10 + 24/t + 5as/(ht)
        (1, True, 34.0),  # score matrix never stored (FlashAttention / selective recompute)
        (8, True, 10 + 24 / 8),  # TP 8 + selective: the as² term is gone
    ],
)
def test_activation_bytes_per_layer_match_korthikanti(tp: int, flash: bool, per_sbh: float) -> None:
    s, b, h, a = 2048, 4, 1024, 16
    lse = 4 * a / tp / h if flash else 0.0  # fused attention's fp32 log-sum-exp per head and token
    assert layer_activation_bytes(_gpt(), s, b, tp=tp, flash=flash) == pytest.approx(
        s * b * h * (per_sbh + lse)
    )


def test_llama_block_activations_generalise_korthikanti() -> None:
    # Llama 2 7B, s = 4096, b = 1, no dropout, flash: attention 2h + 2h + 4h·(kv/a = 1) + 2h = 10h
    # plus the fp32 log-sum-exp 4·a; SwiGLU MLP 2h + 8·ffn; two eager RMSNorms (4 + 2)·h each
    m = get_preset("llama-2-7b")
    per_token = (10 + 2 + 12) * 4096 + 4 * 32 + 8 * 11008
    assert layer_activation_bytes(m, 4096, 1) == 4096 * per_token


def test_full_recompute_keeps_layer_inputs_plus_one_layer() -> None:
    wl = workload_from_options(model="llama-2-7b", task="finetune", grad_ckpt="full", seq_len=2048)
    from gpuwise.estimate.memory import activation_bytes

    s, h, L = 2048, 4096, 32
    one_layer = layer_activation_bytes(wl.model, s, 1)
    assert (
        activation_bytes(wl) == 2 * s * h * L + one_layer
    )  # 2·sbh per layer (Korthikanti Table 2)


def test_kv_cache_llama31_8b_is_128_kib_per_token() -> None:
    # 2 (K, V) · 2 bytes · 32 layers · 8 KV heads · 128 dims = 131,072 bytes per token
    wl = workload_from_options(model="llama-3.1-8b", task="inference", prompt_len=1, output_len=1)
    assert kv_cache_bytes(wl, batch=1) == 2 * 131072  # two tokens of context


def test_kv_cache_fp8_halves_and_tensor_parallel_splits() -> None:
    base = workload_from_options(
        model="llama-2-70b", task="inference", prompt_len=1000, output_len=24
    )
    fp8 = base.with_changes(precision="fp8")
    tp8 = base.with_changes(tensor_parallel=8)
    assert kv_cache_bytes(fp8) == kv_cache_bytes(base) / 2
    assert kv_cache_bytes(tp8) == kv_cache_bytes(base) / 8  # 8 KV heads over 8 GPUs: one each


def test_qlora_base_weights_are_4_127_bits_for_linear_layers() -> None:
    wl = workload_from_options(model="llama-2-7b", task="qlora")
    m = wl.model
    w = model_state_bytes(wl, 1)["weights"]
    adapters = m.lora_params(16, "all-linear") * 2  # QLoRA keeps adapters in bf16 (qlora.py)
    expected = (
        m.linear_params * QLORA_BITS_PER_PARAM / 8
        + (m.total_params - m.linear_params) * 2  # TRL and the QLoRA code keep them in bf16
        + adapters
    )
    assert w == pytest.approx(expected)
    assert pytest.approx(4.127) == QLORA_BITS_PER_PARAM  # Dettmers et al. 2023, Sec. 3


def test_lora_has_no_gradients_or_states_for_the_frozen_base() -> None:
    wl = workload_from_options(model="llama-2-7b", task="lora", lora_rank=8, lora_targets="qv")
    st = model_state_bytes(wl, 1)
    n = 32 * 8 * 2 * 8192  # adapter params (see test_lora_adapter_params)
    assert (
        st["gradients"] == n * 4 and st["optimizer_states"] == n * 8 and st["master_weights"] == 0
    )


def test_unfused_logits_peak_in_the_loss_backward_at_three_fp32_copies() -> None:
    """Upcast to fp32 before cross_entropy (Hugging Face, torchtitan): the backward holds the saved
    log-softmax output, its incoming gradient and the gradient it writes, 4 bytes a value each."""
    wl = workload_from_options(model="gpt2", task="pretrain", micro_batch=8, seq_len=1024)
    assert not wl.uses_fused_kernels
    assert logits_bytes(wl) == 8 * 1024 * 50257 * (4 + 4 + 4)
    fp32 = wl.with_changes(precision="fp32")
    assert logits_bytes(fp32) == logits_bytes(wl)
    assert logits_bytes(wl.with_changes(fused_kernels=True)) == 8 * 1024 * 50257 * 2


def test_torch_keeps_only_the_fp32_log_softmax_output_for_the_loss_backward() -> None:
    """What the count above rests on, checked on real torch: of the logits-sized tensors, autograd
    saves only the fp32 log-softmax output (not the 16-bit logits, not their fp32 copy), and the loss
    backward writes a new fp32 gradient of that size."""
    torch = pytest.importorskip("torch")
    n, v = 64, 1000
    hidden = torch.randn(n, 32, dtype=torch.bfloat16, requires_grad=True)
    head = torch.randn(v, 32, dtype=torch.bfloat16)
    target = torch.randint(0, v, (n,))
    saved: dict[
        int, tuple[Any, tuple[int, ...]]
    ] = {}  # by storage: nll_loss saves the same log-probs

    def pack(t: Any) -> Any:
        saved[t.untyped_storage().data_ptr()] = (t.dtype, tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = hidden @ head.T  # the LM head, 16-bit
        loss = torch.nn.functional.cross_entropy(logits.float(), target)
    big = [dtype for dtype, shape in saved.values() if shape == (n, v)]
    assert big == [torch.float32]  # one fp32 (n, v) tensor: the log-softmax output
    grads: list[Any] = []
    logits.register_hook(lambda g: grads.append(g))
    loss.backward()
    assert grads[0].shape == (n, v) and grads[0].dtype == torch.bfloat16


@pytest.mark.parametrize(
    ("zero", "dp", "expected"),
    [
        (0, 1, 0.0),  # one GPU: no buckets
        (0, 8, 2.0 * 6_738_415_616),  # DDP buckets: a second copy of the bf16 gradients
        (2, 8, 2 * 5e8 * 2.0),  # DeepSpeed reduce + all-gather buckets, 5e8 elements each, 2 bytes
    ],
)
def test_comm_buffers(zero: int, dp: int, expected: float) -> None:
    wl = workload_from_options(model="llama-2-7b", task="pretrain", zero=zero)
    assert comm_buffer_bytes(wl, dp) == pytest.approx(expected)


def test_fsdp_in_a_pipeline_keeps_the_stage_gathered_and_its_gradients_in_fp32() -> None:
    pipelined = workload_from_options(
        model="llama-2-7b", task="pretrain", zero=3, pipeline_parallel=2, tensor_parallel=2
    )
    stage = 6_738_415_616 / 4  # the 7B's parameters on one TP x PP rank
    assert comm_buffer_bytes(pipelined, 8) == pytest.approx(stage * (2 + 4))
    # without a pipeline FSDP gathers one block at a time: far less
    flat = pipelined.with_changes(pipeline_parallel=1)
    assert comm_buffer_bytes(flat, 8) < stage
    # fp32 training gathers 4-byte weights
    fp32 = pipelined.with_changes(precision="fp32")
    assert comm_buffer_bytes(fp32, 8) == pytest.approx(stage * (4 + 4))
    # LoRA: the frozen stage stays gathered too, but only the adapters have gradients
    lora = workload_from_options(
        model="llama-2-7b", task="lora", zero=3, pipeline_parallel=2, tensor_parallel=2
    )
    adapters = lora.model.lora_params(16, "all-linear") / 4
    assert comm_buffer_bytes(lora, 8) == pytest.approx(stage * 2 + adapters * 4)
    # Megatron does not pipeline sharded weights this way (DeepSpeed refuses ZeRO-3 with a pipeline)
    assert comm_buffer_bytes(pipelined.with_changes(stack="megatron"), 8) < stage


def test_fsdp_in_a_pipeline_splits_the_experts_by_expert_parallelism() -> None:
    kw = {"model": "qwen3-30b-a3b", "zero": 3, "pipeline_parallel": 2}
    ep1 = comm_buffer_bytes(workload_from_options(**kw), 8)
    ep8 = comm_buffer_bytes(workload_from_options(expert_parallel=8, **kw), 8)
    assert ep8 < ep1 / 4  # the routed experts are almost all of the 30B


def test_fsdp_over_context_parallel_ranks_alone_has_gather_buffers() -> None:
    # FSDP 1 x CP 8: the states shard over the 8 CP ranks, so blocks are gathered
    wl = workload_from_options(model="llama-3.1-8b", task="pretrain", zero=3, context_parallel=8)
    assert comm_buffer_bytes(wl, 1) > 0
    assert comm_buffer_bytes(wl.with_changes(context_parallel=1), 1) == 0.0


@pytest.mark.parametrize(
    ("stack", "fused"),
    [("megatron", True), ("unknown", True), ("torchtitan", False), ("hf", False)],
)
def test_model_parallel_means_fused_kernels_except_on_plain_pytorch_stacks(
    stack: str, fused: bool
) -> None:
    wl = workload_from_options(model="llama-2-7b", tensor_parallel=2, stack=stack)
    assert wl.uses_fused_kernels is fused
    assert workload_from_options(
        model="llama-2-7b", tensor_parallel=2, stack=stack, fused_kernels="on"
    ).uses_fused_kernels
    # unfused, the loss backward holds three fp32 copies of the logits
    assert logits_bytes(wl) == pytest.approx(4096 * 32000 / 2 * (2 if fused else 4 + 4 + 4))


def test_megatron_fuses_without_model_parallelism_too() -> None:
    """Megatron-Core's layers are Transformer Engine modules and its loss is its own in-place
    cross-entropy at TP 1 too; an unknown stack at TP 1 keeps the Hugging Face eager default."""
    one = workload_from_options(model="llama-2-7b", stack="megatron")
    assert one.tensor_parallel == one.pipeline_parallel == 1 and one.uses_fused_kernels
    assert not workload_from_options(model="llama-2-7b").uses_fused_kernels
    assert not workload_from_options(
        model="llama-2-7b", stack="megatron", fused_kernels="off"
    ).uses_fused_kernels


def test_breakdown_has_every_term_and_overheads() -> None:
    wl = workload_from_options(model="llama-2-7b", task="finetune")
    br = memory_breakdown_bytes(wl, 1)
    assert set(br) == {
        "weights",
        "gradients",
        "optimizer_states",
        "master_weights",
        "activations",
        "logits",
        "comm_buffers",
        "allocator_overhead",
        "cuda_context",
    }
    allocated = sum(v for k, v in br.items() if k not in ("allocator_overhead", "cuda_context"))
    assert br["allocator_overhead"] == pytest.approx(0.05 * allocated)
    assert br["cuda_context"] == 0.5 * 2**30


def test_workload_checks_reject_bad_combinations() -> None:
    m = get_preset("llama-2-7b")
    from gpuwise.errors import EstimateError, InputError

    with pytest.raises(EstimateError):
        Workload(model=m, task="qlora", precision="fp32")  # QLoRA computes in 16 bit
    with pytest.raises(InputError):
        Workload(model=m, micro_batch=8, global_batch=4)  # global batch below micro-batch
    with pytest.raises(EstimateError):
        Workload(model=m, tensor_parallel=3)  # does not divide 32 heads
    with pytest.raises(InputError):
        Workload(model=m, tokens=float("nan"))
    with pytest.raises(EstimateError, match="DeepSpeed's pipeline engine"):
        Workload(model=m, stack="deepspeed", zero=3, pipeline_parallel=2)
    Workload(model=m, stack="deepspeed", zero=1, pipeline_parallel=2)  # ZeRO-1 is what it takes
    with pytest.raises(InputError, match="not both"):
        Workload(
            model=m, tokens=1e9, samples=1e4
        )  # run size given twice: tokens used to win silently


def test_torchtitan_selective_op_keeps_the_saved_matmul_and_attention_outputs() -> None:
    """torchtitan's op policy saves every other ``aten.mm`` output (wq, wv, w1, w2 of a Llama block)
    and the attention output + log-sum-exp; the block input is kept by the checkpoint; one block is
    rebuilt at a time in the backward pass."""
    from gpuwise.estimate.memory import activation_bytes, selective_op_saved_bytes_per_token

    wl = workload_from_options(
        model="llama-2-7b", task="pretrain", grad_ckpt="selective-op", seq_len=4096
    )
    m, s = wl.model, 4096
    h, f, heads = 4096, 11008, 32
    per_tok = (
        2 * h + 2 * h + 2 * f + 2 * h + 2 * h + 4 * heads
    )  # Q, V, gate, MLP out, attention out, lse
    assert selective_op_saved_bytes_per_token(m) == per_tok
    expected = s * (per_tok + 2 * h) * 32 + layer_activation_bytes(m, s, 1) + 2 * 2 * s * h
    assert activation_bytes(wl) == expected
    none_ = activation_bytes(wl.with_changes(grad_ckpt="none"))
    full = activation_bytes(wl.with_changes(grad_ckpt="full"))
    assert full < activation_bytes(wl) < none_


def test_torchtitan_selective_layer_recomputes_every_second_block() -> None:
    from gpuwise.estimate.memory import activation_bytes

    wl = workload_from_options(
        model="llama-2-7b", task="pretrain", grad_ckpt="selective-layer", seq_len=4096
    )
    s, h = 4096, 4096
    block = layer_activation_bytes(wl.model, s, 1)
    assert activation_bytes(wl) == pytest.approx(16 * block + 16 * 2 * s * h + block)


def test_qlora_unquantised_weights_stay_fp32_unless_the_run_is_bf16() -> None:
    # PEFT makes them fp32; TRL and the QLoRA code cast embeddings and LM head back only with bf16
    bf16 = workload_from_options(model="llama-2-7b", task="qlora")
    fp16 = workload_from_options(model="llama-2-7b", task="qlora", precision="fp16")
    rest = bf16.model.total_params - bf16.model.linear_params
    gap = model_state_bytes(fp16, 1)["weights"] - model_state_bytes(bf16, 1)["weights"]
    assert gap == pytest.approx(rest * 2)
    # LitGPT does not go through PEFT: 16-bit weights, 16-bit residual
    lit = fp16.with_changes(stack="lit-gpt")
    assert model_state_bytes(lit, 1)["weights"] == pytest.approx(
        model_state_bytes(bf16, 1)["weights"]
    )


def test_qlora_keeps_fp32_block_inputs_as_peft_prepares_the_model() -> None:
    # prepare_model_for_kbit_training casts the embedding to fp32: the residual stream, and each
    # checkpointed block input, is 4 bytes per value; LoRA on the same model keeps 2
    kw = {"model": "llama-2-7b", "grad_ckpt": "full", "seq_len": 4096, "micro_batch": 1}
    qlora = activation_bytes(workload_from_options(task="qlora", **kw))
    lora = activation_bytes(workload_from_options(task="lora", **kw))
    assert qlora - lora == pytest.approx(2.0 * 4096 * 4096 * 32)
    lit = activation_bytes(workload_from_options(task="qlora", stack="lit-gpt", **kw))
    assert lit == pytest.approx(lora)


def test_validation_memory_rows_are_gpuwise_estimate_command_lines() -> None:
    import shlex
    from importlib import resources

    from gpuwise.base.datafiles import commented_csv
    from gpuwise.cli.estimate import estimate_inputs

    text = (
        resources.files("gpuwise.estimate")
        .joinpath("data/validation_memory.csv")
        .read_text("utf-8")
    )
    rows = list(commented_csv(text))
    assert len(rows) >= 10
    for r in rows:
        argv = [*shlex.split(r["options"]), "--gpu", r["gpu"], "--gpus", r["gpus"]]
        inputs = estimate_inputs([*argv, "--no-calibration"])
        wl = inputs.workload
        assert inputs.gpus == int(r["gpus"]) and inputs.gpus % wl.non_data_parallel == 0
        # a measured peak the source's 96 GB GPUs could hold, and its source named
        assert 0 < float(r["measured_gib"]) <= 96 * 1e9 / 2**30 and r["source"]
