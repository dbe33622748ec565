"""The seam between the doctor's checks and the machine: a small :class:`Probe` interface.

Every check reads the machine only through a ``Probe``: file text (``/proc``, ``/sys``),
directory listings, command output (``dmesg``), the environment, the CPU count, disk usage, the
GPUs (:class:`GpuInfo`, read through NVML) and torch (:class:`TorchInfo`). :class:`SystemProbe`
reads the real machine; :class:`FixtureProbe` serves captured text (real ``/proc`` and ``/sys``
files, real ``nvidia-smi -q`` output) so tests and users can replay another machine's state.
This module knows nothing about what is healthy; the checks decide that.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpuwise.doctor.facts import CommandOutput, DiskUsage, GpuDevice, GpuInfo, TorchInfo

__all__ = [
    "CommandOutput",
    "DiskUsage",
    "FixtureProbe",
    "GpuDevice",
    "GpuInfo",
    "Probe",
    "SystemProbe",
    "TorchInfo",
    "read_torch",
]


class Probe(Protocol):
    """Everything the doctor reads from the machine."""

    def read_text(self, path: str) -> str | None:
        """The file's text, or None when missing or unreadable."""
        ...

    def list_dir(self, path: str) -> list[str] | None:
        """Sorted entry names, or None when the directory is missing or unreadable."""
        ...

    def run(self, argv: Sequence[str]) -> CommandOutput | None:
        """Run a command; None when it is not installed."""
        ...

    def environ(self) -> Mapping[str, str]:
        """The environment variables."""
        ...

    def cpu_count(self) -> int:
        """CPUs this process may run on (scheduler affinity)."""
        ...

    def disk_usage(self, path: str) -> DiskUsage | None:
        """Size and free space of the filesystem holding ``path``; None when it does not exist."""
        ...

    def gpus(self) -> GpuInfo:
        """The NVIDIA driver's view of the GPUs."""
        ...

    def torch(self) -> TorchInfo:
        """torch's view of CUDA."""
        ...


class SystemProbe:
    """The real machine."""

    def read_text(self, path: str) -> str | None:
        try:
            return Path(path).read_text("utf-8", errors="replace")
        except OSError:
            return None

    def list_dir(self, path: str) -> list[str] | None:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return None

    def run(self, argv: Sequence[str]) -> CommandOutput | None:
        if shutil.which(argv[0]) is None:
            return None
        try:
            done = subprocess.run(
                list(argv),
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
                errors="replace",
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return CommandOutput(returncode=-1, stdout="", stderr=str(exc))
        return CommandOutput(done.returncode, done.stdout, done.stderr)

    def environ(self) -> Mapping[str, str]:
        return dict(os.environ)

    def cpu_count(self) -> int:
        try:
            return len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            return os.cpu_count() or 1

    def disk_usage(self, path: str) -> DiskUsage | None:
        try:
            usage = shutil.disk_usage(path)
        except OSError:
            return None
        return DiskUsage(total_bytes=usage.total, free_bytes=usage.free)

    def gpus(self) -> GpuInfo:
        from gpuwise.doctor.nvml import read_nvml

        return read_nvml()

    def torch(self) -> TorchInfo:
        return read_torch()


def read_torch() -> TorchInfo:
    """torch's CUDA facts; imports torch (slow) and catches its CUDA initialisation warning."""
    try:
        import torch
    except Exception as exc:  # ImportError, or a broken install raising anything
        return TorchInfo(installed=False, import_error=f"{type(exc).__name__}: {exc}")
    import warnings

    error: str | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            available = bool(torch.cuda.is_available())
            count = int(torch.cuda.device_count()) if available else 0
        except Exception as exc:  # torch raises RuntimeError for broken drivers
            available, count, error = False, 0, f"{type(exc).__name__}: {exc}"
    if error is None:
        texts = [str(w.message) for w in caught if "CUDA" in str(w.message)]
        error = texts[0] if texts else None
    nccl: str | None = None
    try:
        raw: Any = torch.cuda.nccl.version() if torch.version.cuda else None  # type: ignore[no-untyped-call]
        if isinstance(raw, tuple):
            nccl = ".".join(str(p) for p in raw)
        elif isinstance(
            raw, int
        ):  # older torch: 2215 = 2.21.5... encoded as major*1000+minor*100+patch
            nccl = f"{raw // 1000}.{raw % 1000 // 100}.{raw % 100}"
    except Exception:  # no NCCL in this build
        nccl = None
    return TorchInfo(
        installed=True,
        version=str(torch.__version__),
        cuda_runtime=torch.version.cuda,
        cuda_available=available,
        device_count=count,
        cuda_error=error,
        nccl_version=nccl,
    )


@dataclass(frozen=True)
class FixtureProbe:
    """A recorded machine: file texts by absolute path, command outputs, facts.

    ``FixtureProbe.from_dir(folder)`` reads a folder laid out as ``fs/`` (a copy of the files,
    e.g. ``fs/proc/meminfo``), ``commands/<argv joined by spaces>.txt`` and ``facts.json``
    (``env``, ``cpu_count``, ``disk`` {path: [total, free]}, ``torch`` {TorchInfo fields});
    GPUs come from ``commands/nvidia-smi -q.txt`` when present.
    """

    files: Mapping[str, str] = field(default_factory=dict)
    """Absolute path → text. Directories are implied by the paths."""
    commands: Mapping[str, CommandOutput] = field(default_factory=dict)
    """``" ".join(argv)`` → output; a command not listed is "not installed"."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables."""
    cpus: int = 8
    """Usable CPUs."""
    disks: Mapping[str, DiskUsage] = field(default_factory=dict)
    """Path → disk usage; the longest matching prefix answers."""
    gpu_info: GpuInfo = field(
        default_factory=lambda: GpuInfo(nvml_error="NVML Shared Library Not Found")
    )
    """The driver's view; default: no driver."""
    torch_info: TorchInfo = field(
        default_factory=lambda: TorchInfo(
            installed=False, import_error="ModuleNotFoundError: No module named 'torch'"
        )
    )
    """torch's view; default: not installed."""

    def read_text(self, path: str) -> str | None:
        return self.files.get(path)

    def list_dir(self, path: str) -> list[str] | None:
        prefix = path.rstrip("/") + "/"
        names = {p[len(prefix) :].split("/", 1)[0] for p in self.files if p.startswith(prefix)}
        return sorted(names) if names else None

    def run(self, argv: Sequence[str]) -> CommandOutput | None:
        return self.commands.get(" ".join(argv))

    def environ(self) -> Mapping[str, str]:
        return self.env

    def cpu_count(self) -> int:
        return self.cpus

    def disk_usage(self, path: str) -> DiskUsage | None:
        best = max(
            (p for p in self.disks if path == p or path.startswith(p.rstrip("/") + "/")),
            key=len,
            default=None,
        )
        return self.disks[best] if best is not None else None

    def gpus(self) -> GpuInfo:
        return self.gpu_info

    def torch(self) -> TorchInfo:
        return self.torch_info

    @classmethod
    def from_dir(cls, folder: Path) -> FixtureProbe:
        """Load a recorded machine from ``folder`` (layout in the class docstring).

        A recording is untrusted input: anything malformed raises DataFileError naming the file
        and field (it used to surface as an internal error).
        """
        from gpuwise.doctor.nvsmi import parse_nvidia_smi_q
        from gpuwise.errors import DataFileError

        fs, cmd_dir, facts_path = folder / "fs", folder / "commands", folder / "facts.json"
        if not (fs.is_dir() or cmd_dir.is_dir() or facts_path.is_file()):
            raise DataFileError(
                f"{folder}: not a recorded machine (no fs/, commands/ or facts.json)",
                hint="give a folder with fs/, commands/ (e.g. 'nvidia-smi -q.txt') and facts.json",
            )
        files: dict[str, str] = {}
        if fs.is_dir():
            for p in sorted(fs.rglob("*")):
                if p.is_file():
                    files["/" + p.relative_to(fs).as_posix()] = _recorded_text(p)
        commands: dict[str, CommandOutput] = {}
        if cmd_dir.is_dir():
            for p in sorted(cmd_dir.glob("*.txt")):
                commands[p.stem] = CommandOutput(0, _recorded_text(p))
        facts = _recorded_facts(facts_path) if facts_path.is_file() else {}
        gpu = GpuInfo(nvml_error="NVML Shared Library Not Found")
        if "nvidia-smi -q" in commands:
            gpu = parse_nvidia_smi_q(commands["nvidia-smi -q"].stdout)
        try:
            torch_facts = facts.get("torch")
            torch_info = TorchInfo(**torch_facts) if torch_facts else cls().torch_info
            env = {str(k): str(v) for k, v in dict(facts.get("env", {})).items()}
            cpus = int(facts.get("cpu_count", 8))
            disks = {
                str(k): DiskUsage(int(v[0]), int(v[1]))
                for k, v in dict(facts.get("disk", {})).items()
            }
        except (TypeError, ValueError, IndexError, KeyError) as exc:
            raise DataFileError(
                f"{facts_path}: unexpected content ({' '.join(str(exc).split())})",
                hint="env {NAME: value}, cpu_count N, disk {path: [total_bytes, free_bytes]}, "
                "torch {TorchInfo fields}",
            ) from None
        return cls(
            files=files,
            commands=commands,
            env=env,
            cpus=cpus,
            disks=disks,
            gpu_info=gpu,
            torch_info=torch_info,
        )


def _recorded_text(path: Path) -> str:
    from gpuwise.errors import DataFileError, parse_error_text

    try:
        return path.read_text("utf-8")
    except (UnicodeDecodeError, OSError) as exc:
        why = parse_error_text(exc) if isinstance(exc, UnicodeDecodeError) else exc.strerror
        raise DataFileError(
            f"{path}: {why}", hint="record the machine's files as UTF-8 text"
        ) from None


def _recorded_facts(path: Path) -> dict[str, Any]:
    from gpuwise.errors import DataFileError, parse_error_text

    try:
        facts = json.loads(_recorded_text(path))
    except ValueError as exc:
        raise DataFileError(
            f"{path}: not valid JSON ({parse_error_text(exc)})", hint="fix facts.json"
        ) from None
    if not isinstance(facts, dict):
        raise DataFileError(
            f"{path}: expected a JSON object, got {type(facts).__name__}",
            hint='write {"env": {...}, "cpu_count": N, "disk": {...}, "torch": {...}}',
        )
    return facts
