"""The public API as a type checker and a reader meet it: real types, plain functions, no shadowing."""

from __future__ import annotations

import ast
import os
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gpuwise
from gpuwise.errors import MissingExtraError

SRC = Path(gpuwise.__file__).parent


def _type_checking_imports() -> dict[str, str]:
    """``name: module`` for every import in ``gpuwise/__init__.py``'s ``if TYPE_CHECKING:`` block."""
    tree = ast.parse((SRC / "__init__.py").read_text())
    found: dict[str, str] = {}
    for node in tree.body:
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ):
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module
                for alias in imp.names:
                    # `import X as X` is what marks a re-export under mypy --strict
                    assert alias.asname == alias.name, (
                        f"{alias.name}: write `import {alias.name} as {alias.name}`"
                    )
                    found[alias.name] = imp.module
    return found


def test_type_checking_imports_mirror_the_lazy_table() -> None:
    assert _type_checking_imports() == gpuwise._LAZY


def test_lazy_names_resolve_to_what_the_type_checker_sees() -> None:
    for name, module in gpuwise._LAZY.items():
        value = getattr(gpuwise, name)
        assert value is getattr(__import__(module, fromlist=[name]), name), name


@pytest.mark.parametrize(
    "package", ["gpuwise.monitor", "gpuwise.train", "gpuwise.catalog", "gpuwise.planner"]
)
def test_subpackage_lazy_names_match_their_type_checking_mirror(package: str) -> None:
    """A subpackage's lazily resolved names: each one typed (``import X as X`` under
    ``TYPE_CHECKING``), public (in ``__all__``), and resolving to what the type checker sees."""
    import importlib

    pkg = importlib.import_module(package)
    tree = ast.parse(Path(pkg.__file__).read_text())
    mirrored = {
        alias.name: imp.module
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
        for imp in node.body
        if isinstance(imp, ast.ImportFrom)
        for alias in imp.names
        if alias.asname == alias.name
    }
    assert mirrored == pkg._LAZY
    assert set(pkg._LAZY) <= set(pkg.__all__)
    for name, module in pkg._LAZY.items():
        try:
            value = getattr(pkg, name)
        except MissingExtraError:  # needs an extra this environment lacks (torch for train)
            continue
        assert value is getattr(importlib.import_module(module), name), name


def test_estimate_is_a_plain_package_and_estimate_workload_the_function() -> None:
    import types

    import gpuwise.estimate

    assert type(gpuwise.estimate) is types.ModuleType
    assert not callable(gpuwise.estimate)
    assert gpuwise.estimate_workload is gpuwise.estimate.estimate_workload
    assert "estimate" not in gpuwise.__all__


def test_no_public_function_shadows_a_submodule() -> None:
    """``pkg.name`` must be the submodule ``pkg/name.py`` when both exist (``gpuwise.fleet.tco`` was a function)."""
    import importlib

    clashes = []
    for info in pkgutil.walk_packages([str(SRC)], prefix="gpuwise."):
        if not info.ispkg or info.name.startswith("gpuwise.cli"):
            continue
        pkg = importlib.import_module(info.name)
        for sub in pkgutil.iter_modules(pkg.__path__):
            if sub.name in getattr(pkg, "__all__", ()):
                clashes.append(f"{info.name}.{sub.name}")
    assert clashes == []
    import gpuwise.fleet.tco

    assert gpuwise.fleet.tco.compute_tco is gpuwise.compute_tco


def test_no_public_name_is_also_a_subpackage() -> None:
    # `gpuwise.plan` is a plain function because the planner subpackage is `gpuwise.planner`:
    # a subpackage named `plan` would rebind the attribute to the module on first import.
    import types

    import gpuwise.planner.core

    subpackages = {m.name for m in pkgutil.iter_modules([str(SRC)])}
    assert set(gpuwise._LAZY) & subpackages == set()
    assert isinstance(gpuwise.plan, types.FunctionType) and gpuwise.plan is gpuwise.planner.plan


_MISUSE = """
import gpuwise

wl = gpuwise.workload_from_options(model="gpt2", task="finetune", samples="10k")
gpuwise.estimate_workload(1, 2, 3, 4, 5, 6, 7)
gpuwise.estimate_workload(wl, "H100", gpus="eight")
hours: int = gpuwise.estimate_workload(wl, "H100").wall_hours
gpuwise.find_gpu(3)
gpuwise.plan(wl, 5)
gpuwise.compute_tco("H100")
gpuwise.estimate(wl, "H100")
"""

_CORRECT = """
import gpuwise
from gpuwise.fleet.tco import CloudRates, OwnCosts

wl: gpuwise.Workload = gpuwise.workload_from_options(model="gpt2", task="finetune", samples="10k")
est: gpuwise.Estimate = gpuwise.estimate_workload(wl, "H100", gpus=8, calibration=None)
hours: float | None = est.wall_hours
plan: gpuwise.Plan = gpuwise.plan(wl, gpuwise.PlanRequest(deadline_hours=48.0))
spec: gpuwise.GpuSpec = gpuwise.find_gpu("H100")
own = OwnCosts(server_price_usd=250e3, usd_per_kwh=0.12)
result = gpuwise.compute_tco("H100", 8, 3.0, 0.6, own, CloudRates(3.0, None, None, None), tdp_w=700.0)
try:
    gpuwise.find_gpu("nope")
except gpuwise.GpuwiseError as exc:
    print(exc.hint, result.own_cost_usd, hours, plan, spec)
"""


@pytest.mark.slow
def test_mypy_strict_flags_misuse_and_accepts_correct_use(
    tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    pytest.importorskip("mypy")
    (tmp_path / "misuse.py").write_text(textwrap.dedent(_MISUSE))
    (tmp_path / "correct.py").write_text(textwrap.dedent(_CORRECT))
    store = getattr(pytestconfig, "cache", None)  # absent under `-p no:cacheprovider`
    cache = store.mkdir("mypy") if store is not None else tmp_path / "cache"
    # this checkout's gpuwise, not an installed one
    env = {**os.environ, "MYPYPATH": str(SRC.parent)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--follow-imports=silent",
            "--no-error-summary",
            "--config-file",
            os.devnull,
            "--cache-dir",
            str(cache),
            "misuse.py",
            "correct.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert not [e for e in errors if e.startswith("correct.py")], proc.stdout
    lines_with_errors = {int(e.split(":")[1]) for e in errors if e.startswith("misuse.py")}
    misuse = textwrap.dedent(_MISUSE).splitlines()
    expected = {
        i
        for i, text in enumerate(misuse, 1)
        if text.startswith("gpuwise.") or text.startswith("hours")
    }
    assert lines_with_errors == expected, proc.stdout
    assert "Too many positional arguments" in proc.stdout


_RESILIENT_TYPO = """
import torch
from gpuwise.train import resilient

model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with resilient(model, opt, checkpoint_dirr="x", max_step=10) as run:
    run.step(model(torch.ones(1, 2)).sum())
"""

_RESILIENT_CORRECT = """
import torch
from gpuwise.train import Run, resilient

model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with resilient(model, opt, checkpoint_dir="x", max_steps=10, async_mode="process") as run:
    checked: Run = run
    run.step(model(torch.ones(1, 2)).sum())
"""


@pytest.mark.slow
def test_mypy_strict_flags_a_misspelt_resilient_option(
    tmp_path: Path, pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``resilient`` takes ``Run``'s keyword options, typed: both typos are errors."""
    api = pytest.importorskip("mypy.api")
    typo, correct = tmp_path / "typo.py", tmp_path / "correct.py"
    typo.write_text(textwrap.dedent(_RESILIENT_TYPO))
    correct.write_text(textwrap.dedent(_RESILIENT_CORRECT))
    store = getattr(pytestconfig, "cache", None)  # absent under `-p no:cacheprovider`
    cache = store.mkdir("mypy") if store is not None else tmp_path / "cache"
    monkeypatch.setenv("MYPYPATH", str(SRC.parent))  # this checkout's gpuwise
    common = ["--strict", "--follow-imports=silent", "--no-error-summary"]
    common += ["--config-file", os.devnull, "--cache-dir", str(cache)]
    out, err, status = api.run([*common, str(typo)])
    assert status == 1, out + err
    assert 'Unexpected keyword argument "checkpoint_dirr"' in out, out
    assert 'Unexpected keyword argument "max_step"' in out, out
    out, err, status = api.run([*common, str(correct)])
    assert status == 0, out + err
