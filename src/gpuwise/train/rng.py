"""Capture and restore every random-number generator that shapes a training trajectory.

Python ``random``, NumPy's global generator, torch CPU and every CUDA device. States are kept as
tensors and plain Python types so that a checkpoint loads with ``torch.load(weights_only=True)``
(NumPy arrays are refused there: transformers#40500, open-instruct#673).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from gpuwise.train._torch import torch


def capture_rng() -> dict[str, Any]:
    """The current state of all generators, as tensors and plain types."""
    py = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
        "cuda": [],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Put every generator back where :func:`capture_rng` found it."""
    py = state["python"]
    random.setstate((int(py[0]), tuple(int(x) for x in py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state(
        (
            n["kind"],
            n["keys"].numpy().astype(np.uint32),
            n["pos"],
            n["has_gauss"],
            n["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda[: torch.cuda.device_count()])
