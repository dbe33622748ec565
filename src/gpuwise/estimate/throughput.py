"""FLOPs, MFU, communication and time: how long a workload takes on a GPU setup.

FLOPs per token (PaLM, Chowdhery et al. 2022, App. B): ``6·N + 12·L·H·Q·T`` for training, with N
the matmul parameters (input embeddings excluded), L layers, H heads, Q head width, T sequence
length. LoRA/QLoRA skip the frozen weights' gradients: ``4·N + 12·L·H·Q·T + 6·N_adapter``.

The estimator's time comes from :mod:`.steptime` (step time from named parts); this module gives it
FLOPs and communication. :func:`mfu_model`, the older whole-run fit kept for
``benchmarks/estimate_gpu_hours.py``, fits
``log MFU = b0 + b1·log(balance/153) + b2·log(hidden/4096)`` to the published pretraining runs in
``data/published_runs.csv`` (GPU-hours as reported, so restarts and downtime are included), where
``balance`` = dense peak FLOP/s ÷ memory bandwidth (FLOP/byte; A100-80GB = 153) stands for the GPU
generation. Recompute lowers MFU by the extra forward pass it runs (Korthikanti et al. 2022).

Communication is modelled explicitly, because published runs all had NVLink + InfiniBand and a
user's PCIe box does not: ring all-reduce moves ``2·(n-1)/n·S`` bytes per GPU (Thakur et al. 2005;
NCCL docs "Performance: busBW"), done hierarchically — inside a node over NVLink (half the
bidirectional NVLink figure) or PCIe, across nodes over the node's network. Gradient all-reduce
overlaps with the backward pass (Li et al. 2020, "PyTorch Distributed", Sec. 3.2.3); only the part
longer than the backward pass adds time. ZeRO-3/FSDP moves 1.5x the data of DDP per micro-batch
(Rajbhandari et al. 2020, Sec. 7.2). Tensor parallelism adds 4 all-reduces of ``b·s·h`` activations
per layer per micro-batch that do not overlap (Shoeybi et al. 2019, Sec. 3). A pipeline adds the
1F1B bubble ``(p-1)/m`` (Narayanan et al. 2021, Sec. 2.2).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from importlib import resources

from gpuwise.base.datafiles import commented_csv
from gpuwise.errors import EstimateError, HardwareError
from gpuwise.estimate.model import ModelConfig
from gpuwise.hardware import GpuSpec

# PCIe x16 bandwidth per direction in GB/s by generation (PCI-SIG: 8/16/32 GT/s per lane, 128b/130b):
# gen3 15.75, gen4 31.5, gen5 63, gen6 121 (PAM4, FLIT mode).
PCIE_X16_GB_S = {3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}
# Default network bandwidth per node: 400 Gbit/s, the EFA bandwidth of an AWS p4d.24xlarge
# (aws.amazon.com/ec2/instance-types/p4). H100 nodes often have 3200 Gbit/s (p5); pass yours.
DEFAULT_INTER_NODE_GBIT_S = 400.0
# The network a GPU usually has when none is given: the AWS instance type that carries it, with that
# instance's figure from the provider page (the same figures as gpuwise/catalog/data/instance_network.csv,
# which `plan` and `estimate --instance-type` read; a test keeps the two equal).
TYPICAL_INSTANCE: dict[str, tuple[str, str, float]] = {
    "B200": ("aws", "p6-b200.48xlarge", 3200.0),
    "H200": ("aws", "p5e.48xlarge", 3200.0),
    "H100": ("aws", "p5.48xlarge", 3200.0),
    "A100-80GB": ("aws", "p4de.24xlarge", 400.0),
    "A100": ("aws", "p4d.24xlarge", 400.0),
    "V100": ("aws", "p3dn.24xlarge", 100.0),
    "L40S": ("aws", "g6e.48xlarge", 400.0),
    "L4": ("aws", "g6.48xlarge", 100.0),
    "A10G": ("aws", "g5.48xlarge", 100.0),
    "T4": ("aws", "g4dn.metal", 100.0),
}
# Other GPUs by generation: an NVLink-fabric Hopper/Blackwell node as the H100/B200 instances above,
# an NVLink Ampere node as the A100's, anything else as a PCIe-card instance (g5/g6/g4dn: 100 Gbit/s).
_GENERATION_GBIT_S = {"Hopper": 3200.0, "Blackwell": 3200.0, "Blackwell Ultra": 3200.0}


def default_inter_node(gpu: GpuSpec) -> tuple[float, str]:
    """(Gbit/s per node, basis in words) when no network is given: the GPU's usual instance."""
    if gpu.name in TYPICAL_INSTANCE:
        cloud, itype, gbit = TYPICAL_INSTANCE[gpu.name]
        return (
            gbit,
            f"{gbit:g} Gbit/s per node, as {cloud} {itype} (the {gpu.name}'s usual instance; --instance-type or --inter-node-gbps to change)",
        )
    if gpu.has_gpu_fabric:
        gbit = _GENERATION_GBIT_S.get(gpu.architecture, DEFAULT_INTER_NODE_GBIT_S)
    else:
        gbit = 100.0
    return gbit, (
        f"{gbit:g} Gbit/s per node, usual for a {gpu.architecture} "
        f"{'NVLink' if gpu.has_gpu_fabric else 'PCIe'} node (--instance-type or --inter-node-gbps to change)"
    )


# The common 8-GPU server (NVIDIA HGX/DGX A100/H100): GPUs per node when none is given.
DEFAULT_GPUS_PER_NODE = 8
# GPUs that share one NVLink domain larger than an 8-GPU node: GB200 NVL72 puts 72 GPUs in one NVLink
# domain (nvidia.com/en-us/data-center/gb200-nvl72, the figures gpuwise's GB200 row divides by 72).
NVLINK_DOMAIN = {"GB200": 72}


def default_gpus_per_node(gpu: GpuSpec, gpus: int) -> int:
    """GPUs that share the NVLink/PCIe fabric when --gpus-per-node is not given."""
    return min(gpus, NVLINK_DOMAIN.get(gpu.name, DEFAULT_GPUS_PER_NODE))


# Selective recompute costs about a tenth of full recompute's overhead (Korthikanti et al. 2022,
# abstract: "reduces ... execution time overhead from activation recomputation by over 90%").
_SELECTIVE_OVERHEAD_SHARE = 0.1
# torchtitan op-level selective AC recomputes wk, wo and w3 of a Llama block: for Llama-2 13B
# (h = 5120, f = 13824, no GQA) that is (h·h + h·h + h·f) / (4·h·h + 3·h·f) ≈ 0.38 of its matmul FLOPs.
SELECTIVE_OP_MATMUL_SHARE = 0.38
_MFU_MIN, _MFU_MAX = 0.05, 0.65


def peak_flops(gpu: GpuSpec, precision: str) -> float:
    """Dense peak FLOP/s for ``precision``; errors say what the GPU lacks."""
    if precision == "fp8" and gpu.peak_fp8_tflops is None:
        raise EstimateError(
            f"{gpu.name} has no FP8 tensor cores",
            hint="use precision='bf16' (or a Hopper/Ada/Blackwell GPU)",
        )
    if precision == "bf16" and gpu.peak_bf16_tflops is None and gpu.peak_fp16_tflops is not None:
        raise EstimateError(
            f"{gpu.name} has no BF16 support", hint="use precision='fp16' on this GPU"
        )
    value = gpu.peak_tflops(precision)
    if value is None:
        raise HardwareError(
            f"{gpu.name}: no published {precision} peak",
            hint="add the figure to your gpus.csv (see `gpuwise gpus --help`) or pick another GPU",
        )
    return value * 1e12


def machine_balance(gpu: GpuSpec, precision: str = "bf16") -> float:
    """FLOP per byte of memory traffic the GPU can do at peak (the roofline ridge point)."""
    bw = gpu.memory_bandwidth_tb_s
    if bw is None:
        raise HardwareError(
            f"{gpu.name}: no published memory bandwidth",
            hint="add it to your gpus.csv or pick another GPU",
        )
    return peak_flops(gpu, precision) / (bw * 1e12)


# ------------------------------------------------------------------------------------------
# FLOPs


def attention_flops_per_token(m: ModelConfig, seq: float) -> float:
    """Training attention FLOPs per token: 12·L·H·Q·T (PaLM App. B)."""
    if not m.is_transformer:
        return 0.0
    return 12.0 * (m.layers + 2 * m.decoder_layers) * m.heads * m.d_head * seq


def training_flops_per_token(
    m: ModelConfig, seq: float, task: str, adapter_params: float = 0.0
) -> float:
    """Model FLOPs per trained token (no recompute counted)."""
    if m.arch == "cnn":
        return (
            3 * 2 * m.forward_gmacs_per_sample * 1e9
        )  # per sample: forward 2·MACs, backward 2x forward
    attn = attention_flops_per_token(m, seq)
    if task in ("lora", "qlora"):
        return 4.0 * m.matmul_params + attn + 6.0 * adapter_params
    return 6.0 * m.matmul_params + attn


def forward_flops_per_token(m: ModelConfig, context: float) -> float:
    """Inference forward FLOPs per token at ``context`` tokens of attention span: 2·N + 4·L·H·Q·T."""
    if m.arch == "cnn":
        return 2 * m.forward_gmacs_per_sample * 1e9
    return 2.0 * m.matmul_params + attention_flops_per_token(m, context) / 3


# ------------------------------------------------------------------------------------------
# MFU model fitted to published runs


@dataclass(frozen=True)
class PublishedRun:
    """One published pretraining run (a row of ``data/published_runs.csv``)."""

    name: str
    model: ModelConfig
    seq_len: int
    tokens: float
    gpu: str
    gpus: int | None
    gpu_hours: float
    source: str
    options: tuple[tuple[str, str], ...] = ()
    """The run's stack where its source states it, as workload options (``--tensor-parallel 4``
    → ``("tensor_parallel", "4")``); empty: the defaults."""

    def observed_mfu(self, gpu: GpuSpec) -> float:
        flops = training_flops_per_token(self.model, self.seq_len, "pretrain") * self.tokens
        return flops / (self.gpu_hours * 3600 * peak_flops(gpu, "bf16"))


def _flags(text: str) -> tuple[tuple[str, str], ...]:
    """``--tensor-parallel 4 --grad-ckpt full`` → (("tensor_parallel", "4"), ("grad_ckpt", "full"))."""
    words = text.split()
    if len(words) % 2 or any(not w.startswith("--") for w in words[::2]):
        raise ValueError(f"published_runs.csv options: expected `--flag value` pairs, got {text!r}")
    return tuple((f[2:].replace("-", "_"), v) for f, v in zip(words[::2], words[1::2], strict=True))


def load_published_runs() -> list[PublishedRun]:
    text = (
        resources.files("gpuwise.estimate").joinpath("data/published_runs.csv").read_text("utf-8")
    )
    runs = []
    for r in commented_csv(text):
        m = ModelConfig(
            name=r["name"],
            arch="decoder",
            hidden=int(r["hidden"]),
            layers=int(r["layers"]),
            heads=int(r["heads"]),
            kv_heads=int(r["kv_heads"] or 0),
            intermediate=int(r["intermediate"]),
            vocab=int(r["vocab"]),
            gated_mlp=r["gated_mlp"] == "true",
            tied_embeddings=r["tied"] == "true",
        )
        runs.append(
            PublishedRun(
                name=r["name"],
                model=m,
                seq_len=int(r["seq_len"]),
                tokens=float(r["tokens"]),
                gpu=r["gpu"],
                gpus=int(r["gpus"]) if r["gpus"] else None,
                gpu_hours=float(r["gpu_hours"]),
                source=r["source"],
                options=_flags(r.get("options") or ""),
            )
        )
    return runs


@dataclass(frozen=True)
class MfuModel:
    """``log MFU = b0 + b1·log(balance/153) + b2·log(hidden/4096)``, fitted by ridge least squares."""

    b0: float
    """Intercept: log MFU of an A100-80GB-like GPU on a 4096-wide model."""
    b_balance: float
    """Exponent on machine balance (newer GPUs: more FLOP/byte, lower MFU)."""
    b_hidden: float
    """Exponent on model width (wider GEMMs amortise memory-bound elementwise work)."""
    rows: int
    """Published runs the fit used."""

    def predict(self, balance: float, hidden: int) -> float:
        h = min(max(hidden, 512), 32768)  # do not extrapolate far beyond the data
        bal = min(
            max(balance, 150.0), 300.0
        )  # the published runs span 153 (A100-80GB) to 295 (H100)
        x1, x2 = math.log(bal / 153.0), math.log(h / 4096.0)
        return min(
            max(math.exp(self.b0 + self.b_balance * x1 + self.b_hidden * x2), _MFU_MIN), _MFU_MAX
        )


def fit_mfu_model(runs: list[PublishedRun], ridge: float = 0.5) -> MfuModel:
    """Fit :class:`MfuModel` to ``runs`` (ridge penalty on the slopes keeps 13 rows from overfitting)."""
    import numpy as np

    from gpuwise.hardware import find_gpu

    xs, ys = [], []
    for run in runs:
        gpu = find_gpu(run.gpu)
        xs.append(
            [1.0, math.log(machine_balance(gpu) / 153.0), math.log(run.model.hidden / 4096.0)]
        )
        ys.append(math.log(run.observed_mfu(gpu)))
    x, y = np.array(xs), np.array(ys)
    penalty = np.diag([0.0, ridge, ridge])
    coef = np.linalg.solve(x.T @ x + penalty, x.T @ y)
    return MfuModel(
        b0=float(coef[0]), b_balance=float(coef[1]), b_hidden=float(coef[2]), rows=len(runs)
    )


@functools.lru_cache(maxsize=1)
def mfu_model() -> MfuModel:
    """The MFU model fitted to all bundled published runs (fitted once per process)."""
    return fit_mfu_model(load_published_runs())


@functools.lru_cache(maxsize=1)
def cnn_mfu() -> tuple[float, int]:
    """(median MFU, rows) of the published single-GPU ResNet-50 runs in ``data/published_cnn_throughput.csv``."""
    import statistics

    from gpuwise.estimate.model import get_preset
    from gpuwise.hardware import find_gpu

    text = (
        resources.files("gpuwise.estimate")
        .joinpath("data/published_cnn_throughput.csv")
        .read_text("utf-8")
    )
    mfus = []
    for r in commented_csv(text):
        m = get_preset(r["model"])
        per_image = forward_flops_per_token(m, 1) * (3 if r["mode"] == "train" else 1)
        mfus.append(
            float(r["images_per_s"]) * per_image / peak_flops(find_gpu(r["gpu"]), r["precision"])
        )
    return statistics.median(mfus), len(mfus)


def recompute_factor(
    m: ModelConfig, seq: float, task: str, grad_ckpt: str, adapter_params: float = 0.0
) -> float:
    """MFU multiplier for recompute: model FLOPs / (model FLOPs + recomputed forward FLOPs)."""
    if grad_ckpt == "none":
        return 1.0
    model = training_flops_per_token(m, seq, task, adapter_params)
    extra = forward_flops_per_token(m, seq)  # the recomputed forward pass
    if grad_ckpt == "selective":
        extra *= _SELECTIVE_OVERHEAD_SHARE
    elif grad_ckpt == "selective-layer":  # every second block (torchtitan's default ac_freq)
        extra *= 0.5
    elif grad_ckpt == "selective-op":  # the unsaved matmuls (3 of 7 by count; see memory.py)
        extra *= SELECTIVE_OP_MATMUL_SHARE
    return model / (model + extra)


# ------------------------------------------------------------------------------------------
# communication


@dataclass(frozen=True)
class Network:
    """Where the bytes of a collective travel."""

    gpus_per_node: int
    """GPUs sharing a node (and its NVLink/PCIe fabric)."""
    intra_node_gb_s: float
    """Per-GPU bandwidth inside a node, one direction, GB/s."""
    inter_node_gb_s: float
    """Per-node network bandwidth, one direction, GB/s."""
    intra_kind: str
    """``NVLink``/``Infinity Fabric``/``ICI`` or ``PCIe gen N``."""


def network_for(gpu: GpuSpec, gpus_per_node: int, inter_node_gbit_s: float) -> Network:
    if gpu.has_gpu_fabric and gpu.nvlink_gb_s:
        intra, kind = gpu.nvlink_gb_s / 2, gpu.interconnect
    else:
        intra, kind = PCIE_X16_GB_S.get(gpu.pcie_gen or 4, 31.5), f"PCIe gen {gpu.pcie_gen or 4}"
    return Network(
        gpus_per_node=gpus_per_node,
        intra_node_gb_s=intra,
        inter_node_gb_s=inter_node_gbit_s / 8,
        intra_kind=kind,
    )


def allreduce_seconds(size_bytes: float, n: int, net: Network) -> float:
    """Hierarchical ring all-reduce of ``size_bytes`` over ``n`` GPUs: ``2(g-1)/g·S/B_intra``
    inside nodes of ``g`` GPUs plus ``2(k-1)/k·S/B_node`` across ``k`` nodes."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    g = min(n, net.gpus_per_node)
    k = math.ceil(n / g)
    t = 2 * (g - 1) / g * size_bytes / (net.intra_node_gb_s * 1e9) if g > 1 else 0.0
    if k > 1:
        t += 2 * (k - 1) / k * size_bytes / (net.inter_node_gb_s * 1e9)
    return t


# Per-collective latency (the α of α + n·β) from NCCL's own cost model, NVIDIA/nccl
# src/graph/tuning.cc (commit b647562), Simple protocol (the one NCCL picks for the megabyte messages
# of training): base latency 8.4 µs per ring collective, 0 per tree; per ring step 3.4 µs over NVLink,
# 5.7 µs over PCIe, 14.0 µs over the network; per tree step 28 µs inside a node and 28 µs across
# nodes. A ring all-reduce over n GPUs on k nodes takes 2(n-1) steps of which 2k cross the network,
# a ring all-gather or reduce-scatter n-1 steps of which k-1 do; a tree all-reduce
# 2·((n/k - 1)·intra + log2(k)·inter). NCCL runs the cheaper of ring and tree (all-reduce only; the
# others are rings). Each step waits at least 3 µs for the network proxy on multi-node rings (the
# same file's NET_OVERHEAD × 3 for Simple).
NCCL_BASE_US = {"ring": 8.4, "tree": 0.0}
NCCL_RING_STEP_US = {"nvlink": 3.4, "pcie": 5.7, "net": 14.0}
NCCL_TREE_STEP_US = {"nvlink": 28.0, "pcie": 28.0, "net": 28.0}
_NCCL_NET_OVERHEAD_US = 3.0


def collective_latency_s(kind: str, n: int, net: Network) -> float:
    """The latency (seconds) of one ``kind`` collective (``all-reduce``, ``all-gather``,
    ``reduce-scatter``) over ``n`` GPUs, nodes of ``net.gpus_per_node``: NCCL's model, above."""
    if n <= 1:
        return 0.0
    g = min(n, net.gpus_per_node)
    k = math.ceil(n / g)
    intra = NCCL_RING_STEP_US["nvlink" if not net.intra_kind.startswith("PCIe") else "pcie"]
    if k > 1:
        intra = max(intra, _NCCL_NET_OVERHEAD_US)
    if kind == "all-reduce":
        inter_steps = 2 * k if k > 1 else 0
        ring = max(0, 2 * (n - 1) - inter_steps) * intra + inter_steps * NCCL_RING_STEP_US["net"]
        tree_intra = NCCL_TREE_STEP_US[
            "nvlink" if not net.intra_kind.startswith("PCIe") else "pcie"
        ]
        tree = 2 * ((g - 1) * tree_intra + math.log2(k) * NCCL_TREE_STEP_US["net"])
        us = min(NCCL_BASE_US["ring"] + ring, NCCL_BASE_US["tree"] + tree)
    else:
        inter_steps = k - 1
        us = NCCL_BASE_US["ring"] + max(0, n - 1 - inter_steps) * intra
        us += inter_steps * NCCL_RING_STEP_US["net"]
    return us * 1e-6


# Message sizes: how many collectives a step's gradient (and, sharded, parameter) traffic is cut into,
# by stack. PyTorch DDP buckets 25 MiB (DistributedDataParallel bucket_cap_mb default, PyTorch docs);
# Megatron-Core max(40M, 1M × data-parallel size) parameters per bucket (DistributedDataParallelConfig
# .bucket_size default); DeepSpeed ZeRO 5e8 elements (reduce_bucket_size / allgather_bucket_size
# defaults, DeepSpeed configuration docs); FSDP (torchtitan, llm-foundry, fms-fsdp, lit-gpt, Hugging
# Face with FSDP) one all-gather per wrapped block forward and backward and one reduce-scatter backward.
DDP_BUCKET_BYTES = 25 * 2**20
DEEPSPEED_BUCKET_ELEMENTS = 5e8


def gradient_buckets(stack: str, zero: int, params: float, grad_bytes: float, dp: int) -> float:
    """Collectives one step's gradient reduction is cut into (``params`` trainable per model copy)."""
    if stack == "megatron":
        return max(1.0, math.ceil(params / max(40e6, 1e6 * dp)))
    if stack == "deepspeed" and zero >= 1:
        return max(1.0, math.ceil(params / DEEPSPEED_BUCKET_ELEMENTS))
    return max(1.0, math.ceil(params * grad_bytes / DDP_BUCKET_BYTES))
