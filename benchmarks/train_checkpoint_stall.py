"""How long a save blocks the training loop: gpuwise async vs a synchronous torch.save.

    PYTHONPATH=src python benchmarks/train_checkpoint_stall.py [--gib 1.0] [--repeats 3] [--dir DIR]

State: an MLP whose fp32 parameters + AdamW moments total ``--gib`` GiB (1 GiB by default).
Baseline: ``torch.save`` to a temporary name, fsync, rename (what a careful synchronous
checkpoint costs; page cache cannot be dropped without root, so every write is fsynced).
gpuwise: ``Checkpointer.save`` (copy into the shared host buffer; the writer process serializes,
fsyncs and commits in the background); the stall is the time ``save`` blocks. Median of
``--repeats`` saves, each after the previous one committed. Prints a table; on a GPU machine
``--device cuda`` measures the device→host copy the same way.

Sharded (FSDP2, gloo ranks on this machine):

    PYTHONPATH=src python benchmarks/train_checkpoint_stall.py --fsdp-ranks 2 4 --gib 0.25

For each rank count: a ``fully_shard`` MLP of ``--gib`` GiB (weights + AdamW moments, all ranks
together). Per save, the time the loop is blocked by: ``torch.save`` of the rank's own shards
(sync, fsynced), DCP ``save`` (sync), DCP ``async_save`` (thread, DCP's stager) — each
including ``get_state_dict``, as a real save pays it — and gpuwise
``Checkpointer.save`` (DCP async_save + our train state + marker); the time until gpuwise's
commit is durable; and the peak RSS of each rank next to its share of the state (measured after
the gpuwise saves, which run first, so the baselines do not inflate it; the RSS before saving
includes torch itself, ~0.35 GiB). Slowest rank's median of ``--repeats`` saves.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import torch

from gpuwise.train import Checkpointer


def build(gib: float, device: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    params = int(gib * 2**30 / 4 / 3)  # fp32 weights + 2 AdamW moments
    width = 4096
    layers = max(1, params // (width * width))
    model = torch.nn.Sequential(
        *[torch.nn.Linear(width, width, bias=False) for _ in range(layers)]
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():  # materialize optimizer state without a full forward
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad()
    return model, opt


def sync_save(state: dict, path: str) -> float:
    t0 = time.perf_counter()
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return time.perf_counter() - t0


def _rss_gib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def fsdp_worker(gib: float, repeats: int, root: str) -> None:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    params = int(gib * 2**30 / 4 / 3)
    width = 1024
    layers = max(1, params // (width * width))
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad()
    local_bytes = sum(p.to_local().numel() * 4 * 3 for p in model.parameters())  # type: ignore[attr-defined]
    rss_before = _rss_gib()
    times: dict[str, list[float]] = {
        "torch.save own shards (sync)": [],
        "DCP save (sync)": [],
        "DCP async_save (thread)": [],
        "gpuwise Checkpointer.save": [],
        "gpuwise save → committed": [],
    }
    with Checkpointer(
        os.path.join(root, "ck"), keep_last=2
    ) as ck:  # first: its peak RSS is its own
        for i in range(repeats):
            t0 = time.perf_counter()
            stats = ck.save(i + 1, model=model, optimizer=opt)
            ck.commit()
            times["gpuwise Checkpointer.save"].append(stats.stall_s)
            times["gpuwise save → committed"].append(time.perf_counter() - t0)
    rss_gpuwise = _rss_gib()
    pg = dist.new_group(backend="gloo")

    def local(obj: object) -> object:
        if isinstance(obj, dict):
            return {k: local(v) for k, v in obj.items()}
        return obj.to_local() if hasattr(obj, "to_local") else obj

    for i in range(repeats):  # every method pays for get_state_dict, as a user's save would
        t0 = time.perf_counter()
        msd, osd = get_state_dict(model, opt)
        path = os.path.join(root, f"own-{rank}.pt")
        with open(path, "wb") as f:
            torch.save({"model": local(msd), "optim": local(osd)}, f)
            f.flush()
            os.fsync(f.fileno())
        times["torch.save own shards (sync)"].append(time.perf_counter() - t0)
        dist.barrier()
        t0 = time.perf_counter()
        msd, osd = get_state_dict(model, opt)
        dcp.save(
            {"model": msd, "optim": osd},
            checkpoint_id=os.path.join(root, f"dcp-sync-{i}"),
            process_group=pg,
        )
        times["DCP save (sync)"].append(time.perf_counter() - t0)
        dist.barrier()
        t0 = time.perf_counter()
        msd, osd = get_state_dict(model, opt)
        fut = dcp.async_save(
            {"model": msd, "optim": osd},
            checkpoint_id=os.path.join(root, f"dcp-async-{i}"),
            process_group=pg,
        )
        times["DCP async_save (thread)"].append(time.perf_counter() - t0)
        getattr(fut, "upload_completion", fut).result()
        dist.barrier()
    medians = {k: statistics.median(v) for k, v in times.items()}
    row = (medians, local_bytes / 2**30, rss_before, rss_gpuwise)
    rows: list = [None] * world
    dist.all_gather_object(rows, row)
    if rank == 0:
        print(
            f"FSDP2, {world} gloo ranks, {gib:.2f} GiB state in total, median of {repeats} saves, slowest rank"
        )
        print(f"{'method':<36}{'blocked s':>10}{'vs torch.save':>15}")
        base = max(r[0]["torch.save own shards (sync)"] for r in rows)
        for key in times:
            worst = max(r[0][key] for r in rows)
            print(f"{key:<36}{worst:>10.3f}{worst / base:>15.3f}")
        for r_i, (_, share, before, peak) in enumerate(rows):
            print(
                f"rank {r_i}: state share {share:.3f} GiB, RSS before saves {before:.3f} GiB, "
                f"peak RSS after gpuwise saves {peak:.3f} GiB (added by saves: "
                f"{(peak - before) / share:.2f}x the share)"
            )
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument(
        "--fsdp-ranks",
        type=int,
        nargs="*",
        default=None,
        help="run the FSDP2 table for these rank counts",
    )
    ap.add_argument("--fsdp-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.fsdp_worker:
        torch.set_num_threads(1)
        fsdp_worker(args.gib, args.repeats, args.dir)
        return
    if args.fsdp_ranks:
        import subprocess
        import sys

        for n in args.fsdp_ranks:
            root = tempfile.mkdtemp(prefix="gpuwise-stall-fsdp-")
            try:
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "torch.distributed.run",
                        "--standalone",
                        f"--nproc-per-node={n}",
                        __file__,
                        "--fsdp-worker",
                        "--gib",
                        str(args.gib),
                        "--repeats",
                        str(args.repeats),
                        "--dir",
                        root,
                    ],
                    check=True,
                )
            finally:
                shutil.rmtree(root, ignore_errors=True)
        return
    torch.set_num_threads(1)
    root = args.dir or tempfile.mkdtemp(prefix="gpuwise-stall-")
    model, opt = build(args.gib, args.device)
    nbytes = sum(p.numel() * 4 * 3 for p in model.parameters())
    sync = []
    for _ in range(args.repeats):
        state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
        sync.append(sync_save(state, os.path.join(root, "sync.pt")))
    os.remove(os.path.join(root, "sync.pt"))
    stalls, durable = [], []
    with Checkpointer(os.path.join(root, "ck"), keep_last=2) as ck:
        for i in range(
            args.repeats + 1
        ):  # the first save allocates the shared buffer: reported apart
            t0 = time.perf_counter()
            stats = ck.save(i + 1, model=model, optimizer=opt)
            report = ck.wait()
            (stalls if i else []).append(stats.stall_s)
            if i == 0:
                first = stats.stall_s
            else:
                durable.append(time.perf_counter() - t0)
            assert report is not None
    shutil.rmtree(root, ignore_errors=True) if args.dir is None else None
    s_sync, s_async = statistics.median(sync), statistics.median(stalls)
    print(
        f"state: {nbytes / 2**30:.2f} GiB ({args.device}), {args.repeats} saves each, fsynced, median"
    )
    print(f"{'method':<44}{'blocked s':>10}{'vs sync':>9}")
    print(f"{'torch.save + fsync + rename (sync)':<44}{s_sync:>10.3f}{1.0:>9.2f}")
    print(
        f"{'gpuwise Checkpointer.save (async stall)':<44}{s_async:>10.3f}{s_async / s_sync:>9.3f}"
    )
    print(f"{'gpuwise first save (allocates buffer)':<44}{first:>10.3f}{first / s_sync:>9.3f}")
    print(
        f"{'gpuwise save → committed (durable latency)':<44}{statistics.median(durable):>10.3f}{'':>9}"
    )


if __name__ == "__main__":
    main()
