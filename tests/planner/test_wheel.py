"""The wheel the export ships: installable metadata, the package's code and data, the CLI entry."""

from __future__ import annotations

import email
import zipfile
from pathlib import Path

from gpuwise.planner.wheel import write_wheel


def test_the_wheel_holds_the_running_gpuwise(tmp_path: Path) -> None:
    path = write_wheel(tmp_path)
    assert path.parent == tmp_path / ".gpuwise-dist" and path.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_bytes(zf.read(f"{info}/METADATA"))
        entry = zf.read(f"{info}/entry_points.txt").decode()
        record = zf.read(f"{info}/RECORD").decode().splitlines()
    assert "gpuwise/__init__.py" in names and "gpuwise/hardware/data/gpus.csv" in names
    assert not any("__pycache__" in n for n in names)
    assert meta["Name"] == "gpuwise" and "train" in meta.get_all("Provides-Extra")
    # extras carry their marker, and a dependency's own marker is kept whole
    for req in meta.get_all("Requires-Dist"):
        if "extra ==" in req and req.count(";") == 1 and "(" in req.split(";")[1]:
            assert ") and extra ==" in req
    assert "gpuwise = " in entry  # `gpuwise run` exists after the install
    assert len(record) == len(names)  # every file hashed, RECORD listed last
