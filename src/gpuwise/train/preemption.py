"""``PreemptionWatcher``: notice that this machine is about to go, from signals and cloud notices.

Sources and windows (each cloud's documentation, cited per line below):

- signals SIGTERM, SIGINT, SIGUSR1 (Kubernetes sends SIGTERM, then SIGKILL after
  ``terminationGracePeriodSeconds``, default 30 s; SLURM ``--signal=USR1@N``; torchrun forwards
  SIGTERM and kills 30 s later, pytorch#119856). The handler only sets a flag.
- AWS EC2 Spot: IMDSv2 token (``PUT /latest/api/token``), then ``spot/instance-action`` (2 min
  notice; AWS asks to poll every 5 s) and ``events/recommendations/rebalance`` (early warning).
- GCP Spot/preemptible: ``instance/preempted`` with ``Metadata-Flavor: Google`` (30 s window).
- Azure Spot: Scheduled Events ``Preempt`` with ``Metadata: true`` (≥ 30 s notice).

A daemon thread finds the cloud (each probe has a short timeout, so start-up never waits on a
metadata server that does not answer), then polls it and sets the flag. Environment:
``GPUWISE_CLOUD`` = ``auto`` (default) | ``aws`` | ``gcp`` | ``azure`` | ``none``;
``GPUWISE_METADATA_URL`` overrides every cloud's base URL (the fake server, rehearsals);
``GPUWISE_GRACE_PERIOD_S`` is the window assumed after a signal (default 30, Kubernetes' default);
``GPUWISE_POLL_INTERVAL_S`` the poll period (default 5 s, AWS's advice).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Literal

from gpuwise.base import settings
from gpuwise.errors import InputError

log = logging.getLogger(__name__)

Cloud = Literal["aws", "gcp", "azure"]
CLOUDS: tuple[Cloud, ...] = ("aws", "gcp", "azure")
DEFAULT_URLS: dict[str, str] = {
    "aws": "http://169.254.169.254",  # IMDS link-local address
    "gcp": "http://metadata.google.internal",
    "azure": "http://169.254.169.254",  # Azure IMDS
}
AWS_TOKEN_TTL_S = 21600  # the value in AWS's IMDSv2 examples (6 h)
GRACE_PERIOD_DEFAULT_S = (
    30.0  # Kubernetes terminationGracePeriodSeconds default; GCP/Azure Spot window
)
GCP_WINDOW_S = 30.0  # GCP Spot: 30 s between ACPI soft-off and power-off (Compute API docs)


@dataclass(frozen=True)
class Notice:
    """One warning that the machine is going away (or may soon)."""

    source: str
    """``aws``, ``gcp``, ``azure`` or ``signal:SIGTERM`` ..."""
    kind: Literal["preemption", "rebalance"]
    """``rebalance``: AWS's early warning; save now, but keep training."""
    received_unix: float
    """When gpuwise saw it."""
    deadline_unix: float | None
    """When the machine goes, if the source says (or the assumed grace period after a signal)."""

    @property
    def seconds_left(self) -> float | None:
        return None if self.deadline_unix is None else self.deadline_unix - time.time()


def _parse_time(text: str) -> float | None:
    with contextlib.suppress(ValueError, TypeError):
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    with contextlib.suppress(ValueError, TypeError):
        return parsedate_to_datetime(text).timestamp()
    return None


class _Http:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({})
        )  # never via a proxy

    def call(self, method: str, url: str, headers: dict[str, str]) -> tuple[int, str]:
        req = urllib.request.Request(url, method=method, headers=headers)
        try:
            with self._opener.open(req, timeout=self.timeout_s) as resp:
                return int(resp.status), resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            return int(exc.code), ""


class _Aws:
    def __init__(self, base: str, http: _Http) -> None:
        self.base, self.http, self.token = base.rstrip("/"), http, ""

    def _token(self) -> str:
        code, body = self.http.call(
            "PUT",
            f"{self.base}/latest/api/token",
            {"X-aws-ec2-metadata-token-ttl-seconds": str(AWS_TOKEN_TTL_S)},
        )
        if code != 200:
            raise OSError(f"IMDSv2 token refused ({code})")
        return body.strip()

    def probe(self) -> bool:
        self.token = self._token()
        return True

    def _get(self, path: str) -> tuple[int, str]:
        if not self.token:
            self.token = self._token()
        code, body = self.http.call(
            "GET", f"{self.base}{path}", {"X-aws-ec2-metadata-token": self.token}
        )
        if code == 401:  # token expired: fetch a new one once
            self.token = self._token()
            code, body = self.http.call(
                "GET", f"{self.base}{path}", {"X-aws-ec2-metadata-token": self.token}
            )
        return code, body

    def poll(self) -> Notice | None:
        code, body = self._get("/latest/meta-data/spot/instance-action")
        if code == 200:
            data = json.loads(body or "{}")
            return Notice("aws", "preemption", time.time(), _parse_time(str(data.get("time", ""))))
        code, body = self._get("/latest/meta-data/events/recommendations/rebalance")
        if code == 200:
            return Notice("aws", "rebalance", time.time(), None)
        return None


class _Gcp:
    def __init__(self, base: str, http: _Http) -> None:
        self.base, self.http = base.rstrip("/"), http

    def _get(self) -> tuple[int, str]:
        return self.http.call(
            "GET",
            f"{self.base}/computeMetadata/v1/instance/preempted",
            {"Metadata-Flavor": "Google"},
        )

    def probe(self) -> bool:
        code, body = self._get()
        return code == 200 and body.strip().upper() in ("TRUE", "FALSE")

    def poll(self) -> Notice | None:
        code, body = self._get()
        if code == 200 and body.strip().upper() == "TRUE":
            now = time.time()
            return Notice("gcp", "preemption", now, now + GCP_WINDOW_S)
        return None


class _Azure:
    def __init__(self, base: str, http: _Http) -> None:
        self.base, self.http = base.rstrip("/"), http

    def _get(self) -> tuple[int, str]:
        return self.http.call(
            "GET",
            f"{self.base}/metadata/scheduledevents?api-version=2020-07-01",
            {"Metadata": "true"},
        )

    def probe(self) -> bool:
        code, body = self._get()
        return code == 200 and "Events" in json.loads(body or "{}")

    def poll(self) -> Notice | None:
        code, body = self._get()
        if code != 200:
            return None
        for event in json.loads(body or "{}").get("Events", []):
            if event.get("EventType") == "Preempt":
                return Notice(
                    "azure", "preemption", time.time(), _parse_time(str(event.get("NotBefore", "")))
                )
        return None


_PROVIDERS: dict[str, type[_Aws] | type[_Gcp] | type[_Azure]] = {
    "aws": _Aws,
    "gcp": _Gcp,
    "azure": _Azure,
}


class PreemptionWatcher:
    """Signals + a background poller of the cloud's metadata server; both only set a flag.

    ::

        with PreemptionWatcher() as watcher:
            for step in ...:
                ...
                if watcher.save_requested():   # any notice, including AWS rebalance
                    ckpt.save(...)
                if watcher.should_stop():      # a preemption is coming: save and exit
                    break
    """

    def __init__(
        self,
        *,
        cloud: str | None = None,
        metadata_url: str | None = None,
        poll_interval_s: float | None = None,
        probe_timeout_s: float = 0.5,
        signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1),
        grace_period_s: float | None = None,
    ) -> None:
        self.cloud = (cloud or settings.text("GPUWISE_CLOUD") or "auto").lower()
        if self.cloud not in ("auto", "none", *CLOUDS):
            raise InputError(
                f"unknown cloud {self.cloud!r} for preemption notices",
                hint="use auto, none, aws, gcp or azure",
            )
        self.metadata_url = metadata_url or settings.text("GPUWISE_METADATA_URL")
        if poll_interval_s is None:  # AWS: "check for these interruption notices every 5 seconds"
            poll_interval_s = settings.number("GPUWISE_POLL_INTERVAL_S", 5.0)
        if not (poll_interval_s > 0 and probe_timeout_s > 0):
            raise InputError(
                "poll_interval_s and probe_timeout_s must be positive", hint="e.g. 5 and 0.5"
            )
        self.poll_interval_s = poll_interval_s
        self.probe_timeout_s = probe_timeout_s
        self.signals = tuple(signals)
        self.grace_period_s = (
            grace_period_s
            if grace_period_s is not None
            else settings.number("GPUWISE_GRACE_PERIOD_S", GRACE_PERIOD_DEFAULT_S)
        )
        self.detected_cloud: str | None = None
        self._notice: Notice | None = None
        self._stop_flag = False
        self._save_flag = False
        self._handled_save = False
        self._previous: dict[int, Any] = {}
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> PreemptionWatcher:
        if threading.current_thread() is threading.main_thread():
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._on_signal)
        else:
            log.warning(
                "PreemptionWatcher started outside the main thread: signals are not watched"
            )
        if self.cloud != "none":
            self._thread = threading.Thread(
                target=self._poll_loop, name="gpuwise-preemption", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        self._halt.set()
        if threading.current_thread() is threading.main_thread():
            for sig, prev in self._previous.items():
                with contextlib.suppress(ValueError, TypeError):
                    signal.signal(sig, prev)
        self._previous.clear()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.probe_timeout_s + 1)

    def __enter__(self) -> PreemptionWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what the loop asks ----------------------------------------------------------------------

    def should_stop(self) -> bool:
        """True once a preemption notice or a stop signal arrived."""
        return self._stop_flag

    def save_requested(self) -> bool:
        """True once any notice arrived (preemption or rebalance) and the save was not yet taken."""
        return self._save_flag and not self._handled_save

    def mark_saved(self) -> None:
        """The loop saved in response; a rebalance notice stops asking."""
        self._handled_save = True

    @property
    def notice(self) -> Notice | None:
        return self._notice

    def trigger(
        self,
        source: str = "manual",
        kind: Literal["preemption", "rebalance"] = "preemption",
        deadline_unix: float | None = None,
    ) -> None:
        """Raise a notice by hand (used by the signal handler and the poller)."""
        notice = Notice(source, kind, time.time(), deadline_unix)
        if self._notice is None or (kind == "preemption" and self._notice.kind != "preemption"):
            self._notice = notice
        self._save_flag = True
        if kind == "preemption":
            if not self._stop_flag:
                self._handled_save = False  # a rebalance save does not cover the final one
            self._stop_flag = True

    def check_now(self) -> Notice | None:
        """Ask the cloud once, now: the preemption notice that is up, if any (None without a
        cloud, or when it does not answer within the probe timeout). ``gpuwise run`` asks this
        before a restart: a notice still up means this machine is going away."""
        if self.cloud == "none":
            return None
        name, provider = self._detect()
        if provider is None:
            return None
        try:
            notice: Notice | None = provider.poll()
        except (OSError, ValueError) as exc:
            log.debug("%s metadata poll failed: %s", name, exc)
            return None
        return notice if notice is not None and notice.kind == "preemption" else None

    # -- internals -----------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: Any) -> None:
        # only flags: no I/O, no locks, no logging in a signal handler
        if (
            signum == signal.SIGINT
            and self._stop_flag
            and (self._notice or Notice("", "preemption", 0, None)).source == "signal:SIGINT"
        ):
            raise KeyboardInterrupt  # a second Ctrl-C: the user wants out now
        self.trigger(
            f"signal:{signal.Signals(signum).name}", "preemption", time.time() + self.grace_period_s
        )

    def _detect(self) -> Any:
        http = _Http(self.probe_timeout_s)
        candidates = CLOUDS if self.cloud == "auto" else (self.cloud,)
        for name in candidates:
            provider = _PROVIDERS[name](self.metadata_url or DEFAULT_URLS[name], http)
            try:
                if provider.probe():
                    return name, provider
            except (OSError, ValueError) as exc:
                log.debug("no %s metadata server: %s", name, exc)
        return None, None

    def _poll_loop(self) -> None:
        name, provider = self._detect()
        if provider is None:
            log.info("no cloud metadata server answered; watching signals only")
            return
        self.detected_cloud = name
        log.info("watching %s preemption notices every %.1f s", name, self.poll_interval_s)
        while not self._halt.is_set():
            try:
                notice = provider.poll()
            except (OSError, ValueError) as exc:
                log.debug("%s metadata poll failed: %s", name, exc)
                notice = None
            fresh = notice is not None and (self._notice is None or notice.kind == "preemption")
            if (
                notice is not None
                and fresh
                and not (self._stop_flag and notice.kind == "preemption")
            ):
                log.warning(
                    "%s %s notice received (deadline %s)", name, notice.kind, notice.deadline_unix
                )
                deadline = notice.deadline_unix
                if name == "gcp" and deadline is not None:  # GCP gives no time: the flag may
                    deadline -= self.poll_interval_s  # have been up for one poll interval
                self.trigger(name, notice.kind, deadline)
            if self._halt.wait(self.poll_interval_s):
                return
