"""docs/plan.md's prose numbers come from the generated output shown above them.

The output block is checked against the CLI by ``tests/test_docs_outputs.py``; this test checks
that every money figure, duration, memory size and percentage written in the paragraph between
``<!-- docs-prose: plan-main-job -->`` and ``<!-- /docs-prose -->`` appears in that block, so the
prose cannot drift from what the CLI prints.
"""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "plan.md"
NUMBER = re.compile(r"\$[\d,]+(?:\.\d+)?|[<>+]?\d+(?:\.\d+)?(?: h| GiB|%)")


def _between(text: str, start: str, end: str) -> str:
    i = text.index(start) + len(start)
    return text[i : text.index(end, i)]


def test_the_prose_numbers_are_in_the_generated_output() -> None:
    doc = DOC.read_text("utf-8")
    block = " ".join(_between(doc, "<!-- docs-output: plan-main-job -->\n```\n", "```").split())
    prose = " ".join(
        _between(doc, "<!-- docs-prose: plan-main-job -->", "<!-- /docs-prose -->").split()
    )
    numbers = NUMBER.findall(prose)
    assert len(numbers) >= 8  # the paragraph is about the numbers
    missing = [n for n in numbers if n not in block]
    assert not missing, f"docs/plan.md prose numbers not in the generated output: {missing}"
