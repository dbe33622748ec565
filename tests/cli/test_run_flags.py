"""``gpuwise run`` flags that look like "not given" but were given: 0 is a value, not a default."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest


@pytest.mark.parametrize("torchrun", ["--torchrun", "--no-torchrun"])
def test_nproc_per_node_0_is_refused_not_run_as_1(cli: Any, tmp_path: Path, torchrun: str) -> None:
    # it used to be read as "not given" (`0 or default`) and ran one process
    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    r = cli("run", "--nproc-per-node", "0", torchrun, "--", sys.executable, script)
    assert r.code == 2, r.stderr
    assert r.stderr.startswith("error: --nproc-per-node 0 must be at least 1")
    assert not marker.exists()
