"""No module over 800 lines and no function over 150 (ARCHITECTURE.md, "Rules a change keeps").

Split by concern before a module grows past what a reader holds in one sitting; a function
over 150 lines is several steps that want names of their own.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "gpuwise"
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 150


def test_no_module_over_800_lines() -> None:
    big = [
        f"{p.relative_to(SRC)} ({n} lines)"
        for p in sorted(SRC.rglob("*.py"))
        if (n := len(p.read_text("utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert big == []


def test_no_function_over_150_lines() -> None:
    too_long = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(SRC)}:{node.name} ({length} lines)")
    assert too_long == []
