"""The layer rules of ARCHITECTURE.md, checked on the code as it is.

- the import contract in ``pyproject.toml`` holds (import-linter, the same check CI runs);
- a training rank's ``import gpuwise.train`` loads no planning code and reads no planner config;
- the CLI uses only the capabilities' public API: no ``gpuwise.<capability>.<module>`` import;
- the package is typed where it is installed: a wheel in a fresh virtualenv, no ``MYPYPATH``,
  and mypy reports a misuse of the API instead of "missing library stubs";
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "gpuwise"
PIP = (sys.executable, "-m", "pip")
MYPY = (sys.executable, "-m", "mypy", "--strict", "--no-incremental")


def test_the_import_contract_holds() -> None:
    # in a subprocess: import-linter's command configures logging for the whole process
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command; lint_imports_command()",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,  # it reads pyproject.toml from the working folder
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


CAPABILITIES = frozenset(
    {"bench", "catalog", "doctor", "estimate", "fleet", "hardware", "monitor", "planner", "train"}
)
# imports the CLI may still make from a capability's module, as (cli file, module): none
CLI_SUBMODULE_IMPORTS_ALLOWED: set[tuple[str, str]] = set()


def _capability_module_imports(source: str) -> list[tuple[int, str]]:
    """``(line, module)`` for every import in ``source`` that reaches into a capability's
    module instead of its package: ``from gpuwise.catalog.age import X``, ``import
    gpuwise.fleet.tco``, and ``from gpuwise.catalog import age`` (a submodule by name).
    Imports inside functions and under ``TYPE_CHECKING`` count too."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
            if len(node.module.split(".")) == 2:  # `from gpuwise.pkg import name`
                modules += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if len(parts) < 3 or parts[0] != "gpuwise" or parts[1] not in CAPABILITIES:
                continue
            package = SRC / parts[1]
            if (package / f"{parts[2]}.py").is_file() or (package / parts[2]).is_dir():
                found.append((node.lineno, module))
    return found


def test_the_cli_imports_only_the_capabilities_public_api() -> None:
    """``gpuwise.<capability>`` is the API the CLI is written against, as a user's code is: a
    name the CLI needs is exported from the package, not reached for in one of its modules.
    ``gpuwise.base.*``, ``gpuwise.errors``, ``gpuwise.units`` and ``gpuwise.cli.*`` stay open."""
    found = []
    for path in sorted((SRC / "cli").rglob("*.py")):
        rel = path.relative_to(SRC / "cli").as_posix()
        for line, module in _capability_module_imports(path.read_text()):
            if (rel, module) not in CLI_SUBMODULE_IMPORTS_ALLOWED:
                found.append(f"cli/{rel}:{line}: {module}")
    assert found == []


def test_the_cli_import_check_sees_every_form_it_forbids() -> None:
    code = textwrap.dedent(
        """
        from gpuwise.catalog import load_catalog
        from gpuwise.base.paths import data_home
        from gpuwise.cli._output import console
        from gpuwise import errors, units
        def f():
            from gpuwise.fleet.tco import OwnCosts
            import gpuwise.monitor.exporter
            from gpuwise.planner import export, plan
            if TYPE_CHECKING:
                from gpuwise.catalog.offer import Offer
        """
    )
    assert _capability_module_imports(code) == [
        (7, "gpuwise.fleet.tco"),
        (8, "gpuwise.monitor.exporter"),
        (9, "gpuwise.planner.export"),
        (11, "gpuwise.catalog.offer"),
    ]


def _loaded_after(code: str, env: dict[str, str]) -> list[str]:
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, **env, "PYTHONPATH": str(SRC.parent)},
        check=True,
    )
    loaded: list[str] = json.loads(out.stdout.splitlines()[-1])
    return loaded


@pytest.mark.parametrize(
    "code",
    [
        "import gpuwise.train",  # the package alone
        "from gpuwise.train import checkpoint_interval_s; checkpoint_interval_s(5.0)",
        "from gpuwise.train import PreemptionWatcher",
    ],
)
def test_a_training_rank_loads_no_planning_code(code: str, tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "spot.yaml").write_text("clouds: [unclosed\n")  # a malformed planner config
    loaded = _loaded_after(code, {"GPUWISE_HOME": str(tmp_path)})
    planning = [
        m
        for m in loaded
        if m.split(".")[:2]
        in (["gpuwise", "planner"], ["gpuwise", "estimate"], ["gpuwise", "catalog"])
    ]
    assert planning == []


@pytest.mark.slow  # imports torch in a subprocess: 3-7 s
def test_resilient_imports_with_a_malformed_planner_config(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    config = tmp_path / "config"
    config.mkdir()
    (config / "spot.yaml").write_text("clouds: [unclosed\n")
    loaded = _loaded_after(
        "from gpuwise.train import resilient, Run", {"GPUWISE_HOME": str(tmp_path)}
    )
    assert "gpuwise.train.loop" in loaded
    assert not any(m.startswith("gpuwise.planner") for m in loaded)


def test_the_base_layer_default_mtbf_is_the_planners_default() -> None:
    """One number, two homes: base (for training, no file read) and spot.yaml (for the planner)."""
    from gpuwise.base.interval import DEFAULT_MONTHLY_INTERRUPTION_PROBABILITY
    from gpuwise.planner.spot import load_spot_defaults

    default = load_spot_defaults(fetched=False).clouds["default"]
    assert default.monthly_interruption_probability == DEFAULT_MONTHLY_INTERRUPTION_PROBABILITY


def test_py_typed_ships_with_the_package() -> None:
    assert (SRC / "py.typed").is_file()
    import tomllib

    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["*"]
    assert "py.typed" in patterns


_MISUSE = """
import gpuwise
from gpuwise.train import Checkpointer, checkpoint_interval_s
from gpuwise.monitor import HistoryStore

gpuwise.estimate_workload(1, 2)
checkpoint_interval_s("five")
reveal_type(Checkpointer)
reveal_type(HistoryStore)
"""


@pytest.mark.slow
def test_mypy_checks_a_caller_against_the_installed_wheel(tmp_path: Path) -> None:
    """Build the wheel, install it alone in a fresh venv, and type-check a misuse against it."""
    pytest.importorskip("mypy")
    # conftest puts src/ on PYTHONPATH for subprocesses: this test must see only the wheel
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    wheels = tmp_path / "wheels"
    subprocess.run(
        [*PIP, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(REPO)],
        check=True,
        capture_output=True,
        env=env,
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    wheel = next(wheels.glob("gpuwise-*.whl"))
    subprocess.run(
        [*PIP, "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        env=env,
    )
    caller = tmp_path / "caller"
    caller.mkdir()
    (caller / "use.py").write_text(textwrap.dedent(_MISUSE))
    out = subprocess.run(
        [*MYPY, "--python-executable", str(python), "use.py"],
        capture_output=True,
        text=True,
        cwd=caller,
        env=env,
    )
    report = out.stdout
    assert "missing library stubs or py.typed marker" not in report, report
    assert 'Argument 1 to "estimate_workload" has incompatible type "int"' in report, report
    assert 'Argument 1 to "checkpoint_interval_s" has incompatible type "str"' in report, report
    assert "gpuwise.train.checkpointer.Checkpointer" in report, report
    assert "gpuwise.monitor.store.HistoryStore" in report, report
