"""A fake cloud metadata server on loopback that speaks the AWS, GCP and Azure notice protocols.

Use it to rehearse a preemption (``python -m gpuwise.train.fake_metadata --preempt-after 30``,
then run training with ``GPUWISE_METADATA_URL=http://127.0.0.1:PORT``) and in tests. It is a real
HTTP server and enforces each protocol's headers, so a watcher that forgets one fails here too.

Endpoints (shapes from each cloud's documentation):

- AWS IMDSv2: ``PUT /latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds`` → token;
  ``GET /latest/meta-data/spot/instance-action`` with ``X-aws-ec2-metadata-token`` → 404, or 200
  ``{"action": "terminate"|"stop"|"hibernate", "time": "<UTC>"}``;
  ``GET /latest/meta-data/events/recommendations/rebalance`` → 404 or 200
  ``{"noticeTime": "<UTC>"}``. A GET without a valid token gets 401 (``imdsv1=True``: served).
  ``token_delay_s`` holds the token's answer back, as a container behind a PUT hop limit of 1
  never gets it.
- GCP: ``GET /computeMetadata/v1/instance/preempted`` with ``Metadata-Flavor: Google`` →
  ``FALSE`` / ``TRUE``; ``?wait_for_change=true`` hangs until it changes (or ``timeout_sec``);
  ``instance/maintenance-event`` → ``NONE`` or the event (``TERMINATE_ON_HOST_MAINTENANCE``).
- Azure: ``GET /metadata/scheduledevents?api-version=2020-07-01`` with ``Metadata: true`` →
  ``{"DocumentIncarnation": n, "Events": [{"EventType": "Preempt", "Resources": [vm], ...}]}``;
  ``GET /metadata/instance/compute/name?api-version=...&format=text`` → this VM's name
  (``vm_name``). An event may name other VMs (``resources=``): Azure sends every VM of an
  availability set or scale-set placement group the events of all of them.
- Control (for tests and rehearsals from another process):
  ``POST /_gpuwise/preempt?notice_s=30[&clear_after_s=5|&clear_after_reads=1][&action=stop]
  [&event=Terminate][&resources=vm1,vm2]``, ``POST /_gpuwise/maintenance[?event=TERMINATE_ON_HOST_MAINTENANCE]``,
  ``POST /_gpuwise/rebalance``, ``POST /_gpuwise/clear``.

The shapes follow the clouds' documented answers, recorded with their sources in
``tests/train/data/metadata_answers.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import secrets
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


def _utc(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _http_date(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%a, %d %b %Y %H:%M:%S GMT")


class FakeMetadataServer:
    """``with FakeMetadataServer() as md: md.preempt(notice_s=30)``; ``md.url`` is the base URL."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        vm_name: str = "fakevm",
        imdsv1: bool = False,
        token_delay_s: float = 0.0,
    ) -> None:
        self._lock = threading.Condition()
        self._tokens: set[str] = set()
        self.vm_name = vm_name
        self.imdsv1 = imdsv1
        self.token_delay_s = token_delay_s
        self.preempt_at: float | None = None
        self.notice_at: float | None = None
        self.rebalance_at: float | None = None
        self.aws_action = "terminate"
        self.azure_event = "Preempt"
        self.azure_resources: list[str] | None = None
        self.maintenance_event = "NONE"
        self.reads_left: int | None = None
        self.incarnation = 1
        self.event_id = str(uuid.uuid4())
        self.requests: dict[str, int] = {"aws": 0, "gcp": 0, "azure": 0}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_PUT(self) -> None:
                server._handle(self, "PUT")

            def do_GET(self) -> None:
                server._handle(self, "GET")

            def do_POST(self) -> None:
                server._handle(self, "POST")

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeMetadataServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-metadata",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            self._lock.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeMetadataServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- control -------------------------------------------------------------------------------

    def preempt(
        self,
        notice_s: float = 30.0,
        clear_after_s: float | None = None,
        *,
        action: str = "terminate",
        event: str = "Preempt",
        resources: list[str] | None = None,
        clear_after_reads: int | None = None,
    ) -> None:
        """Announce a preemption ``notice_s`` seconds from now, on all three protocols.

        ``clear_after_s``: withdraw it after that long, as the replacement machine's metadata
        server would (rehearse a preempt → restart → resume cycle on one machine).
        ``action``: AWS's ``terminate``, ``stop`` or ``hibernate``. ``event``: Azure's event type
        (``Preempt``, ``Terminate``, ``Reboot`` ...); ``resources``: the VMs it names (default:
        this one, ``vm_name``). ``clear_after_reads``: withdraw it once it was served that many
        times: a rehearsal of preempt → restart → resume whatever the save takes (with
        ``clear_after_s`` a save that ends sooner finds the notice still up, and ``gpuwise run``
        rightly exits 75 instead of restarting)."""
        if clear_after_s is not None:
            timer = threading.Timer(clear_after_s, self.clear)
            timer.daemon = True
            timer.start()
        with self._lock:
            now = time.time()
            self.notice_at, self.preempt_at = now, now + notice_s
            self.aws_action, self.azure_event = action, event
            self.azure_resources = None if resources is None else list(resources)
            self.reads_left = clear_after_reads
            self.incarnation += 1
            self.event_id = str(uuid.uuid4())
            self._lock.notify_all()

    def maintenance(self, event: str = "TERMINATE_ON_HOST_MAINTENANCE") -> None:
        """GCP ``maintenance-event`` (``NONE`` withdraws it)."""
        with self._lock:
            self.maintenance_event = event
            self._lock.notify_all()

    def rebalance(self) -> None:
        """AWS rebalance recommendation (an early warning, not a preemption)."""
        with self._lock:
            self.rebalance_at = time.time()

    def _served(self) -> None:
        """A preemption notice was answered: count it towards ``clear_after_reads``."""
        with self._lock:
            if self.reads_left is None:
                return
            self.reads_left -= 1
            if self.reads_left <= 0:
                self.clear()

    def clear(self) -> None:
        """Back to "no notice" (the replacement machine's metadata server)."""
        with self._lock:
            self.preempt_at = self.notice_at = self.rebalance_at = None
            self.maintenance_event = "NONE"
            self.reads_left = None
            self.incarnation += 1
            self._lock.notify_all()

    # -- protocol ------------------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        url = urlparse(h.path)
        q = parse_qs(url.query)
        path = url.path
        try:
            if path.startswith("/_gpuwise/") and method == "POST":
                if path == "/_gpuwise/preempt":
                    clear = q.get("clear_after_s", [None])[0]
                    names = q.get("resources", [None])[0]
                    self.preempt(
                        float(q.get("notice_s", ["30"])[0]),
                        float(clear) if clear else None,
                        action=q.get("action", ["terminate"])[0],
                        event=q.get("event", ["Preempt"])[0],
                        resources=names.split(",") if names is not None else None,
                        clear_after_reads=int(reads)
                        if (reads := q.get("clear_after_reads", [None])[0])
                        else None,
                    )
                elif path == "/_gpuwise/maintenance":
                    self.maintenance(q.get("event", ["TERMINATE_ON_HOST_MAINTENANCE"])[0])
                elif path == "/_gpuwise/rebalance":
                    self.rebalance()
                elif path == "/_gpuwise/clear":
                    self.clear()
                else:
                    return self._send(h, 404, "unknown control")
                return self._send(h, 200, "ok")
            if path.startswith("/latest/"):
                return self._aws(h, method, path)
            if path.startswith("/computeMetadata/"):
                return self._gcp(h, method, path, q)
            if path == "/metadata/scheduledevents":
                return self._azure(h, method, q)
            if path == "/metadata/instance/compute/name":
                return self._azure(h, method, q, name=True)
            return self._send(h, 404, "Not Found")
        except (BrokenPipeError, ConnectionResetError):
            return None

    def _send(
        self,
        h: BaseHTTPRequestHandler,
        code: int,
        body: str,
        ctype: str = "text/plain",
        headers: dict[str, str] | None = None,
    ) -> None:
        data = body.encode()
        h.send_response(code)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    def _aws(self, h: BaseHTTPRequestHandler, method: str, path: str) -> None:
        with self._lock:
            self.requests["aws"] += 1
        if path == "/latest/api/token":
            if method != "PUT":
                return self._send(h, 405, "Method Not Allowed")
            if not h.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                return self._send(h, 400, "Missing TTL header")
            if self.token_delay_s:  # the answer a PUT hop limit of 1 drops in a container
                time.sleep(self.token_delay_s)
            token = secrets.token_urlsafe(24)
            with self._lock:
                self._tokens.add(token)
            return self._send(h, 200, token)
        given = h.headers.get("X-aws-ec2-metadata-token")
        if given not in self._tokens and not (given is None and self.imdsv1):
            return self._send(h, 401, "Unauthorized")
        with self._lock:
            preempt_at, rebalance_at = self.preempt_at, self.rebalance_at
            action = self.aws_action
        if path == "/latest/meta-data/spot/instance-action":
            if preempt_at is None:
                return self._send(h, 404, "Not Found")
            self._send(
                h,
                200,
                json.dumps({"action": action, "time": _utc(preempt_at)}),
                "application/json",
            )
            return self._served()
        if path == "/latest/meta-data/events/recommendations/rebalance":
            if rebalance_at is None:
                return self._send(h, 404, "Not Found")
            return self._send(
                h, 200, json.dumps({"noticeTime": _utc(rebalance_at)}), "application/json"
            )
        if path == "/latest/meta-data/instance-id":
            return self._send(h, 200, "i-0fake0metadata0")
        return self._send(h, 404, "Not Found")

    def _gcp(
        self, h: BaseHTTPRequestHandler, method: str, path: str, q: dict[str, list[str]]
    ) -> None:
        with self._lock:
            self.requests["gcp"] += 1
        if h.headers.get("Metadata-Flavor") != "Google":
            return self._send(h, 403, "Missing Metadata-Flavor:Google header.")
        if path == "/computeMetadata/v1/instance/maintenance-event":
            with self._lock:
                event = self.maintenance_event
            return self._send(h, 200, event, headers={"Metadata-Flavor": "Google"})
        if path != "/computeMetadata/v1/instance/preempted":
            return self._send(h, 404, "Not Found")
        if q.get("wait_for_change", ["false"])[0].lower() == "true":
            timeout = min(float(q.get("timeout_sec", ["60"])[0]), 300.0)
            with self._lock:
                before = self.preempt_at is not None
                self._lock.wait_for(
                    lambda: (self.preempt_at is not None) != before, timeout=timeout
                )
        with self._lock:
            value = "TRUE" if self.preempt_at is not None else "FALSE"
        self._send(h, 200, value, headers={"Metadata-Flavor": "Google"})
        return self._served() if value == "TRUE" else None

    def _azure(
        self, h: BaseHTTPRequestHandler, method: str, q: dict[str, list[str]], name: bool = False
    ) -> None:
        with self._lock:
            self.requests["azure"] += 1
        if h.headers.get("Metadata", "").lower() != "true":
            return self._send(
                h,
                400,
                json.dumps({"error": "Bad request. Required metadata header not specified"}),
                "application/json",
            )
        if "api-version" not in q:
            return self._send(
                h,
                400,
                json.dumps({"error": "Bad request. api-version was not specified"}),
                "application/json",
            )
        if name:
            return self._send(h, 200, self.vm_name)
        with self._lock:
            events = []
            if self.preempt_at is not None:
                resources = self.azure_resources
                events.append(
                    {
                        "EventId": self.event_id,
                        "EventType": self.azure_event,
                        "ResourceType": "VirtualMachine",
                        "Resources": [self.vm_name] if resources is None else resources,
                        "EventStatus": "Scheduled",
                        "NotBefore": _http_date(self.preempt_at),
                        "Description": f"{self.azure_event} (gpuwise fake)",
                        "EventSource": "Platform",
                        "DurationInSeconds": -1,
                    }
                )
            doc = {"DocumentIncarnation": self.incarnation, "Events": events}
        self._send(h, 200, json.dumps(doc), "application/json")
        return self._served() if events else None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description="Fake AWS/GCP/Azure metadata server for preemption rehearsals."
    )
    ap.add_argument("--port", type=int, default=8169)
    ap.add_argument(
        "--preempt-after", type=float, default=None, help="announce a preemption after N seconds"
    )
    ap.add_argument(
        "--notice", type=float, default=30.0, help="seconds between notice and preemption"
    )
    ap.add_argument(
        "--clear-after", type=float, default=None, help="withdraw the notice after N seconds"
    )
    ap.add_argument(
        "--clear-after-reads",
        type=int,
        default=None,
        help="withdraw the notice once it was served N times (rehearse a restart: 1)",
    )
    args = ap.parse_args(argv)
    server = FakeMetadataServer(port=args.port).start()
    print(f"fake metadata server on {server.url}  (GPUWISE_METADATA_URL={server.url})", flush=True)
    try:
        if args.preempt_after is not None:
            time.sleep(args.preempt_after)
            server.preempt(args.notice, args.clear_after, clear_after_reads=args.clear_after_reads)
            print("preemption announced", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
