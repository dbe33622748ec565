"""PyTorch Lightning: notice-triggered save and stop (see :mod:`gpuwise.train.integrations`)."""

from __future__ import annotations

import glob
import os
from typing import Any

from gpuwise.errors import MissingExtraError
from gpuwise.train.integrations import _Watching
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
