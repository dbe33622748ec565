"""A tiny, deterministic, resumable training run on the CPU (used by the tests and the docs).

    python examples/train_tiny.py --steps 300 --checkpoint-dir /tmp/tiny

Kill it at any moment (SIGKILL included) and run the same command again: it resumes from the
newest committed checkpoint and ends with the same ``digest`` as an uninterrupted run. Each
optimizer step prints ``loss <step> <loss as float.hex()>``; the last line is
``digest <sha256 of the final parameters>``. Under ``gpuwise run`` a preemption notice makes it
save and exit with code 75. Dropout, a NumPy feature mask, a Python-random label flip, gradient
accumulation and a LR schedule make every kind of saved state matter. Under
``gpuwise run --nproc-per-node 2`` it trains with DDP over gloo (rank 0 prints); with ``--fsdp``
it shards the model and optimizer over all ranks (FSDP2, ``fully_shard``) and checkpoints every
rank's shards; with ``--tp N`` it builds a 2-D device mesh (``dp`` x ``tp``), splits the first
two layers tensor-parallel over ``tp`` (column-, then row-wise) and shards over ``dp`` (FSDP2 + TP):
the ``N`` ranks of one ``tp`` group see the same samples, so the data position is kept per
data-parallel replica (``resilient(mesh=...)``). Each optimizer step also prints
``samples <step> <dp rank> <sha256 of the step's input batches>`` (ranks with tp rank 0). The digest is taken over the gathered full model *and* optimizer state, so it is
comparable across world sizes (a run saved on 4 ranks and resumed on 2 prints the digest of the
same state it restored: ``restored-digest <sha256>``).

Under ``gpuwise run --plan plan.json`` it runs the plan's recipe with no value re-typed: the
batch size is the plan's micro-batch (``plan_recipe()``), the step count the plan's optimizer
steps (unless ``--steps`` is given), and ``resilient()`` applies the planned
accumulation (global batch = micro-batch × accumulation × replicas); a job unlike its plan (world
size, replicas, GPU) exits 2 before its first step. ``--batch``/``--grad-accum`` given with a plan
must agree with it.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import random
import sys
import time

import numpy as np
import torch

import gpuwise.train as gt


def build(seed: int, hidden: int) -> tuple[torch.nn.Module, torch.utils.data.Dataset]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4096, 64, generator=g)
    w = torch.randn(64, 10, generator=g)
    y = (x @ w).argmax(dim=1)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, hidden),
        torch.nn.GELU(),
        torch.nn.Dropout(0.1),
        torch.nn.Linear(hidden, hidden),
        torch.nn.GELU(),
        torch.nn.Dropout(0.1),
        torch.nn.Linear(hidden, 10),
    )
    return model, torch.utils.data.TensorDataset(x, y)


def _flat(prefix: str, obj: object, out: dict[str, object]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flat(f"{prefix}.{k}", v, out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _flat(f"{prefix}.{i}", v, out)
    else:
        out[prefix] = obj


def digest(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> str:
    """sha256 over the full (gathered) model and optimizer state; collective under torch.distributed."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    # No cpu_offload: every tensor here is on the CPU already, and full_state_dict together with
    # cpu_offload makes torch 2.13 segfault rank 0 for FSDP1 (FullyShardedDataParallel) models on
    # CPU, inside torch itself (reproduced without gpuwise). Without it every rank gathers the
    # same full state, which is what the digest hashes.
    opts = StateDictOptions(full_state_dict=True)
    msd, osd = get_state_dict(model, optimizer if optimizer is not None else [], options=opts)
    flat: dict[str, object] = {}
    _flat("model", msd, flat)
    _flat("optim", osd, flat)
    h = hashlib.sha256()
    for name in sorted(flat):
        value = flat[name]
        h.update(name.encode())
        if isinstance(value, torch.Tensor):
            h.update(value.detach().contiguous().numpy().tobytes())
        else:
            h.update(repr(value).encode())
    return h.hexdigest()


def _say(line: str) -> None:
    """One line in one write: ranks share stdout, and print() writes text and newline apart."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _tensor_parallel(model: torch.nn.Module, world: int, tp: int) -> tuple[object, object]:
    """A (dp, tp) mesh; layers 0 and 3 split column- then row-wise over tp (Megatron style).
    Returns the mesh and its dp sub-mesh (FSDP2 shards over dp)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("dp", "tp"))
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "3": RowwiseParallel()})
    return mesh, mesh["dp"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--steps", type=int, default=None, help="optimizer steps (default: the plan's, else 300)"
    )
    ap.add_argument("--checkpoint-dir", required=True)
    ap.add_argument("--every", type=int, default=5, help="save every N optimizer steps")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument(
        "--batch", type=int, default=None, help="default: the plan's micro-batch, else 64"
    )
    ap.add_argument(
        "--grad-accum", type=int, default=None, help="default: the plan's accumulation, else 2"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument(
        "--sync", action="store_true", help="write checkpoints in the loop (no writer process)"
    )
    ap.add_argument("--compress", default="none", choices=["none", "zstd"])
    ap.add_argument(
        "--fsdp", action="store_true", help="shard model and optimizer over all ranks (FSDP2)"
    )
    ap.add_argument(
        "--tp",
        type=int,
        default=1,
        help="tensor-parallel degree: a (dp, tp) device mesh, FSDP2 over dp (needs --fsdp)",
    )
    ap.add_argument(
        "--storage-options",
        default="{}",
        help="JSON keyword arguments for the checkpoint storage (fsspec; S3: endpoint, keys)",
    )
    ap.add_argument(
        "--local-dir",
        default=None,
        help="fast local disk for notice saves when --checkpoint-dir is remote",
    )
    ap.add_argument(
        "--slow-write",
        type=float,
        default=0.0,
        help="seconds to pause between a checkpoint's data files and its marker (crash tests "
        "that aim between the two; changes no number)",
    )
    ap.add_argument(
        "--deterministic", action="store_true", help="torch.use_deterministic_algorithms (GPU runs)"
    )
    ap.add_argument(
        "--step-delay",
        type=float,
        default=0.0,
        help="seconds to sleep after each optimizer step (tests that must act mid-run; "
        "changes no number)",
    )
    ap.add_argument(
        "--abort-at-exit",
        type=int,
        default=None,
        metavar="RANK",
        help="after the run, that rank aborts (SIGABRT), as torch's teardown sometimes does "
        "(tests of gpuwise run; changes no number)",
    )
    args = ap.parse_args(argv)
    recipe = gt.plan_recipe()  # None outside `gpuwise run --plan`
    if args.batch is None:
        args.batch = recipe.micro_batch if recipe is not None else 64
    if args.grad_accum is None and recipe is None:
        args.grad_accum = 2
    if args.steps is None:
        args.steps = recipe.steps if recipe is not None and recipe.steps else 300

    torch.set_num_threads(1)
    if args.deterministic:  # needed on GPUs; the CPU kernels used here are deterministic already
        torch.use_deterministic_algorithms(True)
    random.seed(args.seed)
    np.random.seed(args.seed)
    model, data = build(args.seed, args.hidden)
    world = int(os.environ.get("WORLD_SIZE", "1"))  # under torchrun / gpuwise run --nproc-per-node
    rank = dp_rank = tp_rank = 0
    dp_size = world
    mesh = None
    if args.tp > 1 and (not args.fsdp or world % args.tp):
        ap.error(f"--tp {args.tp} needs --fsdp and a world size divisible by it (got {world})")
    if world > 1:
        torch.distributed.init_process_group("gloo")
        rank = dp_rank = torch.distributed.get_rank()
        if args.fsdp:
            from torch.distributed.fsdp import fully_shard

            dp_mesh = None
            if args.tp > 1:
                mesh, dp_mesh = _tensor_parallel(model, world, args.tp)
                dp_rank, dp_size = dp_mesh.get_local_rank(), dp_mesh.size()
                tp_rank = mesh["tp"].get_local_rank()
            for layer in model:
                if isinstance(layer, torch.nn.Linear):
                    fully_shard(layer, mesh=dp_mesh)
            fully_shard(model, mesh=dp_mesh)
        else:
            model = torch.nn.parallel.DistributedDataParallel(model)
    sampler = gt.ResumableSampler(len(data), seed=args.seed, rank=dp_rank, num_replicas=dp_size)
    loader = torch.utils.data.DataLoader(
        data, batch_size=args.batch, sampler=sampler, drop_last=True
    )
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1.0 + s / 100))

    with gt.resilient(
        model,
        opt,
        scheduler=sched,
        checkpoint_dir=args.checkpoint_dir,
        max_steps=args.steps,
        every_steps=args.every,
        grad_accum=args.grad_accum,
        precision=args.precision,
        async_write=not args.sync,
        compress=args.compress,
        keep_last=2,
        storage_options=json.loads(args.storage_options),
        local_dir=args.local_dir,
        mesh=mesh,
        checkpoint_hooks=gt.WriteHooks(
            before_marker=functools.partial(time.sleep, args.slow_write)
            if args.slow_write > 0
            else None
        ),
    ) as run:
        args.grad_accum = run.accumulation  # the plan's when it has one
        if rank == 0 and recipe is not None:
            _say(f"batch {args.batch} {run.accumulation} {args.batch * run.accumulation * dp_size}")
        if run.resumed_from is not None:
            restored = digest(getattr(model, "module", model), opt)
            if rank == 0:
                _say(f"resumed {run.resumed_from}")
                _say(f"restored-digest {restored}")
        total = 0.0
        seen = hashlib.sha256()
        for x, y in run.batches(loader):
            seen.update(x.numpy().tobytes())
            mask = torch.from_numpy((np.random.rand(x.shape[1]) > 0.05).astype(np.float32))
            if random.random() < 0.02:
                y = torch.roll(y, 1)
            with run.autocast():
                loss = torch.nn.functional.cross_entropy(model(x * mask), y)
            total += float(loss.detach())
            stepped = run.step(loss)
            if stepped and rank == 0:
                _say(f"loss {run.global_step} {(total / args.grad_accum).hex()}")
            if stepped and tp_rank == 0:
                _say(f"samples {run.global_step} {dp_rank} {seen.hexdigest()[:16]}")
            if stepped:
                seen = hashlib.sha256()
            if stepped and args.step_delay > 0:
                time.sleep(args.step_delay)
            if run.micro % args.grad_accum == 0:
                total = 0.0
    final = digest(getattr(model, "module", model), opt)
    if world > 1:
        torch.distributed.destroy_process_group()
    if rank == 0:
        _say(f"digest {final}")
    if args.abort_at_exit == rank:
        os.abort()
    return 0


if __name__ == "__main__":
    sys.exit(main())
