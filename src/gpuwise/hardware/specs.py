"""GPU datasheet records and their lookup by any name a cloud, NVML or a person uses.

The table lives in ``data/gpus.csv`` (one row per model, each with its source). A user file
``<config dir>/gpus.csv`` with the same columns adds models or overrides figures, e.g. the A10G
peaks NVIDIA never published. This module does not know prices (see :mod:`gpuwise.catalog`).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from importlib import resources
from pathlib import Path
from typing import Literal

from gpuwise.base.datafiles import commented_csv
from gpuwise.base.paths import config_dir
from gpuwise.errors import DataFileError, HardwareError, did_you_mean

Precision = Literal["fp32", "tf32", "fp16", "bf16", "fp8", "int8"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8")


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model's datasheet figures. ``None`` means the vendor publishes no such figure."""

    name: str
    """Canonical model name used across gpuwise, e.g. ``H100`` (SXM), ``A100-80GB``, ``L4``."""
    vendor: Literal["nvidia", "amd", "google"]
    """Who makes it."""
    family: str
    """The chip family shared by variants, e.g. ``A100`` for A100, A100-80GB and A100-PCIE."""
    architecture: str
    """Architecture name, e.g. ``Hopper``."""
    compute_capability: str | None
    """CUDA compute capability (``9.0``) or the AMD gfx target; None for TPUs."""
    form_factor: str
    """SXM4/SXM5/PCIe/OAM/Superchip/TPU."""
    memory_gib: float
    """Device memory in GiB as the datasheet states it (datasheet GPU "GB" are binary)."""
    memory_type: str
    """HBM3, GDDR6, ..."""
    memory_bandwidth_tb_s: float | None
    """Peak device-memory bandwidth in TB/s (10^12 bytes/s)."""
    peak_fp32_tflops: float | None
    """Dense FP32 (non-tensor) peak, TFLOP/s."""
    peak_tf32_tflops: float | None
    """Dense TF32 tensor-core peak, TFLOP/s."""
    peak_fp16_tflops: float | None
    """Dense FP16 tensor-core peak, TFLOP/s."""
    peak_bf16_tflops: float | None
    """Dense BF16 tensor-core peak, TFLOP/s (None where BF16 is not supported, e.g. T4, V100)."""
    peak_fp8_tflops: float | None
    """Dense FP8 tensor-core peak, TFLOP/s (None where FP8 is not supported)."""
    peak_int8_tops: float | None
    """Dense INT8 peak, TOPS."""
    interconnect: str
    """GPU-to-GPU link as the datasheet names it."""
    nvlink_gb_s: float | None
    """Per-GPU total bidirectional NVLink / Infinity Fabric / ICI bandwidth in GB/s; None = PCIe only."""
    pcie_gen: int | None
    """Host PCIe generation."""
    tdp_w: float | None
    """Maximum board power in watts."""
    mig_profiles: tuple[str, ...]
    """MIG profiles (``1g.10gb`` ...), empty where MIG is not supported."""
    aliases: tuple[str, ...]
    """Other names: cloud accelerator names, NVML names, GKE labels."""
    source: str
    """Where the figures come from."""
    as_of: str
    """When the source was read (YYYY-MM)."""
    reported_memory_mib: float | None = None
    """``memory.total`` as nvidia-smi/NVML reports it on a real GPU, MiB (None: no public figure)."""
    reported_memory_source: str = ""
    """Where ``reported_memory_mib`` comes from."""

    @property
    def total_memory_gib(self) -> float:
        """The memory a real GPU reports (nvidia-smi ``memory.total``), GiB; the datasheet figure
        where no reported one is known (see :attr:`total_memory_known`)."""
        if self.reported_memory_mib is not None:
            return self.reported_memory_mib / 1024
        return float(self.memory_gib)

    @property
    def total_memory_known(self) -> bool:
        """True when :attr:`total_memory_gib` is a reported figure, not the datasheet's."""
        return self.reported_memory_mib is not None

    def peak_tflops(self, precision: str) -> float | None:
        """Dense peak for ``precision`` (``fp32``/``tf32``/``fp16``/``bf16``/``fp8``; ``int8`` in TOPS)."""
        if precision == "int8":
            return self.peak_int8_tops
        if precision not in PRECISIONS:
            raise HardwareError(
                f"unknown precision {precision!r}", hint=f"use one of {', '.join(PRECISIONS)}"
            )
        value: float | None = getattr(self, f"peak_{precision}_tflops")
        return value

    @property
    def has_gpu_fabric(self) -> bool:
        """True when every GPU of a node talks to every other over NVLink/Infinity Fabric/ICI.

        PCIe cards with an NVLink bridge pair up only two GPUs, so they count as PCIe here.
        """
        return self.nvlink_gb_s is not None and self.form_factor != "PCIe"

    @property
    def supports_mig(self) -> bool:
        return bool(self.mig_profiles)


_FLOAT_FIELDS = {
    f.name
    for f in fields(GpuSpec)
    if f.name.startswith(("peak_", "memory_bandwidth", "nvlink", "tdp"))
} | {"memory_gib", "reported_memory_mib"}


def normalize_gpu_name(name: str) -> str:
    """Key used for matching: lower-case alphanumerics without vendor words.

    ``NVIDIA A100-SXM4-80GB`` → ``a100sxm480gb``; ``nvidia-tesla-t4`` → ``t4``.
    """
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    for prefix in ("nvidia", "tesla", "amdinstinct", "amd", "instinct", "google"):
        key = key.removeprefix(prefix)
    return key


def _parse_rows(text: str, origin: str) -> list[GpuSpec]:
    reader = commented_csv(text)
    if reader.fieldnames is None:
        raise DataFileError(f"{origin}: no GPU rows", hint="add a header line and one row per GPU")
    names = {f.name for f in fields(GpuSpec)}
    header = set(reader.fieldnames)
    missing = {"name", "memory_gib"} - header
    if missing:
        raise DataFileError(
            f"{origin}: missing column(s) {', '.join(sorted(missing))}",
            hint=f"the header must name the columns of {', '.join(sorted(names))}",
        )
    unknown = header - names
    if unknown:
        raise DataFileError(
            f"{origin}: unknown column(s) {', '.join(sorted(unknown))}",
            hint="use the column names of gpuwise's own gpus.csv",
            suggestions=[s for u in unknown for s in did_you_mean(u, names, 1)],
        )
    specs = []
    for lineno, row in enumerate(reader, start=2):
        specs.append(_row_to_spec(row, f"{origin}, row {lineno}"))
    return specs


def _row_to_spec(row: dict[str, str], where: str) -> GpuSpec:
    values: dict[str, object] = {}
    for f in fields(GpuSpec):
        raw = (row.get(f.name) or "").strip()
        if f.name in _FLOAT_FIELDS:
            if not raw:
                values[f.name] = None
                continue
            try:
                number = float(raw)
            except ValueError:
                raise DataFileError(
                    f"{where}, column {f.name}: {raw!r} is not a number",
                    hint="write a plain number, or leave the cell empty if unknown",
                ) from None
            if not math.isfinite(number) or number <= 0:
                raise DataFileError(
                    f"{where}, column {f.name}: {raw!r} must be a positive number",
                    hint="leave the cell empty if the figure is unknown",
                )
            values[f.name] = number
        elif f.name in ("mig_profiles", "aliases"):
            values[f.name] = tuple(p.strip() for p in raw.split(";") if p.strip())
        elif f.name == "pcie_gen":
            values[f.name] = int(raw) if raw.isdigit() else None
        elif f.name == "compute_capability":
            values[f.name] = raw or None
        else:
            values[f.name] = raw
    if not values["name"]:
        raise DataFileError(f"{where}: empty name", hint="every row needs a GPU model name")
    if values["memory_gib"] is None:
        raise DataFileError(f"{where}, column memory_gib: empty", hint="give the GPU memory in GiB")
    values.setdefault("vendor", "nvidia")
    if not values["vendor"]:
        values["vendor"] = "nvidia"
    if not values["family"]:
        values["family"] = str(values["name"])
    return GpuSpec(**values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class GpuTable:
    """All known GPU models with a name index; build with :func:`load_gpu_table`."""

    specs: tuple[GpuSpec, ...]
    index: dict[str, GpuSpec]

    def find(self, name: str) -> GpuSpec:
        """The model called ``name`` (any alias, any case), or HardwareError with did-you-mean."""
        spec = self.get(name)
        if spec is None:
            raise HardwareError(
                f"unknown GPU {name!r}",
                hint="run `gpuwise gpus` for the known models, or add a row to "
                f"{config_dir() / 'gpus.csv'}",
                suggestions=did_you_mean(
                    name, [s.name for s in self.specs] + [a for s in self.specs for a in s.aliases]
                ),
            )
        return spec

    def get(self, name: str) -> GpuSpec | None:
        """The model called ``name``, or None."""
        return self.index.get(normalize_gpu_name(name))

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.specs]


def _build_table(specs: Iterable[GpuSpec]) -> GpuTable:
    by_name: dict[str, GpuSpec] = {}
    for spec in specs:  # later rows (user file) replace earlier ones of the same name
        by_name[spec.name] = spec
    index: dict[str, GpuSpec] = {}
    for spec in by_name.values():
        for alias in (*spec.aliases, spec.name):
            index[normalize_gpu_name(alias)] = spec
    return GpuTable(specs=tuple(by_name.values()), index=index)


def bundled_gpu_rows() -> list[GpuSpec]:
    """The rows of the GPU table that ships with gpuwise."""
    text = resources.files("gpuwise.hardware").joinpath("data/gpus.csv").read_text("utf-8")
    return _parse_rows(text, "gpuwise/hardware/data/gpus.csv")


def _read_user_file(path: Path) -> list[GpuSpec]:
    try:
        text = path.read_text("utf-8")
    except UnicodeDecodeError:
        raise DataFileError(f"{path}: not UTF-8 text", hint="save the file as UTF-8 CSV") from None
    except OSError as exc:
        raise DataFileError(
            f"{path}: cannot read ({exc.strerror})", hint="check the path and permissions"
        ) from None
    bundled = {s.name: s for s in bundled_gpu_rows()}
    specs = []
    for spec in _parse_rows(text, str(path)):
        base = bundled.get(spec.name)
        if base is not None:  # a user row overrides only the cells it fills
            overrides = {
                f.name: getattr(spec, f.name)
                for f in fields(GpuSpec)
                if getattr(spec, f.name) not in (None, "", ())
            }
            spec = replace(base, **overrides)
        specs.append(spec)
    return specs


def load_gpu_table(user_file: Path | None = None) -> GpuTable:
    """The bundled table plus the user's ``gpus.csv`` (``user_file`` or the config dir's)."""
    path = user_file if user_file is not None else config_dir() / "gpus.csv"
    extra = _read_user_file(path) if path.is_file() else []
    return _build_table([*bundled_gpu_rows(), *extra])


@functools.lru_cache(maxsize=1)
def _default_table(config_key: str) -> GpuTable:
    return load_gpu_table()


def gpu_table() -> GpuTable:
    """The GPU table in effect (bundled + user file), cached per config directory."""
    return _default_table(str(config_dir()))


def find_gpu(name: str) -> GpuSpec:
    """Look up a GPU model by any of its names; raises HardwareError with did-you-mean."""
    return gpu_table().find(name)


def canonical_gpu_name(name: str) -> str | None:
    """gpuwise's name for any name of a GPU (``NVIDIA H100 80GB HBM3`` → ``H100``), or None when
    the table does not know it: for names a machine reports, where an unknown GPU is no error."""
    try:
        return find_gpu(name).name
    except HardwareError:
        return None
