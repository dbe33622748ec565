"""The exporter's HTTP server under stalled clients: silent connections cost no worker, a client
trickling its headers is cut off at the header deadline, idle keep-alive connections are closed,
and a normal scrape still answers while hundreds of stalled connections are open."""

from __future__ import annotations

import socket
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from gpuwise.monitor.exporter import Exporter
from gpuwise.monitor.fake import FakeGpuReader
from gpuwise.monitor.httpserver import BoundedHTTPServer
from tests.monitor.conftest import wait_for


class _Hello(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = b"hello\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[BoundedHTTPServer]:
    srv = BoundedHTTPServer(
        ("127.0.0.1", 0), _Hello, workers=2, header_timeout_s=0.5, idle_timeout_s=1.0
    )
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    t.join(10)


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    return s


def _closed_by_server(s: socket.socket) -> bool:
    s.settimeout(0.05)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_stalled_connections_do_not_take_workers(server: BoundedHTTPServer) -> None:
    """200 connections that never send a byte, 2 workers: a real request still gets its answer,
    and the server runs no thread per connection."""
    port = server.server_address[1]
    before = threading.active_count()
    stalled = [_connect(port) for _ in range(200)]
    try:
        for _ in range(3):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
                assert r.read() == b"hello\n"
        assert threading.active_count() <= before + 2  # the two workers at most
    finally:
        for s in stalled:
            s.close()


def test_a_trickling_client_is_cut_off_at_the_header_deadline(server: BoundedHTTPServer) -> None:
    port = server.server_address[1]
    s = _connect(port)
    try:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # ...and never the blank line

        def cut() -> bool:
            try:
                s.sendall(b"X-a: b\r\n")  # one header line now and then
            except OSError:
                return True
            return _closed_by_server(s)

        wait_for(cut, 20, "the server to drop the trickling client")
    finally:
        s.close()


def test_keep_alive_then_idle_close(server: BoundedHTTPServer) -> None:
    port = server.server_address[1]
    s = _connect(port)
    try:
        for _ in range(2):  # two requests on one connection
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while not data.endswith(b"hello\n"):
                chunk = s.recv(4096)
                assert chunk
                data += chunk
            assert data.startswith(b"HTTP/1.1 200")
        wait_for(lambda: _closed_by_server(s), 20, "the idle connection to be closed")
    finally:
        s.close()


def test_exporter_scrapes_answer_beside_stalled_connections() -> None:
    exp = Exporter(FakeGpuReader.from_scenario("idle"), port=0, interval_s=3600, http_workers=2)
    exp.start()
    port = int(exp.server.server_address[1])
    stalled = [_connect(port) for _ in range(100)]
    try:
        with urllib.request.urlopen(exp.url + "/metrics", timeout=10) as r:
            assert b"gpuwise_gpu_up" in r.read()
    finally:
        for s in stalled:
            s.close()
        exp.stop()


def test_sixty_four_half_open_slow_loris_clients_do_not_stop_scrapes() -> None:
    """64 connections each send half a request line and stall (8 workers, 5 s header deadline):
    three scrapes in a row still answer at once. They used to hold every worker for 5 s each,
    40 s of queue, and the scrapes timed out."""
    exp = Exporter(FakeGpuReader.from_scenario("idle"), port=0, interval_s=3600, http_workers=8)
    exp.start()
    port = int(exp.server.server_address[1])
    loris = [_connect(port) for _ in range(64)]
    try:
        for s in loris:
            s.sendall(b"GET /metr")  # half a request line, then nothing
        for _ in range(3):
            with urllib.request.urlopen(exp.url + "/metrics", timeout=10) as r:
                assert b"gpuwise_gpu_up" in r.read()
    finally:
        for s in loris:
            s.close()
        exp.stop()


def test_a_request_split_across_packets_is_served(server: BoundedHTTPServer) -> None:
    port = server.server_address[1]
    s = _connect(port)
    try:
        for part in (b"GE", b"T / HTTP/1.1\r\nHo", b"st: x\r\n", b"\r\n"):
            s.sendall(part)
        data = b""
        while not data.endswith(b"hello\n"):
            chunk = s.recv(4096)
            assert chunk
            data += chunk
        assert data.startswith(b"HTTP/1.1 200")
    finally:
        s.close()
