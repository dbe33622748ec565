"""Read ``nvidia-smi -q`` text into :class:`~gpuwise.doctor.probe.GpuInfo`.

Recorded ``nvidia-smi -q`` output is the most common thing people paste when a GPU misbehaves,
so the doctor can replay it (``FixtureProbe``) and tests use it as fixtures. The live machine
is read through NVML instead (:mod:`gpuwise.doctor.nvml`); both produce the same values.
Handles both the driver ≥ 535 wording ("Clocks Event Reasons") and the older one ("Clocks
Throttle Reasons").
"""

from __future__ import annotations

import re
from typing import Any

from gpuwise.doctor.facts import GpuDevice, GpuInfo

Tree = dict[str, Any]
_KV = re.compile(r"^(.*?)\s+:(?:\s(.*))?$")

# nvidia-smi -q's wording → the one reason table (gpuwise.base.nvml.THROTTLE_REASONS)
_REASONS = {
    "idle": "gpu_idle",
    "applications clocks setting": "applications_clocks",
    "sw power cap": "sw_power_cap",
    "hw slowdown": "hw_slowdown",
    "hw thermal slowdown": "hw_thermal",
    "hw power brake slowdown": "hw_power_brake",
    "sync boost": "sync_boost",
    "sw thermal slowdown": "sw_thermal",
    "display clock setting": "display_clocks",
}


def _tree(lines: list[str]) -> Tree:
    """Indentation (4 spaces a level) → nested dicts; ``Key : value`` lines are leaves."""
    root: Tree = {}
    stack: list[tuple[int, Tree]] = [(-1, root)]
    for raw in lines:
        if not raw.strip() or raw.startswith("="):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        m = _KV.match(raw.strip())
        if m:  # "Key    : value" (the colon always has a space before it; bus ids have none)
            parent[m.group(1).strip()] = (m.group(2) or "").strip()
        else:
            child: Tree = {}
            parent[raw.strip()] = child
            stack.append((indent, child))
    return root


def _get(tree: Any, *path: str) -> str | None:
    node = tree
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node if isinstance(node, str) else None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    m = re.match(r"\s*(\d+)", text)
    return int(m.group(1)) if m else None


def _flag(text: str | None, yes: tuple[str, ...] = ("enabled", "yes", "active")) -> bool | None:
    if text is None or text.strip().upper() in ("N/A", "[N/A]", "NOT SUPPORTED", "[NOT SUPPORTED]"):
        return None
    return text.strip().lower() in yes


def _device(index: int, header: str, node: Tree) -> GpuDevice:
    bus = header.split(" ", 1)[1] if " " in header else None
    link = node.get("PCI", {}).get("GPU Link Info", {}) if isinstance(node.get("PCI"), dict) else {}
    reasons_node = node.get("Clocks Event Reasons") or node.get("Clocks Throttle Reasons") or {}
    active: list[str] = []

    def walk(n: Tree) -> None:
        for key, value in n.items():
            if isinstance(value, dict):
                walk(value)
            elif key.lower() in _REASONS and value.strip().lower() == "active":
                active.append(_REASONS[key.lower()])

    if isinstance(reasons_node, dict):
        walk(reasons_node)
    remapped = node.get("Remapped Rows")
    remapped_node: Tree = remapped if isinstance(remapped, dict) else {}
    mig_devices = node.get("MIG devices") or node.get("MIG Devices")
    pstate = _get(node, "Performance State")
    util = _get(node, "Utilization", "Gpu")
    ecc_total = ("ECC Errors", "Volatile")
    return GpuDevice(
        index=index,
        name=_get(node, "Product Name") or "unknown",
        uuid=_get(node, "GPU UUID"),
        pci_bus_id=bus,
        persistence_mode=_flag(_get(node, "Persistence Mode")),
        mig_current=_flag(_get(node, "MIG Mode", "Current")),
        mig_pending=_flag(_get(node, "MIG Mode", "Pending")),
        mig_device_count=(
            len(mig_devices)
            if isinstance(mig_devices, dict)
            else 0
            if mig_devices == "None"
            else None
        ),
        ecc_enabled=_flag(_get(node, "ECC Mode", "Current")),
        ecc_volatile_uncorrected=_sum_counts(node, *ecc_total, kind="Uncorrectable"),
        ecc_volatile_corrected=_sum_counts(node, *ecc_total, kind="Correctable"),
        ecc_aggregate_uncorrected=_sum_counts(
            node, "ECC Errors", "Aggregate", kind="Uncorrectable"
        ),
        retired_pages_sbe=_int(_get(node, "Retired Pages", "Single Bit ECC")),
        retired_pages_dbe=_int(_get(node, "Retired Pages", "Double Bit ECC")),
        retired_pages_pending=_flag(_get(node, "Retired Pages", "Pending Page Blacklist")),
        remapped_rows_uncorrectable=_int(remapped_node.get("Uncorrectable Error")),
        remapped_rows_pending=_flag(remapped_node.get("Pending")),
        remapping_failed=_flag(remapped_node.get("Remapping Failure Occurred")),
        pcie_gen_current=_int(_get(link, "PCIe Generation", "Current")),
        pcie_gen_max=_int(_get(link, "PCIe Generation", "Max")),
        pcie_width_current=_int(_get(link, "Link Width", "Current")),
        pcie_width_max=_int(_get(link, "Link Width", "Max")),
        performance_state=_int(pstate[1:]) if pstate and pstate.startswith("P") else None,
        utilization_gpu_ratio=float(u) / 100 if (u := _int(util)) is not None else None,
        clock_event_reasons=tuple(active),
    )


def _sum_counts(node: Tree, *path: str, kind: str) -> int | None:
    """Sum the ``* Uncorrectable`` (or ``* Correctable``) counters under ``path``.

    Drivers ≥ 535 split them into SRAM/DRAM; older ones into Device Memory/Register File/...
    and a ``Total``. Returns None when all are N/A.
    """
    section: Any = node
    for key in path:
        section = section.get(key) if isinstance(section, dict) else None
    if not isinstance(section, dict):
        return None
    if kind == "Uncorrectable":
        total = (
            section.get("Double Bit", {}).get("Total")
            if isinstance(section.get("Double Bit"), dict)
            else None
        )
    else:
        total = (
            section.get("Single Bit", {}).get("Total")
            if isinstance(section.get("Single Bit"), dict)
            else None
        )
    if total is not None:
        return _int(total)

    def wanted(key: str) -> bool:
        return key.endswith(kind) and not (kind == "Correctable" and key.endswith("Uncorrectable"))

    values = [_int(v) for k, v in section.items() if isinstance(v, str) and wanted(k)]
    numbers = [v for v in values if v is not None]
    return sum(numbers) if numbers else None


def parse_nvidia_smi_q(text: str) -> GpuInfo:
    """``nvidia-smi -q`` output → GpuInfo (driver, CUDA version, each GPU's health figures)."""
    tree = _tree(text.splitlines())
    gpus = [(k, v) for k, v in tree.items() if k.startswith("GPU ") and isinstance(v, dict)]
    devices = tuple(_device(i, k, v) for i, (k, v) in enumerate(gpus))
    cuda = _get(tree, "CUDA Version")
    return GpuInfo(
        nvml_error=None,
        driver_version=_get(tree, "Driver Version"),
        cuda_driver_version=cuda if cuda and cuda.upper() != "N/A" else None,
        devices=devices,
    )
