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


# --- the fast-test timer -------------------------------------------------------------------------
# A test not marked `slow` must take < 3 s (CONTRIBUTING.md). The rule is checked, not only written:
# an unmarked test whose call phase (setup and teardown excluded) runs longer fails with the fix.
# Wall time on a shared machine stretches with its load, so the limit is scaled by the 1-minute
# load average per core when that is above 1 (a test that is fast alone is not failed because
# seven other jobs share the cores). `--fast-limit=N` sets the limit, `--fast-limit=0` turns the
# check off (e.g. PYTEST_ADDOPTS=--fast-limit=0 under a debugger).
FAST_LIMIT_S = 3.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast-limit",
        type=float,
        default=FAST_LIMIT_S,
        help="fail an unmarked (not slow) test whose call phase takes longer than this many "
        "seconds, scaled by the load per core when above 1 (0: off)",
    )


def _load_per_core() -> float:
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # no load average on this platform
        return 1.0


def fast_test_verdict(seconds: float, limit_s: float, load_per_core: float) -> str | None:
    """Why an unmarked test that took ``seconds`` breaks the fast-test rule, or None."""
    if limit_s <= 0:
        return None
    allowed = limit_s * max(1.0, load_per_core)
    if seconds <= allowed:
        return None
    return (
        f"this test is not marked slow and took {seconds:.1f} s (limit {allowed:.1f} s = "
        f"{limit_s:g} s × load {max(1.0, load_per_core):.1f} per core) — To fix: make it faster, "
        "or mark it @pytest.mark.slow"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if call.when != "call" or not report.passed or item.get_closest_marker("slow") is not None:
        return
    why = fast_test_verdict(call.duration, item.config.getoption("--fast-limit"), _load_per_core())
    if why is not None:
        report.outcome = "failed"
        report.longrepr = why
