"""How long a save blocks the training loop: gpuwise async vs a synchronous torch.save.

    PYTHONPATH=src python benchmarks/train_checkpoint_stall.py [--gib 1.0] [--repeats 3] [--dir DIR]

State: an MLP whose fp32 parameters + AdamW moments total ``--gib`` GiB (1 GiB by default).
Baseline: ``torch.save`` to a temporary name, fsync, rename (what a careful synchronous
checkpoint costs; page cache cannot be dropped without root, so every write is fsynced).
gpuwise: ``Checkpointer.save`` (copy into a host buffer; the writer thread streams the file,
fsyncs and commits in the background); the stall is the time ``save`` blocks. Median of
``--repeats`` saves, each after the previous one committed. Prints a table; on a GPU machine
``--device cuda`` measures the device→host copy the same way.

Sharded (FSDP2, gloo ranks on this machine):

    PYTHONPATH=src python benchmarks/train_checkpoint_stall.py --fsdp-ranks 2 4 --gib 0.25

For each rank count: a ``fully_shard`` MLP of ``--gib`` GiB (weights + AdamW moments, all ranks
together). Per save, the time the loop is blocked by: ``torch.save`` of the rank's own shards
(sync, fsynced), DCP ``save`` (sync), DCP ``async_save`` (thread, DCP's stager) — each
including ``get_state_dict``, as a real save pays it — and gpuwise ``Checkpointer.save`` (DCP
async_save + our train state; checksums taken while writing, marker by rank 0's background
thread); the time until the save is durable (gpuwise: marker written); and the extra peak RSS
of each rank over its share of the state. ``--fsdp-ranks 1`` runs a plain model on one rank:
gpuwise then saves through its writer thread (``gpuwise-process``: the opt-in writer process,
forked; ``gpuwise-exec``: that process exec'd). ``--methods`` picks the methods.

RSS is sampled from the parent every 2 ms, per process: each rank and every child process it
starts (a writer), from just before the warm-up save (included) to the end of the last save.
A rank's extra RSS is the highest sum of its own RSS and its children's at one sample, minus
the rank's RSS just before the warm-up save, over its share; per method the min / median /
max over the rounds of the worst rank. Shared pages (the snapshot buffer both processes map,
pages a forked child shares copy-on-write) count once per process that maps them, as any
outside per-process RSS sampler counts them. Each method runs in its own processes, the
methods interleaved over ``--rounds`` rounds because this kind of machine is often shared.
Goals (issue 35): blocked ≤ 1.5x DCP async_save, extra RSS ≤ 1.5x the share.

Does a background write slow the loop (the writer thread holds the GIL at times)?

    PYTHONPATH=src python benchmarks/train_checkpoint_stall.py --step-during-write --gib 0.25

times a training step with no write in flight and while the writer thread (the default) or
the writer process (``async_mode="process"``) writes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
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


def _rss_bytes(pid: int | str = "self") -> int:
    """Current RSS of one process (``/proc/<pid>/statm``: resident pages), 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


class RssSampler:
    """Samples the RSS of every process under ``root_pid`` every ``period_s`` (2 ms), from
    outside the measured processes: each rank and each child it starts (a writer process) is
    read on its own, and a rank's footprint at one instant is its RSS plus its descendants'.
    The process tree is re-listed every 50 ms (psutil); the RSS itself is read from /proc."""

    def __init__(self, root_pid: int, period_s: float = 0.002) -> None:
        import threading

        self.root_pid, self.period_s = root_pid, period_s
        self.sweeps: list[tuple[float, dict[int, int]]] = []
        self.parent: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psutil

        pids: list[int] = []
        listed = 0.0
        while not self._stop.is_set():
            now = time.time()
            if now - listed > 0.05:
                listed = now
                try:
                    kids = psutil.Process(self.root_pid).children(recursive=True)
                except psutil.Error:
                    kids = []
                for k in kids:
                    with contextlib.suppress(psutil.Error):
                        self.parent.setdefault(k.pid, k.ppid())
                pids = [k.pid for k in kids]
            self.sweeps.append((now, {p: _rss_bytes(p) for p in pids}))
            time.sleep(self.period_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def peak(self, pid: int, t0: float, t1: float, part: str = "all") -> int:
        """Highest RSS of ``pid`` plus its descendants between ``t0`` and ``t1`` (``part``:
        ``"self"`` only the process, ``"children"`` only its descendants)."""

        def under(p: int) -> bool:
            while p in self.parent:
                if p == pid:
                    return True
                p = self.parent[p]
            return p == pid

        best = 0
        for t, rss in self.sweeps:
            if t0 <= t <= t1:
                best = max(
                    best,
                    sum(
                        v
                        for p, v in rss.items()
                        if under(p) and (part == "all" or (p == pid) == (part == "self"))
                    ),
                )
        return best


FSDP_METHODS = ("gpuwise", "gpuwise-process", "gpuwise-exec", "dcp-async", "dcp-sync", "torch-save")
FSDP_LABELS = {
    "gpuwise-process": "gpuwise, async_mode=process",
    "torch-save": "torch.save own shards (sync)",
    "dcp-sync": "DCP save (sync)",
    "dcp-async": "DCP async_save (thread)",
    "gpuwise": "gpuwise Checkpointer.save",
    "gpuwise-exec": "gpuwise, writer_start=exec",
}


def fsdp_worker(gib: float, repeats: int, root: str, method: str) -> None:
    """One method in a fresh process group (and process): its stall and its own peak RSS.

    A warm-up save first (not counted: process-group creation, first allocations), then
    ``repeats`` saves, each after the previous one is durable."""
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
    if world > 1:  # one rank: a plain model (gpuwise then uses its writer process)
        for layer in model:
            fully_shard(layer)
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad()
    local_bytes = sum(
        getattr(p, "to_local", lambda p=p: p)().numel() * 4 * 3 for p in model.parameters()
    )
    rss_before = _rss_bytes()
    t_first = time.time()  # the warm-up save is measured too
    stalls: list[float] = []
    durable: list[float] = []
    pg = dist.new_group(backend="gloo")

    def local(obj: object) -> object:
        if isinstance(obj, dict):
            return {k: local(v) for k, v in obj.items()}
        return obj.to_local() if hasattr(obj, "to_local") else obj

    ck = Checkpointer(
        os.path.join(root, "ck"),
        keep_last=2,
        writer_start="exec" if method == "gpuwise-exec" else None,
        async_mode="process" if method in ("gpuwise-process", "gpuwise-exec") else None,
    )
    for i in range(repeats + 1):  # every method pays for get_state_dict, as a user's save would
        dist.barrier()
        t0 = time.perf_counter()
        if method.startswith("gpuwise"):
            stats = ck.save(i + 1, model=model, optimizer=opt)
            stall = stats.stall_s
            ck.wait()  # sealed by every rank and the marker written
        elif method == "dcp-async":
            msd, osd = get_state_dict(model, opt)
            fut = dcp.async_save(
                {"model": msd, "optim": osd},
                checkpoint_id=os.path.join(root, f"dcp-async-{i % 2}"),
                process_group=pg,
            )
            stall = time.perf_counter() - t0
            getattr(fut, "upload_completion", fut).result()
        elif method == "dcp-sync":
            msd, osd = get_state_dict(model, opt)
            dcp.save(
                {"model": msd, "optim": osd},
                checkpoint_id=os.path.join(root, f"dcp-sync-{i % 2}"),
                process_group=pg,
            )
            stall = time.perf_counter() - t0
        else:
            msd, osd = get_state_dict(model, opt)
            path = os.path.join(root, f"own-{rank}.pt")
            with open(path, "wb") as f:
                torch.save({"model": local(msd), "optim": local(osd)}, f)
                f.flush()
                os.fsync(f.fileno())
            stall = time.perf_counter() - t0
        if i:  # the first is the warm-up
            stalls.append(stall)
            durable.append(time.perf_counter() - t0)
        else:
            t_warm = time.time()  # end of the warm-up save
    ck.close()
    row = (
        statistics.median(stalls),
        statistics.median(durable),
        local_bytes,
        rss_before,
        os.getpid(),
        t_first,
        time.time(),
        t_warm,
    )
    rows: list = [None] * world
    dist.all_gather_object(rows, row)
    if rank == 0:
        print("ROW " + json.dumps({"method": method, "rows": rows}), flush=True)
    dist.destroy_process_group()


def fsdp_table(ranks: int, gib: float, repeats: int, rounds: int, methods: list[str]) -> None:
    """Each method in its own torchrun, the methods interleaved over ``rounds`` rounds (this
    machine is shared: interleaving spreads the noise over all of them). RSS is sampled from
    this process every 2 ms, per process (each rank and its writer child, if any), from just
    before the warm-up save to the end of the last one."""
    import subprocess
    import sys

    found: dict[str, list[list]] = {m: [] for m in methods}
    extra: dict[str, list[float]] = {m: [] for m in methods}
    split: dict[str, list[tuple[float, float]]] = {m: [] for m in methods}
    after: dict[str, list[float]] = {m: [] for m in methods}  # the saves after the warm-up
    for _ in range(rounds):
        for method in methods:
            root = tempfile.mkdtemp(prefix="gpuwise-stall-fsdp-")
            try:
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "torch.distributed.run",
                        "--standalone",
                        f"--nproc-per-node={ranks}",
                        __file__,
                        "--fsdp-worker",
                        method,
                        "--gib",
                        str(gib),
                        "--repeats",
                        str(repeats),
                        "--dir",
                        root,
                    ],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                sampler = RssSampler(proc.pid)
                out, err = proc.communicate()
                sampler.stop()
                if proc.returncode:
                    raise SystemExit(f"{method} failed ({proc.returncode}):\n{err[-3000:]}")
            finally:
                shutil.rmtree(root, ignore_errors=True)
            line = next(ln for ln in out.splitlines() if ln.startswith("ROW "))
            rows = json.loads(line[4:])["rows"]
            found[method].append(rows)
            extra[method].append(max((sampler.peak(r[4], r[5], r[6]) - r[3]) / r[2] for r in rows))
            after[method].append(max((sampler.peak(r[4], r[7], r[6]) - r[3]) / r[2] for r in rows))
            split[method].append(
                max(
                    (
                        (sampler.peak(r[4], r[5], r[6], "self") - r[3]) / r[2],
                        sampler.peak(r[4], r[5], r[6], "children") / r[2],
                    )
                    for r in rows
                )
            )
    print(
        f"FSDP2, {ranks} gloo rank(s), {gib:.2f} GiB state in total; blocked/durable: median "
        f"over {rounds} rounds of the slowest rank's median of {repeats} saves (after a "
        f"warm-up); extra RSS / share: min / median / max over the rounds of the worst rank"
    )
    print(
        f"{'method':<34}{'blocked s':>10}{'vs DCP async':>13}{'durable s':>10}"
        f"{'extra RSS / share (min med max)':>33}{'rank + children':>17}"
        f"{'after warm-up (max)':>21}"
    )

    def stat(method: str, i: int) -> float:
        return statistics.median(max(r[i] for r in rows) for rows in found[method])

    base = stat("dcp-async", 0) if "dcp-async" in found else float("nan")
    for method in methods:
        blocked = stat(method, 0)
        e = extra[method]
        print(
            f"{FSDP_LABELS[method]:<34}{blocked:>10.3f}{blocked / base:>13.2f}"
            f"{stat(method, 1):>10.3f}"
            f"{min(e):>15.2f}x{statistics.median(e):>8.2f}x{max(e):>8.2f}x"
            f"{statistics.median(a for a, _ in split[method]):>9.2f}x"
            f" + {statistics.median(b for _, b in split[method]):.2f}x"
            f"{max(after[method]):>12.2f}x"
        )
    share = statistics.median(r[2] / 2**30 for r in found[methods[0]][0])
    print(
        f"rank share of the state: {share:.3f} GiB; extra RSS = highest RSS of the rank plus "
        "its child processes, sampled every 2 ms from the start of the warm-up save to the "
        "end of the last save, minus the rank's RSS just before it, over the share; "
        "rank + children: the rank's own peak and its child processes' peak (medians); "
        "after warm-up: the same extra RSS counting only samples after the warm-up save "
        "(worst round)"
    )


def step_table(gib: float, repeats: int, rounds: int) -> None:
    """Does the background write slow the loop? One process, a training step (8 layers
    forward + backward, one thread) timed with no write in flight and while each writer
    (thread: the default; process: ``async_mode="process"``) writes; the modes alternate over
    ``rounds`` rounds (the machine is shared)."""
    torch.set_num_threads(1)
    model, opt = build(gib, "cpu")
    x = torch.randn(64, 4096)

    def step() -> float:
        t0 = time.perf_counter()
        y = x
        for layer in list(model)[:8]:
            y = layer(y)
        y.sum().backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    quiet: dict[str, list[float]] = {"thread": [], "process": []}
    busy: dict[str, list[float]] = {"thread": [], "process": []}
    root = tempfile.mkdtemp(prefix="gpuwise-step-")
    try:
        for _ in range(rounds):
            for mode in ("thread", "process"):
                with Checkpointer(os.path.join(root, mode), async_mode=mode) as ck:  # type: ignore[arg-type]
                    ck.start_writer()
                    ck.save(1, model=model, optimizer=opt, block=True)  # warm-up
                    quiet[mode] += [step() for _ in range(20)]
                    for i in range(repeats):
                        ck.save(i + 2, model=model, optimizer=opt)
                        while ck.in_flight is not None:
                            busy[mode].append(step())
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"one process, {gib:.2f} GiB state; step time, median over {rounds} rounds")
    print(f"{'writer':<26}{'no write ms':>12}{'during write ms':>17}{'ratio':>7}{'steps':>7}")
    for mode in ("thread", "process"):
        q, b = statistics.median(quiet[mode]) * 1e3, statistics.median(busy[mode]) * 1e3
        print(f"{mode:<26}{q:>12.1f}{b:>17.1f}{b / q:>7.2f}{len(busy[mode]):>7}")


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
    ap.add_argument(
        "--rounds", type=int, default=3, help="FSDP2: interleaved rounds of every method"
    )
    ap.add_argument(
        "--methods", nargs="*", choices=FSDP_METHODS, default=None, help="FSDP2: which methods"
    )
    ap.add_argument("--fsdp-worker", choices=FSDP_METHODS, default=None, help=argparse.SUPPRESS)
    ap.add_argument(
        "--step-during-write",
        action="store_true",
        help="one process: step time while the writer thread / writer process writes",
    )
    args = ap.parse_args()
    if args.step_during_write:
        step_table(args.gib, args.repeats, args.rounds)
        return
    if args.fsdp_worker:
        torch.set_num_threads(1)
        fsdp_worker(args.gib, args.repeats, args.dir, args.fsdp_worker)
        return
    if args.fsdp_ranks:
        for n in args.fsdp_ranks:
            fsdp_table(n, args.gib, args.repeats, args.rounds, args.methods or list(FSDP_METHODS))
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
