"""Run the benchmarks in order, put each figure beside its datasheet peak: :func:`run_bench`.

Sizes: on a GPU the full run uses sizes that reach peak (8192² matmuls, 1 GiB copies); ``quick``
and CPU runs use small sizes so CI exercises the same code in seconds. Peaks come from
:func:`gpuwise.hardware.find_gpu` on the device name (``--gpu`` overrides it); on a CPU without
``--gpu`` every peak and ratio is None.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuwise.bench import compute, storage, training
from gpuwise.bench.result import BenchReport, BenchResult, DeviceInfo, Skipped, compare
from gpuwise.errors import HardwareError, InputError, MissingExtraError, check_choice
from gpuwise.hardware import GpuSpec

log = logging.getLogger(__name__)

GROUPS = ("matmul", "memory", "transfer", "nccl", "train", "storage", "dataloader")
MATMUL_PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")
MIB, GIB = 1024**2, 1024**3


@dataclass(frozen=True)
class BenchOptions:
    """What to run and where."""

    quick: bool = False
    """Small sizes: seconds on a CPU; checks the code path, not the hardware."""
    checkpoint_dir: Path = Path(".")
    """Where the storage benchmark writes its (removed) scratch file."""
    gpu: str | None = None
    """GPU model whose datasheet peaks to use, overriding the name the device reports."""
    only: tuple[str, ...] = ()
    """Run only these groups (``matmul``, ``memory``, ``transfer``, ``nccl``, ``train``,
    ``storage``, ``dataloader``); empty = all."""
    num_workers: int | None = None
    """DataLoader workers for the input-pipeline benchmark (default: 0 when quick, else
    min(4, CPUs))."""
    device: str | None = None
    """``cuda`` or ``cpu``; default: cuda when available."""
    storage_mib: int | None = None
    """Size of the storage benchmark's file; default 1 GiB on a GPU machine (16 MiB quick, 256 MiB
    on CPU). Make it larger than RAM to defeat the page cache where O_DIRECT is unavailable."""

    def __post_init__(self) -> None:
        for g in self.only:
            check_choice(g, GROUPS, "benchmark group")
        if self.num_workers is not None and self.num_workers < 0:
            raise InputError(f"--num-workers {self.num_workers} is negative", hint="give 0 or more")
        if self.storage_mib is not None and not 1 <= self.storage_mib <= 1024 * 1024:
            raise InputError(
                f"--storage-mib {self.storage_mib} is out of range", hint="give 1 to 1048576 MiB"
            )
        if self.device not in (None, "cuda", "cpu"):
            raise InputError(
                f"--device {self.device!r} is not cuda or cpu",
                hint="use --device cuda or --device cpu",
            )

    def wants(self, group: str) -> bool:
        return not self.only or group in self.only


@dataclass(frozen=True)
class Sizes:
    """Problem sizes for one run."""

    matmul_n: int
    matmul_iters: int
    copy_bytes: int
    copy_iters: int
    transfer_bytes: int
    allreduce_bytes: int
    gpt: training.TrainSize
    resnet: training.TrainSize
    storage_bytes: int
    random_reads: int
    loader_batches: int
    loader_image: int


def sizes_for(cuda: bool, quick: bool) -> Sizes:
    """Full GPU sizes reach peak: an 8192² bf16 matmul (1.1 TFLOP) runs ~1 ms on an H100, long
    enough to hide launch overhead; 1 GiB copies are far beyond L2 (50 MiB on H100)."""
    if cuda and not quick:
        return Sizes(
            8192,
            50,
            GIB,
            20,
            256 * MIB,
            256 * MIB,
            training.TrainSize(width=1024, depth=12, batch=8, seq_len=1024, vocab=32768, steps=10),
            training.TrainSize(width=64, depth=2, batch=128, image=64, steps=10),
            GIB,
            5000,
            50,
            64,
        )
    if cuda:
        return Sizes(
            4096,
            10,
            256 * MIB,
            10,
            64 * MIB,
            64 * MIB,
            training.TrainSize(width=512, depth=4, batch=8, seq_len=512, vocab=8192, steps=3),
            training.TrainSize(width=32, depth=1, batch=64, image=32, steps=3),
            128 * MIB,
            1000,
            10,
            32,
        )
    if quick:
        return Sizes(
            256,
            5,
            16 * MIB,
            5,
            0,
            0,
            training.TrainSize(width=64, depth=2, batch=4, seq_len=64, vocab=512, steps=2),
            training.TrainSize(width=8, depth=1, batch=4, image=32, steps=2),
            16 * MIB,
            200,
            4,
            32,
        )
    return Sizes(
        1024,
        10,
        256 * MIB,
        10,
        0,
        0,
        training.TrainSize(width=256, depth=4, batch=8, seq_len=256, vocab=8192, steps=3),
        training.TrainSize(width=16, depth=1, batch=32, image=32, steps=3),
        256 * MIB,
        2000,
        20,
        64,
    )


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise MissingExtraError("torch", "train") from None
    return torch


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "cpu"


def resolve_device(options: BenchOptions) -> tuple[Any, DeviceInfo, Any]:
    """(torch device, DeviceInfo, GpuSpec or None). Unknown GPU names raise HardwareError (exit 2)."""
    torch = _torch()
    from gpuwise.hardware import find_gpu

    use_cuda = torch.cuda.is_available() if options.device is None else options.device == "cuda"
    if use_cuda and not torch.cuda.is_available():
        from gpuwise.errors import DeviceError

        raise DeviceError(
            "--device cuda but torch sees no GPU", hint="run `gpuwise doctor` to find out why"
        )
    if use_cuda:
        device = torch.device("cuda", 0)
        name = torch.cuda.get_device_name(0)
        try:
            spec = find_gpu(options.gpu or name)
        except HardwareError as exc:
            raise HardwareError(
                exc.message,
                hint=f"name the model with --gpu (one of `gpuwise gpus`), e.g. "
                f"--gpu H100; or add a row for {name!r} to the user gpus.csv ({exc.hint})",
                suggestions=exc.suggestions,
            ) from None
        cc = ".".join(map(str, torch.cuda.get_device_capability(0)))
        info = DeviceInfo(
            "cuda",
            name,
            spec.name,
            torch.cuda.device_count(),
            str(torch.__version__),
            torch.version.cuda,
            _driver_version(),
            cc,
        )
        return device, info, spec
    cpu_spec = find_gpu(options.gpu) if options.gpu else None
    info = DeviceInfo(
        "cpu",
        _cpu_name(),
        cpu_spec.name if cpu_spec else None,
        0,
        str(torch.__version__),
        torch.version.cuda,
    )
    return torch.device("cpu"), info, cpu_spec


def _driver_version() -> str | None:
    from gpuwise.doctor.nvml import driver_version  # the one NVML layer (NvmlSession)

    return driver_version()


@dataclass
class _Collector:
    results: list[BenchResult] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    extras: dict[str, float] = field(default_factory=dict)


Progress = Callable[[str], None]


def stage_names(options: BenchOptions) -> list[str]:
    """The stages this run goes through (for progress bars)."""
    names = []
    if options.wants("matmul"):
        names += [f"matmul.{p}" for p in MATMUL_PRECISIONS]
    if options.wants("memory"):
        names.append("memory.copy")
    if options.wants("transfer"):
        names.append("transfer")
    if options.wants("nccl"):
        names.append("nccl.allreduce")
    if options.wants("train"):
        names += ["train.gpt.fp32", "train.gpt.amp", "train.resnet.fp32", "train.resnet.amp"]
    if options.wants("storage"):
        names.append("storage")
    if options.wants("dataloader"):
        names.append("dataloader")
    return names


@dataclass(frozen=True)
class _Context:
    """What every benchmark stage needs: the device, its datasheet, the sizes, where results go."""

    torch: Any
    device: Any
    options: BenchOptions
    spec: GpuSpec | None
    sizes: Sizes
    out: _Collector
    progress: Progress
    cuda: bool

    def peak(self, precision: str) -> float | None:
        """The datasheet's dense peak for ``precision`` (None without a datasheet)."""
        return self.spec.peak_tflops(precision) if self.spec is not None else None


def _bench_matmul(c: _Context) -> None:
    torch = c.torch
    device = c.device
    sz = c.sizes
    out = c.out
    progress = c.progress
    peak = c.peak
    for p in MATMUL_PRECISIONS:
        progress(f"matmul.{p}")
        reason = _matmul_unsupported(torch, device, p)
        if reason:
            out.skipped.append(Skipped(f"matmul.{p}", reason))
            continue
        value = compute.matmul_tflops(device, p, sz.matmul_n, sz.matmul_iters)
        out.results.append(
            compare(
                f"matmul.{p}",
                value,
                "TFLOP/s",
                peak(p),
                f"{sz.matmul_n}×{sz.matmul_n} matmul, best of 3 × {sz.matmul_iters}",
            )
        )


def _bench_memory(c: _Context) -> None:
    torch = c.torch
    device = c.device
    options = c.options
    spec = c.spec
    sz = c.sizes
    out = c.out
    progress = c.progress
    cuda = c.cuda
    progress("memory.copy")
    bw = (
        spec.memory_bandwidth_tb_s * 1000
        if spec is not None and spec.memory_bandwidth_tb_s
        else None
    )
    value = compute.copy_gb_s(device, sz.copy_bytes, sz.copy_iters)
    out.results.append(
        compare(
            "memory.copy",
            value,
            "GB/s",
            bw if cuda or options.gpu else None,
            f"tensor copy of {sz.copy_bytes // MIB} MiB (read + write counted)",
        )
    )
    if cuda:
        free, total = torch.cuda.mem_get_info(device)
        out.extras["cuda_context_gib"] = max(
            0.0, (total - free - torch.cuda.memory_reserved(device)) / GIB
        )
        # what the driver reports (nvidia-smi memory.total): the planner's capacity for this GPU
        out.extras["total_memory_gib"] = total / GIB


def _bench_transfer(c: _Context) -> None:
    device = c.device
    spec = c.spec
    sz = c.sizes
    out = c.out
    progress = c.progress
    cuda = c.cuda
    progress("transfer")
    if not cuda:
        out.skipped.append(Skipped("transfer", "host↔device transfers need a GPU"))
    else:
        pcie = (
            None
            if spec is None or spec.form_factor == "Superchip"
            else compute.pcie_x16_gb_s(spec.pcie_gen)
        )
        for to_dev in (True, False):
            for pinned in (True, False):
                name = f"transfer.{'h2d' if to_dev else 'd2h'}.{'pinned' if pinned else 'pageable'}"
                value = compute.transfer_gb_s(
                    device, sz.transfer_bytes, 5, to_device=to_dev, pinned=pinned
                )
                out.results.append(
                    compare(
                        name,
                        value,
                        "GB/s",
                        pcie,
                        f"{sz.transfer_bytes // MIB} MiB; peak = PCIe Gen{spec.pcie_gen if spec else '?'} x16 per direction",
                    )
                )


def _bench_nccl(c: _Context) -> None:
    torch = c.torch
    spec = c.spec
    sz = c.sizes
    out = c.out
    progress = c.progress
    cuda = c.cuda
    progress("nccl.allreduce")
    count = torch.cuda.device_count() if cuda else 0
    if count < 2:
        out.skipped.append(
            Skipped("nccl.allreduce", f"all-reduce needs 2 or more GPUs; {count} here")
        )
    else:
        # nccl-tests compares busbw with the per-direction link bandwidth (NVLink total ÷ 2).
        link = (
            spec.nvlink_gb_s / 2
            if spec is not None and spec.has_gpu_fabric and spec.nvlink_gb_s
            else compute.pcie_x16_gb_s(spec.pcie_gen if spec else None)
        )
        value = compute.allreduce_bus_gb_s(count, sz.allreduce_bytes, 20)
        out.results.append(
            compare(
                "nccl.allreduce",
                value,
                "GB/s",
                link,
                f"bus bandwidth, {count} GPUs, {sz.allreduce_bytes // MIB} MiB bf16",
            )
        )


def _bench_train(c: _Context) -> None:
    device = c.device
    sz = c.sizes
    out = c.out
    progress = c.progress
    peak = c.peak
    for kind, tsize in (("gpt", sz.gpt), ("resnet", sz.resnet)):
        for amp in (False, True):
            name = f"train.{kind}.{'amp' if amp else 'fp32'}"
            progress(name)
            run = training.train_run(kind, tsize, device, amp=amp)  # type: ignore[arg-type]
            precision = run.amp_dtype or "fp32"
            per_s = (
                f"{run.tokens_per_step / run.seconds_per_step:,.0f} tokens/s"
                if run.tokens_per_step
                else f"{run.samples_per_step / run.seconds_per_step:,.1f} images/s"
            )
            out.results.append(
                compare(
                    name,
                    run.tflops,
                    "TFLOP/s",
                    peak(precision),
                    f"{per_s}; {precision}; ratio = MFU vs the dense {precision} peak",
                )
            )


def _bench_storage(c: _Context) -> None:
    options = c.options
    sz = c.sizes
    out = c.out
    progress = c.progress
    progress("storage")
    nbytes = options.storage_mib * MIB if options.storage_mib else sz.storage_bytes
    run_s = storage.storage_run(options.checkpoint_dir, nbytes, sz.random_reads)
    cache = (
        "O_DIRECT"
        if run_s.direct_io
        else "page cache dropped with fadvise (O_DIRECT unsupported here)"
    )
    where = f"{run_s.file_bytes // MIB} MiB in {options.checkpoint_dir}"
    out.results.append(
        compare(
            "storage.seq_write",
            run_s.write_gb_s,
            "GB/s",
            None,
            f"{where}, 4 MiB blocks + fsync",
        )
    )
    out.results.append(
        compare(
            "storage.seq_read", run_s.read_gb_s, "GB/s", None, f"{where}, 4 MiB blocks, {cache}"
        )
    )
    out.results.append(
        compare(
            "storage.rand_read",
            run_s.random_read_iops,
            "IOPS",
            None,
            f"4 KiB random reads, queue depth 1, {cache}",
        )
    )


def _bench_dataloader(c: _Context) -> None:
    options = c.options
    sz = c.sizes
    out = c.out
    progress = c.progress
    progress("dataloader")
    workers = (
        options.num_workers
        if options.num_workers is not None
        else (0 if options.quick else min(4, len(os.sched_getaffinity(0))))
    )
    value = storage.dataloader_samples_per_s(workers, sz.loader_batches, 32, sz.loader_image)
    out.results.append(
        compare(
            "dataloader",
            value,
            "samples/s",
            None,
            f"synthetic 3×{sz.loader_image}² images, batch 32, {workers} worker(s)",
        )
    )


_STAGES: tuple[tuple[str, Callable[[_Context], None]], ...] = (
    ("matmul", _bench_matmul),
    ("memory", _bench_memory),
    ("transfer", _bench_transfer),
    ("nccl", _bench_nccl),
    ("train", _bench_train),
    ("storage", _bench_storage),
    ("dataloader", _bench_dataloader),
)
"""Each stage in the order it runs; ``BenchOptions.only`` picks by these names."""


def run_bench(
    options: BenchOptions | None = None, progress: Progress = lambda stage: None
) -> BenchReport:
    """Run the benchmarks; ``progress(stage)`` is called as each stage starts."""
    options = options or BenchOptions()
    torch = _torch()
    if options.wants(
        "storage"
    ):  # fail fast on an unwritable checkpoint dir, before minutes of GPU work
        storage.scratch_dir(options.checkpoint_dir).rmdir()
    device, info, spec = resolve_device(options)
    cuda = info.kind == "cuda"
    out = _Collector()
    context = _Context(
        torch, device, options, spec, sizes_for(cuda, options.quick), out, progress, cuda
    )
    for name, stage in _STAGES:
        if options.wants(name):
            stage(context)
    return BenchReport(
        info, options.quick, tuple(out.results), tuple(out.skipped), dict(out.extras)
    )


def _matmul_unsupported(torch: Any, device: Any, precision: str) -> str | None:
    if precision == "fp8":
        return compute.fp8_supported(device)
    if device.type == "cpu" and precision == "tf32":
        return "TF32 is a GPU tensor-core mode; a CPU has none"
    if (
        device.type == "cuda"
        and precision in ("tf32", "bf16")
        and torch.cuda.get_device_capability(device) < (8, 0)
    ):
        return f"{precision} needs compute capability ≥ 8.0 (Ampere)"
    return None
