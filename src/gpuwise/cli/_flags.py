"""Library errors name Python arguments (``zero=4``); on the command line they name flags (``--zero 4``).

The core never mentions CLI flags, since it is also called from Python. A command wraps its
library calls in :func:`named_as_flags` with the argument → flag names it uses, and only
``name=value`` is rewritten, so prose words in a message stay as they are.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping


def as_flags(text: str, flags: Mapping[str, str]) -> str:
    """``zero=4 is not a ZeRO stage`` → ``--zero 4 is not a ZeRO stage`` for ``{"zero": "--zero"}``."""
    if not flags:
        return text
    names = "|".join(sorted(map(re.escape, flags), key=len, reverse=True))
    pattern = re.compile(r"(?<![\w-])(" + names + r")=(?:'([^']*)'|([^\s,;)]+))?")

    def flag(m: re.Match[str]) -> str:
        value = m.group(2) if m.group(2) is not None else m.group(3)
        shown = value and value != "True"  # a flag (normalize_weights=True) takes no value
        return flags[m.group(1)] + (f" {value}" if shown else "")

    return pattern.sub(flag, text)


@contextlib.contextmanager
def named_as_flags(flags: Mapping[str, str]) -> Iterator[None]:
    """Re-raise a :class:`~gpuwise.errors.GpuwiseError` with ``name=value`` written as ``--flag value``.

    Also a decorator: ``@named_as_flags({"budget_usd": "--budget"})`` on a command function.
    """
    from gpuwise.errors import GpuwiseError

    try:
        yield
    except GpuwiseError as exc:
        exc.message, exc.hint = as_flags(exc.message, flags), as_flags(exc.hint, flags)
        exc.args = (exc.message,)
        raise
