"""Storage and input-pipeline benchmarks: sequential write/read and random 4 KiB reads in the
checkpoint directory, and DataLoader throughput.

Everything the storage benchmark writes lives in one temporary folder inside the checkpoint
directory, removed in a ``finally`` (so also on Ctrl-C). Reads bypass the page cache with
O_DIRECT where the filesystem supports it; otherwise the file's cached pages are dropped with
``posix_fadvise(DONTNEED)`` first, and the note says so.
"""

from __future__ import annotations

import mmap
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuwise.errors import StorageError

BLOCK = 4 * 1024 * 1024  # sequential I/O block: 4 MiB
PAGE = 4096  # random-read size: 4 KiB, the usual IOPS unit (fio's default bs)


@dataclass(frozen=True)
class StorageRun:
    """Sequential and random I/O figures in one folder."""

    write_gb_s: float
    """Sequential write incl. fsync, GB/s."""
    read_gb_s: float
    """Sequential read, GB/s."""
    random_read_iops: float
    """Random 4 KiB reads per second (one outstanding read)."""
    direct_io: bool
    """Reads used O_DIRECT (page cache bypassed)."""
    file_bytes: int
    """Size of the test file."""


def scratch_dir(parent: Path) -> Path:
    """A fresh folder inside ``parent``; StorageError (exit 2) when it cannot be created."""
    if not parent.is_dir():
        raise StorageError(
            f"checkpoint directory {parent} does not exist or is not a folder",
            hint=f"create it (`mkdir -p {parent}`) or pass --checkpoint-dir",
        )
    try:
        return Path(tempfile.mkdtemp(prefix=".gpuwise-bench-", dir=parent))
    except OSError as exc:
        raise StorageError(
            f"cannot write in checkpoint directory {parent}: {exc.strerror}",
            hint="pass a writable --checkpoint-dir, or fix its permissions",
        ) from None


def _drop_cache(fd: int) -> None:
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def _open_read(path: Path) -> tuple[int, bool]:
    flags = os.O_RDONLY
    direct = getattr(os, "O_DIRECT", 0)
    if direct:
        try:
            return os.open(path, flags | direct), True
        except OSError:  # tmpfs and some overlay filesystems refuse O_DIRECT
            pass
    fd = os.open(path, flags)
    _drop_cache(fd)
    return fd, False


def storage_run(
    parent: Path, file_bytes: int, random_reads: int, tick: Callable[[], None] = lambda: None
) -> StorageRun:
    """Write, read back and randomly read a ``file_bytes`` file in a scratch folder of ``parent``.

    ``tick`` is called between phases (progress bars; tests use it to interrupt). The scratch
    folder is removed however this returns.
    """
    folder = scratch_dir(parent)
    try:
        path = folder / "bench.bin"
        block = os.urandom(BLOCK)
        blocks = max(1, file_bytes // BLOCK)
        t0 = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for _ in range(blocks):
                os.write(fd, block)
            os.fsync(fd)
        except OSError as exc:  # a full disk or quota: the folder cannot hold the test file
            raise StorageError(
                f"cannot write the {blocks * BLOCK // (1 << 20):,} MiB test file in checkpoint "
                f"directory {parent}: {exc.strerror}",
                hint="free space there, give a smaller --storage-mib, or pass another "
                "--checkpoint-dir",
            ) from None
        finally:
            os.close(fd)
        write_s = time.perf_counter() - t0
        size = blocks * BLOCK
        tick()

        buf = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT requires
        fd, direct = _open_read(path)
        try:
            t0 = time.perf_counter()
            offset = 0
            while offset < size:
                n = os.preadv(fd, [buf], offset)
                if n <= 0:
                    break
                offset += n
            read_s = time.perf_counter() - t0
        finally:
            os.close(fd)
        tick()

        page = mmap.mmap(-1, PAGE)
        fd, direct_r = _open_read(path)
        try:
            rng = random.Random(0)
            pages = size // PAGE
            t0 = time.perf_counter()
            for _ in range(random_reads):
                os.preadv(fd, [page], rng.randrange(pages) * PAGE)
            rand_s = time.perf_counter() - t0
        finally:
            os.close(fd)
        tick()
        return StorageRun(
            size / max(write_s, 1e-9) / 1e9,
            size / max(read_s, 1e-9) / 1e9,
            random_reads / max(rand_s, 1e-9),
            direct and direct_r,
            size,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def dataloader_samples_per_s(num_workers: int, batches: int, batch_size: int, image: int) -> float:
    """Samples/s of a DataLoader over a synthetic image dataset (decode-free: measures the
    worker/collate/IPC path, not JPEG decoding)."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Synthetic(Dataset[tuple[torch.Tensor, int]]):
        def __len__(self) -> int:
            return batches * batch_size

        def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
            g = torch.Generator().manual_seed(i)
            return torch.rand(3, image, image, generator=g), i % 10

    loader = DataLoader(
        Synthetic(),
        batch_size=batch_size,
        num_workers=num_workers,
        persistent_workers=False,
        pin_memory=False,
    )
    t0 = time.perf_counter()
    n = 0
    for x, _ in loader:
        n += int(x.shape[0])
    return n / max(time.perf_counter() - t0, 1e-9)
