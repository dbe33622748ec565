"""Regenerate the command output shown in the docs from the real CLI, or check it is current.

    python scripts/docs_output.py          # rewrite the blocks
    python scripts/docs_output.py --check  # exit 1 naming each stale block (tests/test_docs_outputs.py)

A block is a fenced code block right after a ``<!-- docs-output: NAME -->`` line; ``OUTPUTS``
says which command fills it. Commands run as ``python -m gpuwise`` on this checkout, 80 columns
wide, with an empty gpuwise home (no user config or cache) and no SkyPilot catalog: on the
bundled snapshot alone, so the output is the same on every machine. The one part that depends
on the day, the price age in days, is written as ``N days old``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# NAME → (doc file, gpuwise arguments). The doc shows the same arguments in prose above.
OUTPUTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "plan-main-job": (
        "docs/plan.md",
        ("plan", "--model", "llama-3.1-8b", "--task", "lora", "--tokens", "2B",
         "--deadline", "24h", "--limit", "3"),
    ),
}  # fmt: skip

_BLOCK = "<!-- docs-output: {name} -->\n```\n"
_AGE = re.compile(r"\(\d+ days? old;")


def render(args: tuple[str, ...]) -> str:
    """The command's stdout as the docs show it (trailing spaces stripped, the day count hidden)."""
    with tempfile.TemporaryDirectory() as home:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
            "GPUWISE_HOME": home,
            "GPUWISE_SKYPILOT_CATALOG": "off",
            "COLUMNS": "80",
        }
        for name in [n for n in env if n.startswith(("XDG_", "GPUWISE_CONFIG"))]:
            del env[name]
        r = subprocess.run(
            [sys.executable, "-m", "gpuwise", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            check=False,
        )
    if r.returncode not in (0, 3):
        raise SystemExit(f"gpuwise {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    text = "\n".join(line.rstrip() for line in r.stdout.splitlines()) + "\n"
    return _AGE.sub("(N days old;", text)


def current(doc: str, name: str) -> str:
    """The text now in ``doc``'s block ``name``."""
    start = doc.index(_BLOCK.format(name=name)) + len(_BLOCK.format(name=name))
    return doc[start : doc.index("```", start)]


def update(check: bool) -> list[str]:
    """Rewrite (or with ``check`` only compare) every block; the names of the stale ones."""
    stale = []
    for name, (rel, args) in OUTPUTS.items():
        path = ROOT / rel
        doc = path.read_text("utf-8")
        old, new = current(doc, name), render(args)
        if old == new:
            continue
        stale.append(f"{rel} block {name}")
        if not check:
            head = _BLOCK.format(name=name)
            path.write_text(doc.replace(head + old, head + new), "utf-8")
    return stale


if __name__ == "__main__":
    check = "--check" in sys.argv[1:]
    stale = update(check)
    for what in stale:
        print(("stale: " if check else "rewrote: ") + what)
    sys.exit(1 if check and stale else 0)
