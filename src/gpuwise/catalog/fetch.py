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

import email.utils
import http.client
import math
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from gpuwise.base import settings
from gpuwise.errors import CatalogError

OFFLINE_HINT = (
    "check the network (or a proxy), or work offline: `gpuwise catalog update --from-csv FILE` "
    "or `--from-skypilot DIR`; the current catalog keeps working"
)


class FetchError(CatalogError):
    """A download failed; nothing was imported."""


class NotFound(FetchError):
    """The server answered 404: the file does not exist there (not a network problem)."""


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
    deadline_s: float = 300.0
    """One download (all attempts, and reading the body) ends after this long, seconds
    (``GPUWISE_FETCH_DEADLINE_S``)."""

    @classmethod
    def from_env(cls) -> FetchSettings:
        """The defaults, with ``GPUWISE_FETCH_*`` variables applied (read now, not at import)."""

        def num(name: str, default: float) -> float:
            return settings.number(name, default)

        return cls(
            timeout_s=num("GPUWISE_FETCH_TIMEOUT_S", cls.timeout_s),
            max_bytes=int(num("GPUWISE_FETCH_MAX_BYTES", cls.max_bytes)),
            deadline_s=num("GPUWISE_FETCH_DEADLINE_S", cls.deadline_s),
        )


class Download(bytearray):
    """A downloaded body, filled in place as it arrives (no second copy of a large file: the
    price-list benchmark holds peak memory under 2× the file size); ``last_modified`` is the
    server's ``Last-Modified`` as an ISO date, or None."""

    last_modified: str | None = None

    @classmethod
    def of(cls, data: bytes | bytearray, last_modified: str | None) -> Download:
        out = cls(data)
        out.last_modified = last_modified
        return out


def http_date(value: str | None) -> str | None:
    """An HTTP date header (``Wed, 21 Oct 2026 07:28:00 GMT``) → ``2026-10-21``; None when absent/bad."""
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value).date().isoformat()
    except (TypeError, ValueError, IndexError):
        return None


class _Retryable(Exception):
    pass


class _DeadlinePassed(Exception):
    pass


def _read_capped(
    resp: http.client.HTTPResponse, url: str, max_bytes: int, deadline: float = float("inf")
) -> Download:
    length = resp.headers.get("Content-Length")
    expected = int(length) if length and length.isdigit() else None
    if expected is not None and expected > max_bytes:
        raise FetchError(
            f"{url}: {expected:,} bytes is over the {max_bytes:,}-byte limit",
            hint="raise GPUWISE_FETCH_MAX_BYTES if the file is really that large",
        )
    body = Download(expected or 0)  # sized once when the length is known
    total = 0
    while True:
        if time.monotonic() > deadline:
            raise _DeadlinePassed(f"{total:,} bytes read")
        try:
            chunk = resp.read1(1 << 16)  # what has arrived: the deadline is checked between reads
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
        body[total - len(chunk) : total] = chunk
    if expected is not None and total != expected:
        raise FetchError(
            f"{url}: download cut short after {total:,} of {expected:,} bytes",
            hint="try again; " + OFFLINE_HINT,
        )
    return body


def fetch_bytes(
    url: str,
    settings: FetchSettings | None = None,
    *,
    accept: str = "*/*",
    run_deadline: float | None = None,
) -> Download:
    """GET ``url`` and return the body; :class:`FetchError` (one line, with the fix) on any failure.

    ``run_deadline`` (a :func:`time.monotonic` instant) bounds the whole run as well: the download
    ends at whichever deadline comes first.
    """
    s = settings or FetchSettings.from_env()
    if not url.startswith(("https://", "http://")):
        raise FetchError(
            f"{url}: only http(s) URLs can be fetched", hint="check the source's base-URL setting"
        )
    start = time.monotonic()
    deadline = min(start + s.deadline_s, run_deadline if run_deadline is not None else math.inf)
    attempt = 0
    timeout = s.timeout_s
    while True:
        if time.monotonic() >= deadline:
            raise _deadline_error(url, s, start, attempt, run_deadline, "before it began")
        try:
            left = max(0.05, deadline - time.monotonic())
            return _attempt(url, s, accept, min(timeout, left), deadline)
        except _DeadlinePassed as exc:
            raise _deadline_error(url, s, start, attempt + 1, run_deadline, str(exc)) from None
        except _Retryable as exc:
            wait = s.backoff_s * (2**attempt)
            attempt += 1
            elapsed = time.monotonic() - start
            left = min(s.failure_budget_s - elapsed, deadline - time.monotonic()) - wait
            if attempt <= s.retries and deadline - time.monotonic() - wait <= 0.05:
                raise _deadline_error(url, s, start, attempt, run_deadline, str(exc)) from None
            if attempt > s.retries or left <= 0.05:
                raise FetchError(
                    f"cannot download {url} ({exc}; {attempt} attempt{'s' if attempt > 1 else ''}"
                    f" in {seconds_text(elapsed)}, each allowed {seconds_text(s.timeout_s)})",
                    hint=OFFLINE_HINT,
                ) from None
            time.sleep(wait)
            timeout = min(s.timeout_s, left)  # a retry never outlasts the failure budget


def seconds_text(s: float) -> str:
    """Seconds for a message, two significant digits: ``0.47 s``, ``3.2 s``, ``1 s``, ``41 s``
    (never ``0.473657 s``)."""
    return f"{s:.0f} s" if s >= 10 else f"{s:.2g} s"


def _deadline_error(
    url: str, s: FetchSettings, start: float, attempts: int, run_deadline: float | None, what: str
) -> FetchError:
    elapsed = time.monotonic() - start
    whole_run = run_deadline is not None and run_deadline < start + s.deadline_s
    limit = (
        "the run's deadline (GPUWISE_FETCH_RUN_DEADLINE_S)"
        if whole_run
        else f"the {seconds_text(s.deadline_s)} download deadline (GPUWISE_FETCH_DEADLINE_S)"
    )
    return FetchError(
        f"cannot download {url}: stopped at {limit} after {seconds_text(elapsed)} "
        f"({attempts} attempt{'s' if attempts != 1 else ''}; {what})",
        hint="the server is too slow; try again later or raise the deadline; " + OFFLINE_HINT,
    )


def _attempt(url: str, s: FetchSettings, accept: str, timeout: float, deadline: float) -> Download:
    req = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "gpuwise-catalog"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = _read_capped(resp, url, s.max_bytes, deadline)
            body.last_modified = http_date(resp.headers.get("Last-Modified"))
            return body
    except urllib.error.HTTPError as exc:
        exc.close()  # the error holds the response's socket
        if exc.code >= 500 or exc.code == 429:
            raise _Retryable(f"HTTP {exc.code}") from None
        # urllib's reason for a redirect loop spans three lines; an error is one line
        reason = " ".join(str(exc.reason).split())
        reason = "redirects in a loop" if "infinite loop" in reason else reason
        raise (NotFound if exc.code == 404 else FetchError)(
            f"cannot download {url} (HTTP {exc.code} {reason})",
            hint="the source moved or the base-URL setting is wrong; " + OFFLINE_HINT,
        ) from None
    except urllib.error.URLError as exc:
        raise _Retryable(str(exc.reason)) from None
    except TimeoutError:
        shortened = "" if timeout >= s.timeout_s else " (shortened to fit the time budget)"
        raise _Retryable(f"no answer within {seconds_text(timeout)}{shortened}") from None
    except (ConnectionError, http.client.HTTPException, OSError) as exc:
        raise _Retryable(type(exc).__name__ + (f": {exc}" if str(exc) else "")) from None
