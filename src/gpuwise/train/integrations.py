"""Notice-triggered saves for PyTorch Lightning and the Hugging Face Trainer.

Both keep the framework's own checkpointing and add what it lacks: a save as soon as a
preemption notice (cloud metadata server or SIGTERM/SIGINT/SIGUSR1) arrives, then a clean stop.
After ``fit``/``train`` returns, ``sys.exit(callback.exit_code)`` hands the preemption code (75)
to ``gpuwise run`` or SkyPilot.

::

    cb = gpuwise.train.lightning_callback.LightningPreemptionCallback("ckpts/")
    trainer = lightning.Trainer(callbacks=[cb], ...)
    trainer.fit(model, ckpt_path=cb.latest_checkpoint())   # resumes when there is one
    sys.exit(cb.exit_code)

    cb = gpuwise.train.hf_callback.HFPreemptionCallback()
    trainer = transformers.Trainer(..., callbacks=[cb])
    trainer.train(resume_from_checkpoint=bool(transformers.trainer_utils.get_last_checkpoint(out)))
    sys.exit(cb.exit_code)

Tested against lightning 2.6.6 and transformers 5.23.0 with torch 2.13.0 (CPU).
"""

from __future__ import annotations

from gpuwise.train.exitcodes import EXIT_OK, EXIT_PREEMPTED
from gpuwise.train.preemption import PreemptionWatcher


class _Watching:
    def _init_watcher(self, watcher: PreemptionWatcher | None) -> None:
        self.watcher = watcher or PreemptionWatcher()
        self._own = watcher is None
        self.preempted = False

    @property
    def exit_code(self) -> int:
        """75 after a preemption save, else 0."""
        return EXIT_PREEMPTED if self.preempted else EXIT_OK

    def _start(self) -> None:
        if self._own:
            self.watcher.start()

    def _stop(self) -> None:
        if self._own:
            self.watcher.stop()
