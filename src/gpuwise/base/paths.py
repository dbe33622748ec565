"""Where gpuwise keeps user files: config (``gpus.csv``, ``reserved.yaml``, calibration) and data
(the updated catalog, the monitoring history).

``GPUWISE_HOME`` puts both under one folder (tests and containers use it); otherwise the XDG
locations apply: ``$XDG_CONFIG_HOME/gpuwise`` (``~/.config/gpuwise``) and
``$XDG_DATA_HOME/gpuwise`` (``~/.local/share/gpuwise``). Nothing here creates a folder.
:func:`write_bytes_atomic` writes a file all or nothing: output files (``--html``,
``--save-demand``, ``--export -o``), the catalog store, calibration.json and local checkpoints.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

from gpuwise.base import settings


def _home_override() -> Path | None:
    return settings.path("GPUWISE_HOME")


def config_dir() -> Path:
    """User configuration: gpus.csv overrides, reserved.yaml, calibration.json."""
    override = _home_override()
    if override is not None:
        return override / "config"
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpuwise"


def data_dir() -> Path:
    """User data: the updated offers catalog, the monitoring history database."""
    override = _home_override()
    if override is not None:
        return override / "data"
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gpuwise"


def skypilot_catalog_root() -> Path | None:
    """SkyPilot's local catalog root (``~/.sky/catalogs``), or None when switched off.

    ``GPUWISE_SKYPILOT_CATALOG=off`` switches it off; any other value is the root to use.
    """
    value = settings.text("GPUWISE_SKYPILOT_CATALOG")
    if value is not None:
        return None if value.lower() in ("0", "off", "none", "no") else Path(value).expanduser()
    return Path.home() / ".sky" / "catalogs"


def write_bytes_atomic(
    path: Path | str, data: bytes | memoryview, *, sync_folder: bool = False
) -> None:
    """Replace ``path`` with ``data`` all at once: a temporary file beside it, fsync, rename.

    A write that fails half-way (disk full, file-size limit, killed) leaves an existing file as
    it was and no temporary behind. ``sync_folder`` also fsyncs the folder, so that the rename
    itself survives a power loss (checkpoints need this; an output file does not). The file gets
    the mode ``open()`` would give it (0666 less the umask). Raises OSError.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:16]}.tmp")
    try:
        # O_EXCL: never write into another writer's file; mode 0o666: the kernel applies the umask
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync_folder:
        fsync_folder(path.parent)


def write_text_atomic(path: Path | str, text: str) -> None:
    """:func:`write_bytes_atomic` of ``text`` as UTF-8 (``--html``, ``--save-demand``, the catalog store)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def fsync_folder(folder: Path | str) -> None:
    """Make a rename in ``folder`` durable (POSIX: fsync the directory itself)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
