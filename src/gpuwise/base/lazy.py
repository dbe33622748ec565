"""Names a package exports lazily: resolved from their module on first use, then kept.

``gpuwise``, ``gpuwise.catalog``, ``gpuwise.planner``, ``gpuwise.monitor`` and ``gpuwise.train``
each keep a ``_LAZY`` table (name → defining module) mirrored, for type checkers, in an
``if TYPE_CHECKING:`` block, and answer ``__getattr__`` with :func:`resolve`. This keeps
``import gpuwise`` and ``gpuwise --help`` light while every public name keeps its real type.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, MutableMapping
from typing import Any

from gpuwise.errors import MissingExtraAttributeError, MissingExtraError


def resolve(
    package: str, table: Mapping[str, str], namespace: MutableMapping[str, Any], name: str
) -> Any:
    """``name`` from its module in ``table``, stored in the package's ``namespace``.

    An unknown name is an ``AttributeError``; a name whose module needs a missing extra (torch)
    is a :class:`~gpuwise.errors.MissingExtraAttributeError`, which is an ``AttributeError`` too, so
    ``help(package)`` and ``hasattr`` skip it while a direct use names the ``pip install`` to run.
    """
    module = table.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(module), name)
    except MissingExtraAttributeError:  # a lazy package below already said which extra
        raise
    except MissingExtraError as exc:
        raise MissingExtraAttributeError(f"{package}.{name}", exc) from exc
    namespace[name] = value
    return value
