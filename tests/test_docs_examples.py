"""Every ``python`` block in README.md and docs/*.md runs, as written, from the repository root.

A block that cannot run here says so on the line just above it, visibly in the Markdown source:
``<!-- docs-test: skip <reason> -->`` (a GPU, the network, or a fragment of the reader's own
training script). Each skip shows up in ``pytest -rs`` with its reason. A block that runs but takes
more than the fast-test limit says ``<!-- docs-test: slow <reason> -->`` and runs with ``-m slow``. A block runs in a fresh
interpreter (the code under test first on the path, the test's isolated ``GPUWISE_HOME``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_SKIP = re.compile(r"<!-- docs-test: skip (.+?) -->\s*$")
_SLOW = re.compile(r"<!-- docs-test: slow (.+?) -->\s*$")


def _blocks() -> list[pytest.ParameterSet]:
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text("utf-8")
        for m in _BLOCK.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            skip = _SKIP.search(before)
            marks = [pytest.mark.skip(reason=f"docs-test: {skip.group(1)}")] if skip else []
            if _SLOW.search(before):
                marks.append(pytest.mark.slow)
            name = f"{path.relative_to(ROOT)}:{line}"
            out.append(pytest.param(m.group(1), id=name, marks=marks))
    return out


def test_the_docs_have_python_examples() -> None:
    assert len(_blocks()) >= 8  # a broken pattern must not pass by finding nothing


@pytest.mark.parametrize("code", _blocks())
def test_documented_example_runs(code: str) -> None:
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "error"},
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]


_IMPORT = re.compile(r"^from (gpuwise[\w.]*) import \(?([\w, \n]+?)\)?$", re.M)


def test_documented_imports_are_public() -> None:
    """A name the docs teach (``from gpuwise.fleet import plan_fleet``) is in that module's
    ``__all__``, so the public-API tests pin it and it cannot vanish in a refactor."""
    import importlib
    import importlib.util

    outside = []
    for param in _blocks():
        code = str(param.values[0])
        for module, names in _IMPORT.findall(code):
            spec = importlib.util.find_spec(module)
            source = Path(spec.origin).read_text("utf-8") if spec and spec.origin else ""
            if "__all__" not in source:  # a module without a curated list (nothing to import)
                continue
            public = importlib.import_module(module).__all__
            for name in (n.strip() for n in names.replace("\n", " ").split(",")):
                if name and name not in public:
                    outside.append(f"{param.id}: {module}.{name}")
    assert not outside, outside
