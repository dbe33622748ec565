"""The gpuwise a plan ran with, as a wheel the exported job installs from its own workdir.

The SkyPilot export's ``setup`` must install gpuwise on a fresh VM. A release pin
(``gpuwise[train]==0.1.0``) names a version the package index may not have — and anyone who
registers that name there would run code on every exported VM. Instead the export ships the exact
code that made the plan: :func:`write_wheel` zips the importable ``gpuwise`` package (pure Python,
data files included) with its metadata into ``<workdir>/.gpuwise-dist/``, which SkyPilot syncs with
the workdir, and ``setup`` installs it with the ``train`` extra.

Metadata comes from the installed distribution when there is one, else from the checkout's
``pyproject.toml`` (a source tree on ``PYTHONPATH``). Standard library only: no build backend runs.
"""

from __future__ import annotations

import base64
import hashlib
import tomllib
import zipfile
from email.message import Message
from importlib import metadata
from pathlib import Path

from gpuwise.base.version import __version__
from gpuwise.errors import InputError, PlanError, StorageError

_WHEEL = "Wheel-Version: 1.0\nGenerator: gpuwise.planner.wheel\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _from_pyproject(path: Path) -> tuple[str, str, str]:
    """(version, METADATA text, entry_points.txt text) from a checkout's pyproject.toml."""
    project = tomllib.loads(path.read_text("utf-8"))["project"]
    # the version is dynamic in pyproject.toml: setuptools reads gpuwise.base.version, as here
    version = str(project.get("version") or __version__)
    msg = Message()
    msg["Metadata-Version"] = "2.1"
    msg["Name"] = project["name"]
    msg["Version"] = version
    if "requires-python" in project:
        msg["Requires-Python"] = project["requires-python"]
    for dep in project.get("dependencies", []):
        msg["Requires-Dist"] = dep
    for extra, deps in project.get("optional-dependencies", {}).items():
        msg["Provides-Extra"] = extra
        for dep in deps:
            marker = f'extra == "{extra}"'
            if ";" in dep:  # keep the dependency's own marker whole: (its marker) and the extra
                req, _, own = dep.partition(";")
                msg["Requires-Dist"] = f"{req.strip()}; ({own.strip()}) and {marker}"
            else:
                msg["Requires-Dist"] = f"{dep}; {marker}"
    scripts = project.get("scripts", {})
    entry = "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items())
    return version, msg.as_string(), entry


def _metadata() -> tuple[str, str, str]:
    """(version, METADATA, entry_points.txt) of the gpuwise being imported."""
    package = Path(__file__).resolve().parents[1]  # gpuwise/, as gpuwise.__file__'s parent
    checkout = package.parents[1] / "pyproject.toml"  # src/gpuwise -> the repository root
    if checkout.is_file() and 'name = "gpuwise"' in checkout.read_text("utf-8"):
        return _from_pyproject(checkout)
    try:
        dist = metadata.distribution("gpuwise")
    except metadata.PackageNotFoundError:
        raise PlanError(
            "cannot find gpuwise's metadata to ship it with the export",
            hint="install gpuwise (pip install .) or run from its checkout",
        ) from None
    return (
        dist.version,
        dist.read_text("METADATA") or "",
        dist.read_text("entry_points.txt") or "",
    )


def write_wheel(workdir: Path, folder: str = ".gpuwise-dist") -> Path:
    """Write ``gpuwise-VERSION-py3-none-any.whl`` of the running gpuwise into ``workdir/folder``.

    ``workdir`` is the user's code folder: it must exist (a missing one is a typo, not a folder to
    create) and be writable; either failure is an :class:`InputError` / :class:`StorageError`.
    """
    if not workdir.is_dir():
        raise InputError(
            f"--workdir {workdir} is {'a file' if workdir.exists() else 'not there'}: "
            "it must be your code's folder",
            hint="give the folder with your training code, e.g. --workdir .",
        )
    try:
        return _write_wheel(workdir, folder)
    except OSError as exc:  # read-only, full disk, no permission
        raise StorageError(
            f"cannot write the gpuwise wheel into {workdir / folder}: {exc.strerror or exc}",
            hint="give a --workdir you can write to, with free space",
        ) from None


def _write_wheel(workdir: Path, folder: str) -> Path:
    version, meta, entry = _metadata()
    package = Path(__file__).resolve().parents[1]  # gpuwise/, as gpuwise.__file__'s parent
    out_dir = workdir / folder
    out_dir.mkdir(exist_ok=True)
    path = out_dir / f"gpuwise-{version}-py3-none-any.whl"
    info = f"gpuwise-{version}.dist-info"
    records: list[str] = []
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:

        def add(name: str, data: bytes) -> None:
            zf.writestr(name, data)
            records.append(f"{name},{_record_hash(data)},{len(data)}")

        for file in sorted(package.rglob("*")):
            if file.is_dir() or "__pycache__" in file.parts or file.suffix in (".pyc", ".pyo"):
                continue
            add(f"gpuwise/{file.relative_to(package).as_posix()}", file.read_bytes())
        add(f"{info}/METADATA", meta.encode())
        add(f"{info}/WHEEL", _WHEEL.encode())
        if entry.strip():
            add(f"{info}/entry_points.txt", entry.encode())
        records.append(f"{info}/RECORD,,")
        zf.writestr(f"{info}/RECORD", "\n".join(records) + "\n")
    tmp.replace(path)
    return path
