"""A small HTTP server for /metrics that stalled clients cannot exhaust.

The standard library's ``ThreadingHTTPServer`` starts a thread per connection and waits for its
request without a deadline: 2,000 connections that never send a byte held 2,000 threads. Here one
selector thread holds every connection that has no complete request yet (accepted, kept alive
between scrapes, or sending its headers), reads what arrives without blocking, and hands a
connection to a bounded pool of workers only once its request line and headers are complete
(the blank line is in). So a client that sends half a request line and stops (slow-loris) costs
a file descriptor and a buffer, never a worker: 64 of them used to hold all 8 workers for 5 s
each and time out every scrape. A request whose headers do not complete within
``header_timeout_s`` of its first byte, or exceed :data:`MAX_HEADER_BYTES`, is dropped; idle
connections are closed after ``idle_timeout_s``, and past ``max_connections`` the oldest idle
one is dropped. A worker only answers (a request body, which scrapers never send, is read with
the same deadline) and gives the connection back.

HTTP/1.1 keep-alive works (Prometheus reuses its connection); bytes of a pipelined request that
arrived with the previous one are kept for the next.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler
from typing import Any

log = logging.getLogger(__name__)


MAX_HEADER_BYTES = 64 * 1024
"""Request line and headers larger than this are refused (a scrape sends a few hundred bytes)."""


class _Conn:
    __slots__ = ("buf", "handler", "last_s", "request_s", "sock")

    def __init__(self, sock: socket.socket, handler: BaseHTTPRequestHandler) -> None:
        self.sock, self.handler, self.last_s = sock, handler, time.monotonic()
        self.buf = b""
        """Bytes received and not yet handled (the request being read)."""
        self.request_s: float | None = None
        """When the first byte of the request being read arrived (its header deadline)."""


class BoundedHTTPServer:
    """``serve_forever`` / ``shutdown`` / ``server_close`` like socketserver's servers."""

    def __init__(
        self,
        address: tuple[str, int],
        handler_class: type[BaseHTTPRequestHandler],
        *,
        workers: int = 8,
        header_timeout_s: float = 5.0,
        idle_timeout_s: float = 75.0,
        max_connections: int = 512,
        backlog: int = 1024,
    ) -> None:
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(backlog)
        except OSError:
            self.socket.close()
            raise
        self.socket.setblocking(False)
        self.request_queue_size = backlog
        self.server_address: tuple[Any, ...] = self.socket.getsockname()
        self.handler_class = handler_class
        self.header_timeout_s, self.idle_timeout_s = header_timeout_s, idle_timeout_s
        self.max_connections = max_connections
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="gpuwise-http")
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._returned: list[_Conn] = []
        self._idle: dict[socket.socket, _Conn] = {}
        self._live: set[_Conn] = set()  # every open connection, wherever it is
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()

    # -- selector thread ------------------------------------------------------------------------

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._stopped.clear()
        self._sel.register(self.socket, selectors.EVENT_READ, "listen")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        try:
            while not self._stop.is_set():
                for key, _ in self._sel.select(timeout=poll_interval):
                    if key.data == "listen":
                        self._accept()
                    elif key.data == "wake":
                        self._drain_wake()
                    else:
                        self._dispatch(key.data)
                self._expire_idle()
        finally:
            self._sel.unregister(self.socket)
            self._sel.unregister(self._wake_r)
            self._stopped.set()

    def _accept(self) -> None:
        for _ in range(64):  # a burst of connections, without starving the others
            try:
                sock, addr = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. too many open files: keep serving who is connected
                log.warning("accept failed: %s", exc)
                return
            if len(self._idle) >= self.max_connections:
                oldest = min(self._idle.values(), key=lambda c: c.last_s)
                self._close(oldest)
            sock.settimeout(self.header_timeout_s)
            handler = self._new_handler(sock, addr)
            conn = _Conn(sock, handler)
            with self._lock:
                self._live.add(conn)
            self._park(conn)

    def _new_handler(self, sock: socket.socket, addr: Any) -> BaseHTTPRequestHandler:
        # BaseHTTPRequestHandler's constructor would handle the connection to its end in this
        # thread; build it without that, and run one request per readiness in a worker
        h = self.handler_class.__new__(self.handler_class)
        h.request, h.client_address, h.server = sock, addr, self  # type: ignore[assignment]
        h.setup()
        return h

    def _park(self, conn: _Conn) -> None:
        conn.last_s = time.monotonic()
        if b"\r\n\r\n" in conn.buf:  # a pipelined request already complete
            self._hand_over(conn)
            return
        conn.request_s = conn.last_s if conn.buf else None
        self._idle[conn.sock] = conn
        self._sel.register(conn.sock, selectors.EVENT_READ, conn)

    def _dispatch(self, conn: _Conn) -> None:
        """Bytes arrived: read them without blocking; hand the connection to a worker once its
        request line and headers are complete."""
        try:
            data = conn.sock.recv(MAX_HEADER_BYTES, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client closed (or reset) the connection
            self._close(conn)
            return
        conn.last_s = time.monotonic()
        if conn.request_s is None:
            conn.request_s = conn.last_s
        conn.buf += data
        if b"\r\n\r\n" in conn.buf:
            self._sel.unregister(conn.sock)
            del self._idle[conn.sock]
            self._hand_over(conn)
        elif len(conn.buf) > MAX_HEADER_BYTES:
            self._close(conn)

    def _hand_over(self, conn: _Conn) -> None:
        try:
            self._pool.submit(self._serve_one, conn)
        except RuntimeError:  # the pool is shut down: we are stopping
            self._close(conn, registered=False)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        with self._lock:
            back, self._returned = self._returned, []
        for conn in back:
            self._park(conn)

    def _expire_idle(self) -> None:
        now = time.monotonic()
        cutoff, header_cutoff = now - self.idle_timeout_s, now - self.header_timeout_s
        for conn in [
            c
            for c in self._idle.values()
            if c.last_s < cutoff or (c.request_s is not None and c.request_s < header_cutoff)
        ]:
            self._close(conn)

    def _close(self, conn: _Conn, *, registered: bool = True) -> None:
        if registered and conn.sock in self._idle:
            self._sel.unregister(conn.sock)
            del self._idle[conn.sock]
        self._shut(conn)

    # -- workers ----------------------------------------------------------------------------------

    def _serve_one(self, conn: _Conn) -> None:
        h = conn.handler
        keep = False
        try:
            deadline = time.monotonic() + self.header_timeout_s
            raw = h.rfile
            reader = _Buffered(conn.buf, _Deadline(raw, conn.sock, deadline))
            h.rfile = reader  # type: ignore[assignment]
            h.handle_one_request()
            h.wfile.flush()
            h.rfile = raw
            conn.buf = reader.rest()
            keep = not h.close_connection
        except (OSError, TimeoutError) as exc:
            log.debug("connection from %s dropped: %s", h.client_address, exc)
        if not keep or self._stop.is_set():
            self._shut(conn)
            return
        with self._lock:
            self._returned.append(conn)
        try:
            self._wake_w.send(b"x")
        except OSError:
            self._shut(conn)

    def _shut(self, conn: _Conn) -> None:
        with self._lock:
            self._live.discard(conn)
        _close_quietly(conn)

    # -- lifecycle ----------------------------------------------------------------------------------

    def shutdown(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._stopped.wait(10)

    def server_close(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            live, self._live, self._returned = list(self._live), set(), []
        self._idle.clear()
        for conn in live:  # idle, queued for a worker, or handed back
            _close_quietly(conn)
        for s in (self.socket, self._wake_r, self._wake_w):
            s.close()
        self._sel.close()


class _Buffered:
    """The request bytes the selector already read, then the socket (a body, rarely)."""

    def __init__(self, head: bytes, more: Any) -> None:
        self._head, self._pos, self._more = head, 0, more

    def rest(self) -> bytes:
        return self._head[self._pos :]

    def readline(self, size: int = -1) -> bytes:
        end = self._head.find(b"\n", self._pos)
        if end < 0:
            line = self._head[self._pos :]
            self._pos = len(self._head)
            left = -1 if size < 0 else size - len(line)
            return line + (self._more.readline(left) if left != 0 else b"")
        stop = end + 1 if size < 0 else min(end + 1, self._pos + size)
        line, self._pos = self._head[self._pos : stop], stop
        return bytes(line)

    def read(self, size: int = -1) -> bytes:
        part = self._head[self._pos :] if size < 0 else self._head[self._pos : self._pos + size]
        self._pos += len(part)
        left = -1 if size < 0 else size - len(part)
        return bytes(part) + (self._more.read(left) if left != 0 else b"")

    def __getattr__(self, name: str) -> Callable[..., Any]:
        return getattr(self._more, name)  # type: ignore[no-any-return]


class _Deadline:
    """The handler's rfile with a total deadline for the request line and headers: a client that
    trickles a byte every few seconds is cut off, not served forever."""

    def __init__(self, raw: Any, sock: socket.socket, deadline: float) -> None:
        self.raw, self._sock, self._deadline = raw, sock, deadline

    def _arm(self) -> None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request headers took too long")
        self._sock.settimeout(left)

    def readline(self, size: int = -1) -> bytes:
        self._arm()
        return bytes(self.raw.readline(size))

    def read(self, size: int = -1) -> bytes:
        self._arm()
        return bytes(self.raw.read(size))

    def __getattr__(self, name: str) -> Callable[..., Any]:
        return getattr(self.raw, name)  # type: ignore[no-any-return]


def _close_quietly(conn: _Conn) -> None:
    with contextlib.suppress(OSError, ValueError):
        conn.handler.finish()
    with contextlib.suppress(OSError):
        conn.sock.close()
