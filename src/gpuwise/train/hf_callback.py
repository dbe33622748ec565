"""Hugging Face Trainer: notice-triggered save and stop (see :mod:`gpuwise.train.integrations`)."""

from __future__ import annotations

from typing import Any

from gpuwise.errors import MissingExtraError
from gpuwise.train.integrations import _Watching
from gpuwise.train.preemption import PreemptionWatcher

try:
    from transformers import TrainerCallback as _HFCallback
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingExtraError("transformers", "hf") from exc


class HFPreemptionCallback(_HFCallback, _Watching):
    """On a notice: ``control.should_save`` (the Trainer writes ``checkpoint-N`` as usual) and
    ``control.should_training_stop``. An AWS rebalance recommendation only asks for a save."""

    def __init__(self, watcher: PreemptionWatcher | None = None) -> None:
        super().__init__()
        self._init_watcher(watcher)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._start()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.watcher.should_stop() and not self.preempted:
            control.should_save = True
            control.should_training_stop = True
            self.preempted = True
        elif self.watcher.save_requested():
            control.should_save = True
            self.watcher.mark_saved()
        else:
            self._progress(int(state.global_step))
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._progress(
            int(state.global_step),
            "preempted" if self.preempted else None,
            committed=int(state.global_step),
        )

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._stop()
        self._progress(int(state.global_step), "preempted" if self.preempted else "done")
