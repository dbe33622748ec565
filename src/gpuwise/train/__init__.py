"""Run safely on spot: checkpoints that survive any kill, preemption notices, exact resume.

torch is imported only inside this package (extra ``gpuwise[train]``); names resolve lazily, so
``gpuwise.train.FakeMetadataServer`` and ``PreemptionWatcher`` work without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY: dict[str, str] = {
    "Checkpointer": "gpuwise.train.checkpointer",
    "CheckpointWriteError": "gpuwise.train.checkpointer",
    "Progress": "gpuwise.train.checkpointer",
    "Restored": "gpuwise.train.checkpointer",
    "SaveStats": "gpuwise.train.checkpointer",
    "Retention": "gpuwise.train.commit",
    "WriteReport": "gpuwise.train.commit",
    "PreemptionWatcher": "gpuwise.train.preemption",
    "Notice": "gpuwise.train.preemption",
    "FakeMetadataServer": "gpuwise.train.fake_metadata",
    "ResumableSampler": "gpuwise.train.sampler",
    "ignore_sigterm_worker_init": "gpuwise.train.sampler",
    "worker_init": "gpuwise.train.sampler",
    "SampleIndex": "gpuwise.train.sampler",
    "resilient": "gpuwise.train.loop",
    "Run": "gpuwise.train.loop",
    "checkpoint_interval_s": "gpuwise.train.interval",
    "daly_interval_s": "gpuwise.train.interval",
    "young_interval_s": "gpuwise.train.interval",
    "EXIT_PREEMPTED": "gpuwise.train.exitcodes",
    "Storage": "gpuwise.train.storage",
    "WriteHooks": "gpuwise.train.writers",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuwise.train' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
