"""The one place gpuwise.train imports torch: a missing extra becomes a clear error."""

from __future__ import annotations

from gpuwise.errors import MissingExtraError

try:
    import torch
except ImportError as exc:  # pragma: no cover - exercised in an environment without torch
    raise MissingExtraError("torch", "train") from exc

__all__ = ["torch"]
