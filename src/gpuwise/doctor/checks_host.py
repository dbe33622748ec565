"""Host checks: /dev/shm against DataLoader workers, CPUs against workers, free disk and RAM,
and container (cgroup v1/v2) limits."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuwise.doctor.context import Context
from gpuwise.doctor.result import CheckResult, fail, ok, skip, warn

GIB = 1024**3
MIB = 1024**2
# Docker's default /dev/shm size: `docker run --shm-size` "Size of /dev/shm ... default 64MB"
# (https://docs.docker.com/reference/cli/docker/container/run/).
DOCKER_DEFAULT_SHM_BYTES = 64 * MIB
# cgroup v1 reports "no limit" as the largest page-aligned signed 64-bit number.
_V1_UNLIMITED = 2**62


def _gib(n: float) -> str:
    return f"{n / GIB:,.1f} GiB"


@dataclass(frozen=True)
class CgroupLimits:
    """This process's container limits; None = no limit (or not readable)."""

    version: int | None
    """1 or 2; None when no cgroup filesystem is readable."""
    memory_limit_bytes: int | None
    """memory.max (v2) / memory.limit_in_bytes (v1)."""
    memory_usage_bytes: int | None
    """memory.current (v2) / memory.usage_in_bytes (v1)."""
    cpu_quota_cpus: float | None
    """cpu.max (v2) / cfs_quota_us ÷ cfs_period_us (v1), in CPUs."""
    pids_max: int | None
    """pids.max."""


def _int_file(ctx: Context, path: str) -> int | None:
    text = (ctx.probe.read_text(path) or "").strip()
    if not text or text == "max" or not text.lstrip("-").isdigit():
        return None
    value = int(text)
    return None if value < 0 or value >= _V1_UNLIMITED else value


def read_cgroup(ctx: Context) -> CgroupLimits:
    """cgroup v2 (unified, /sys/fs/cgroup/cgroup.controllers present) or v1 limits."""
    root = "/sys/fs/cgroup"
    if ctx.probe.read_text(f"{root}/cgroup.controllers") is not None:
        quota: float | None = None
        cpu = (ctx.probe.read_text(f"{root}/cpu.max") or "").split()
        if (
            len(cpu) == 2
            and cpu[0] != "max"
            and cpu[0].isdigit()
            and cpu[1].isdigit()
            and int(cpu[1]) > 0
        ):
            quota = int(cpu[0]) / int(cpu[1])
        return CgroupLimits(
            2,
            _int_file(ctx, f"{root}/memory.max"),
            _int_file(ctx, f"{root}/memory.current"),
            quota,
            _int_file(ctx, f"{root}/pids.max"),
        )
    if (
        ctx.probe.list_dir(f"{root}/memory") is not None
        or ctx.probe.list_dir(f"{root}/cpu") is not None
    ):
        q = _int_file(ctx, f"{root}/cpu/cpu.cfs_quota_us")
        p = _int_file(ctx, f"{root}/cpu/cpu.cfs_period_us")
        return CgroupLimits(
            1,
            _int_file(ctx, f"{root}/memory/memory.limit_in_bytes"),
            _int_file(ctx, f"{root}/memory/memory.usage_in_bytes"),
            q / p if q and p else None,
            _int_file(ctx, f"{root}/pids/pids.max"),
        )
    return CgroupLimits(None, None, None, None, None)


def meminfo(ctx: Context) -> dict[str, int]:
    """/proc/meminfo as bytes."""
    out = {}
    for line in (ctx.probe.read_text("/proc/meminfo") or "").splitlines():
        m = re.match(r"(\w+):\s+(\d+)(?:\s+kB)?", line)
        if m:
            out[m.group(1)] = int(m.group(2)) * (1024 if "kB" in line else 1)
    return out


def _shm_bytes(ctx: Context) -> int | None:
    usage = ctx.probe.disk_usage("/dev/shm")
    if usage is not None:
        return usage.total_bytes
    for line in (ctx.probe.read_text("/proc/mounts") or "").splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[1] == "/dev/shm":
            m = re.search(r"size=(\d+)([kmg]?)", parts[3])
            if m:
                return int(m.group(1)) * {"": 1, "k": 1024, "m": MIB, "g": GIB}[m.group(2)]
    return None


def check_shm(ctx: Context) -> CheckResult:
    """/dev/shm is big enough for the DataLoader workers (too small: "Bus error" in a worker)."""
    name = "shm"
    size = _shm_bytes(ctx)
    if size is None:
        return skip(name, "/dev/shm not found or unreadable")
    workers = ctx.options.num_workers * ctx.processes
    need = workers * ctx.options.shm_per_worker_mib * MIB
    what = (
        f"/dev/shm is {size / MIB:,.0f} MiB for {workers} DataLoader worker(s) "
        f"({ctx.options.num_workers} per process × {ctx.processes} process(es))"
    )
    fix = (
        f"give it ≥ {need / GIB:,.0f} GiB: `docker run --shm-size={max(1, round(need / GIB))}g ...`, or in "
        "Kubernetes mount an emptyDir with `medium: Memory` at /dev/shm"
    )
    if workers == 0:
        return ok(
            name,
            f"/dev/shm is {size / MIB:,.0f} MiB; no DataLoader workers planned (NCCL still uses some)",
        )
    if size <= DOCKER_DEFAULT_SHM_BYTES or size < need / 4:
        return fail(
            name,
            what
            + ': workers will die with "Bus error" / "unable to write to file </torch_...>"'
            + (" (Docker's 64 MiB default)" if size <= DOCKER_DEFAULT_SHM_BYTES else ""),
            fix,
        )
    if size < need:
        return warn(
            name,
            what
            + f"; about {need / GIB:,.1f} GiB wanted at {ctx.options.shm_per_worker_mib:g} MiB "
            "per worker",
            fix,
        )
    return ok(name, what)


def usable_cpus(ctx: Context) -> tuple[float, str]:
    """CPUs this process can use (affinity, capped by a cgroup CPU quota) and how that was found."""
    affinity = ctx.probe.cpu_count()
    quota = read_cgroup(ctx).cpu_quota_cpus
    if quota is not None and quota < affinity:
        return quota, f"{quota:g} CPUs (cgroup quota; {affinity} visible)"
    return float(affinity), f"{affinity} CPUs"


def check_cpu_workers(ctx: Context) -> CheckResult:
    """CPUs against DataLoader workers and training processes."""
    name = "cpu-workers"
    cpus, how = usable_cpus(ctx)
    per, procs = ctx.options.num_workers, ctx.processes
    total = per * procs
    if cpus < procs:
        return fail(
            name,
            f"{how} for {procs} training processes (one per GPU): each process needs a core of its own",
            "use an instance with more vCPUs per GPU, or raise the container's CPU limit",
        )
    if total > cpus:
        suggest = max(0, int(cpus // procs) - 1)
        return warn(
            name,
            f"{how} for {total} DataLoader workers ({per} per process × {procs}): torch warns that "
            "this many workers may freeze or slow the DataLoader",
            f"use num_workers={suggest} per process (CPUs ÷ processes, minus one for the main process)",
        )
    return ok(name, f"{how} for {total} DataLoader workers ({per} per process × {procs})")


def check_disk(ctx: Context) -> CheckResult:
    """Free space where checkpoints go."""
    name = "disk"
    where = ctx.options.checkpoint_dir
    usage = ctx.probe.disk_usage(where)
    if usage is None:
        return fail(
            name,
            f"checkpoint directory {where!r} does not exist or cannot be read",
            f"create it: `mkdir -p {where}`, or pass --checkpoint-dir",
        )
    free, total = usage.free_bytes, usage.total_bytes
    what = f"{_gib(free)} free of {_gib(total)} at {where}"
    if free < ctx.options.min_free_disk_gib * GIB:
        return fail(
            name,
            what
            + f", below the {ctx.options.min_free_disk_gib:g} GiB minimum: checkpoint writes will "
            "fail with ENOSPC",
            "free space (old checkpoints, ~/.cache/huggingface), mount a bigger volume, "
            "or point --checkpoint-dir elsewhere",
        )
    if total and free / total < 0.10:
        return warn(name, what + " (under 10% free)", "prune old checkpoints or grow the volume")
    return ok(name, what)


def check_memory(ctx: Context) -> CheckResult:
    """Available RAM (the container's limit counts, not the host's)."""
    name = "memory"
    info = meminfo(ctx)
    if "MemTotal" not in info:
        return skip(name, "/proc/meminfo unreadable")
    total, avail = info["MemTotal"], info.get("MemAvailable", info.get("MemFree", 0))
    limits = read_cgroup(ctx)
    note = ""
    if limits.memory_limit_bytes is not None and limits.memory_limit_bytes < total:
        used = limits.memory_usage_bytes or 0
        total, avail = limits.memory_limit_bytes, min(avail, limits.memory_limit_bytes - used)
        note = " (container memory limit)"
    what = f"{_gib(avail)} available of {_gib(total)}{note}"
    if avail < ctx.options.min_free_memory_gib * GIB:
        return fail(
            name,
            what
            + f", below the {ctx.options.min_free_memory_gib:g} GiB minimum: loading a model or "
            "starting DataLoader workers will be OOM-killed",
            "stop other processes, or use a larger instance / raise the container memory limit",
        )
    if avail < 0.10 * total:
        return warn(
            name,
            what + " (under 10% available)",
            "stop other processes or use fewer DataLoader workers",
        )
    return ok(name, what)


def check_cgroup(ctx: Context) -> CheckResult:
    """Container limits (cgroup v1 or v2): memory and CPU caps that tools reading /proc do not see."""
    name = "cgroup"
    limits = read_cgroup(ctx)
    if limits.version is None:
        return skip(name, "no cgroup filesystem readable at /sys/fs/cgroup")
    host = meminfo(ctx).get("MemTotal")
    cpus = ctx.probe.cpu_count()
    parts = [f"cgroup v{limits.version}"]
    parts.append(
        f"memory limit {_gib(limits.memory_limit_bytes)}"
        if limits.memory_limit_bytes
        else "no memory limit"
    )
    parts.append(
        f"CPU quota {limits.cpu_quota_cpus:g}" if limits.cpu_quota_cpus else "no CPU quota"
    )
    if limits.pids_max:
        parts.append(f"pids.max {limits.pids_max}")
    what = ", ".join(parts)
    lim, use = limits.memory_limit_bytes, limits.memory_usage_bytes
    if lim and use is not None and use >= 0.9 * lim:
        return fail(
            name,
            what
            + f": {_gib(use)} in use, ≥ 90% of the limit: the next allocation can be OOM-killed "
            "(exit code 137)",
            "raise the container memory limit or stop what holds the memory",
        )
    small = []
    if lim and host and lim < host:
        small.append(
            f"the memory limit is below the host's {_gib(host)} (free/top show the host's, the OOM killer "
            "uses the limit)"
        )
    if limits.cpu_quota_cpus and limits.cpu_quota_cpus < cpus:
        small.append(
            f"the CPU quota is below the {cpus} CPUs os.cpu_count() reports, so thread pools and "
            "num_workers sized by it oversubscribe"
        )
    if small:
        return warn(
            name,
            what + ": " + "; ".join(small),
            "size workers and threads by the limits (e.g. OMP_NUM_THREADS), or raise them",
        )
    return ok(name, what)
