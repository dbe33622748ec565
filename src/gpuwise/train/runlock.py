"""One run per checkpoint folder: a lock file next to the checkpoints.

Rank 0 of :func:`~gpuwise.train.resilient` takes ``.gpuwise-run.lock`` in a local checkpoint
folder (a POSIX record lock, ``fcntl.lockf``) and writes who holds it (host, pid, parent pid,
start time) into it. The kernel drops the lock when the process ends, however it ends, so a file
left by a dead process is stale and simply taken over; a second run while the first one lives
refuses with a usage error (exit 2 under ``gpuwise run``) instead of writing the same folder.
Record locks are not inherited across ``fork``: a DataLoader worker or writer process left behind
for a moment does not hold it. When the holder's parent (its launcher or torchrun) is already
gone, the holder is an orphan on its way out (its parent-death signal): the lock is waited for a
few seconds instead of refused at once. Object storage (S3, GCS) has no such lock: not checked.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import time
from typing import Any

from gpuwise.errors import InputError

log = logging.getLogger(__name__)

LOCK_FILE = ".gpuwise-run.lock"
ORPHAN_WAIT_S = 10.0
"""How long a lock whose holder's parent is gone is waited for (the holder is being killed)."""


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _parse(data: bytes) -> dict[str, Any]:
    with contextlib.suppress(ValueError):
        doc = json.loads(data or b"{}")
        return doc if isinstance(doc, dict) else {}
    return {}


class RunLock:
    """``RunLock(folder).acquire()`` … ``release()``; see the module docstring."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.path = os.path.join(folder, LOCK_FILE)
        self._fd: int | None = None

    def holder(self) -> dict[str, Any]:
        """What the lock file says about its holder ({} when unreadable). Never call it while
        holding the lock: closing a descriptor of the file drops the process's record lock."""
        with contextlib.suppress(OSError), open(self.path, "rb") as f:
            return _parse(f.read(4096))
        return {}

    def acquire(self, orphan_wait_s: float = ORPHAN_WAIT_S) -> None:
        """Take the lock or raise :class:`InputError` naming the run that holds it."""
        import fcntl

        try:
            os.makedirs(self.folder, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:  # a read-only folder: the save reports it, not the lock
            log.warning("cannot lock the checkpoint folder %s: %s", self.folder, exc)
            return
        deadline = time.monotonic() + orphan_wait_s
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EACCES, errno.EAGAIN):
                    os.close(fd)
                    return  # no record locks on this file system: not ours to judge
                who = self.holder()
                same_host = who.get("host") == socket.gethostname()
                if same_host and not _alive(who.get("parent")) and time.monotonic() < deadline:
                    time.sleep(0.2)  # an orphan being killed with its launcher: it goes soon
                    continue
                os.close(fd)
                raise InputError(
                    f"the checkpoint folder {self.folder} is in use by another run (pid "
                    f"{who.get('pid', '?')} on {who.get('host', '?')}, started "
                    f"{who.get('started', '?')})",
                    hint="stop that run first, or give this run another checkpoint folder",
                ) from exc
        stale = _parse(os.pread(fd, 4096, 0))  # through this fd: closing any other one to the
        if stale.get("pid") is not None:  # file would drop this process's record lock
            log.info(
                "taking over the lock of %s left by pid %s on %s (that process has ended)",
                self.folder,
                stale.get("pid"),
                stale.get("host"),
            )
        doc = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "parent": os.getppid(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(doc) + "\n").encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (the file stays: the next run takes it over)."""
        if self._fd is None:
            return
        import fcntl

        with contextlib.suppress(OSError):
            fcntl.lockf(self._fd, fcntl.LOCK_UN)
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._fd = None
