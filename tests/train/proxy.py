"""A loopback TCP proxy in front of a server (the S3 API): hung or slow storage on demand."""

from __future__ import annotations

import contextlib
import socket
import time


class HangingProxy:
    """A TCP proxy on 127.0.0.1 in front of another server; ``hang()`` makes it stop answering
    (connections are accepted, nothing is forwarded or returned): a hung object store.
    ``delay_s`` (settable at any time) holds every chunk that passes that long: a slow one."""

    def __init__(self, upstream_port: int, delay_s: float = 0.0) -> None:
        import threading

        self.upstream_port = upstream_port
        self.delay_s = delay_s
        self.hung = threading.Event()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = int(self._sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            self._held.append(client)
            if self.hung.is_set():
                continue  # accepted, never answered
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            except OSError:
                client.close()
                continue
            self._held.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(None)
        while not self.hung.is_set():
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data or self.hung.is_set():
                return  # once hung, bytes in flight are swallowed and the connection stays open
            if self.delay_s > 0:
                time.sleep(self.delay_s)
            try:
                dst.sendall(data)
            except OSError:
                return

    def hang(self) -> None:
        self.hung.set()

    def close(self) -> None:
        self._sock.close()
        for s in self._held:
            with contextlib.suppress(OSError):
                s.close()
