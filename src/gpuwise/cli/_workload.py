"""Workload flags shared by ``gpuwise estimate`` and ``gpuwise plan``.

Each flag is an ``Annotated`` type; a command lists the ones it takes and passes the values to
:func:`workload_from_cli`, which returns a :class:`gpuwise.estimate.Workload`::

    from gpuwise.cli._workload import ModelOpt, ParamsOpt, TaskOpt, ..., workload_from_cli

    def plan(model: ModelOpt = None, params: ParamsOpt = None, task: TaskOpt = "pretrain", ...):
        from gpuwise.cli._workload import workload_from_cli
        wl = workload_from_cli(model=model, params=params, task=task, ...)

Numbers are taken as text so ``7B``, ``2e12`` and ``1.5T`` work; the library parses and checks
them (bad values raise InputError → exit 2). Only typer and the standard library are imported here.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from gpuwise.estimate import Workload

_W = "Workload"
_P = "Parallelism and memory"
_I = "Inference"

ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="Model preset (see --list-models), or a path to a Hugging Face config.json.",
        rich_help_panel=_W,
    ),
]
ParamsOpt = Annotated[
    str | None,
    typer.Option(
        "--params",
        metavar="COUNT",
        help="Parameter count when no --model is given, e.g. 7e9 or 7B (a Llama-like shape is assumed).",
        rich_help_panel=_W,
    ),
]
TaskOpt = Annotated[
    str,
    typer.Option(
        "--task", help="pretrain | finetune | lora | qlora | inference.", rich_help_panel=_W
    ),
]
TokensOpt = Annotated[
    str | None,
    typer.Option(
        "--tokens",
        metavar="COUNT",
        help="Training tokens in total, e.g. 2e12 or 300B (pretrain default: 20 per parameter).",
        rich_help_panel=_W,
    ),
]
SamplesOpt = Annotated[
    str | None,
    typer.Option(
        "--samples",
        metavar="COUNT",
        help="Training sequences (or images) per epoch, e.g. 50k; tokens = samples × seq-len × epochs.",
        rich_help_panel=_W,
    ),
]
EpochsOpt = Annotated[
    str,
    typer.Option("--epochs", metavar="NUMBER", help="Passes over --samples.", rich_help_panel=_W),
]
SeqLenOpt = Annotated[
    str | None,
    typer.Option(
        "--seq-len",
        metavar="N",
        help="Tokens per sequence (default: the model's context, at most 4096).",
        rich_help_panel=_W,
    ),
]
MicroBatchOpt = Annotated[
    str | None,
    typer.Option(
        "--micro-batch",
        metavar="N",
        help="Sequences per GPU per step (inference: concurrent sequences). Default 1.",
        rich_help_panel=_W,
    ),
]
GlobalBatchOpt = Annotated[
    str | None,
    typer.Option(
        "--global-batch",
        metavar="N",
        help="Sequences per optimizer step over all GPUs (default: micro-batch × data-parallel GPUs; "
        "pretrain: ~4M tokens).",
        rich_help_panel=_W,
    ),
]
PrecisionOpt = Annotated[
    str,
    typer.Option(
        "--precision",
        help="fp32 | fp16 | bf16 | fp8 (16-bit and fp8 train in mixed precision).",
        rich_help_panel=_W,
    ),
]
OptimizerOpt = Annotated[
    str,
    typer.Option("--optimizer", help="adamw | adamw8bit | sgd | adafactor.", rich_help_panel=_W),
]
ZeroOpt = Annotated[
    str,
    typer.Option(
        "--zero",
        metavar="N",
        help="ZeRO stage 0 | 1 | 2 | 3 (FSDP full sharding = 3).",
        rich_help_panel=_P,
    ),
]
GradCkptOpt = Annotated[
    str | None,
    typer.Option(
        "--grad-ckpt",
        help="Activation recomputation: none | selective (Megatron) | selective-op | selective-layer (torchtitan) | full (qlora default: full).",
        rich_help_panel=_P,
    ),
]
LoraRankOpt = Annotated[
    str,
    typer.Option("--lora-rank", metavar="N", help="LoRA rank r (lora/qlora).", rich_help_panel=_W),
]
LoraTargetsOpt = Annotated[
    str,
    typer.Option(
        "--lora-targets", help="Layers with adapters: qv | attn | all-linear.", rich_help_panel=_W
    ),
]
TensorParallelOpt = Annotated[
    str,
    typer.Option(
        "--tensor-parallel",
        metavar="N",
        help="Tensor-parallel degree (within a node).",
        rich_help_panel=_P,
    ),
]
PipelineParallelOpt = Annotated[
    str,
    typer.Option(
        "--pipeline-parallel", metavar="N", help="Pipeline-parallel degree.", rich_help_panel=_P
    ),
]
CpuOffloadOpt = Annotated[
    bool,
    typer.Option(
        "--cpu-offload",
        help="Keep optimizer states in CPU memory (ZeRO-Offload).",
        rich_help_panel=_P,
    ),
]
FlashAttentionOpt = Annotated[
    str,
    typer.Option(
        "--flash-attention",
        help="Fused attention that never stores the score matrix: auto | on | off "
        "(auto: on for modern models, off for GPT-2/BERT/T5 eager attention).",
        rich_help_panel=_P,
    ),
]
PromptLenOpt = Annotated[
    str,
    typer.Option(
        "--prompt-len", metavar="N", help="Prompt tokens per sequence.", rich_help_panel=_I
    ),
]
OutputLenOpt = Annotated[
    str,
    typer.Option(
        "--output-len", metavar="N", help="Generated tokens per sequence.", rich_help_panel=_I
    ),
]
RequestsOpt = Annotated[
    str | None,
    typer.Option(
        "--requests",
        metavar="COUNT",
        help="Sequences to serve in total (for hours), e.g. 1M.",
        rich_help_panel=_I,
    ),
]
GpuOpt = Annotated[str, typer.Option("--gpu", help="GPU model or alias, e.g. A100-80GB, H100, L4.")]
GpusOpt = Annotated[int, typer.Option("--gpus", help="Number of GPUs.")]
GpusPerNodeOpt = Annotated[
    int | None,
    typer.Option(
        "--gpus-per-node", help="GPUs per node (default: min(--gpus, 8)).", rich_help_panel=_P
    ),
]
InterNodeOpt = Annotated[
    float,
    typer.Option(
        "--inter-node-gbps",
        help="Network bandwidth per node in Gbit/s (default 400, an AWS p4d; p5 has 3200).",
        rich_help_panel=_P,
    ),
]


def workload_from_cli(
    *,
    model: str | None = None,
    params: str | None = None,
    task: str = "pretrain",
    tokens: str | None = None,
    samples: str | None = None,
    epochs: str = "1",
    seq_len: str | None = None,
    micro_batch: str | None = None,
    global_batch: str | None = None,
    precision: str = "bf16",
    optimizer: str = "adamw",
    zero: str = "0",
    grad_ckpt: str | None = None,
    lora_rank: str = "16",
    lora_targets: str = "all-linear",
    tensor_parallel: str = "1",
    pipeline_parallel: str = "1",
    cpu_offload: bool = False,
    flash_attention: str = "auto",
    prompt_len: str = "512",
    output_len: str = "256",
    requests: str | None = None,
) -> Workload:
    """The parsed flag values → a checked Workload (InputError/EstimateError/DataFileError on bad input)."""
    from gpuwise.errors import InputError, did_you_mean
    from gpuwise.estimate import workload_from_options

    flash_choices = {"auto": None, "on": True, "off": False}
    flash = flash_attention.strip().lower()
    if flash not in flash_choices:
        raise InputError(
            f"unknown --flash-attention {flash_attention!r}",
            hint="use auto, on or off",
            suggestions=did_you_mean(flash, flash_choices),
        )
    with named_as_flags():
        return workload_from_options(
            model=model,
            params=params,
            task=task,
            tokens=tokens,
            samples=samples,
            epochs=epochs,
            seq_len=seq_len,
            micro_batch=micro_batch,
            global_batch=global_batch,
            precision=precision,
            optimizer=optimizer,
            zero=zero,
            grad_ckpt=grad_ckpt,
            lora_rank=lora_rank,
            lora_targets=lora_targets,
            tensor_parallel=tensor_parallel,
            pipeline_parallel=pipeline_parallel,
            cpu_offload=cpu_offload,
            flash_attention=flash_choices[flash],
            prompt_len=prompt_len,
            output_len=output_len,
            requests=requests,
        )


# Library errors name the Python argument (``zero=4``); the CLI names the flag (``--zero 4``).
WORKLOAD_FLAGS = {
    name: "--" + name.replace("_", "-")
    for name in (
        "model",
        "params",
        "task",
        "tokens",
        "samples",
        "epochs",
        "seq_len",
        "micro_batch",
        "global_batch",
        "precision",
        "optimizer",
        "zero",
        "grad_ckpt",
        "lora_rank",
        "lora_targets",
        "tensor_parallel",
        "pipeline_parallel",
        "prompt_len",
        "output_len",
        "requests",
        "gpus_per_node",
        "gpus",
    )
}


def named_as_flags() -> contextlib.AbstractContextManager[None]:
    """Re-raise a library GpuwiseError with the workload's argument names written as CLI flags."""
    from gpuwise.cli._flags import named_as_flags as named

    return named(WORKLOAD_FLAGS)
