"""resilient(): AMP, accumulation, activation checkpointing, exact resume, save policy, exits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from gpuwise.errors import InputError
from gpuwise.train import EXIT_PREEMPTED, PreemptionWatcher, ResumableSampler, resilient


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.lin(x)) + x


def _setup(seed: int = 0) -> tuple[torch.nn.Module, Any, Any, Any]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(Block(), torch.nn.Dropout(0.1), Block(), torch.nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 / (1 + s))
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(
        torch.randn(96, 16, generator=g), torch.randn(96, 1, generator=g)
    )
    loader = torch.utils.data.DataLoader(
        data, batch_size=8, sampler=ResumableSampler(96, seed=3), drop_last=True
    )
    return model, opt, sched, loader


def _train(
    ckpt: str, max_steps: int, stop_at: int | None = None, **kw: Any
) -> tuple[list[float], torch.nn.Module, int]:
    model, opt, sched, loader = _setup()
    losses: list[float] = []
    with resilient(
        model, opt, scheduler=sched, checkpoint_dir=ckpt, max_steps=max_steps, watcher=False, **kw
    ) as run:
        for x, y in run.batches(loader):
            with run.autocast():
                loss = torch.nn.functional.mse_loss(model(x).float(), y)
            if run.step(loss):
                losses.append(float(loss.detach()))
            if stop_at is not None and run.global_step == stop_at:
                break
    return losses, model, run.resumed_from or 0


@pytest.mark.parametrize(
    "kw",
    [
        {"precision": "fp32"},
        {"precision": "bf16"},
        {"precision": "fp16"},  # GradScaler state must round-trip
        {"precision": "fp32", "grad_accum": 3},  # resume at an optimizer-step boundary
        {"precision": "fp32", "activation_checkpointing": (Block,)},  # recompute in backward
        {"precision": "fp32", "compress": "zstd", "clip_grad_norm": 0.5},
    ],
)
@pytest.mark.slow
def test_interrupted_and_resumed_equals_uninterrupted(kw: dict[str, Any], tmp_path: Path) -> None:
    ref_losses, ref_model, _ = _train(str(tmp_path / "ref"), 20, every_steps=4, **kw)
    first, _, _ = _train(
        str(tmp_path / "run"), 20, stop_at=9, every_steps=4, **kw
    )  # "crash" after step 9
    second, model, resumed = _train(
        str(tmp_path / "run"), 20, every_steps=4, **kw
    )  # resumes from 4 or 8
    assert resumed in (4, 8)  # a periodic save is skipped while the previous write is in flight
    assert len(ref_losses) == 20
    assert first[:resumed] + second == ref_losses
    for a, b in zip(ref_model.state_dict().values(), model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_default_interval_is_young_daly_from_the_measured_stall(tmp_path: Path) -> None:
    model, opt, _, loader = _setup()
    with resilient(
        model, opt, checkpoint_dir=str(tmp_path / "c"), max_steps=3, watcher=False, mtbf_hours=1e-3
    ) as run:  # a failure every 3.6 s → save very often
        for x, y in run.batches(loader):
            run.step(torch.nn.functional.mse_loss(model(x), y))
        assert run.interval_s < 5
    model, opt, _, loader = _setup()
    with resilient(
        model, opt, checkpoint_dir=str(tmp_path / "d"), max_steps=2, watcher=False
    ) as run:
        for x, y in run.batches(loader):
            run.step(torch.nn.functional.mse_loss(model(x), y))
        assert 60 < run.interval_s <= 1800  # Spot-advisor MTBF: minutes, capped at 30 min


def test_notice_saves_and_exits_with_the_preemption_code(tmp_path: Path) -> None:
    model, opt, _, loader = _setup()
    watcher = PreemptionWatcher(cloud="none", signals=())
    with (
        pytest.raises(SystemExit) as exc,
        resilient(
            model,
            opt,
            checkpoint_dir=str(tmp_path / "c"),
            max_steps=50,
            every_steps=100,
            watcher=watcher,
            exit_on_preemption=True,
        ) as run,
    ):
        for x, y in run.batches(loader):
            run.step(torch.nn.functional.mse_loss(model(x), y))
            if run.global_step == 7:
                watcher.trigger("test")
    assert exc.value.code == EXIT_PREEMPTED
    # noticed at the next step boundary, saved there (synchronously committed), loop ended
    assert run.preempted and run.global_step == 8 and run.committed_step == 8
    assert run.checkpointer.committed_steps() == [8]


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": 5, "grad_accum": 0}, "grad_accum"),
        ({"max_steps": 5, "precision": "fp8"}, "precision"),
        ({"max_steps": 5, "every_minutes": float("nan")}, "every_minutes"),
        ({"max_steps": 5, "async_mode": "proc"}, "async_mode"),
    ],
)
def test_bad_options_are_input_errors(kw: dict[str, Any], match: str, tmp_path: Path) -> None:
    model, opt, *_ = _setup()
    with (
        pytest.raises(InputError, match=match),
        resilient(model, opt, checkpoint_dir=str(tmp_path), **kw),
    ):
        pass


def test_async_mode_reaches_the_checkpointer(tmp_path: Path) -> None:
    """The process writer is an option of ``resilient`` too, not only of ``Checkpointer``."""
    model, opt, *_ = _setup()
    with resilient(
        model, opt, checkpoint_dir=str(tmp_path), max_steps=5, async_mode="process", watcher=False
    ) as run:
        assert run.checkpointer.async_mode == "process"


def test_without_torch_the_error_names_the_extra(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from gpuwise.errors import MissingExtraError\n"
        "import gpuwise.train as t\n"
        "t.FakeMetadataServer; t.PreemptionWatcher  # these need no torch\n"
        "try:\n    t.Checkpointer\nexcept MissingExtraError as e:\n    print(e)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, timeout=60
    )
    assert "pip install 'gpuwise[train]'" in r.stdout, r.stderr


CLEANUP = """
import sys, torch
from gpuwise.train import PreemptionWatcher, resilient
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = torch.utils.data.DataLoader(data, batch_size=4)
watcher = PreemptionWatcher(cloud="none", signals=())
with resilient(model, opt, checkpoint_dir=sys.argv[1], max_steps=50, every_steps=100, watcher=watcher) as run:
    for x, y in run.batches(loader):
        run.step(torch.nn.functional.mse_loss(model(x), y))
        if run.global_step == 3:
            watcher.trigger("test")
print("cleanup ran after step", run.global_step, flush=True)
"""


@pytest.mark.slow
def test_preemption_exits_75_after_the_code_that_follows_the_block(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(CLEANUP)
    r = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "c")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "GPUWISE_CLOUD": "none"},
    )
    assert r.returncode == EXIT_PREEMPTED, r.stderr[-2000:]
    assert "cleanup ran after step 4" in r.stdout  # the user's eval/cleanup was not skipped


def test_first_save_comes_after_the_first_step_not_the_interval(tmp_path: Path) -> None:
    from gpuwise.train import Checkpointer

    ckpt = str(tmp_path / "c")
    _train(ckpt, max_steps=20, stop_at=2)  # default policy: Young/Daly (minutes), first save early
    assert Checkpointer(ckpt).committed_steps() == [1]


def _batch_sampler_run(ckpt: str, max_steps: int, stop_at: int | None) -> list[list[float]]:
    model, opt, _, _ = _setup()
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(
        torch.arange(96, dtype=torch.float32).unsqueeze(1) + 0 * torch.randn(96, 1, generator=g)
    )
    batches = torch.utils.data.BatchSampler(
        ResumableSampler(96, seed=3), batch_size=8, drop_last=True
    )
    loader = torch.utils.data.DataLoader(data, batch_sampler=batches)
    seen: list[list[float]] = []
    with resilient(
        model, opt, checkpoint_dir=ckpt, max_steps=max_steps, watcher=False, every_steps=3
    ) as run:
        for (x,) in run.batches(loader):
            seen.append(x.squeeze(1).tolist())
            run.step(model[0].lin.weight.sum() * 0 + x.sum() * 0 + model(torch.zeros(1, 16)).sum())
            if stop_at is not None and run.global_step == stop_at:
                break
    return seen


def test_batch_sampler_over_a_resumable_sampler_resumes_at_the_right_sample(tmp_path: Path) -> None:
    reference = _batch_sampler_run(str(tmp_path / "ref"), 8, None)
    first = _batch_sampler_run(str(tmp_path / "run"), 8, 3)
    rest = _batch_sampler_run(str(tmp_path / "run"), 8, None)
    assert first + rest == reference
