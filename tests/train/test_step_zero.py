"""A checkpoint of step 0 (the initial state, a torchtitan habit) on 2 gloo ranks: committed,
waited for and closed like any other step (a committed step 0 once read as "none yet")."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.train.conftest import NO_CLOUD_ENV

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    import torch.distributed as dist
    from gpuwise.train import Checkpointer

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.AdamW(model.parameters())
    ckpt = Checkpointer(sys.argv[1])
    ckpt.save(0, model=model, optimizer=opt)
    report = ckpt.wait(timeout_s=60)
    committed = ckpt.committed_step
    ckpt.close(timeout_s=60)
    print(json.dumps({"rank": dist.get_rank(), "committed": committed,
                      "report_step": None if report is None else report.step}), flush=True)
    dist.destroy_process_group()
    """
)


def test_step_0_is_committed_waited_for_and_closed_on_two_ranks(tmp_path: Path) -> None:
    script = tmp_path / "save0.py"
    script.write_text(SCRIPT)
    ckpt = tmp_path / "ck"
    cmd = [
        *(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"),
        *(str(script), str(ckpt)),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, env=NO_CLOUD_ENV, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = _json_objects(r.stdout)
    assert sorted(d["rank"] for d in lines) == [0, 1]
    assert all(d["committed"] == 0 for d in lines), lines
    marker = json.loads((ckpt / "step-000000000" / "COMMIT.json").read_text())
    assert marker["step"] == 0 and marker["world_size"] == 2


def _json_objects(text: str) -> list[dict[str, Any]]:
    """Every JSON object in ``text``: the two ranks share torchrun's stdout, and their lines can
    arrive run together (``{...}{...}``), so objects are read where they start, not by line."""
    decoder, out, i = json.JSONDecoder(), [], 0
    while (start := text.find("{", i)) != -1:
        try:
            obj, i = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            i = start + 1
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out
