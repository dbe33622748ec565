"""Short training-throughput runs: a GPT-style and a ResNet-style model in plain torch,
with AMP on or off, giving achieved TFLOP/s and MFU.

FLOPs per step are counted, not assumed: ``torch.utils.flop_counter.FlopCounterMode`` counts
the matmuls and convolutions of one forward+backward step (model FLOPs, no recompute). MFU =
achieved FLOP/s ÷ datasheet dense peak of the precision the matmuls ran in (PaLM, Chowdhery et
al. 2022, Appendix B). Both models are written here (torchvision has no CPU wheel on our CI).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Literal

Model = Literal["gpt", "resnet"]


@dataclass(frozen=True)
class TrainSize:
    """Model and batch dimensions of one run."""

    width: int
    """GPT: embedding width; ResNet: channels of the first stage."""
    depth: int
    """GPT: transformer blocks; ResNet: residual blocks per stage (3 stages)."""
    batch: int
    """Samples per step."""
    seq_len: int = 0
    """GPT: tokens per sample."""
    image: int = 0
    """ResNet: image side in pixels."""
    vocab: int = 0
    """GPT: vocabulary size."""
    steps: int = 3
    """Timed steps (after one warm-up step)."""


def _gpt(size: TrainSize) -> Any:
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.heads = heads

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            y = (
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
                .transpose(1, 2)
                .reshape(b, t, d)
            )
            x = x + self.proj(y)
            out: torch.Tensor = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
            return out

    class Gpt(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d = size.width
            self.tok, self.pos = nn.Embedding(size.vocab, d), nn.Embedding(size.seq_len, d)
            self.blocks = nn.Sequential(*[Block(d, max(1, d // 64)) for _ in range(size.depth)])
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, size.vocab, bias=False)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            pos = torch.arange(idx.shape[1], device=idx.device)
            out: torch.Tensor = self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))
            return out

    return Gpt()


def _resnet(size: TrainSize) -> Any:
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Basic(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.short = (
                nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                if stride != 1 or cin != cout
                else nn.Identity()
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = F.relu(self.b1(self.c1(x)))
            out: torch.Tensor = F.relu(self.b2(self.c2(y)) + self.short(x))
            return out

    class ResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            w = size.width
            self.stem = nn.Sequential(
                nn.Conv2d(3, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU()
            )
            layers: list[nn.Module] = []
            cin = w
            for stage, cout in enumerate((w, 2 * w, 4 * w)):
                for i in range(size.depth):
                    layers.append(Basic(cin, cout, 2 if stage and i == 0 else 1))
                    cin = cout
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(cin, 1000)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.fc(
                torch.flatten(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1)
            )
            return out

    return ResNet()


@dataclass(frozen=True)
class TrainRun:
    """One run's outcome."""

    flops_per_step: float
    """Counted model FLOPs of one forward+backward step."""
    seconds_per_step: float
    """Best measured step time."""
    samples_per_step: int
    """Samples (sequences or images) per step."""
    tokens_per_step: int
    """Tokens per step (GPT) or 0."""
    amp_dtype: str | None
    """``bf16``/``fp16`` under AMP, None without."""

    @property
    def tflops(self) -> float:
        return self.flops_per_step / self.seconds_per_step / 1e12


def amp_dtype_for(device: Any) -> str:
    """bf16 where the device supports it (Ampere and newer, CPUs), else fp16."""
    import torch

    if getattr(device, "type", "cpu") == "cuda" and not torch.cuda.is_bf16_supported():
        return "fp16"
    return "bf16"


def train_run(model_kind: Model, size: TrainSize, device: Any, *, amp: bool) -> TrainRun:
    """Train ``size.steps`` steps of a fresh model on random data; count FLOPs, time the steps."""
    import torch
    from torch.nn import functional as F
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model = (_gpt(size) if model_kind == "gpt" else _resnet(size)).to(device)
    opt = torch.optim.AdamW(
        model.parameters(), lr=1e-4, fused=getattr(device, "type", "") == "cuda"
    )
    if model_kind == "gpt":
        x = torch.randint(0, size.vocab, (size.batch, size.seq_len), device=device)
        y = torch.randint(0, size.vocab, (size.batch, size.seq_len), device=device)
    else:
        x = torch.randn(size.batch, 3, size.image, size.image, device=device)
        y = torch.randint(0, 1000, (size.batch,), device=device)
    amp_name = amp_dtype_for(device) if amp else None
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp_name or "")
    dev_type = getattr(device, "type", "cpu")
    scaler = torch.amp.GradScaler(dev_type, enabled=amp_name == "fp16")

    def autocast() -> Any:
        return (
            torch.autocast(dev_type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
        )

    def step() -> None:
        with autocast():
            out = model(x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    # fp32 means fp32: no TF32 tensor cores in the no-AMP run, so the fp32 peak is the right one.
    prev = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        counter = FlopCounterMode(display=False)
        with counter:
            step()  # also the warm-up step
        flops = float(counter.get_total_flops())
        _sync(device)
        best = float("inf")
        for _ in range(size.steps):
            t0 = time.perf_counter()
            step()
            _sync(device)
            best = min(best, time.perf_counter() - t0)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = prev
    tokens = size.batch * size.seq_len if model_kind == "gpt" else 0
    return TrainRun(flops, max(best, 1e-9), size.batch, tokens, amp_name)


def _sync(device: Any) -> None:
    import torch

    if getattr(device, "type", "cpu") == "cuda":
        torch.cuda.synchronize()
