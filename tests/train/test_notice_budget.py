"""The notice-exit budget with a multi-GB state on CPU: a GCP notice (30 s window) while a
~2 GiB state (weights + AdamW moments) trains on local disk; ``gpuwise run`` must end with 75
inside the window, with the notice step committed. ``GPUWISE_TEST_BUDGET_GIB`` sets the size."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuwise.train import FakeMetadataServer

pytestmark = pytest.mark.slow

SCRIPT = """
import sys, torch
from gpuwise.train import resilient
gib = float(sys.argv[2])
width = 4096
layers = max(1, int(gib * 2**30 / 4 / 3) // (width * width))
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
x = torch.randn(4, width)
with resilient(model, opt, checkpoint_dir=sys.argv[1], max_steps=10**9) as run:
    while not run.done:
        run.step(model(x).pow(2).mean())
        print("step", run.global_step, "committed", run.committed_step, flush=True)
"""
WINDOW_S = 30.0


@pytest.mark.timeout(900)  # a 2 GiB state steps in seconds on 2 shared cores
def test_a_multi_gib_state_saves_on_notice_and_exits_75_inside_the_window(tmp_path: Path) -> None:
    gib = float(os.environ.get("GPUWISE_TEST_BUDGET_GIB", "2"))
    script = tmp_path / "big.py"
    script.write_text(SCRIPT)
    log = tmp_path / "out.txt"
    ckpt = tmp_path / "ck"
    with FakeMetadataServer() as md:
        env = {
            **os.environ,
            "GPUWISE_CLOUD": "gcp",
            "GPUWISE_METADATA_URL": md.url,
            "GPUWISE_POLL_INTERVAL_S": "0.5",
        }
        cmd = [
            *(sys.executable, "-m", "gpuwise", "run", "--restart-delay", "0s", "--json", "--"),
            *(sys.executable, str(script), str(ckpt), str(gib)),
        ]
        with open(log, "w") as err:
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
            try:
                deadline = time.monotonic() + 600
                while not re.search(r"committed \d+", log.read_text()):  # the first save is in
                    assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                    time.sleep(0.2)
                md.preempt(notice_s=WINDOW_S)
                noticed = time.time()
                out, _ = proc.communicate(timeout=300)
                ended = time.time()
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    text = log.read_text()
    assert proc.returncode == 75, text[-3000:]
    assert json.loads(out)["attempts"][0]["outcome"] == "preempted"
    steps = [int(s) for s in re.findall(r"^step (\d+) ", text, re.M)]
    committed = sorted(int(p.parent.name.split("-")[1]) for p in ckpt.glob("step-*/COMMIT.json"))
    assert committed and committed[-1] == max(steps), (committed, max(steps))  # notice step
    print(f"state {gib} GiB: notice to exit {ended - noticed:.1f} s of a {WINDOW_S:.0f} s window")
    assert ended - noticed < WINDOW_S, text[-3000:]
