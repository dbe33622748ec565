"""Give a forwarding function the signature of what it forwards to, written once."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def signature_of(target: Callable[P, Any]) -> Callable[[Callable[..., R]], Callable[P, R]]:
    """Type ``fn(*args, **kwargs)`` as taking exactly ``target``'s parameters (a class: its
    ``__init__``'s), so mypy checks every keyword at the call site and ``help()`` lists them;
    the forwarding function keeps its own return type and behaviour.

    ::

        @signature_of(Run)
        @contextlib.contextmanager
        def resilient(*args: Any, **kwargs: Any) -> Iterator[Run]: ...
    """

    def apply(fn: Callable[..., R]) -> Callable[P, R]:
        own = inspect.signature(fn)
        fn.__signature__ = inspect.signature(target).replace(  # type: ignore[attr-defined]
            return_annotation=own.return_annotation
        )
        return fn

    return apply
