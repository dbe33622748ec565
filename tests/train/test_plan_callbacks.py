"""The Hugging Face and Lightning callbacks apply what their trainers let them of a plan and name
the rest in one WARNING line."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from .test_plan_apply import plan_for

pytestmark = [
    pytest.mark.slow,  # importing the frameworks alone takes seconds
    # the frameworks' own deprecation notices, as in test_integrations.py
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]


def _plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **recipe: Any) -> None:
    base = plan_for(1, micro=4, accumulation=3)
    plan = replace(base, recipe=replace(base.recipe, **recipe))
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    monkeypatch.setenv("GPUWISE_PLAN", str(path))
    monkeypatch.delenv("GPUWISE_RUN_DIR", raising=False)


def _warning(caplog: pytest.LogCaptureFixture, framework: str) -> str:
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    found = [line for line in lines if f"not applied by the {framework} callback" in line]
    assert len(found) == 1, lines
    return found[0]


def test_lightning_gets_the_planned_batch_and_accumulation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    lightning = pytest.importorskip("lightning")
    from gpuwise.train import PreemptionWatcher
    from gpuwise.train.lightning_callback import LightningPreemptionCallback

    _plan(tmp_path, monkeypatch)  # micro-batch 4, accumulation 3, bf16, LoRA rank 16
    seen: list[int] = []

    class Tiny(lightning.LightningModule):  # type: ignore[name-defined,misc]
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)
            self.batch_size = 1  # the plan's replaces it before the loader is made

        def train_dataloader(self) -> Any:
            data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
            return torch.utils.data.DataLoader(data, batch_size=self.batch_size)

        def training_step(self, batch: Any, idx: int) -> torch.Tensor:
            seen.append(len(batch[0]))
            return torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1])

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    cb = LightningPreemptionCallback(tmp_path, watcher=PreemptionWatcher(cloud="none", signals=()))
    trainer = lightning.Trainer(
        callbacks=[cb],
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        max_steps=2,
    )
    with caplog.at_level(logging.WARNING):
        trainer.fit(Tiny())
    assert trainer.accumulate_grad_batches == 3 and trainer.global_step == 2
    assert seen == [4] * 6  # 2 optimizer steps × 3 micro-batches of the planned 4
    line = _warning(caplog, "Lightning")
    assert "precision bf16, the Trainer runs 32-true" in line and "LoRA rank 16" in line
    assert "batch size" not in line  # applied, so not named


def test_hf_trainer_gets_the_planned_accumulation_and_names_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    transformers = pytest.importorskip("transformers")
    from gpuwise.train import PreemptionWatcher
    from gpuwise.train.hf_callback import HFPreemptionCallback, plan_training_args

    _plan(tmp_path, monkeypatch, precision="fp32")
    calls: list[int] = []

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            calls.append(len(x))
            return {"loss": torch.nn.functional.mse_loss(self.lin(x), labels)}

    data = [{"x": torch.randn(4), "labels": torch.randn(1)} for _ in range(64)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=2,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        logging_strategy="no",
        disable_tqdm=True,
    )
    planned = plan_training_args(args)
    assert (planned.per_device_train_batch_size, planned.gradient_accumulation_steps) == (4, 3)
    assert args.per_device_train_batch_size == 2  # a copy: the caller's arguments are not changed

    cb = HFPreemptionCallback(watcher=PreemptionWatcher(cloud="none", signals=()))
    with caplog.at_level(logging.WARNING):
        trainer = transformers.Trainer(model=Tiny(), args=args, train_dataset=data, callbacks=[cb])
        trainer.train()
    assert trainer.state.global_step == 2
    assert calls == [2] * 6  # the plan's accumulation applied; the batch fixed at the start
    line = _warning(caplog, "Hugging Face")
    assert "per_device_train_batch_size=4, the Trainer runs 2" in line and "precision" not in line
