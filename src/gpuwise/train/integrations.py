"""Notice-triggered saves for PyTorch Lightning and the Hugging Face Trainer.

Both keep the framework's own checkpointing and add what it lacks: a save as soon as a
preemption notice (cloud metadata server or SIGTERM/SIGINT/SIGUSR1) arrives, then a clean stop.
After ``fit``/``train`` returns, ``sys.exit(callback.exit_code)`` hands the preemption code (75)
to ``gpuwise run`` or SkyPilot.

::

    cb = gpuwise.train.lightning_callback.LightningPreemptionCallback("ckpts/")
    trainer = lightning.Trainer(callbacks=[cb], ...)
    trainer.fit(model, ckpt_path=cb.latest_checkpoint(trainer))   # resumes when there is one
    sys.exit(cb.exit_code)

    cb = gpuwise.train.hf_callback.HFPreemptionCallback()
    trainer = transformers.Trainer(..., callbacks=[cb])
    trainer.train(resume_from_checkpoint=bool(transformers.trainer_utils.get_last_checkpoint(out)))
    sys.exit(cb.exit_code)

Under ``gpuwise run`` both write the progress file of their rank (:mod:`gpuwise.train.progress`),
so a preemption is reported as one (exit 75) even though torchrun turns the worker's 75 into 1.

What is exact, and what is not (these callbacks decide *when* to save; the frameworks save and
restore):

- Hugging Face Trainer: ``checkpoint-N`` holds model, optimizer, scheduler and RNG, and the
  Trainer skips the consumed batches of the epoch on resume. That is exact at an epoch boundary.
  In the middle of an epoch with DataLoader workers it is **not**: the workers' random state
  (augmentations) is not restored, and final weights differed from an uninterrupted run in both
  mid-epoch cases we tried. For an exact resume use :func:`~gpuwise.train.resilient` with a
  :class:`~gpuwise.train.ResumableSampler`, which seeds every sample's randomness.
- Lightning: the ``.ckpt`` restores model, optimizer, schedulers and loop counters, not the RNG
  of the data loader's sampler in the middle of an epoch nor Python/NumPy random state: a
  mid-epoch resume sees the same batches only with a deterministic sampler (``shuffle=False``
  or a seeded sampler Lightning can rewind). The notice save happens only at an optimizer-step
  boundary (never inside a gradient-accumulation window), and
  ``latest_checkpoint(trainer)`` picks the newest of the callback's files and Lightning's
  ``last.ckpt``, so a kill without notice resumes from Lightning's periodic checkpoint. For
  FSDP, use Lightning's own strategy checkpointing (``FSDPStrategy(state_dict_type="sharded")``,
  which saves through torch.distributed.checkpoint).

Tested against lightning 2.6.6 and transformers 5.23.0 with torch 2.13.0 (CPU).
"""

from __future__ import annotations

import time

from gpuwise.train.exitcodes import EXIT_OK, EXIT_PREEMPTED
from gpuwise.train.preemption import PreemptionWatcher
from gpuwise.train.progress import global_rank, run_dir, write_progress


class _Watching:
    def _init_watcher(self, watcher: PreemptionWatcher | None) -> None:
        self.watcher = watcher or PreemptionWatcher()
        self._own = watcher is None
        self.preempted = False
        self._last_progress = 0.0
        self._committed: int | None = None

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

    def _progress(
        self, step: int, exit_reason: str | None = None, committed: int | None = None
    ) -> None:
        """This rank's progress file for ``gpuwise run`` (at most twice a second, and at the end)."""
        if committed is not None:
            self._committed = committed
        now = time.monotonic()
        if exit_reason is None and now - self._last_progress < 0.5:
            return
        self._last_progress = now
        write_progress(
            run_dir(),
            rank=global_rank(),
            step=step,
            committed_step=self._committed,
            exit_reason=exit_reason,
        )
