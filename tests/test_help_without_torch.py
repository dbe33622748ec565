"""``help(gpuwise)`` without torch: the package documents itself instead of crashing.

pydoc reads every name ``dir(gpuwise)`` lists; ``gpuwise.Checkpointer`` needs torch, and its
missing-extra error used to escape from ``help()``. Run in a subprocess where torch cannot be
imported (``sys.modules['torch'] = None`` makes ``import torch`` raise ImportError).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_SCRIPT = """
import sys
sys.modules["torch"] = None
import io, contextlib, importlib
import gpuwise
from gpuwise.errors import MissingExtraError
module = importlib.import_module({module!r})
out = io.StringIO()
with contextlib.redirect_stdout(out):
    help(module)
print(len(out.getvalue()), {shown!r} in out.getvalue())
try:
    getattr(module, "Checkpointer")
except MissingExtraError as exc:  # the direct lookup still names the extra to install
    print(exc)
print(hasattr(module, "Checkpointer"))
"""


@pytest.mark.parametrize(
    ("module", "shown"),
    [
        ("gpuwise", "PreemptionWatcher"),  # the top level; PreemptionWatcher needs no torch
        ("gpuwise.train", "FakeMetadataServer"),  # the training package itself
    ],
)
def test_help_without_torch_documents_the_rest(module: str, shown: str) -> None:
    r = subprocess.run(
        [sys.executable, "-c", _SCRIPT.format(module=module, shown=shown)],
        capture_output=True,
        text=True,
        env={**os.environ, "PAGER": "cat"},
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    documented, message, has_attr = r.stdout.splitlines()
    length, shows_name = documented.split()
    assert int(length) > 1000 and shows_name == "True"
    assert message.startswith(
        "gpuwise.train.Checkpointer: this needs the optional dependency 'torch'"
    )
    assert "pip install 'gpuwise[train]'" in message
    assert has_attr == "False"
