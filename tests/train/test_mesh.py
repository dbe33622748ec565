"""FSDP2 + tensor parallelism on a (dp, tp) device mesh (gloo, CPU): a SIGTERM and a resume give
the same losses, the same samples per data-parallel replica and the same final state as an
uninterrupted run. The data position is kept per data-parallel replica, so the ranks of one
tp group (which see the same samples) count once."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.train.conftest import NO_CLOUD_ENV, tiny_command, tiny_digest, tiny_losses

pytestmark = pytest.mark.slow

ENV = NO_CLOUD_ENV
TINY_TP = ("--hidden", "64", "--batch", "16", "--fsdp", "--tp", "2")
STEPS = 24


def _command(nproc: int, ckpt: Path, *extra: str) -> list[str]:
    every = ("--every", "4", "--checkpoint-dir", str(ckpt))
    return tiny_command(nproc, *TINY_TP, "--steps", str(STEPS), *every, *extra)


def _lines(text: str) -> tuple[dict[int, str], dict[tuple[int, int], str], str | None]:
    losses = tiny_losses(text)
    samples = {
        (int(m[1]), int(m[2])): m[3]
        for m in re.finditer(r"^samples (\d+) (\d+) (\w+)$", text, re.M)
    }
    return losses, samples, tiny_digest(text)


@pytest.mark.parametrize(
    "nproc",
    [
        2,  # a 1x2 mesh: one data-parallel replica split over two tp ranks
        4,  # a 2x2 mesh: two replicas, each over two tp ranks (4 gloo processes)
    ],
)
def test_fsdp2_tp_sigterm_and_resume_is_bit_identical(nproc: int, tmp_path: Path) -> None:
    ref = subprocess.run(
        _command(nproc, tmp_path / "ref"),
        capture_output=True,
        text=True,
        env=ENV,
        timeout=600,
    )
    assert ref.returncode == 0, ref.stderr[-4000:]
    ref_losses, ref_samples, ref_digest = _lines(ref.stdout)
    assert sorted(ref_losses) == list(range(1, STEPS + 1))
    assert {dp for _, dp in ref_samples} == set(range(nproc // 2))

    ckpt = tmp_path / "run"
    out = tmp_path / "first.out"
    with open(out, "w") as f:  # a file, not a pipe: a full pipe would block the workers
        proc = subprocess.Popen(
            _command(nproc, ckpt, "--step-delay", "0.3"),
            stdout=f,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
    try:
        deadline = time.monotonic() + 300
        while not re.search(r"^loss 9 ", out.read_text(), re.M):
            assert proc.poll() is None and time.monotonic() < deadline, out.read_text()[-2000:]
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)  # gpuwise run forwards it: every rank saves and stops
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 75, err[-4000:]
    first_losses, first_samples, _ = _lines(out.read_text())
    stopped_at = max(first_losses)
    assert 9 <= stopped_at < STEPS

    again = subprocess.run(
        _command(nproc, ckpt), capture_output=True, text=True, env=ENV, timeout=600
    )
    assert again.returncode == 0, again.stderr[-4000:]
    assert f"resumed {stopped_at}" in again.stdout
    losses, samples, final = _lines(again.stdout)
    assert min(losses) == stopped_at + 1  # nothing replayed, nothing skipped
    assert {**first_losses, **losses} == ref_losses  # every loss, bit for bit (float.hex)
    assert {**first_samples, **samples} == ref_samples  # each replica's batches, step by step
    assert final == ref_digest  # the gathered full model and optimizer state


def test_a_sampler_dealing_to_every_rank_under_tp_is_refused(tmp_path: Path) -> None:
    """The issue's silent skip: a sampler over all ranks while tp ranks share data."""
    script = tmp_path / "bad.py"
    script.write_text(
        "import torch, gpuwise.train as gt\n"
        "from torch.distributed.device_mesh import init_device_mesh\n"
        "torch.distributed.init_process_group('gloo')\n"
        "mesh = init_device_mesh('cpu', (1, 2), mesh_dim_names=('dp', 'tp'))\n"
        "model = torch.nn.Linear(4, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "data = torch.utils.data.TensorDataset(torch.randn(64, 4))\n"
        "sampler = gt.ResumableSampler(64, rank=torch.distributed.get_rank(), num_replicas=2)\n"
        "loader = torch.utils.data.DataLoader(data, batch_size=4, sampler=sampler)\n"
        f"with gt.resilient(model, opt, checkpoint_dir={str(tmp_path / 'ck')!r}, max_steps=4,\n"
        "                  mesh=mesh) as run:\n"
        "    for (x,) in run.batches(loader):\n"
        "        run.step(model(x).sum())\n"
    )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuwise",
            "run",
            "--nproc-per-node",
            "2",
            "--",
            sys.executable,
            str(script),
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert "deals to 2 replica(s) but the run has 1 data-parallel replica(s)" in r.stderr
