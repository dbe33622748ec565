"""Run safely on spot: checkpoints that survive any kill, preemption notices, exact resume.

torch is imported only inside this package (extra ``gpuwise[train]``); names resolve lazily, so
``gpuwise.train.FakeMetadataServer`` and ``PreemptionWatcher`` work without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuwise.base import lazy

if TYPE_CHECKING:
    from gpuwise.train.checkpointer import Checkpointer as Checkpointer
    from gpuwise.train.checkpointer import CheckpointWriteError as CheckpointWriteError
    from gpuwise.train.checkpointer import Progress as Progress
    from gpuwise.train.checkpointer import Restored as Restored
    from gpuwise.train.checkpointer import SaveStats as SaveStats
    from gpuwise.train.commit import Retention as Retention
    from gpuwise.train.commit import WriteReport as WriteReport
    from gpuwise.train.exitcodes import EXIT_PREEMPTED as EXIT_PREEMPTED
    from gpuwise.train.fake_metadata import FakeMetadataServer as FakeMetadataServer
    from gpuwise.train.interval import checkpoint_interval_s as checkpoint_interval_s
    from gpuwise.train.interval import daly_interval_s as daly_interval_s
    from gpuwise.train.interval import young_interval_s as young_interval_s
    from gpuwise.train.launch_spec import LaunchSpec as LaunchSpec
    from gpuwise.train.launch_spec import RunFlag as RunFlag
    from gpuwise.train.launcher import from_environment as from_environment
    from gpuwise.train.launcher import launch as launch
    from gpuwise.train.loop import Run as Run
    from gpuwise.train.loop import resilient as resilient
    from gpuwise.train.plan import job_plan as job_plan
    from gpuwise.train.plan import plan_recipe as plan_recipe
    from gpuwise.train.preemption import Notice as Notice
    from gpuwise.train.preemption import PreemptionWatcher as PreemptionWatcher
    from gpuwise.train.sampler import ResumableSampler as ResumableSampler
    from gpuwise.train.sampler import SampleIndex as SampleIndex
    from gpuwise.train.sampler import ignore_sigterm_worker_init as ignore_sigterm_worker_init
    from gpuwise.train.sampler import worker_init as worker_init
    from gpuwise.train.storage import Storage as Storage
    from gpuwise.train.writers import WriteHooks as WriteHooks

_LAZY: dict[str, str] = {
    # name: module that defines it (keep the TYPE_CHECKING imports above in step)
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
    "job_plan": "gpuwise.train.plan",
    "plan_recipe": "gpuwise.train.plan",
    "checkpoint_interval_s": "gpuwise.train.interval",
    "daly_interval_s": "gpuwise.train.interval",
    "young_interval_s": "gpuwise.train.interval",
    "EXIT_PREEMPTED": "gpuwise.train.exitcodes",
    "Storage": "gpuwise.train.storage",
    "LaunchSpec": "gpuwise.train.launch_spec",
    "RunFlag": "gpuwise.train.launch_spec",
    "from_environment": "gpuwise.train.launcher",
    "launch": "gpuwise.train.launcher",
    "WriteHooks": "gpuwise.train.writers",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    return lazy.resolve(__name__, _LAZY, globals(), name)


def __dir__() -> list[str]:
    return sorted(__all__)
