"""The torch side of the GPU proof: the small GPT, its measured peak memory and tokens/s, a plain
large ``tensor.copy_``, and the checkpoint stall of a large state.

torch is imported inside the functions (``import gpuwise.bench.proof`` stays light). Everything
here also runs on the CPU at tiny sizes, which is how the tests check that the measuring code
counts parameters and tokens correctly; only on CUDA are the memory figures meaningful.
"""

from __future__ import annotations

import gc
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from gpuwise.bench.proof.gpt import GptShape, TrainConfig


def _torch() -> Any:
    import torch

    return torch


def build_gpt(shape: GptShape, device: Any = "cpu", recompute: str = "none") -> Any:
    """A GPT-2 shaped decoder (nanoGPT-like, no dropout): token + learned position embeddings,
    pre-LayerNorm blocks with ``scaled_dot_product_attention`` (causal), a 4× GELU MLP, a final
    LayerNorm and an output head tied to the token embedding. ``recompute="full"`` checkpoints
    every block (``torch.utils.checkpoint``, non-reentrant)."""
    torch = _torch()
    nn, functional = torch.nn, torch.nn.functional
    from torch.utils.checkpoint import checkpoint

    module: Any = nn.Module

    class Block(module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            h = shape.hidden
            self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
            self.fc, self.out = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

        def forward(self, x: Any) -> Any:
            b, s, h = x.shape
            q, k, v = (
                t.view(b, s, shape.heads, h // shape.heads).transpose(1, 2)
                for t in self.qkv(self.ln1(x)).split(h, dim=2)
            )
            y = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, s, h))
            return x + self.out(functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class Gpt(module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(shape.vocab, shape.hidden)
            self.pos = nn.Embedding(shape.max_seq_len, shape.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(shape.layers))
            self.ln = nn.LayerNorm(shape.hidden)
            # GPT-2's initialisation: the tied head starts near uniform
            for emb in (self.tok, self.pos):
                nn.init.normal_(emb.weight, std=0.02)

        def forward(self, idx: Any, targets: Any) -> Any:
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = checkpoint(block, x, use_reentrant=False) if recompute == "full" else block(x)
            logits = functional.linear(self.ln(x), self.tok.weight)  # tied head
            return functional.cross_entropy(logits.float().view(-1, shape.vocab), targets.view(-1))

    return Gpt().to(device)


def count_params(model: Any) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def _sync(device: Any) -> None:
    torch = _torch()
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def measure_training(
    config: TrainConfig, device: Any = "cuda", warmup: int = 3, steps: int = 10
) -> dict[str, Any]:
    """Train ``config`` with AdamW on random tokens: ``warmup`` steps (optimizer state allocated,
    kernels chosen), then ``steps`` timed steps over which the peak memory is read.

    Returns params, tokens_per_s, step_s, loss and (CUDA only) peak_allocated_bytes and
    peak_reserved_bytes; None for the memory figures on the CPU. The model is freed before the
    next configuration (the caching allocator's blocks are returned)."""
    torch = _torch()
    if warmup < 1 or steps < 1:
        raise ValueError("warmup and steps must be ≥ 1 (the peak is read after warm-up)")
    result = _train(config, torch.device(device), warmup, steps)
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
    return result


def _train(config: TrainConfig, dev: Any, warmup: int, steps: int) -> dict[str, Any]:
    torch = _torch()
    cuda = dev.type == "cuda"
    model = build_gpt(config.shape, dev, config.recompute)
    params = count_params(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cpu").manual_seed(0)
    idx = torch.randint(
        0, config.shape.vocab, (config.micro_batch, config.seq_len + 1), generator=gen
    ).to(dev)
    x, y = idx[:, :-1], idx[:, 1:].contiguous()
    autocast_dtype = torch.bfloat16 if config.precision == "bf16" else None

    def step() -> float:
        with torch.autocast(dev.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    for _ in range(warmup):
        step()
    _sync(dev)
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    start = time.perf_counter()
    losses = [step() for _ in range(steps)]
    _sync(dev)
    seconds = time.perf_counter() - start
    return {
        "params": params,
        "tokens_per_s": config.tokens_per_step * steps / seconds,
        "step_s": seconds / steps,
        "loss": losses[-1],
        "peak_allocated_bytes": int(torch.cuda.max_memory_allocated(dev)) if cuda else None,
        "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(dev)) if cuda else None,
    }


def plain_copy_gb_s(device: Any = "cuda", nbytes: int = 1024**3, iters: int = 20) -> float:
    """GB/s of a plain ``b.copy_(a)`` of ``nbytes`` fp32, counting read + write (as ``gpuwise
    bench``'s ``memory.copy``), after 3 warm-up copies."""
    torch = _torch()
    a = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    _sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        b.copy_(a)
    _sync(device)
    return float(2 * a.numel() * 4 * iters / (time.perf_counter() - start) / 1e9)


def build_state(params: int, device: Any) -> tuple[Any, Any]:
    """A model of about ``params`` fp32 parameters (square 4096-wide linears, fewer for small
    counts) with its AdamW moments allocated: ``12 × params`` bytes of training state."""
    torch = _torch()
    width = 4096 if params >= 4096 * 4096 else max(8, int(params**0.5))
    layers = max(1, round(params / (width * width)))
    model = torch.nn.Sequential(
        *[torch.nn.Linear(width, width, bias=False) for _ in range(layers)]
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():  # optimizer state without a forward pass
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return model, opt


def checkpoint_stall(params: int, device: Any, scratch: Path, repeats: int = 2) -> dict[str, Any]:
    """Seconds a save blocks the loop: ``torch.save`` (temporary name, fsync, rename) vs
    :class:`gpuwise.train.Checkpointer` (async); medians of ``repeats`` saves each. The first
    async save, which allocates the shared host buffer, is reported apart."""
    torch = _torch()
    from gpuwise.train import Checkpointer

    model, opt = build_state(params, device)
    state_bytes = sum(p.numel() * p.element_size() * 3 for p in model.parameters())
    root = Path(tempfile.mkdtemp(prefix="gpuwise-proof-ckpt-", dir=scratch))
    try:
        sync_s = []
        for _ in range(repeats):
            start = time.perf_counter()
            tmp, final = root / "sync.pt.tmp", root / "sync.pt"
            with open(tmp, "wb") as f:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
            sync_s.append(time.perf_counter() - start)
            final.unlink()
        stalls, durable = [], []
        with Checkpointer(root / "ckpt", keep_last=2) as ck:
            first = ck.save(1, model=model, optimizer=opt).stall_s
            ck.wait()
            for i in range(repeats):
                start = time.perf_counter()
                stalls.append(ck.save(i + 2, model=model, optimizer=opt).stall_s)
                ck.wait()
                durable.append(time.perf_counter() - start)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "params": count_params(model),
        "state_bytes": int(state_bytes),
        "device": str(device),
        "sync_save_s": statistics.median(sync_s),
        "async_first_stall_s": first,
        "async_stall_s": statistics.median(stalls),
        "async_durable_s": statistics.median(durable),
    }
