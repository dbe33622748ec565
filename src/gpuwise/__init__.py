"""gpuwise: choose, pay less for, run safely on, and see cloud GPUs for PyTorch work.

The public API is re-exported here lazily so ``import gpuwise`` stays light; the names are
pinned by ``tests/test_public_api.py``.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    # name: module that defines it
    "GpuwiseError": "gpuwise.errors",
    "InputError": "gpuwise.errors",
    "GpuSpec": "gpuwise.hardware",
    "find_gpu": "gpuwise.hardware",
    "Offer": "gpuwise.catalog",
    "Catalog": "gpuwise.catalog",
    "load_catalog": "gpuwise.catalog",
    "query_offers": "gpuwise.catalog",
    "Checkpointer": "gpuwise.train",
    "PreemptionWatcher": "gpuwise.train",
    "resilient": "gpuwise.train",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuwise' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
