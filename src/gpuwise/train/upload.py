"""Copy a checkpoint committed on local disk to the main (remote) storage, within a deadline.

A notice save goes to fast local disk first; the upload runs in a daemon thread and the caller
waits for it only until the deadline, so a hung object store can never keep a preempted process
alive past its grace period. Files first, ``COMMIT.json`` last (the same rule as every write).
Only what this machine's disk holds is uploaded: a multi-node job keeps each node's notice copy
on that node (the marker is uploaded only when every file it lists is here).
"""

from __future__ import annotations

import logging
import threading
import time

from gpuwise.errors import StorageError
from gpuwise.train.commit import MARKER, read_marker, step_dir
from gpuwise.train.storage import Storage

log = logging.getLogger(__name__)


def upload_committed(
    local: Storage,
    remote: Storage,
    step: int,
    *,
    deadline: float,
    rank: int = 0,
    world_size: int = 1,
) -> bool:
    """Upload ``step`` from ``local`` to ``remote`` until ``deadline`` (``time.monotonic()``).

    True when the remote copy was committed in time. Only rank 0 uploads; other ranks return False."""
    if rank != 0:
        return False
    marker = read_marker(local, step)
    if marker is None:
        return False
    done = threading.Event()
    src, dst = local.join(step_dir(step)), remote.join(step_dir(step))

    def copy() -> None:
        try:
            remote.makedirs(dst)
            remote.remove(f"{dst}/{MARKER}")
            for name in marker["files"]:
                remote.put_durable(f"{dst}/{name}", local.get(f"{src}/{name}"))
            remote.put_durable(f"{dst}/{MARKER}", local.get(f"{src}/{MARKER}"))
            done.set()
        except StorageError as exc:
            log.warning(
                "upload of the notice checkpoint %s failed: %s", step_dir(step), exc.message
            )

    threading.Thread(target=copy, name="gpuwise-notice-upload", daemon=True).start()
    return done.wait(max(deadline - time.monotonic(), 0.0))
