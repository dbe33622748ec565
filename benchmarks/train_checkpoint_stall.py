"""How long a save blocks the training loop: gpuwise async vs a synchronous torch.save.

    PYTHONPATH=src python benchmarks/train_checkpoint_stall.py [--gib 1.0] [--repeats 3] [--dir DIR]

State: an MLP whose fp32 parameters + AdamW moments total ``--gib`` GiB (1 GiB by default).
Baseline: ``torch.save`` to a temporary name, fsync, rename (what a careful synchronous
checkpoint costs; page cache cannot be dropped without root, so every write is fsynced).
gpuwise: ``Checkpointer.save`` (copy into the shared host buffer; the writer process serializes,
fsyncs and commits in the background); the stall is the time ``save`` blocks. Median of
``--repeats`` saves, each after the previous one committed. Prints a table; on a GPU machine
``--device cuda`` measures the device→host copy the same way.
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
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)]).to(device)
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
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
        for i in range(args.repeats + 1):  # the first save allocates the shared buffer: reported apart
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
    print(f"state: {nbytes / 2**30:.2f} GiB ({args.device}), {args.repeats} saves each, fsynced, median")
    print(f"{'method':<44}{'blocked s':>10}{'vs sync':>9}")
    print(f"{'torch.save + fsync + rename (sync)':<44}{s_sync:>10.3f}{1.0:>9.2f}")
    print(f"{'gpuwise Checkpointer.save (async stall)':<44}{s_async:>10.3f}{s_async / s_sync:>9.3f}")
    print(f"{'gpuwise first save (allocates buffer)':<44}{first:>10.3f}{first / s_sync:>9.3f}")
    print(f"{'gpuwise save → committed (durable latency)':<44}{statistics.median(durable):>10.3f}{'':>9}")


if __name__ == "__main__":
    main()
