"""Where gpuwise keeps user files: config (``gpus.csv``, ``reserved.yaml``, calibration) and data
(the updated catalog, the monitoring history).

``GPUWISE_HOME`` puts both under one folder (tests and containers use it); otherwise the XDG
locations apply: ``$XDG_CONFIG_HOME/gpuwise`` (``~/.config/gpuwise``) and
``$XDG_DATA_HOME/gpuwise`` (``~/.local/share/gpuwise``). Nothing here creates a folder.
:func:`write_text_atomic` writes a file all or nothing (``--html``, ``--save-demand``, the catalog
store, calibration.json).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _home_override() -> Path | None:
    home = os.environ.get("GPUWISE_HOME")
    return Path(home).expanduser() if home else None


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
    value = os.environ.get("GPUWISE_SKYPILOT_CATALOG")
    if value is not None:
        return None if value.lower() in ("", "0", "off", "none", "no") else Path(value).expanduser()
    return Path.home() / ".sky" / "catalogs"


def write_text_atomic(path: Path | str, text: str) -> None:
    """Replace ``path`` with ``text`` all at once: a temporary file beside it, fsync, rename.

    A write that fails half-way (disk full, file-size limit, killed) leaves an existing file as
    it was and no temporary behind. Raises OSError (the caller turns it into a user error).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # as open() would create it, not mkstemp's 0600
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
