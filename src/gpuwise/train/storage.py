"""Where checkpoints live: one small interface over fsspec (local disk, S3, ``memory://``).

What lives here: opening a filesystem from a URL, writing one object durably (local: temporary
name, fsync, rename, fsync of the folder; object stores: one PUT, which is atomic per object),
reading, listing and deleting, and translating every storage exception into
:class:`~gpuwise.errors.StorageError` at the edge (:func:`storage_errors`).

What does not: the checkpoint layout and the commit protocol (``checkpointer.py``). Object stores
have no atomic rename (an fsspec ``mv`` on S3 is copy + delete), so the protocol never relies on
renaming a folder: shards are written first and the commit marker last.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from gpuwise.base.paths import fsync_folder, write_bytes_atomic
from gpuwise.errors import StorageError


@contextlib.contextmanager
def storage_errors(what: str) -> Iterator[None]:
    """Translate OS, fsspec and botocore failures into :class:`StorageError`."""
    try:
        yield
    except StorageError:
        raise
    except FileNotFoundError as exc:
        raise StorageError(f"{what}: not found ({exc})", hint="check the checkpoint URL") from exc
    except Exception as exc:  # every backend has its own tree (OSError, ClientError, aiohttp ...)
        raise StorageError(
            f"{what}: {type(exc).__name__}: {exc}",
            hint="check that the storage is reachable, writable and not full",
        ) from exc


@dataclass(frozen=True)
class Storage:
    """A checkpoint root: ``/data/ckpt``, ``file:///data/ckpt``, ``s3://bucket/run``, ``memory://run``."""

    url: str
    """Where the checkpoint folders live."""
    options: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for the fsspec filesystem (S3: ``key``, ``secret``, ``client_kwargs``...)."""

    @property
    def protocol(self) -> str:
        return self.url.split("://", 1)[0] if "://" in self.url else "file"

    @property
    def is_local(self) -> bool:
        return self.protocol in ("file", "local")

    @property
    def shared_across_processes(self) -> bool:
        """False for ``memory://``: a background writer process would write to its own memory."""
        return self.protocol != "memory"

    @property
    def root(self) -> str:
        if self.is_local:
            path = self.url.split("://", 1)[1] if "://" in self.url else self.url
            return os.path.abspath(os.path.expanduser(path))
        return self.url.split("://", 1)[1].rstrip("/")

    def fs(self) -> Any:
        import fsspec

        with storage_errors(f"opening {self.url}"):
            return fsspec.filesystem("file" if self.is_local else self.protocol, **self.options)

    def join(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def url_of(self, path: str) -> str:
        """``path`` (from :meth:`join`) as a URL for fsspec-based writers (DCP's FsspecWriter)."""
        return path if self.is_local else f"{self.protocol}://{path}"

    def list_names(self, folder: str) -> list[str]:
        """Names of the files directly inside ``folder``; [] when it does not exist."""
        with storage_errors(f"listing {folder}"):
            if self.is_local:
                try:
                    return sorted(os.listdir(folder))
                except FileNotFoundError:
                    return []
            fs = self.fs()
            fs.invalidate_cache()
            try:
                entries = fs.ls(folder, detail=False)
            except FileNotFoundError:
                return []
            return sorted(str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries)

    # -- operations ---------------------------------------------------------------------------

    def put_durable(self, path: str, data: bytes | memoryview) -> None:
        """Write ``data`` at ``path`` so that a reader sees either nothing or all of it."""
        with storage_errors(f"writing {path}"):
            if self.is_local:
                _put_local(path, data)
            else:
                fs = self.fs()
                fs.pipe_file(path, data)

    @contextlib.contextmanager
    def open_durable(self, path: str) -> Iterator[BinaryIO]:
        """Local storage only: a file to stream ``path``'s bytes into. They go to a temporary
        name beside it; when the block ends without an error the file is fsynced, renamed over
        ``path`` and the folder fsynced (as :meth:`put_durable`), else the temporary is removed
        and nothing appears at ``path``. An OSError inside the block becomes a StorageError."""
        if not self.is_local:
            raise StorageError(
                f"cannot stream {path} to {self.protocol}://",
                hint="use put_durable for object stores",
            )
        folder = os.path.dirname(path) or "."
        tmp = os.path.join(folder, f".{os.path.basename(path)}.{uuid.uuid4().hex[:16]}.tmp")
        with storage_errors(f"writing {path}"):
            os.makedirs(folder, exist_ok=True)
            # O_EXCL: never write into another writer's file; 0o666: the kernel applies the umask
            fh = os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb")
        try:
            try:
                yield fh
            except OSError as exc:
                raise StorageError(
                    f"writing {path}: {type(exc).__name__}: {exc}",
                    hint="check that the storage is writable and not full",
                ) from exc
            with storage_errors(f"writing {path}"):
                fh.flush()
                os.fsync(fh.fileno())
                fh.close()
                os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                fh.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        with storage_errors(f"writing {path}"):
            fsync_folder(folder)

    def get(self, path: str) -> bytes:
        with storage_errors(f"reading {path}"):
            if self.is_local:
                with open(path, "rb") as f:
                    return f.read()
            data: bytes = self.fs().cat_file(path)
            return data

    def exists(self, path: str) -> bool:
        with storage_errors(f"checking {path}"):
            if self.is_local:
                return os.path.exists(path)
            return bool(self.fs().exists(path))

    def size(self, path: str) -> int:
        """Size of one file in bytes (raises StorageError when it is missing)."""
        with storage_errors(f"checking {path}"):
            if self.is_local:
                return os.path.getsize(path)
            return int(self.fs().size(path))

    def list_dirs(self) -> list[str]:
        """Names (not paths) of the entries directly under the root; [] when it does not exist."""
        with storage_errors(f"listing {self.url}"):
            if self.is_local:
                try:
                    return sorted(os.listdir(self.root))
                except FileNotFoundError:
                    return []
            fs = self.fs()
            fs.invalidate_cache()
            try:
                entries = fs.ls(self.root, detail=False)
            except FileNotFoundError:
                return []
            return sorted(str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries)

    def remove(self, path: str, missing_ok: bool = True) -> None:
        with storage_errors(f"removing {path}"):
            if self.is_local:
                try:
                    os.remove(path)
                except FileNotFoundError:
                    if not missing_ok:
                        raise
                return
            fs = self.fs()
            if missing_ok and not fs.exists(path):
                return
            fs.rm_file(path)

    def remove_tree(self, path: str) -> None:
        with storage_errors(f"removing {path}"):
            if self.is_local:
                import shutil

                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                elif os.path.exists(path):
                    os.remove(path)
                return
            fs = self.fs()
            if fs.exists(path):
                fs.rm(path, recursive=True)

    def makedirs(self, path: str) -> None:
        with storage_errors(f"creating {path}"):
            if self.is_local:
                os.makedirs(path, exist_ok=True)
            elif self.protocol == "memory":
                self.fs().makedirs(path, exist_ok=True)
            # object stores have no folders: a key prefix exists once an object is under it


def _put_local(path: str, data: bytes | memoryview) -> None:
    """Temporary name in the same folder, fsync, rename over the target, fsync the folder."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    write_bytes_atomic(path, data, sync_folder=True)
