"""A Python caller who passes the wrong kind of value gets a GpuwiseError that says which, not an
AttributeError from deep inside (``estimate_workload(1, 2)`` raised ``'int' object has no
attribute 'name'``)."""

from __future__ import annotations

from typing import Any

import pytest

import gpuwise
from gpuwise.errors import InputError


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((1, 2), "workload must be a Workload, got int"),
        (("llama-3.1-8b", "H100"), "workload must be a Workload, got str"),
        ((None, 8), "workload must be a Workload, got NoneType"),
    ],
)
def test_a_workload_that_is_not_one(args: tuple[Any, ...], needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        gpuwise.estimate_workload(*args)


def test_a_gpu_that_is_not_a_name() -> None:
    wl = gpuwise.workload_from_options(model="gpt2", task="finetune", tokens="1M")
    with pytest.raises(InputError, match="gpu must be a GPU name or a GpuSpec, got int"):
        gpuwise.estimate_workload(wl, 8)
