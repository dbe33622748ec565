"""Every parser's "To fix:" fits the flag's kind: durations, sizes, bandwidths, counts.

Two hints used to contradict the flag: ``--deadline nan`` said "give a plain number" (a bare
number is exactly what a duration refuses), and ``--checkpoint-bandwidth fast`` was told to write
"e.g. 7e9, 7B" (the token parser's hint). Each row runs the real command line.
"""

from __future__ import annotations

from typing import Any

import pytest

_PLAN = ["plan", "--model", "llama-2-7b", "--tokens", "1B"]
_DURATION = "with a unit, e.g. 30s"
_SIZE = "in GiB"
_BANDWIDTH = "in GB/s"
_COUNT = "7B"
_WHOLE = "give a whole number"
_KINDS = (_DURATION, _SIZE, _BANDWIDTH, _COUNT, _WHOLE)


@pytest.mark.parametrize(
    ("args", "kind"),
    [
        ([*_PLAN, "--deadline", "nan"], _DURATION),  # said "give --deadline as a plain number"
        ([*_PLAN, "--deadline", "inf"], _DURATION),
        ([*_PLAN, "--deadline", "2"], _DURATION),  # a bare number: the unit is missing
        ([*_PLAN, "--spot-mtbf", "nan"], _DURATION),
        ([*_PLAN, "--restart-time", "soon"], _DURATION),
        (["monitor", "--fake", "idle", "--interval", "nan"], _DURATION),
        (["report", "--fake", "idle", "--since", "inf"], _DURATION),
        (["run", "--restart-delay", "nan", "--", "python", "x.py"], _DURATION),
        (["offers", "--max-price-age", "nan"], _DURATION),
        ([*_PLAN, "--checkpoint-size", "lots"], _SIZE),  # said "e.g. 7e9, 7B"
        ([*_PLAN, "--checkpoint-bandwidth", "fast"], _BANDWIDTH),  # said "e.g. 7e9, 7B"
        ([*_PLAN, "--checkpoint-bandwidth", "1e999"], _BANDWIDTH),  # overflows to infinity
        (["estimate", "--model", "llama-2-7b", "--gpu", "H100", "--tokens", "lots"], _COUNT),
        # whole-number flags: said "write context_parallel as e.g. 7e9, 7B" and named the argument
        (["estimate", "--model", "llama-2-7b", "--context-parallel", "nan"], _WHOLE),
        (["estimate", "--model", "llama-2-7b", "--context-parallel", "-1"], _WHOLE),
        (["estimate", "--model", "llama-2-7b", "--tensor-parallel", "0"], _WHOLE),
        ([*_PLAN, "--micro-batch", "1.5"], _WHOLE),
    ],
)
def test_the_hint_fits_the_flag(cli: Any, args: list[str], kind: str) -> None:
    r = cli(*args)
    assert r.code == 2, r.stderr
    hint = r.stderr.split("To fix:", 1)[1]
    assert kind in hint, r.stderr
    assert not [other for other in _KINDS if other != kind and other in hint], r.stderr
    if kind == _DURATION:  # a bare number is what a duration refuses
        assert "plain number" not in hint
    if kind == _WHOLE:  # the flag, never the Python argument's name
        assert "_parallel" not in r.stderr and "micro_batch" not in r.stderr, r.stderr
