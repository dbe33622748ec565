"""Every GPUWISE_* variable is declared once in gpuwise.base.settings and read only through it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gpuwise.base import settings
from gpuwise.errors import InputError

SRC = Path(__file__).resolve().parents[2] / "src" / "gpuwise"
_NAME = re.compile(r"\bGPUWISE_[A-Z0-9_]*[A-Z0-9]\b")


def test_every_variable_named_in_the_code_is_declared() -> None:
    named = set()
    for path in SRC.rglob("*.py"):
        named |= set(_NAME.findall(path.read_text("utf-8")))
    assert sorted(named - set(settings.SETTINGS)) == []


def _environ_reads(tree: ast.AST) -> list[int]:
    """Lines that read os.environ[...] / os.environ.get(...) / os.getenv(...) for a GPUWISE_ name."""
    lines = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and node.args:
            fn = ast.unparse(node.func)
            if fn in ("os.environ.get", "os.getenv", "environ.get"):
                key = node.args[0]
        elif (
            isinstance(node, ast.Subscript)
            and ast.unparse(node.value) == "os.environ"
            and isinstance(node.ctx, ast.Load)
        ):
            key = node.slice
        if isinstance(key, ast.Constant) and str(key.value).startswith("GPUWISE_"):
            lines.append(node.lineno)
    return lines


def test_no_module_reads_a_gpuwise_variable_itself() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path == SRC / "base" / "settings.py":
            continue
        for line in _environ_reads(ast.parse(path.read_text("utf-8"))):
            found.append(f"{path.relative_to(SRC)}:{line}")
    assert found == []


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("2.5", 2.5),  # a plain number
        ("30", 30.0),
    ],
)
def test_number_reads_on_call(raw: str, want: float) -> None:
    assert (
        settings.number("GPUWISE_POLL_INTERVAL_S", 5.0, env={"GPUWISE_POLL_INTERVAL_S": raw})
        == want
    )
    assert settings.number("GPUWISE_POLL_INTERVAL_S", 5.0, env={}) == 5.0


@pytest.mark.parametrize("raw", ["nan", "-1", "0", "inf", "5s", "1e999"])
def test_a_bad_number_names_the_variable(raw: str) -> None:
    with pytest.raises(InputError) as err:
        settings.number("GPUWISE_POLL_INTERVAL_S", 5.0, env={"GPUWISE_POLL_INTERVAL_S": raw})
    assert "GPUWISE_POLL_INTERVAL_S" in str(err.value)
    assert "unset GPUWISE_POLL_INTERVAL_S" in (err.value.hint or "")


@pytest.mark.parametrize(
    ("raw", "on"), [("1", True), ("yes", True), ("0", False), ("off", False), ("", False)]
)
def test_flags(raw: str, on: bool) -> None:
    assert settings.flag("GPUWISE_DEBUG", {"GPUWISE_DEBUG": raw}) is on


def test_an_undeclared_name_is_a_programming_error() -> None:
    with pytest.raises(KeyError):
        settings.text("GPUWISE_NOT_A_SETTING", {})


def test_the_docs_table_is_the_declared_table() -> None:
    docs = (SRC.parents[1] / "docs" / "settings.md").read_text("utf-8")
    assert settings.markdown_table() in docs
