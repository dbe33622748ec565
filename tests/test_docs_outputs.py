"""The command output shown in the docs is what the CLI prints today.

docs/plan.md's example had gone stale (other counts, another winner). Its blocks are now made
by ``scripts/docs_output.py`` from the real CLI on the bundled catalog; this test renders them
again and compares. On failure: ``python scripts/docs_output.py`` rewrites them; review the diff.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_output", ROOT / "scripts/docs_output.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(_script().OUTPUTS))
def test_documented_output_matches_the_cli(name: str) -> None:
    script = _script()
    rel, args = script.OUTPUTS[name]
    doc = (ROOT / rel).read_text("utf-8")
    assert " ".join(args[1:]) in doc  # the command the prose shows is the one rendered
    shown = script.current(doc, name)
    fresh = script.render(args)
    assert shown == fresh, f"{rel} block {name} is stale: run python scripts/docs_output.py"
