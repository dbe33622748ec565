"""Can this driver run code built for that CUDA runtime? NVIDIA's compatibility rules as a function.

The rules (CUDA Compatibility guide, https://docs.nvidia.com/deploy/cuda-compatibility/):

* **Backward compatibility**: a driver runs code built with any CUDA toolkit up to the CUDA
  version it reports (``nvidia-smi``'s "CUDA Version").
* **Minor-version compatibility** (CUDA 11 and later): code built with a newer *minor* release
  of the same major family runs on an older driver of that family, provided the driver is at
  least the family minimum (11.x ≥ 450.80.02, 12.x ≥ 525.60.13, 13.x ≥ 580), with a limited
  feature set: PTX built by the newer toolkit cannot be JIT-compiled
  (``cudaErrorUnsupportedPtxVersion``), and APIs that need the newer driver return
  ``cudaErrorCallRequiresNewerDriver``.
* **A newer major** than the driver supports fails at the first CUDA call: "CUDA driver
  version is insufficient for CUDA runtime version". Only datacenter GPUs can bridge this
  with the forward-compatibility package (``cuda-compat-<major>-<minor>``).

The minimum drivers live in ``data/cuda_drivers.csv`` with their sources.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Literal

from gpuwise.base.datafiles import commented_csv
from gpuwise.errors import DataFileError

Verdict = Literal[
    "compatible", "minor_compat", "minor_compat_driver_too_old", "incompatible", "unknown"
]


def parse_version(text: str) -> tuple[int, ...]:
    """``"550.54.15"`` → ``(550, 54, 15)``; ``"12.4"`` → ``(12, 4)``; raises ValueError if not numeric."""
    parts = text.strip().split(".")
    return tuple(int(p) for p in parts)


@dataclass(frozen=True)
class DriverTable:
    """Minimum drivers: per toolkit release (``toolkit``) and per major family (``minor_compat``)."""

    toolkit: dict[tuple[int, int], str]
    """(major, minor) → minimum Linux x86_64 driver for that toolkit's GA release."""
    minor_compat: dict[int, str]
    """major → minimum driver for minor-version compatibility within that family."""


@functools.lru_cache(maxsize=1)
def driver_table() -> DriverTable:
    """The bundled table (``gpuwise/doctor/data/cuda_drivers.csv``)."""
    text = resources.files("gpuwise.doctor").joinpath("data/cuda_drivers.csv").read_text("utf-8")
    toolkit: dict[tuple[int, int], str] = {}
    minor: dict[int, str] = {}
    for lineno, row in enumerate(commented_csv(text), start=2):
        try:
            version = parse_version(row["cuda"])
            parse_version(row["min_driver"])
        except (ValueError, KeyError):
            raise DataFileError(
                f"cuda_drivers.csv row {lineno}: bad version", hint="fix the data file"
            ) from None
        if row["kind"] == "toolkit":
            toolkit[(version[0], version[1])] = row["min_driver"]
        else:
            minor[version[0]] = row["min_driver"]
    return DriverTable(toolkit=toolkit, minor_compat=minor)


@dataclass(frozen=True)
class Compatibility:
    """The verdict for one driver and one CUDA runtime."""

    verdict: Verdict
    """``compatible``; ``minor_compat`` (runs, limited features); ``minor_compat_driver_too_old``
    and ``incompatible`` (fails); ``unknown`` (a version did not parse)."""
    explanation: str
    """One sentence saying which rule applied."""
    min_driver_for_runtime: str | None
    """The driver the runtime's own toolkit asks for (release notes Table 3), when known."""


def check_compatibility(
    driver_version: str | None, driver_cuda: str | None, runtime_cuda: str
) -> Compatibility:
    """Apply NVIDIA's rules to a driver (its version and the CUDA version it reports) and a runtime."""
    table = driver_table()
    try:
        rt = parse_version(runtime_cuda)[:2]
    except ValueError:
        return Compatibility(
            "unknown", f"cannot read the CUDA runtime version {runtime_cuda!r}", None
        )
    needed = table.toolkit.get((rt[0], rt[1]))
    if driver_cuda is None:
        return Compatibility(
            "unknown", "the driver did not report which CUDA version it supports", needed
        )
    try:
        drv = parse_version(driver_cuda)[:2]
    except ValueError:
        return Compatibility(
            "unknown", f"cannot read the driver's CUDA version {driver_cuda!r}", needed
        )
    if rt <= drv:
        return Compatibility(
            "compatible",
            f"the driver supports CUDA {driver_cuda}, at or above the runtime's "
            f"{runtime_cuda} (backward compatibility)",
            needed,
        )
    if rt[0] > drv[0]:
        return Compatibility(
            "incompatible",
            f"the runtime is CUDA {rt[0]}.x but the driver only supports up to "
            f"{driver_cuda}: a newer major version needs a newer driver",
            needed,
        )
    family_min = table.minor_compat.get(rt[0])
    if family_min is None or driver_version is None:
        return Compatibility(
            "unknown", f"no minor-version-compatibility rule known for CUDA {rt[0]}.x", needed
        )
    try:
        ok = parse_version(driver_version) >= parse_version(family_min)
    except ValueError:
        return Compatibility(
            "unknown", f"cannot read the driver version {driver_version!r}", needed
        )
    if ok:
        return Compatibility(
            "minor_compat",
            f"CUDA {runtime_cuda} is newer than the driver's {driver_cuda} within "
            f"the same major release, and driver {driver_version} ≥ {family_min} (the CUDA "
            f"{rt[0]}.x minimum), so minor-version compatibility applies",
            needed,
        )
    return Compatibility(
        "minor_compat_driver_too_old",
        f"driver {driver_version} is below {family_min}, the minimum "
        f"for CUDA {rt[0]}.x minor-version compatibility",
        needed,
    )
