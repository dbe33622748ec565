"""Step time from parts you can name, and goodput kept apart from speed.

A training step is the sum of

- **matmuls**: the linear layers' FLOPs (``6·N`` per token, ``4·N + 6·N_adapter`` for LoRA; PaLM
  App. B) at the GPU's *achievable* matmul rate: dense peak × the measured fraction in
  ``data/achievable.csv`` (MAMF table), replaced by ``bench --calibrate``'s ``matmul_efficiency``.
  fp8 speeds up only the blocks' linear layers (Transformer Engine and torchao keep the LM head and
  attention in bf16); their FLOPs run at the fp8 peak × fp8 fraction;
- **attention**: ``12·L·H·Q·T`` FLOPs per token (PaLM App. B), halved for causal decoders because
  FlashAttention skips masked blocks, at the FlashAttention kernel's efficiency (FlashAttention-2 on
  A100: 50–73% of peak forward+backward, Dao 2023 abstract; on H100 FlashAttention-2 reaches about
  35%, Shah et al. 2024 "FlashAttention-3", abstract); FlashAttention-1-era kernels (FlashAttention-1,
  its Triton port) at half that (FlashAttention-2 is "around 2×" faster, Dao 2023, abstract).
  Without FlashAttention the score matrix is written and read from memory (memory-bound, below);
- **memory-bound work** (norms, activations, residuals, rotary, softmax without FlashAttention,
  cross-entropy over the logits): the activation bytes a layer keeps (:func:`.memory.layer_activation_bytes`)
  are written in the forward pass, read and their gradients written in the backward pass: 3× that
  traffic at the achievable memory bandwidth;
- **optimizer step**: the optimizer reads and writes its states once per step (memory-bound);
- **recompute**: full recompute runs the forward pass again (a third more matmul and attention
  FLOPs, a third more memory traffic); selective recompute reruns only the attention core
  (Korthikanti et al. 2022);
- **QLoRA dequantisation**: every pass over the 4-bit base weights (forward, backward, the recomputed
  forward) dequantises them: :data:`QLORA_DEQUANT_BYTES` per base parameter at the achievable memory
  bandwidth, per micro-batch — a fixed cost per pass, so its share falls as sequences grow (LitGPT's
  resource tables, Lightning-AI/litgpt ``tutorials/resource-tables.md``, A100-40GB, micro-batch 1, time
  LoRA with ``bnb.nf4`` at 1.09× (phi-1.5) to 2.00× (Llama 2 13B) the bf16 LoRA step);
- **fp8 casts**: PyTorch-native float8 (torchao, ``--fp8-recipe tensorwise|rowwise``) casts every
  linear layer's input, output gradient and weight to fp8 in kernels of its own: :data:`FP8_CAST_BYTES`
  per element at the achievable memory bandwidth (Transformer Engine fuses them: nothing added);
- **exposed communication and the pipeline bubble**: :mod:`.throughput`.

What no formula gives (kernel launch gaps, data loading, framework overheads) is one multiplicative
**framework factor** per GPU and workload class, fitted in log space to the measured per-step
throughputs in ``data/measured_throughput.csv`` (:mod:`.measured`); the accuracy benchmark refits
it leaving each source out.

``fp32`` on GPUs with TF32 tensor cores: PyTorch runs convolutions in TF32 by default
(``torch.backends.cudnn.allow_tf32 = True``) but matmuls in full FP32 unless asked
(``torch.backends.cuda.matmul.allow_tf32 = False`` since PyTorch 1.12; ``torch.set_float32_matmul_precision``),
so a CNN in fp32 is estimated at the TF32 peak and a transformer at the FP32 peak, with a note.

**Goodput** (share of wall-clock time that advances training) is separate from speed: Meta
reports 419 unexpected interruptions in a 54-day window on 16,384 H100s and more than 90%
effective training time (Llama 3 paper, Dubey et al. 2024, Sec. 3.3.4). That gives an interruption
rate per GPU-hour and, from the 90%, the time each interruption costs (restart, lost work,
checkpoint reload). Goodput = run time ÷ (run time + start-up + interruptions × cost), so it falls
as GPU count and run length grow the number of interruptions, and a short job pays its start-up.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
from importlib import resources
from typing import NamedTuple

from gpuwise.base.datafiles import commented_csv
from gpuwise.hardware import GpuSpec

# Interruptions per GPU-hour: 419 unexpected interruptions in 54 days on 16,384 GPUs
# (Llama 3 paper, arXiv:2407.21783, Sec. 3.3.4 "Reliability and Operational Challenges").
INTERRUPTIONS_PER_GPU_HOUR = 419 / (54 * 24 * 16384)
# Same source: "achieved higher than 90% effective training time". If all of the other 10% went to
# the interruptions, each cost (1/0.9 - 1) / (rate × 16,384) hours.
_LLAMA3_EFFECTIVE = 0.90
HOURS_LOST_PER_INTERRUPTION = (1 / _LLAMA3_EFFECTIVE - 1) / (INTERRUPTIONS_PER_GPU_HOUR * 16384)
# Start-up of one job (scheduling, container start, checkpoint load, warm-up/compile): an assumption
# (not a published figure), 0.1 h.
STARTUP_HOURS = 0.1
# Achievable memory bandwidth as a fraction of the datasheet figure: an assumption (0.8), replaced by
# calibration.json's memory_bandwidth_efficiency (`gpuwise bench --calibrate` measures a large copy).
DEFAULT_BANDWIDTH_FRACTION = 0.8
# FlashAttention forward+backward efficiency (fraction of the dense 16-bit peak) by architecture:
# FlashAttention-2 on A100 "50-73% of the theoretical maximum FLOPs/s" (Dao 2023, abstract): midpoint
# 0.6; on H100 "only 35% utilization" (Shah et al. 2024, FlashAttention-3, abstract). Other
# architectures: the A100 figure (not measured).
ATTENTION_EFFICIENCY = {"Hopper": 0.35, "Ampere": 0.6}
_ATTENTION_DEFAULT = 0.6
# FlashAttention-1-era kernels (FlashAttention-1, its Triton port) take twice FlashAttention-2's time:
# FlashAttention-2 "yield[s] around 2x speedup compared to FlashAttention" (Dao 2023, abstract).
FLASH1_SLOWDOWN = 2.0
# FlashAttention-3 on Hopper: "speedup on H100 GPUs by 1.5-2.0x with FP16" over FlashAttention-2
# (Shah et al. 2024, abstract): the midpoint, 1.75x. It runs on Hopper only.
FLASH3_SPEEDUP = 1.75
# Memory traffic of activations: written in forward, read and gradient written in backward.
ACTIVATION_TRAFFIC_PASSES = 3.0
# CNNs in eager mode (conv -> BatchNorm -> ReLU, unfused): per conv the forward writes the conv output,
# BatchNorm reads it twice (statistics, normalise) and writes, ReLU reads and writes, the next conv reads:
# 7 accesses over the 3 tensors kept for backward, i.e. 7/3 passes over the kept bytes forward; backward
# reads each kept tensor and writes and reads its gradient: 7 passes in all for training (a count, not a fit).
CNN_INFER_TRAFFIC_PASSES = 7.0 / 3.0
CNN_TRAIN_TRAFFIC_PASSES = 7.0
# Optimizer-step bytes touched per trainable parameter (read + write): AdamW mixed precision reads
# 16-bit grads, fp32 master, m, v and writes master, m, v and the 16-bit weights: 2+4+4+4 + 4+4+4+2.
OPTIMIZER_TRAFFIC_BYTES = {"adamw": 28.0, "adamw8bit": 16.0, "sgd": 20.0, "adafactor": 16.0}
# QLoRA step ÷ LoRA step: median of LitGPT's four measured pairs (1.09, 1.47, 1.56, 2.00). Kept for
# reference; the step model counts the dequantisation traffic instead (QLORA_DEQUANT_BYTES).
QLORA_DEQUANT_FACTOR = (1.47 + 1.56) / 2
# QLoRA dequantises every 4-bit base weight each time a pass uses it (bitsandbytes dequantize_4bit before
# the 16-bit matmul: forward, backward for the input gradient, and the recomputed forward): it reads the
# NF4 weight (0.5 byte) and writes the bf16 copy (2 bytes), which the matmul reads back (2 bytes) —
# 4.5 bytes per base parameter per pass at the achievable memory bandwidth (a count, not a fit). A cost
# per pass over the weights, not per token: the longer the sequence, the smaller its share of the step.
QLORA_DEQUANT_BYTES = 0.5 + 2.0 + 2.0


# PyTorch-native float8 (torchao Float8Linear) casts each linear layer's bf16 input, weight and output
# gradient to fp8 in kernels of its own: (bytes per element of every linear's input and output gradient,
# bytes per weight element per micro-batch), from torchao's own roofline of those casts
# (pytorch/ao torchao/testing/float8/roofline_utils.py, get_tensor_memory_traffic_ovhd_s, commit
# 042170ff), compiled (the max-abs pass of an activation fused into the kernel before it, as its
# enable_fusion_modeling counts). tensorwise: activations read 2 bytes and write fp8 twice (row- and
# column-major) = 4; weights read 2 for the max-abs, then 2 + 1 for each of the two casts = 8. rowwise:
# activations 1 + 2 (first kernel, one read fused) + 2 + 1 = 6; weights 2 + 1, 2 + 2 (transpose),
# 2 + 1 = 10. Transformer Engine (``te``) fuses its casts into the neighbouring kernels (a norm writes
# fp8): nothing is added, and what remains is in the framework factor fitted to its rows.
# A recomputed forward casts again what the forward cast: the inputs (the activation bytes) and the
# weight's forward cast — tensorwise its max-abs pass and the row-major cast (2 + 3), rowwise the
# row-major cast (2 + 1) — by the same roofline.
class Fp8CastBytes(NamedTuple):
    """Bytes one fp8 recipe moves to cast to fp8, per element."""

    activation: float
    """Of every linear's input (forward) and output gradient (backward)."""
    weight: float
    """Of the weight, per micro-batch (forward and backward casts)."""
    weight_forward: float
    """Of the weight, what a recomputed forward casts again."""


FP8_CAST_BYTES: dict[str, Fp8CastBytes] = {
    "te": Fp8CastBytes(0.0, 0.0, 0.0),
    "tensorwise": Fp8CastBytes(4.0, 8.0, 5.0),
    "rowwise": Fp8CastBytes(6.0, 10.0, 3.0),
}


@dataclass(frozen=True)
class Achievable:
    """The matmul fraction of one GPU/precision and where it comes from."""

    fraction: float
    """Achieved / dense datasheet peak for large GEMMs."""
    basis: str
    """Source in words."""
    measured: bool
    """False when the GPU has no row and the median of the measured rows stands in."""


@functools.lru_cache(maxsize=1)
def _achievable_table() -> dict[tuple[str, str], tuple[float, str]]:
    text = resources.files("gpuwise.estimate").joinpath("data/achievable.csv").read_text("utf-8")
    return {
        (r["gpu"], r["precision"]): (float(r["matmul_fraction"]), r["source"])
        for r in commented_csv(text)
    }


def achievable_matmul(gpu: GpuSpec, precision: str) -> Achievable:
    """Achievable matmul fraction for ``gpu`` at ``precision`` (fp32/tf32 fall back to bf16's)."""
    table = _achievable_table()
    for key in ((gpu.name, precision), (gpu.name, "bf16"), (gpu.name, "fp16")):
        if key in table:
            frac, src = table[key]
            return Achievable(frac, f"{src}", True)
    nvidia = [v for (name, p), (v, _) in table.items() if p == "bf16" and not name.startswith("MI")]
    med = statistics.median(nvidia)
    return Achievable(
        med,
        f"{gpu.name} has no measured matmul rate: median of measured NVIDIA GPUs "
        f"({med:.0%}); run `gpuwise bench --calibrate` on it",
        False,
    )


def attention_efficiency(gpu: GpuSpec, flash_version: int = 2) -> float:
    """FlashAttention's forward+backward rate as a fraction of the dense 16-bit peak."""
    eff = ATTENTION_EFFICIENCY.get(gpu.architecture or "", _ATTENTION_DEFAULT)
    if flash_version == 1:
        return eff / FLASH1_SLOWDOWN
    if flash_version == 3:
        return eff * FLASH3_SPEEDUP
    return eff


@dataclass(frozen=True)
class StepParts:
    """Seconds per optimizer step, by part (all GPUs work in parallel; figures are per GPU)."""

    matmul_s: float
    attention_s: float
    """Attention core, its recompute included (before ``attention_factor``)."""
    memory_s: float
    recompute_s: float
    """Recomputed matmuls and memory-bound work (attention recompute is in ``attention_s``)."""
    dequant_s: float
    optimizer_s: float
    framework_factor: float
    """Multiplies the compute parts (what the named parts miss; fitted, see :mod:`.measured`)."""
    attention_factor: float = 1.0
    """Multiplies the attention time (the FlashAttention version in use; fitted, see :mod:`.measured`)."""
    fp8_cast_s: float = 0.0
    """PyTorch-native float8's casts to fp8 (:data:`FP8_CAST_BYTES`), at the memory bandwidth."""

    @property
    def raw_other_s(self) -> float:
        """Compute parts other than attention and the optimizer, before the factors."""
        return self.matmul_s + self.memory_s + self.recompute_s + self.dequant_s + self.fp8_cast_s

    @property
    def compute_s(self) -> float:
        raw = self.raw_other_s + self.attention_factor * self.attention_s
        return raw * self.framework_factor + self.optimizer_s

    def as_dict(self) -> dict[str, float]:
        return {
            "matmul_s": self.matmul_s,
            "attention_s": self.attention_s,
            "memory_bound_s": self.memory_s,
            "recompute_s": self.recompute_s,
            "dequant_s": self.dequant_s,
            "fp8_cast_s": self.fp8_cast_s,
            "optimizer_s": self.optimizer_s,
            "framework_factor": self.framework_factor,
            "attention_factor": self.attention_factor,
        }


def goodput(gpus: int, run_hours: float | None) -> float:
    """Share of wall-clock time that advances training for a run of ``run_hours`` of pure stepping."""
    if run_hours is None or run_hours <= 0:
        run_hours = 24.0 * 30  # unknown length: a month-long run
    lost = INTERRUPTIONS_PER_GPU_HOUR * gpus * run_hours * HOURS_LOST_PER_INTERRUPTION
    return run_hours / (run_hours + STARTUP_HOURS + lost)
