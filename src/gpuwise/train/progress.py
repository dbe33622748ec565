"""Progress files for ``gpuwise run``: how far each rank got and how it ended.

``gpuwise run`` sets ``GPUWISE_RUN_DIR``; :func:`~gpuwise.train.resilient` and the Lightning /
Hugging Face callbacks write ``progress-rank<R>.json`` there. torchrun turns any worker's exit
code into its own 1, so the file — not the exit code — tells a preemption (``exit:
"preempted"``) from a crash, and how many steps a restart redoes. ``notice`` names the source of
a preemption notice (``aws``, ``gcp``, ``azure``: the cloud announced this machine's end, so
``gpuwise run`` does not restart on it; ``signal:SIGTERM`` ...), ``exit: "peer-lost"`` a
collective that failed because another rank or node went away, ``exit: "usage"`` a worker that
refused to run (its ``error`` line says why: e.g. the job differs from its plan), ``exit:
"pilot"`` a pilot that measured its steps.
"""

from __future__ import annotations

import contextlib
import json
import os
import time

from gpuwise.base import settings


def run_dir() -> str | None:
    """The folder ``gpuwise run`` gave this process, or None when not under ``gpuwise run``."""
    return settings.text("GPUWISE_RUN_DIR")


def write_progress(
    folder: str | None,
    *,
    rank: int,
    step: int,
    committed_step: int | None,
    resumed_from: int | None = None,
    exit_reason: str | None = None,
    save_errors: list[str] | None = None,
    notice: str | None = None,
    deadline_unix: float | None = None,
    error: str | None = None,
) -> None:
    """Replace this rank's progress file atomically; silent when ``folder`` is None or unwritable."""
    if folder is None:
        return
    doc = {
        "rank": rank,
        "pid": os.getpid(),
        "step": step,
        "committed_step": committed_step,
        "resumed_from": resumed_from,
        "exit": exit_reason,
        "time_unix": time.time(),
        "save_errors": list(save_errors or []),
        "notice": notice,
        "deadline_unix": deadline_unix,
        "error": error,
    }
    path = os.path.join(folder, f"progress-rank{rank}.json")
    with contextlib.suppress(OSError):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)


def global_rank() -> int:
    """This process's rank from torchrun's environment (0 outside torchrun)."""
    return int(os.environ.get("RANK", "0") or 0)
