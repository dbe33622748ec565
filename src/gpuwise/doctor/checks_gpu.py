"""GPU health: persistence mode, ECC errors and retired pages / remapped rows, Xid errors in the
kernel log, MIG mode, PCIe link below its maximum, and clock throttling.

Read through gpuwise's one NVML layer (:mod:`gpuwise.doctor.nvml` over
:class:`gpuwise.base.nvml.NvmlSession`), or replayed from ``nvidia-smi -q`` text. Throttle
reason names come from :data:`gpuwise.base.nvml.THROTTLE_REASONS`, Xid meanings from
:data:`gpuwise.base.xid.XID_MEANINGS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from gpuwise.base.xid import XID_MEANINGS
from gpuwise.doctor.context import NO_GPU, Context, parse_expected_gpu
from gpuwise.doctor.probe import GpuDevice
from gpuwise.doctor.result import CheckResult, fail, ok, skip, warn

_XID_RE = re.compile(r"NVRM: Xid \((PCI:[0-9a-fA-F:.]+)\): (\d+)")


def _label(d: GpuDevice) -> str:
    return f"GPU {d.index} ({d.name})"


def _per_gpu(
    ctx: Context,
    name: str,
    fn: Callable[[GpuDevice], tuple[str, str] | None],
    ok_text: str,
    fix: str,
    unsupported: Callable[[GpuDevice], bool] | None = None,
) -> CheckResult:
    """Run ``fn`` on each GPU: it returns (status, finding) for a problem, None when healthy."""
    devices = ctx.gpus.devices
    if not devices:
        return skip(name, f"{NO_GPU}" if not ctx.has_gpu else "the driver lists no GPU to check")
    if unsupported is not None and all(unsupported(d) for d in devices):
        return skip(
            name, "not reported by these GPUs: " + ", ".join(sorted({d.name for d in devices}))
        )
    problems = [(d, r) for d in devices if (r := fn(d)) is not None]
    if not problems:
        return ok(name, ok_text.format(n=len(devices)))
    status = "fail" if any(r[0] == "fail" for _, r in problems) else "warn"
    finding = "; ".join(f"{_label(d)}: {r[1]}" for d, r in problems)
    return fail(name, finding, fix) if status == "fail" else warn(name, finding, fix)


def check_persistence(ctx: Context) -> CheckResult:
    """Persistence mode on (off: each CUDA start re-initialises the GPU, seconds of delay, and
    the driver unloads between jobs)."""
    return _per_gpu(
        ctx,
        "gpu-persistence",
        lambda d: ("warn", "persistence mode is off") if d.persistence_mode is False else None,
        "persistence mode on for all {n} GPU(s)",
        "`sudo nvidia-smi -pm 1`, or enable the nvidia-persistenced service",
        unsupported=lambda d: d.persistence_mode is None,
    )


def _ecc(d: GpuDevice) -> tuple[str, str] | None:
    bad: list[str] = []
    if d.ecc_volatile_uncorrected:
        bad.append(
            f"{d.ecc_volatile_uncorrected} uncorrectable ECC error(s) since the driver loaded"
        )
    if d.retired_pages_pending:
        bad.append("a page retirement is pending (needs a GPU reset)")
    if d.remapped_rows_pending:
        bad.append("a row remap is pending (needs a GPU reset)")
    if d.remapping_failed:
        bad.append("row remapping failed (no spare rows left)")
    if bad:
        return "fail", ", ".join(bad)
    soft: list[str] = []
    if d.ecc_enabled is False:
        soft.append("ECC is disabled")
    if d.ecc_aggregate_uncorrected:
        soft.append(f"{d.ecc_aggregate_uncorrected} uncorrectable ECC error(s) in its lifetime")
    if d.retired_pages_dbe or d.retired_pages_sbe:
        soft.append(f"{(d.retired_pages_dbe or 0) + (d.retired_pages_sbe or 0)} retired page(s)")
    if d.remapped_rows_uncorrectable:
        soft.append(f"{d.remapped_rows_uncorrectable} row(s) remapped for uncorrectable errors")
    return ("warn", ", ".join(soft)) if soft else None


def check_ecc(ctx: Context) -> CheckResult:
    """ECC errors, retired pages (pre-Ampere) and remapped rows (Ampere and newer)."""
    return _per_gpu(
        ctx,
        "gpu-ecc",
        _ecc,
        "no uncorrectable ECC errors, nothing pending on {n} GPU(s)",
        "reset the GPU (`sudo nvidia-smi -r -i N`, with no process on it) or reboot to apply pending "
        "retirements/remaps; if errors recur or remapping failed, ask the provider to replace the GPU; "
        "enable ECC with `sudo nvidia-smi -e 1` and reboot",
        unsupported=lambda d: (
            d.ecc_enabled is None
            and d.ecc_volatile_uncorrected is None
            and d.remapped_rows_pending is None
            and d.retired_pages_pending is None
        ),
    )


def check_xid(ctx: Context) -> CheckResult:
    """Xid errors the NVIDIA driver wrote to the kernel log (dmesg), when it is readable."""
    name = "gpu-xid"
    if not ctx.has_gpu:
        return skip(name, NO_GPU)
    out = ctx.probe.run(["dmesg"])
    text = out.stdout if out is not None and out.returncode == 0 else None
    source = "dmesg"
    if text is None:
        text = ctx.probe.read_text("/var/log/kern.log")
        source = "/var/log/kern.log"
    if text is None:
        return skip(
            name,
            "the kernel log is not readable here (dmesg needs root when kernel.dmesg_restrict=1)",
            "run `sudo gpuwise doctor`, or `sudo dmesg | grep -i xid` yourself",
        )
    seen: dict[int, list[str]] = {}
    for m in _XID_RE.finditer(text):
        seen.setdefault(int(m.group(2)), []).append(m.group(1))
    if not seen:
        return ok(name, f"no Xid errors in {source}")
    parts, worst = [], "warn"
    for xid, where in sorted(seen.items()):
        severity, meaning = XID_MEANINGS.get(xid, ("warn", "see NVIDIA's Xid catalog"))
        worst = "fail" if severity == "fail" else worst
        parts.append(f"Xid {xid} ×{len(where)} on {', '.join(sorted(set(where)))}: {meaning}")
    fix = (
        "reset the GPU or reboot; if a hardware Xid (48, 64, 74, 79, 95, 119) recurs, ask the provider to replace "
        "the node; application Xids (13, 31, 43) point at the program"
    )
    finding = f"{source}: " + "; ".join(parts)
    return fail(name, finding, fix) if worst == "fail" else warn(name, finding, fix)


def _mig(d: GpuDevice) -> tuple[str, str] | None:
    if d.mig_current is None:
        return None
    if d.mig_pending is not None and d.mig_pending != d.mig_current:
        return "warn", (
            f"MIG mode {'on' if d.mig_current else 'off'} now, {'on' if d.mig_pending else 'off'} after the "
            "next GPU reset"
        )
    if d.mig_current and d.mig_device_count == 0:
        return (
            "fail",
            "MIG is enabled but no MIG instance exists, so CUDA sees no device on this GPU",
        )
    return None


def check_mig(ctx: Context) -> CheckResult:
    """MIG mode: pending changes, and MIG on with no instances (CUDA then finds no device)."""
    result = _per_gpu(
        ctx,
        "gpu-mig",
        _mig,
        "MIG state consistent on {n} GPU(s)",
        "create instances (`sudo nvidia-smi mig -cgi 9,9 -C`) or disable MIG (`sudo nvidia-smi -mig 0` "
        "then reset the GPU); a pending mode needs `sudo nvidia-smi -r`",
    )
    if result.status == "ok":
        on = [d for d in ctx.gpus.devices if d.mig_current]
        if on:
            return ok(
                result.name,
                f"MIG on for {len(on)} GPU(s) with {sum(d.mig_device_count or 0 for d in on)} "
                "instance(s): select them with MIG-UUIDs from `nvidia-smi -L` in CUDA_VISIBLE_DEVICES",
            )
    return result


def _pcie(d: GpuDevice) -> tuple[str, str] | None:
    w, wmax, g, gmax = d.pcie_width_current, d.pcie_width_max, d.pcie_gen_current, d.pcie_gen_max
    if w and wmax and w < wmax:
        severity = "fail" if w * 4 <= wmax else "warn"
        return (
            severity,
            f"PCIe link x{w} of x{wmax} (host↔device copies run at about {w / wmax:.0%} speed)",
        )
    busy = d.performance_state == 0 and (d.utilization_gpu_ratio or 0) > 0
    if g and gmax and g < gmax and busy:
        return "warn", f"PCIe gen {g} of {gmax} while busy"
    return None


def check_pcie(ctx: Context) -> CheckResult:
    """PCIe link width and generation against their maximum (idle GPUs lower the generation on purpose)."""
    result = _per_gpu(
        ctx,
        "gpu-pcie",
        _pcie,
        "PCIe links at full width on {n} GPU(s)",
        "reseat the GPU or riser, check the slot's BIOS lane setting, or ask the provider for another node",
        unsupported=lambda d: d.pcie_width_current is None and d.pcie_gen_current is None,
    )
    if result.status == "ok":
        idle_low = [
            d
            for d in ctx.gpus.devices
            if d.pcie_gen_current and d.pcie_gen_max and d.pcie_gen_current < d.pcie_gen_max
        ]
        if idle_low:
            return ok(
                result.name,
                result.finding + f"; {len(idle_low)} idle GPU(s) at a lower PCIe generation, which "
                "GPUs do to save power (rerun under load to check)",
            )
    return result


_HARD = {
    "hw_slowdown": "hardware slowdown",
    "hw_thermal": "hardware thermal slowdown",
    "hw_power_brake": "power brake (external power-supply signal)",
}


def _throttle(d: GpuDevice) -> tuple[str, str] | None:
    reasons = set(d.clock_event_reasons)
    hard = [text for key, text in _HARD.items() if key in reasons]
    if hard:
        return "fail", "clocks held down by " + ", ".join(hard)
    if "sw_thermal" in reasons:
        return "warn", "clocks lowered by the driver for temperature (software thermal slowdown)"
    return None


def check_throttle(ctx: Context) -> CheckResult:
    """Clock event (throttle) reasons: hardware slowdown, thermal, power brake."""
    result = _per_gpu(
        ctx,
        "gpu-throttle",
        _throttle,
        "no thermal or hardware clock throttling on {n} GPU(s)",
        "check cooling (fans, airflow, `nvidia-smi -q -d TEMPERATURE`) and power delivery; on a rented "
        "node ask the provider to replace it",
        unsupported=lambda d: False,
    )
    if result.status == "ok":
        capped = [str(d.index) for d in ctx.gpus.devices if "sw_power_cap" in d.clock_event_reasons]
        if capped:
            return ok(
                result.name,
                result.finding + f"; GPU(s) {', '.join(capped)} at the power limit (normal under "
                "heavy load; compare `nvidia-smi -q -d POWER` current vs default limit)",
            )
    return result


def _model(name: str) -> str:
    """gpuwise's name for an NVML product name (``NVIDIA H100 80GB HBM3`` → ``H100``), else as is."""
    from gpuwise.hardware import canonical_gpu_name

    return canonical_gpu_name(name) or name


def check_expected(ctx: Context) -> CheckResult:
    """The machine has the GPUs the job was planned for (``--expect-gpu H100x8``).

    A plan for 8×H100 on a node that came up with no GPU, 4 GPUs or A100s is a failed check (exit 3),
    not a list of skipped GPU checks and exit 0.
    """
    name = "gpu-expected"
    if ctx.options.expect_gpu is None:
        return skip(name, "no GPU expected (give --expect-gpu MODELxCOUNT, e.g. H100x8, to check)")
    model, count = parse_expected_gpu(ctx.options.expect_gpu)
    want = f"{count}×{model}" if count else model
    seen = [_model(d.name) for d in ctx.gpus.devices] if ctx.gpus.available else []
    if not seen:
        why = f" ({ctx.gpus.nvml_error})" if ctx.gpus.nvml_error else ""
        return fail(
            name,
            f"expected {want}, found {NO_GPU}{why}",
            "start the job on the machine it was planned for (check the instance type), or install "
            "the NVIDIA driver / run the container with the GPUs (`docker run --gpus all`)",
        )
    found = ", ".join(f"{seen.count(m)}×{m}" for m in sorted(set(seen)))
    matching = seen.count(model)
    if matching == 0:
        return fail(
            name,
            f"expected {want}, found {found}",
            "this is not the instance type the plan chose: start the job on it, or plan again for "
            "the GPUs you have (`gpuwise plan --gpu ...`)",
        )
    if count is not None and matching < count:
        return fail(
            name,
            f"expected {want}, found {found}: {count - matching} missing",
            "a GPU fell off the bus or is hidden (see the nvidia-driver and cuda-visible-devices "
            "checks); on a rented node ask the provider to replace it",
        )
    if count is not None and len(seen) > count:
        return warn(
            name,
            f"expected {want}, found {found}",
            "the job uses only what it was planned for; plan again to use every GPU",
        )
    return ok(name, f"{found}, as expected")
