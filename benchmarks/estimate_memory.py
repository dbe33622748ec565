"""Memory accuracy of ``gpuwise.estimate`` checked against real torch objects on the CPU, and
against published fine-tuning figures.

1. Parameter bytes: small GPT-2- and Llama-shaped models built in torch; ``sum(p.numel())``
   vs the estimator's count (and the preset totals vs the numbers on the model cards, see tests).
2. Optimizer-state bytes: one real ``torch.optim`` step, bytes of ``optimizer.state`` per
   parameter vs the estimator's bytes per parameter.
3. Activation bytes: every tensor autograd saves for backward in one transformer block, caught
   with ``torch.autograd.graph.saved_tensors_hooks`` (unique storages, parameters excluded),
   in bf16, vs Korthikanti-style per-layer formula the estimator uses. This is what
   ``torch.cuda.max_memory_allocated`` would see for activations, minus kernel workspaces.
4. Published figures: PEFT README (T0_3B on one A100-80GB: full fine-tune 47.14 GB, LoRA 14.4 GB)
   and QLoRA (Dettmers et al. 2023: a 65B model fine-tunes on one 48 GB GPU).
5. Measured peaks of multi-GPU runs (validation only, ``data/validation_memory.csv``): torchtitan's
   FSDP, context-, tensor- and pipeline-parallel Llama 3.1 runs on H100s, each row built by
   ``gpuwise estimate``'s own argument parser, with the signed error and its median.
6. The longest sequence a published QLoRA setup trained (``data/validation_max_context.csv``:
   Unsloth's Hugging Face + FlashAttention-2 baseline) against the longest gpuwise says fits.

Still unmeasured without a GPU: CUDA context, allocator fragmentation, cuBLAS/NCCL workspaces,
FlashAttention's CUDA kernels (the CPU SDPA path saves the same q/k/v/out/logsumexp tensors).

Run: ``PYTHONPATH=src python benchmarks/estimate_memory.py`` (torch CPU; ~10 s).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from gpuwise.estimate import estimate_workload, workload_from_options
from gpuwise.estimate.memory import layer_activation_bytes, model_state_bytes
from gpuwise.estimate.model import ModelConfig

torch.manual_seed(0)


# ----------------------------------------------------------------------------------------
# small reference implementations (eager, as Hugging Face's GPT-2 and Llama blocks compute)


class GPT2Block(nn.Module):
    def __init__(self, h: int, a: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.a = a
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc, self.out = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        q, k, v = (t.view(b, s, self.a, h // self.a).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(h // self.a)
        mask = torch.ones(s, s, dtype=torch.bool).tril()
        att = self.drop(att.masked_fill(~mask, float("-inf")).softmax(-1))
        y = (att @ v).transpose(1, 2).reshape(b, s, h)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.out(nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh")))


class RMSNorm(nn.Module):
    def __init__(self, h: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # as transformers' LlamaRMSNorm
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * x.to(dtype)


class _FusedRMSNorm(torch.autograd.Function):
    """What a fused RMSNorm kernel keeps for backward: its 16-bit input and the fp32 reciprocal RMS
    per token (no fp32 copy of the input, no normalised tensor)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        r = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
        ctx.save_for_backward(x, w, r)
        return (x.float() * r).to(x.dtype) * w

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        x, w, r = ctx.saved_tensors
        xf, u = x.float(), (g * w).float()
        dx = r * u - xf * r.pow(3) * (u * xf).mean(-1, keepdim=True)
        dw = (g.float() * xf * r).reshape(-1, x.shape[-1]).sum(0)
        return dx.to(x.dtype), dw.to(w.dtype)


class _FusedSwiGLU(torch.autograd.Function):
    """What a fused SwiGLU keeps: gate and up (its input); silu(gate) is recomputed in backward and
    the product is the down projection's input (Megatron-Core's SwiGLUFunction behaves so)."""

    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(gate, up)
        return nn.functional.silu(gate) * up

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        gate, up = ctx.saved_tensors
        sig = torch.sigmoid(gate.float())
        dgate = g.float() * up.float() * sig * (1 + gate.float() * (1 - sig))
        dup = g.float() * gate.float() * sig
        return dgate.to(gate.dtype), dup.to(up.dtype)


class LlamaBlock(nn.Module):
    def __init__(self, h: int, a: int, kv: int, f: int, fused: bool = False) -> None:
        super().__init__()
        self.fused = fused
        self.a, self.kv, self.d = a, kv, h // a
        self.n1, self.n2 = RMSNorm(h), RMSNorm(h)
        self.q, self.k, self.v = (
            nn.Linear(h, h, bias=False),
            nn.Linear(h, kv * self.d, bias=False),
            nn.Linear(h, kv * self.d, bias=False),
        )
        self.o = nn.Linear(h, h, bias=False)
        self.gate, self.up, self.down = (
            nn.Linear(h, f, bias=False),
            nn.Linear(h, f, bias=False),
            nn.Linear(f, h, bias=False),
        )

    def norm(self, n: RMSNorm, x: torch.Tensor) -> torch.Tensor:
        return _FusedRMSNorm.apply(x, n.weight) if self.fused else n(x)  # type: ignore[no-any-return]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        y = self.norm(self.n1, x)
        q = self.q(y).view(b, s, self.a, self.d).transpose(1, 2)
        k = self.k(y).view(b, s, self.kv, self.d).transpose(1, 2)
        v = self.v(y).view(b, s, self.kv, self.d).transpose(1, 2)
        att = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(att.transpose(1, 2).reshape(b, s, h))
        y = self.norm(self.n2, x)
        if self.fused:
            return x + self.down(_FusedSwiGLU.apply(self.gate(y), self.up(y)))
        return x + self.down(nn.functional.silu(self.gate(y)) * self.up(y))


class Bottleneck(nn.Module):
    """torchvision's ResNet-50 v1.5 bottleneck (stride on the 3x3 conv)."""

    def __init__(self, cin: int, width: int, stride: int, down: bool) -> None:
        super().__init__()
        cout = width * 4
        self.c1, self.b1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.c2, self.b2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.c3, self.b3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if down
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idt = x if self.down is None else self.down(x)
        y = self.relu(self.b1(self.c1(x)))
        y = self.relu(self.b2(self.c2(y)))
        return self.relu(self.b3(self.c3(y)) + idt)


def resnet50() -> nn.Module:
    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1, i == 0))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    return nn.Sequential(*layers)


def saved_activation_bytes(block: nn.Module, x: torch.Tensor) -> int:
    """Bytes of the unique storages autograd keeps for backward, parameters excluded."""
    params = {p.untyped_storage().data_ptr() for p in block.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x).sum().backward()
    # the block input is kept by the first op, but it is the previous layer's output: count it
    return sum(seen.values())


def row(label: str, measured: float, estimated: float, unit: str = "") -> None:
    err = estimated / measured - 1 if measured else float("nan")
    print(f"{label:58s} {measured:14,.0f} {estimated:14,.0f} {err:+8.1%} {unit}")


def main() -> None:
    print(f"{'check':58s} {'measured':>14s} {'gpuwise':>14s} {'error':>8s}")
    print("-" * 98)
    # 1. parameters
    gpt = ModelConfig(
        name="gpt2-mini",
        arch="decoder",
        hidden=256,
        layers=2,
        heads=4,
        intermediate=1024,
        vocab=1000,
        max_positions=128,
        learned_positions=True,
        tied_embeddings=True,
        gated_mlp=False,
        bias=True,
        norm="layernorm",
        dropout=True,
        flash_attention=False,
    )
    gpt_torch = nn.ModuleDict(
        {
            "wte": nn.Embedding(1000, 256),
            "wpe": nn.Embedding(128, 256),
            "h": nn.ModuleList(GPT2Block(256, 4) for _ in range(2)),
            "ln_f": nn.LayerNorm(256),
        }
    )
    row(
        "params: GPT-2-shaped (2 layers, h=256, tied head)",
        sum(p.numel() for p in gpt_torch.parameters()),
        gpt.total_params,
        "params",
    )
    lla = ModelConfig(
        name="llama-mini",
        arch="decoder",
        hidden=256,
        layers=2,
        heads=8,
        kv_heads=2,
        intermediate=688,
        vocab=1000,
        max_positions=128,
    )
    lla_torch = nn.ModuleDict(
        {
            "emb": nn.Embedding(1000, 256),
            "layers": nn.ModuleList(LlamaBlock(256, 8, 2, 688) for _ in range(2)),
            "norm": RMSNorm(256),
            "lm_head": nn.Linear(256, 1000, bias=False),
        }
    )
    row(
        "params: Llama-shaped (GQA 8/2 heads, SwiGLU, untied head)",
        sum(p.numel() for p in lla_torch.parameters()),
        lla.total_params,
        "params",
    )

    from gpuwise.estimate.model import get_preset

    rn = resnet50()
    row(
        "params: ResNet-50 (torchvision v1.5 layout)",
        sum(p.numel() for p in rn.parameters()),
        get_preset("resnet-50").total_params,
        "params",
    )

    # 2. optimizer states from a real step
    for name, opt_cls, kwargs, key in (
        ("adamw", torch.optim.AdamW, {}, "adamw"),
        ("sgd momentum", torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}, "sgd"),
    ):
        model = lla_torch
        opt = opt_cls(model.parameters(), **kwargs)
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        opt.step()
        state = sum(
            t.numel() * t.element_size()
            for st in opt.state.values()
            for t in st.values()
            if torch.is_tensor(t) and t.dim() > 0
        )
        wl = workload_from_options(model=lla, task="pretrain", precision="fp32", optimizer=key)
        est = model_state_bytes(wl, 1)["optimizer_states"]
        row(f"optimizer state bytes: torch.optim {name} (fp32)", state, est, "bytes")
    # mixed precision: bf16 weights + bf16 grads + fp32 master + AdamW(master)
    master = [p.detach().float().clone().requires_grad_() for p in lla_torch.parameters()]
    work = [m.detach().to(torch.bfloat16) for m in master]
    opt = torch.optim.AdamW(master)
    for m in master:
        m.grad = torch.randn_like(m)
    opt.step()
    grads_bf16 = [torch.zeros_like(w) for w in work]
    measured = sum(t.numel() * t.element_size() for t in work + grads_bf16 + master) + sum(
        t.numel() * t.element_size()
        for st in opt.state.values()
        for t in st.values()
        if torch.is_tensor(t) and t.dim()
    )
    wl = workload_from_options(model=lla, task="pretrain", precision="bf16", optimizer="adamw")
    row(
        "model states: bf16 + fp32 master + AdamW (16 B/param)",
        measured,
        sum(model_state_bytes(wl, 1).values()),
        "bytes",
    )

    # 3. activations saved by autograd, bf16, one block
    from dataclasses import replace

    for s, b in ((256, 2), (512, 1)):
        block = (
            GPT2Block(256, 4).to(torch.bfloat16).eval()
        )  # eval: no dropout, autograd still records
        x = torch.randn(b, s, 256, dtype=torch.bfloat16, requires_grad=True)
        row(
            f"activations: GPT-2 block eager attn, no dropout, s={s} b={b}",
            saved_activation_bytes(block, x),
            layer_activation_bytes(replace(gpt, dropout=False), s, b, flash=False),
            "bytes",
        )
    block = GPT2Block(256, 4).to(torch.bfloat16).train()
    x = torch.randn(2, 256, 256, dtype=torch.bfloat16, requires_grad=True)
    row(
        "activations: GPT-2 block + dropout, s=256 b=2 (CPU: 2-byte masks)*",
        saved_activation_bytes(block, x),
        layer_activation_bytes(gpt, 256, 2, flash=False),
        "bytes",
    )
    for s, b in ((256, 2), (1024, 1)):
        block = LlamaBlock(256, 8, 2, 688).to(torch.bfloat16)
        x = torch.randn(b, s, 256, dtype=torch.bfloat16, requires_grad=True)
        row(
            f"activations: Llama block SDPA (GQA, SwiGLU), s={s} b={b}",
            saved_activation_bytes(block, x),
            layer_activation_bytes(lla, s, b, flash=True),
            "bytes",
        )
    block = LlamaBlock(256, 8, 2, 688, fused=True).to(torch.bfloat16)
    x = torch.randn(2, 256, 256, dtype=torch.bfloat16, requires_grad=True)
    row(
        "activations: Llama block, fused RMSNorm + SwiGLU, s=256 b=2",
        saved_activation_bytes(block, x),
        layer_activation_bytes(lla, 256, 2, flash=True, fused=True),
        "bytes",
    )

    x = torch.randn(2, 3, 224, 224)
    measured = saved_activation_bytes(rn, x)
    preset = get_preset("resnet-50").activation_mib_per_sample * 2**20 * 2
    row(
        "activations: ResNet-50 fp32 224x224 b=2 (preset value is this measurement)",
        measured,
        preset,
        "bytes",
    )
    print(
        "* torch on the CPU keeps dropout masks in the activation dtype (2 bytes); CUDA keeps 1-byte"
        " bool masks, as the formula assumes."
    )
    # 4. published figures
    gb = 2**30 / 1e9
    print(
        "\npublished fine-tuning figures (GB = 1e9 bytes; the PEFT README gives no batch size or sequence"
        " length, so totals are shown for a few)"
    )
    print(f"{'case':58s} {'published':>14s} {'gpuwise':>14s}")
    print("-" * 90)
    t5 = "t5-3b"  # T0_3B is a T5-3B fine-tune: same shape
    states_full = sum(
        model_state_bytes(
            workload_from_options(model=t5, task="finetune", precision="fp32"), 1
        ).values()
    )
    states_lora = sum(
        model_state_bytes(
            workload_from_options(
                model=t5, task="lora", precision="fp32", lora_rank=8, lora_targets="qv"
            ),
            1,
        ).values()
    )
    print(
        f"{'PEFT README: T0_3B full fine-tune (fp32 AdamW): model states only':58s} {'47.14 GB':>14s} "
        f"{states_full / 1e9:11.2f} GB"
    )
    print(
        f"{'PEFT README: T0_3B LoRA r=8 (q, v), fp32: model states only':58s} {'14.4 GB':>14s} "
        f"{states_lora / 1e9:11.2f} GB"
    )
    for b, s in ((1, 128), (4, 128), (8, 128)):
        full = estimate_workload(
            workload_from_options(
                model=t5, task="finetune", precision="fp32", micro_batch=b, seq_len=s
            ),
            "A100-80GB",
            calibration=None,
            suggest=False,
        )
        lora = estimate_workload(
            workload_from_options(
                model=t5,
                task="lora",
                precision="fp32",
                micro_batch=b,
                seq_len=s,
                lora_rank=8,
                lora_targets="qv",
            ),
            "A100-80GB",
            calibration=None,
            suggest=False,
        )
        print(
            f"{f'  total with activations at batch {b} x {s} tokens: full / LoRA':58s} {'':>14s} "
            f"{full.memory.per_gpu_gib * gb:8.2f} / {lora.memory.per_gpu_gib * gb:.2f} GB"
        )
    llama65 = ModelConfig(
        name="llama-65b",
        arch="decoder",
        hidden=8192,
        layers=80,
        heads=64,
        intermediate=22016,
        vocab=32000,
        max_positions=2048,
        source="LLaMA paper Table 2",
    )
    from gpuwise.estimate.workload import Workload

    q = Workload(
        model=llama65,
        task="qlora",
        lora_rank=64,
        lora_targets="all-linear",
        seq_len=512,
        micro_batch=1,
        grad_ckpt="full",
    )
    est = estimate_workload(q, "A100-80GB", calibration=None, suggest=False)
    print(
        f"{'QLoRA paper: LLaMA-65B, r=64 all-linear, seq 512, ckpt':58s} {'< 48 GB':>14s} "
        f"{est.memory.per_gpu_gib * gb:11.2f} GB"
    )
    print(
        "\nbreakdown (GiB) of the QLoRA 65B case:",
        ", ".join(f"{k} {v:.2f}" for k, v in est.memory.breakdown.items() if v),
    )
    print_validation_memory()
    print_max_context()


def print_validation_memory() -> None:
    """Measured peak memory of multi-GPU runs (validation_memory.csv) against the estimate, each
    row parsed by ``gpuwise estimate``'s own argument parser."""
    import shlex
    import statistics
    from importlib import resources

    from gpuwise.base.datafiles import commented_csv
    from gpuwise.cli.estimate import estimate_argv

    text = (
        resources.files("gpuwise.estimate")
        .joinpath("data/validation_memory.csv")
        .read_text("utf-8")
    )
    print(
        "\nmeasured peaks of multi-GPU runs (validation only; the measured figure is PyTorch's peak "
        "reserved memory, the maximum over all GPUs)"
    )
    print(f"{'row':74s} {'measured':>9s} {'gpuwise':>8s} {'error':>7s}  largest terms (GiB)")
    print("-" * 130)
    errs: list[float] = []
    by_source: dict[str, list[float]] = {}
    for r in commented_csv(text):
        est = estimate_argv([*shlex.split(r["options"]), "--gpu", r["gpu"], "--gpus", r["gpus"]])
        measured = float(r["measured_gib"])
        err = est.memory.per_gpu_gib / measured - 1
        errs.append(err)
        by_source.setdefault(r["source_id"], []).append(err)
        wl = est.workload
        label = (
            f"{r['source_id']} {wl.model.name} x{est.gpus} tp{wl.tensor_parallel} "
            f"pp{wl.pipeline_parallel} cp{wl.context_parallel} mb{wl.micro_batch} "
            f"s{wl.seq_len} {wl.grad_ckpt} {wl.precision}"
        )
        top = sorted(est.memory.breakdown.items(), key=lambda kv: -kv[1])[:3]
        print(
            f"{label:74s} {measured:9.1f} {est.memory.per_gpu_gib:8.1f} {err:+7.0%}  "
            + ", ".join(f"{k} {v:.1f}" for k, v in top)
        )
    for src in dict.fromkeys(by_source):
        e = by_source[src]
        print(
            f"  {src:16s} median |error| {statistics.median(abs(x) for x in e):.0%}, signed "
            f"{statistics.median(e):+.0%}, over {len(e)} rows"
        )
    print(
        f"all rows: median |error| {statistics.median(abs(e) for e in errs):.0%}, signed "
        f"{statistics.median(errs):+.0%}, over {len(errs)} rows"
    )


def _longest_that_fits(argv: list[str]) -> int:
    """The longest --seq-len (to 16 tokens) for which ``gpuwise estimate ARGV`` says it fits."""
    from gpuwise.cli.estimate import estimate_argv

    def fits(seq: int) -> bool:
        return estimate_argv([*argv, "--seq-len", str(seq)]).memory.fits

    lo, hi = 0, 1 << 21
    while hi - lo > 16:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def print_max_context() -> None:
    """Published longest trainable sequences (validation_max_context.csv) against gpuwise's."""
    import shlex
    from importlib import resources

    from gpuwise.base.datafiles import commented_csv

    text = (
        resources.files("gpuwise.estimate")
        .joinpath("data/validation_max_context.csv")
        .read_text("utf-8")
    )
    print("\nlongest sequence that trains (validation only; QLoRA, batch 1)")
    print(f"{'source':14s} {'GPU':10s} {'published':>10s} {'gpuwise':>8s} {'ratio':>6s}")
    for r in commented_csv(text):
        argv = [*shlex.split(r["options"]), "--gpu", r["gpu"]]
        ours = _longest_that_fits(argv)
        if r["measured_max_seq"] == "OOM":  # no length trained
            said = "fits nothing" if ours == 0 else f"says up to {ours:,d} fits"
            print(f"{r['source_id']:14s} {r['gpu']:10s} {'OOM':>10s} {ours:8,d}  gpuwise {said}")
            continue
        theirs = int(r["measured_max_seq"])
        print(f"{r['source_id']:14s} {r['gpu']:10s} {theirs:10,d} {ours:8,d} {ours / theirs:5.2f}x")


if __name__ == "__main__":
    main()
