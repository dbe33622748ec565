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
    (``strategy.reduce_boolean_decision``), so no rank is left in a collective."""

    def __init__(
        self, dirpath: str | os.PathLike[str], watcher: PreemptionWatcher | None = None
    ) -> None:
        super().__init__()
        self.dirpath = os.fspath(dirpath)
        self._init_watcher(watcher)
        self.saved_path: str | None = None

    def latest_checkpoint(self) -> str | None:
        """The newest ``preempted-step*.ckpt`` in ``dirpath`` (for ``fit(ckpt_path=...)``)."""
        paths = glob.glob(os.path.join(self.dirpath, "preempted-step*.ckpt"))
        return (
            max(paths, key=lambda p: int(p.rsplit("step", 1)[1].split(".")[0])) if paths else None
        )

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._start()  # after Lightning's own signal handlers, so ours see SIGTERM

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
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
