"""A notice with the object store hung: the save goes to local disk, the process exits 75 within
the grace period, and the local copy is committed (and used by the next start)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuwise.train.chaos import StorageProxy

pytestmark = pytest.mark.slow

SCRIPT = """
import json, sys, torch
from gpuwise.train import resilient
opts = json.loads(sys.argv[2])
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.utils.data.TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
loader = torch.utils.data.DataLoader(data, batch_size=8)
with resilient(model, opt, checkpoint_dir="s3://ckpt/run", storage_options=opts, local_dir=sys.argv[1],
               max_steps=10**9, every_steps=20) as run:
    if run.resumed_from is not None:
        print("resumed", run.resumed_from, flush=True)
        raise SystemExit(0)
    for x, y in run.batches(loader):
        run.step(torch.nn.functional.mse_loss(model(x), y))
        print("step", run.global_step, flush=True)
"""


def test_a_notice_with_s3_hung_exits_75_in_the_grace_period_with_a_local_commit(
    s3, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    proxy = StorageProxy(s3.port)
    opts = {
        **s3.options,
        "client_kwargs": {**s3.options["client_kwargs"], "endpoint_url": proxy.url},
    }
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    local = tmp_path / "local"
    grace_s = 20
    env = {
        **os.environ,
        "GPUWISE_CLOUD": "none",
        "GPUWISE_GRACE_PERIOD_S": str(grace_s),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "w") as err_file:  # files, not pipes: a full pipe would block the child
        proc = subprocess.Popen(
            [sys.executable, str(script), str(local), json.dumps(opts)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err_file,
        )
    try:
        from gpuwise.train import Checkpointer

        remote = Checkpointer("s3://ckpt/run", storage_options=s3.options)
        deadline = time.monotonic() + 240
        while not remote.committed_steps():  # a periodic save reached S3 through the proxy
            assert time.monotonic() < deadline and proc.poll() is None, err_path.read_text()[-3000:]
            time.sleep(0.2)
        proxy.hang()
        proc.send_signal(signal.SIGTERM)
        noticed = time.monotonic()
        proc.wait(
            timeout=grace_s + 30
        )  # generous: the process must not be alive long after the window
        waited = time.monotonic() - noticed
        err = err_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        proxy.close()
    assert proc.returncode == 75, err[-3000:]
    assert waited < grace_s + 30
    steps = Checkpointer(local).committed_steps()
    assert steps, err[-3000:]  # the notice save is committed on local disk
    assert "did not finish before the deadline" in err
    # the next start prefers the newer local copy over the last step that reached S3
    again = subprocess.run(
        [sys.executable, str(script), str(local), json.dumps(s3.options)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert f"resumed {steps[0]}" in again.stdout, again.stderr[-3000:]
