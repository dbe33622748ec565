"""Driver, CUDA compatibility, torch and GPU visibility checks."""

from __future__ import annotations

import re

from gpuwise.doctor.context import NO_GPU, Context
from gpuwise.doctor.cuda_compat import check_compatibility, driver_table, parse_version
from gpuwise.doctor.result import CheckResult, fail, ok, skip, warn

_TRAIN_EXTRA = "pip install 'gpuwise[train]'"


def _kernel_module_version(ctx: Context) -> str | None:
    text = ctx.probe.read_text("/proc/driver/nvidia/version")
    m = re.search(r"Kernel Module(?: for [\w-]+)?\s+(\d+(?:\.\d+)+)", text or "")
    return m.group(1) if m else None


def check_driver(ctx: Context) -> CheckResult:
    """The NVIDIA driver is loaded, NVML answers, its version, and every GPU on the bus is seen."""
    name = "nvidia-driver"
    gpus, pci = ctx.gpus, ctx.pci_gpus
    kernel = _kernel_module_version(ctx)
    if not gpus.available:
        if not pci and kernel is None:
            return skip(
                name,
                f"{NO_GPU}: no NVIDIA device on the PCI bus and the NVIDIA driver is not loaded "
                f"({gpus.nvml_error}); GPU checks are skipped, everything else is checked",
            )
        if "mismatch" in (gpus.nvml_error or "").lower():
            return fail(
                name,
                f"NVML says: {gpus.nvml_error}: the loaded kernel module ({kernel or 'unknown'}) and "
                "the user-space driver libraries differ, usually after a driver upgrade without a reboot",
                "reboot (or unload and reload the nvidia kernel modules: `sudo rmmod nvidia_uvm nvidia_drm "
                "nvidia_modeset nvidia && sudo modprobe nvidia`)",
            )
        where = (
            f"{len(pci)} NVIDIA GPU(s) on the PCI bus"
            if pci
            else f"NVIDIA kernel module {kernel} loaded"
        )
        return fail(
            name,
            f"{where} but NVML cannot be used: {gpus.nvml_error}",
            "install the NVIDIA driver (e.g. `sudo apt install nvidia-driver-570-server`), or in a "
            "container run with the NVIDIA Container Toolkit (`docker run --gpus all ...`)",
        )
    if kernel is not None and gpus.driver_version and kernel != gpus.driver_version:
        return fail(
            name,
            f"kernel module {kernel} differs from user-space driver {gpus.driver_version}",
            "reboot so the kernel module matches the installed driver",
        )
    seen = len(gpus.devices)
    if pci and len(pci) > seen:
        return warn(
            name,
            f"driver {gpus.driver_version}: {len(pci)} NVIDIA GPU(s) on the PCI bus but NVML sees "
            f"only {seen}; a GPU may have fallen off the bus (Xid 79) or failed to initialise "
            "(inside a container given fewer GPUs this is expected)",
            "check `sudo dmesg | grep -i -e xid -e nvrm`; reset the GPU (`sudo nvidia-smi -r -i N`) or "
            "reboot; if it persists, ask the provider to replace the node",
        )
    return ok(
        name,
        f"driver {gpus.driver_version} (CUDA {gpus.cuda_driver_version or 'unknown'}), {seen} GPU(s): "
        + ", ".join(sorted({d.name for d in gpus.devices})),
    )


def check_cuda_compat(ctx: Context) -> CheckResult:
    """The CUDA runtime torch was built for runs on this driver (NVIDIA's compatibility rules)."""
    name = "cuda-compat"
    torch, gpus = ctx.torch, ctx.gpus
    if not gpus.available:
        if ctx.has_gpu:
            return skip(
                name,
                f"the NVIDIA driver cannot be asked which CUDA version it supports ({gpus.nvml_error}); "
                "see the nvidia-driver check",
                "fix the nvidia-driver check first",
            )
        return skip(name, f"{NO_GPU} (no driver to compare with)")
    if not torch.installed:
        return skip(
            name,
            f"torch is not installed, so there is no CUDA runtime to compare with driver "
            f"{gpus.driver_version} (CUDA {gpus.cuda_driver_version})",
            _TRAIN_EXTRA,
        )
    if torch.cuda_runtime is None:
        return fail(
            name,
            f"torch {torch.version} is a CPU-only build, on a machine with GPUs",
            "install a CUDA build: `pip install torch --index-url https://download.pytorch.org/whl/cu"
            f"{_wheel_tag(gpus.cuda_driver_version)}`",
        )
    verdict = check_compatibility(gpus.driver_version, gpus.cuda_driver_version, torch.cuda_runtime)
    base = (
        f"torch {torch.version} is built for CUDA {torch.cuda_runtime}; driver {gpus.driver_version} "
        f"supports CUDA {gpus.cuda_driver_version}: "
    )
    upgrade = (
        f"upgrade the NVIDIA driver to ≥ {verdict.min_driver_for_runtime} (the CUDA {torch.cuda_runtime} "
        "toolkit's driver)"
        if verdict.min_driver_for_runtime
        else "upgrade the NVIDIA driver"
    )
    downgrade = (
        f"or install torch built for the driver's CUDA: `pip install torch --index-url "
        f"https://download.pytorch.org/whl/cu{_wheel_tag(gpus.cuda_driver_version)}`"
    )
    if verdict.verdict == "compatible":
        return ok(name, base + verdict.explanation)
    if verdict.verdict == "minor_compat":
        return warn(
            name,
            base + verdict.explanation + "; kernels shipped only as newer PTX will fail with "
            "cudaErrorUnsupportedPtxVersion and some newer APIs are unavailable",
            f"{upgrade}, {downgrade}",
        )
    if verdict.verdict == "unknown":
        return warn(name, base + verdict.explanation, upgrade)
    compat_pkg = "cuda-compat-" + torch.cuda_runtime.replace(".", "-")
    return fail(
        name,
        base + verdict.explanation + '. torch will fail with "CUDA driver version is insufficient '
        'for CUDA runtime version"',
        f"{upgrade} (datacenter GPUs can instead install the forward-compatibility package {compat_pkg}), "
        f"{downgrade}",
    )


def _wheel_tag(cuda: str | None) -> str:
    """The PyTorch wheel index tag for the newest CUDA build the driver can run (e.g. ``124``)."""
    try:
        limit = parse_version(cuda or "")[:2]
    except ValueError:
        return "118"
    # PyTorch publishes wheels for a few CUDA versions per release; pick the newest in the table
    # that the driver supports, without claiming a wheel exists for every one.
    usable = [v for v in driver_table().toolkit if v <= limit]
    best = max(usable) if usable else (11, 8)
    return f"{best[0]}{best[1]}"


def check_torch(ctx: Context) -> CheckResult:
    """``torch.cuda.is_available()``, and why not."""
    name = "torch-cuda"
    torch = ctx.torch
    if not torch.installed:
        return skip(
            name,
            f"torch is not importable ({torch.import_error}); `gpuwise bench` and training need it",
            _TRAIN_EXTRA,
        )
    if torch.cuda_available:
        return ok(
            name,
            f"torch {torch.version} (CUDA {torch.cuda_runtime}) sees {torch.device_count} GPU(s)",
        )
    if not ctx.has_gpu:
        if torch.cuda_runtime is None:
            return ok(
                name,
                f"torch {torch.version} is a CPU-only build and this machine has no NVIDIA GPU: "
                "CPU training works, CUDA will not",
            )
        return skip(
            name, f"torch {torch.version} (CUDA {torch.cuda_runtime}) finds no GPU because {NO_GPU}"
        )
    if torch.cuda_runtime is None:
        return fail(
            name,
            f"torch {torch.version} is a CPU-only build, so torch.cuda.is_available() is False "
            "although this machine has NVIDIA GPUs",
            "pip install torch --index-url https://download.pytorch.org/whl/cu"
            f"{_wheel_tag(ctx.gpus.cuda_driver_version)}",
        )
    cvd = ctx.env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and cvd.strip() in ("", "-1", "NoDevFiles"):
        return fail(
            name,
            f"torch.cuda.is_available() is False because CUDA_VISIBLE_DEVICES={cvd!r} hides "
            "every GPU",
            "unset CUDA_VISIBLE_DEVICES or list the GPUs to use (e.g. 0,1)",
        )
    reason = torch.cuda_error or "torch gave no reason"
    return fail(
        name,
        f"torch.cuda.is_available() is False on a machine with NVIDIA GPUs: {reason}",
        "see the cuda-compat and nvidia-driver checks; in a container pass the GPUs "
        "(`docker run --gpus all`, or `nvidia.com/gpu` limits in Kubernetes)",
    )


def _parse_visible(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


def check_visible_devices(ctx: Context) -> CheckResult:
    """CUDA_VISIBLE_DEVICES against the GPUs present: bad indices, duplicates, hidden GPUs."""
    name = "cuda-visible-devices"
    value = ctx.env.get("CUDA_VISIBLE_DEVICES")
    devices = ctx.gpus.devices
    if value is None:
        if not devices:
            return skip(name, f"CUDA_VISIBLE_DEVICES is unset and {NO_GPU}")
        return ok(name, f"CUDA_VISIBLE_DEVICES is unset: all {len(devices)} GPU(s) are visible")
    entries = _parse_visible(value)
    if not entries or entries[0] in ("-1", "NoDevFiles"):
        if not devices:
            return ok(name, f"CUDA_VISIBLE_DEVICES={value!r} hides all GPUs (and {NO_GPU})")
        return warn(
            name,
            f"CUDA_VISIBLE_DEVICES={value!r} hides all {len(devices)} GPU(s): CUDA sees none",
            "unset CUDA_VISIBLE_DEVICES, or set it to the GPUs to use, e.g. `export CUDA_VISIBLE_DEVICES=0,1`",
        )
    if not devices:
        return warn(
            name,
            f"CUDA_VISIBLE_DEVICES={value!r} is set but {NO_GPU}",
            "unset CUDA_VISIBLE_DEVICES",
        )
    if all(e.startswith("MIG-") for e in entries):
        return ok(
            name,
            f"CUDA_VISIBLE_DEVICES selects {len(entries)} MIG instance(s) by UUID (CUDA uses only the "
            "first MIG device per process)"
            if len(entries) > 1
            else "CUDA_VISIBLE_DEVICES selects one MIG instance by UUID",
        )
    uuids = [d.uuid or "" for d in devices]
    problems: list[str] = []
    resolved: list[int] = []
    for entry in entries:
        if entry.isdigit():
            idx = int(entry)
            if idx >= len(devices):
                problems.append(f"index {idx} does not exist (GPUs are 0-{len(devices) - 1})")
                break  # CUDA ignores everything from the first invalid entry on
            resolved.append(idx)
        elif entry.startswith("GPU-"):
            matches = [i for i, u in enumerate(uuids) if u and u.startswith(entry)]
            if len(matches) != 1:
                problems.append(f"{entry} matches {'no' if not matches else 'several'} GPU UUID(s)")
                break
            resolved.append(matches[0])
        else:
            problems.append(
                f"{entry!r} is neither an index nor a GPU- UUID"
                + (" (MIG- UUIDs cannot be mixed with GPUs)" if entry.startswith("MIG-") else "")
            )
            break
    dupes = sorted({i for i in resolved if resolved.count(i) > 1})
    if dupes:
        problems.append(f"GPU(s) {dupes} listed twice (CUDA then sees no device at all)")
    torch = ctx.torch
    if problems:
        return fail(
            name,
            f"CUDA_VISIBLE_DEVICES={value!r}: "
            + "; ".join(problems)
            + f". CUDA stops at the first invalid entry, so only {len(resolved)} GPU(s) are visible",
            f"use indices 0-{len(devices) - 1} or the UUIDs from `nvidia-smi -L`, each once",
        )
    note = ""
    if torch.installed and torch.cuda_available and torch.device_count != len(resolved):
        note = f"; torch sees {torch.device_count}"
        return warn(
            name,
            f"CUDA_VISIBLE_DEVICES={value!r} selects {len(resolved)} of {len(devices)} GPU(s){note}",
            "check for a second CUDA_VISIBLE_DEVICES set by a launcher or the container runtime",
        )
    hidden = len(devices) - len(set(resolved))
    finding = f"CUDA_VISIBLE_DEVICES={value!r} selects {len(resolved)} of {len(devices)} GPU(s)"
    if hidden:
        finding += f" ({hidden} hidden on purpose?)"
    return ok(
        name,
        finding + ". Note: CUDA numbers them in its own order; set CUDA_DEVICE_ORDER=PCI_BUS_ID to "
        "match nvidia-smi"
        if ctx.env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID" and len(devices) > 1
        else finding,
    )
