"""Fixtures for the training runtime: a real S3 API (moto) on loopback, the tiny example."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_tiny.py"
NO_CLOUD_ENV = {**os.environ, "GPUWISE_CLOUD": "none"}
"""The environment for runs that must not look for a cloud's metadata service."""


def tiny_command(nproc: int, *args: str) -> list[str]:
    """``gpuwise run`` of ``examples/train_tiny.py`` on ``nproc`` local ranks, restarting at once."""
    return [
        *(sys.executable, "-m", "gpuwise", "run", "--nproc-per-node", str(nproc)),
        *("--restart-delay", "0s", "--", sys.executable, str(EXAMPLE), *args),
    ]


def tiny_losses(text: str) -> dict[int, str]:
    """Step → loss, from the ``loss STEP VALUE`` lines train_tiny prints."""
    return {int(m[1]): m[2] for m in re.finditer(r"^loss (\d+) (\S+)$", text, re.M)}


def tiny_digest(text: str, kind: str = "digest") -> str | None:
    """The last ``digest HEX`` (or ``restored-digest HEX``) line's value, None when there is none."""
    found = re.findall(rf"^{kind} (\w+)$", text, re.M)
    return str(found[-1]) if found else None


def run_records(
    checkpoint_dir: str | Path, storage_options: dict[str, Any] | None = None
) -> list[Any]:
    """The run records under a checkpoint folder, oldest first, read as ``report --runs`` reads them."""
    from gpuwise.base.runlog import read_runs

    return [r.record for r in read_runs(checkpoint_dir, storage_options=storage_options).runs]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3:
    """A moto S3 server on 127.0.0.1 that can be stopped and started again (same port, same data)."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self.port = free_port()
        self._cls = ThreadedMotoServer
        self.server: Any = None
        self.url = f"http://127.0.0.1:{self.port}"
        self.options = {
            "key": "testing",
            "secret": "testing",
            "skip_instance_cache": True,
            "client_kwargs": {"endpoint_url": self.url, "region_name": "us-east-1"},
            "config_kwargs": {
                "connect_timeout": 1,
                "read_timeout": 5,
                "retries": {"max_attempts": 1},
            },
        }

    def start(self) -> None:
        self.server = self._cls(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    def reset(self) -> None:
        """Forget every bucket and object: moto keeps one store per Python process, shared by
        every server in it, so a test would otherwise see the previous test's checkpoints."""
        import urllib.request

        urllib.request.urlopen(
            urllib.request.Request(f"{self.url}/moto-api/reset", method="POST"), timeout=10
        ).close()

    def stop(self) -> None:
        """Stop answering: shut the server down and close its socket (connections are refused)."""
        self.server.stop()
        self.server._server.server_close()  # moto's stop() leaves the socket listening

    def make_bucket(self, name: str) -> None:
        import boto3

        boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        ).create_bucket(Bucket=name)


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3]:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    server = S3()
    server.start()
    server.reset()
    server.make_bucket("ckpt")
    yield server
    with contextlib.suppress(Exception):  # a test may have stopped it already
        server.stop()


@pytest.fixture(scope="session")
def tiny() -> ModuleType:
    """examples/train_tiny.py as a module (its ``main(argv)`` is forked by the kill tests)."""
    spec = importlib.util.spec_from_file_location("train_tiny", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
