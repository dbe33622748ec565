"""What every check receives: the probe, the user's options, and the facts read once."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from gpuwise.doctor.probe import GpuInfo, Probe, TorchInfo
from gpuwise.errors import HardwareError, InputError

NVIDIA_PCI_VENDOR = "0x10de"
# PCI class codes of display controllers: 0x0300 VGA, 0x0302 3D controller (datacenter GPUs).
_GPU_CLASSES = ("0x0300", "0x0302")


@dataclass(frozen=True)
class DoctorOptions:
    """What the run being diagnosed intends to do; defaults are stated in ``gpuwise doctor --help``."""

    num_workers: int = 8
    """DataLoader ``num_workers`` per training process (gpuwise's assumption when not given: 8)."""
    checkpoint_dir: str = "."
    """Where checkpoints will be written (free-disk check)."""
    shm_per_worker_mib: float = 512.0
    """/dev/shm a DataLoader worker may hold (prefetched batches); a gpuwise rule of thumb,
    raise it for large batches of images or long sequences."""
    min_free_disk_gib: float = 20.0
    """Free disk below this fails the disk check (gpuwise's default; size it to a few checkpoints)."""
    min_free_memory_gib: float = 4.0
    """Available RAM below this fails the memory check (gpuwise's default)."""
    with_torch: bool = True
    """Import torch to ask it about CUDA (slow to import; ``--no-torch`` skips those checks)."""
    expect_gpu: str | None = None
    """The GPUs this machine should have, e.g. ``H100x8`` (``8xH100``, or ``H100`` for any count):
    a missing or different GPU fails the ``gpu-expected`` check. None: that check is skipped."""

    def __post_init__(self) -> None:
        if self.num_workers < 0:
            raise InputError(f"--num-workers {self.num_workers} is negative", hint="give 0 or more")
        for name in ("shm_per_worker_mib", "min_free_disk_gib", "min_free_memory_gib"):
            value = getattr(self, name)
            if not value == value or value < 0 or value == float("inf"):  # NaN, negative, infinite
                raise InputError(
                    f"--{name.replace('_', '-')} {value} is not a finite number ≥ 0",
                    hint="give a plain number such as 512",
                )
        if self.expect_gpu is not None:
            parse_expected_gpu(self.expect_gpu)  # a typo is bad input (exit 2), not a failed check


_EXPECTED = re.compile(r"(?:(\d+)\s*[x×*]\s*)?(.+?)(?:\s*[x×*]\s*(\d+))?", re.I)


def parse_expected_gpu(text: str) -> tuple[str, int | None]:
    """``H100x8``, ``8xH100``, ``H100×8`` or ``H100`` → (gpuwise's model name, count or None)."""
    from gpuwise.hardware import find_gpu

    how = "write it as MODEL or MODELxCOUNT, e.g. H100x8 or A100-80GB"
    m = _EXPECTED.fullmatch(text.strip())
    if m is None or (m.group(1) and m.group(3)):
        raise InputError(f"--expect-gpu {text!r} is not MODELxCOUNT", hint=how)
    count = int(m.group(1) or m.group(3)) if (m.group(1) or m.group(3)) else None
    if count is not None and not 1 <= count <= 1024:
        raise InputError(f"--expect-gpu {text!r}: the count must be 1 to 1024", hint=how)
    try:
        return find_gpu(m.group(2).strip()).name, count
    except HardwareError as exc:  # name the flag: "unknown GPU 'H10'" alone does not say where
        raise InputError(
            f"--expect-gpu {text!r}: {exc.message}", hint=exc.hint, suggestions=exc.suggestions
        ) from None


class Context:
    """The probe plus facts read once and shared by the checks (GPUs, torch, PCI devices)."""

    def __init__(self, probe: Probe, options: DoctorOptions) -> None:
        self.probe = probe
        self.options = options

    @functools.cached_property
    def gpus(self) -> GpuInfo:
        return self.probe.gpus()

    @functools.cached_property
    def torch(self) -> TorchInfo:
        if not self.options.with_torch:
            return TorchInfo(installed=False, import_error="not asked (--no-torch)")
        return self.probe.torch()

    @functools.cached_property
    def env(self) -> dict[str, str]:
        return dict(self.probe.environ())

    @functools.cached_property
    def pci_gpus(self) -> list[str]:
        """PCI addresses of NVIDIA display/3D controllers (from /sys/bus/pci/devices)."""
        found = []
        for dev in self.probe.list_dir("/sys/bus/pci/devices") or []:
            vendor = (
                (self.probe.read_text(f"/sys/bus/pci/devices/{dev}/vendor") or "").strip().lower()
            )
            klass = (
                (self.probe.read_text(f"/sys/bus/pci/devices/{dev}/class") or "").strip().lower()
            )
            if vendor == NVIDIA_PCI_VENDOR and klass.startswith(_GPU_CLASSES):
                found.append(dev)
        return found

    @property
    def has_gpu(self) -> bool:
        """An NVIDIA GPU is here: NVML lists one, or one sits on the PCI bus."""
        return bool(self.gpus.devices) or bool(self.pci_gpus)

    @property
    def processes(self) -> int:
        """Training processes on this host: one per GPU (torchrun), at least one."""
        return max(1, len(self.gpus.devices))


NO_GPU = "no NVIDIA GPU on this machine"
