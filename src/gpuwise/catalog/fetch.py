"""The one place gpuwise downloads anything: ``catalog update --fetch`` only.

:func:`fetch_bytes` is a small layer over :mod:`urllib.request` with a per-attempt timeout,
retries with exponential backoff (5xx, connection errors and timeouts; never 4xx), a size cap
read as the body streams in (a ``Content-Length`` over the cap is refused before reading), a
check that the body is as long as ``Content-Length`` says (a truncated download is an error), and
a total time budget for failures so that with no network a fetch gives up in under 10 s. Every
error is a :class:`FetchError` naming the URL and what to do offline.

Nothing else in gpuwise imports this module; no command fetches unless asked.
"""

from __future__ import annotations

import http.client
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from gpuwise.errors import CatalogError

OFFLINE_HINT = (
    "check the network (or a proxy), or work offline: `gpuwise catalog update --from-csv FILE` "
    "or `--from-skypilot DIR`; the current catalog keeps working"
)


class FetchError(CatalogError):
    """A download failed; nothing was imported."""


@dataclass(frozen=True)
class FetchSettings:
    """How patient a fetch is; every field can be set by environment for tests and slow links."""

    timeout_s: float = 8.0
    """Socket timeout per attempt (connect and each read), seconds (``GPUWISE_FETCH_TIMEOUT_S``)."""
    retries: int = 2
    """Further attempts after the first, on 5xx, connection errors and timeouts."""
    backoff_s: float = 0.5
    """First wait between attempts; doubles each time."""
    failure_budget_s: float = 9.0
    """No new attempt starts once this long has passed since the first (no network: < 10 s)."""
    max_bytes: int = 512 * 1024 * 1024
    """Refuse a body larger than this (``GPUWISE_FETCH_MAX_BYTES``)."""

    @classmethod
    def from_env(cls) -> FetchSettings:
        def num(name: str, default: float) -> float:
            raw = os.environ.get(name)
            if not raw:
                return default
            try:
                value = float(raw)
            except ValueError:
                raise CatalogError(
                    f"{name}={raw!r} is not a number", hint=f"unset {name} or give a number"
                ) from None
            if not value > 0:
                raise CatalogError(
                    f"{name}={raw!r} must be > 0", hint=f"unset {name} or give a positive number"
                )
            return value

        return cls(
            timeout_s=num("GPUWISE_FETCH_TIMEOUT_S", cls.timeout_s),
            max_bytes=int(num("GPUWISE_FETCH_MAX_BYTES", cls.max_bytes)),
        )


class _Retryable(Exception):
    pass


def _read_capped(resp: http.client.HTTPResponse, url: str, max_bytes: int) -> bytes:
    length = resp.headers.get("Content-Length")
    expected = int(length) if length and length.isdigit() else None
    if expected is not None and expected > max_bytes:
        raise FetchError(
            f"{url}: {expected:,} bytes is over the {max_bytes:,}-byte limit",
            hint="raise GPUWISE_FETCH_MAX_BYTES if the file is really that large",
        )
    chunks: list[bytes] = []
    total = 0
    while True:
        try:
            chunk = resp.read(1 << 16)
        except http.client.IncompleteRead as exc:
            raise FetchError(
                f"{url}: download cut short after {total + len(exc.partial):,} of "
                f"{expected or '?'} bytes",
                hint="try again; " + OFFLINE_HINT,
            ) from None
        if not chunk:
            break
        total += len(chunk)
        if total > max_bytes:
            raise FetchError(
                f"{url}: more than {max_bytes:,} bytes",
                hint="raise GPUWISE_FETCH_MAX_BYTES if "
                "the file is really that large, else the server is not the price source",
            )
        chunks.append(chunk)
    if expected is not None and total != expected:
        raise FetchError(
            f"{url}: download cut short after {total:,} of {expected:,} bytes",
            hint="try again; " + OFFLINE_HINT,
        )
    return b"".join(chunks)


def fetch_bytes(url: str, settings: FetchSettings | None = None, *, accept: str = "*/*") -> bytes:
    """GET ``url`` and return the body; :class:`FetchError` (one line, with the fix) on any failure."""
    s = settings or FetchSettings.from_env()
    if not url.startswith(("https://", "http://")):
        raise FetchError(
            f"{url}: only http(s) URLs can be fetched", hint="check the source's base-URL setting"
        )
    start = time.monotonic()
    attempt = 0
    timeout = s.timeout_s
    while True:
        try:
            return _attempt(url, s, accept, timeout)
        except _Retryable as exc:
            wait = s.backoff_s * (2**attempt)
            attempt += 1
            left = s.failure_budget_s - (time.monotonic() - start) - wait
            if attempt > s.retries or left <= 0.05:
                raise FetchError(f"cannot download {url} ({exc})", hint=OFFLINE_HINT) from None
            time.sleep(wait)
            timeout = min(s.timeout_s, left)  # a retry never outlasts the failure budget


def _attempt(url: str, s: FetchSettings, accept: str, timeout: float) -> bytes:
    req = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "gpuwise-catalog"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return _read_capped(resp, url, s.max_bytes)
    except urllib.error.HTTPError as exc:
        if exc.code >= 500 or exc.code == 429:
            raise _Retryable(f"HTTP {exc.code}") from None
        raise FetchError(
            f"cannot download {url} (HTTP {exc.code} {exc.reason})",
            hint="the source moved or the base-URL setting is wrong; " + OFFLINE_HINT,
        ) from None
    except urllib.error.URLError as exc:
        raise _Retryable(str(exc.reason)) from None
    except TimeoutError:
        raise _Retryable(f"no answer within {timeout:g} s") from None
    except (ConnectionError, http.client.HTTPException, OSError) as exc:
        raise _Retryable(type(exc).__name__ + (f": {exc}" if str(exc) else "")) from None
