"""Shared fixtures: an isolated environment for every test, and a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
# Subprocesses (`python -m gpuwise ...`, examples) import the code under test, not an installed copy.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p
)

_CLOUD_VARS = ("AWS_", "GOOGLE_", "GCE_", "AZURE_", "SKYPILOT_", "KUBERNETES_")


@pytest.fixture(autouse=True)
def isolated_env(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """No test sees the developer's config, SkyPilot catalog, GPUs or cloud credentials."""
    home = tmp_path_factory.mktemp("gpuwise-home")
    monkeypatch.setenv("GPUWISE_HOME", str(home))
    monkeypatch.setenv("GPUWISE_SKYPILOT_CATALOG", "off")
    monkeypatch.delenv("GPUWISE_DEBUG", raising=False)
    monkeypatch.delenv("GPUWISE_CATALOG_DIR", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)  # tables piped at their full width (160)
    for name in list(os.environ):
        if name.startswith(_CLOUD_VARS):
            monkeypatch.delenv(name, raising=False)
    from gpuwise.hardware import specs

    specs._default_table.cache_clear()
    yield home
    specs._default_table.cache_clear()


@dataclass(frozen=True)
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> object:
        import json

        return json.loads(self.stdout)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """Run ``gpuwise ARGS`` in process: ``cli("offers", "--json")`` → CliResult."""
    from gpuwise.cli.main import main

    def run(*args: str | Path) -> CliResult:
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run


def run_module(args: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """``python -m gpuwise ARGS`` in a subprocess, for what must be checked end to end."""
    return subprocess.run(
        [sys.executable, "-m", "gpuwise", *args],
        capture_output=True,
        text=True,
        check=False,
        **kwargs,
    )  # type: ignore[call-overload]
