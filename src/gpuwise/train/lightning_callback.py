"""PyTorch Lightning: notice-triggered save and stop (see :mod:`gpuwise.train.integrations`).

In a planned job (``gpuwise run --plan``) the callback applies at ``setup("fit")``, before any
data loader is made: ``trainer.accumulate_grad_batches`` (the accumulation that keeps the planned
global batch on this world size), the per-device batch size where Lightning can set one (a
``batch_size`` attribute or hyperparameter of the module or data module, as its batch size finder
does) and gradient checkpointing where the module has a ``gradient_checkpointing_enable``. The
precision is fixed when the Trainer is made (``Trainer(precision=...)``): a different one, and the
rest of the recipe (sharding, parallelism, LoRA ...), is named in one WARNING.
"""

from __future__ import annotations

import glob
import os
from typing import Any

from gpuwise.errors import MissingExtraError
from gpuwise.train.integrations import _Watching
from gpuwise.train.plan import job_plan
from gpuwise.train.plan_frameworks import FrameworkPlan, framework_plan, warn_not_applied
from gpuwise.train.preemption import PreemptionWatcher

try:
    from lightning.pytorch.callbacks import Callback as _LightningCallback
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingExtraError("lightning", "lightning") from exc


class LightningPreemptionCallback(_LightningCallback, _Watching):
    """On a notice: ``trainer.save_checkpoint`` to ``dirpath/preempted-step{N}.ckpt`` (written to a
    temporary name and renamed), then ``trainer.should_stop``. Every rank takes the same decision
    (``strategy.reduce_boolean_decision``), so no rank is left in a collective.

    The decision is taken only at an optimizer-step boundary (after a batch that advanced
    ``trainer.global_step``): with ``accumulate_grad_batches=k`` a notice in the middle of a window
    waits for the window's last batch, so the resumed run never steps on part of a window."""

    def __init__(
        self, dirpath: str | os.PathLike[str], watcher: PreemptionWatcher | None = None
    ) -> None:
        super().__init__()
        self.dirpath = os.fspath(dirpath)
        self._seen_step = 0
        self._init_watcher(watcher)
        self.saved_path: str | None = None

    def latest_checkpoint(self, trainer: Any = None) -> str | None:
        """The checkpoint to resume from (for ``fit(ckpt_path=...)``): the one with the highest
        ``global_step`` among this callback's ``preempted-step*.ckpt`` and Lightning's own
        ``last*.ckpt`` — in ``dirpath`` and, given the ``trainer``, in the folder of each of its
        ``ModelCheckpoint`` callbacks that names one. After a kill without notice (SIGKILL, OOM)
        only Lightning's periodic ``last.ckpt`` exists; after a notice ours is newer."""
        folders = {self.dirpath}
        for cb in getattr(trainer, "checkpoint_callbacks", None) or []:
            if getattr(cb, "dirpath", None):
                folders.add(os.fspath(cb.dirpath))
        paths = set()
        for folder in folders:
            paths |= set(glob.glob(os.path.join(folder, "preempted-step*.ckpt")))
            paths |= set(glob.glob(os.path.join(folder, "last*.ckpt")))
        best: tuple[int, float, str] | None = None
        for path in paths:
            key = (_global_step(path), os.path.getmtime(path), path)
            if key[0] >= 0 and (best is None or key > best):
                best = key
        return best[2] if best is not None else None

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        plan = job_plan() if stage == "fit" else None
        if plan is not None:
            _apply_plan(framework_plan(plan, int(trainer.world_size)), trainer, pl_module)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._start()  # after Lightning's own signal handlers, so ours see SIGTERM
        self._seen_step = int(trainer.global_step)

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = int(trainer.global_step)
        boundary, self._seen_step = step != self._seen_step, step
        if not boundary:  # inside a gradient-accumulation window: decide after its last batch
            return
        stop = self.watcher.should_stop() or bool(getattr(trainer, "received_sigterm", False))
        stop = bool(trainer.strategy.reduce_boolean_decision(stop, all=False))
        if not stop or self.preempted:
            self._progress(int(trainer.global_step))
            return
        os.makedirs(self.dirpath, exist_ok=True)
        final = os.path.join(self.dirpath, f"preempted-step{trainer.global_step}.ckpt")
        tmp = final + ".tmp"
        trainer.save_checkpoint(tmp)
        if trainer.is_global_zero:
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, final)
        self.saved_path = final
        self.preempted = True
        trainer.should_stop = True
        self._progress(int(trainer.global_step), "preempted", committed=int(trainer.global_step))

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._stop()
        self._progress(int(trainer.global_step), "preempted" if self.preempted else "done")


def _global_step(path: str) -> int:
    """``global_step`` saved in a Lightning checkpoint; -1 when it cannot be read (a torn file)."""
    from gpuwise.train._torch import torch

    try:  # Lightning's own files hold more than tensors; mmap keeps the read cheap
        ckpt = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
        return int(ckpt.get("global_step", -1))
    except Exception:
        return -1


_PRECISION = {
    "bf16": "bf16-mixed",
    "fp16": "16-mixed",
    "fp32": "32-true",
    "fp8": "transformer-engine",
}


def _apply_plan(fp: FrameworkPlan, trainer: Any, pl_module: Any) -> None:
    from lightning.pytorch.utilities.parsing import lightning_hasattr, lightning_setattr

    differs: list[str] = []
    trainer.accumulate_grad_batches = fp.accumulation
    if lightning_hasattr(pl_module, "batch_size"):
        lightning_setattr(pl_module, "batch_size", fp.micro_batch)
    else:
        differs.append(
            f"batch size {fp.micro_batch} per device (give the data loader batch_size="
            f"{fp.micro_batch}, or the module a batch_size attribute)"
        )
    if fp.gradient_checkpointing:
        switch = getattr(pl_module, "gradient_checkpointing_enable", None)
        if callable(switch):
            switch()
        else:
            differs.append(f"gradient checkpointing ({type(pl_module).__name__} has no switch)")
    running = str(trainer.precision)
    if running != _PRECISION.get(fp.precision, fp.precision):
        differs.append(
            f"precision {fp.precision}, the Trainer runs {running} (Trainer(precision="
            f"{_PRECISION.get(fp.precision, fp.precision)!r}))"
        )
    warn_not_applied(fp, "Lightning", differs)
