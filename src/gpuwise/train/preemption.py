"""``PreemptionWatcher``: notice that this machine is about to go, from signals and cloud notices.

Sources and windows (each cloud's documentation, cited per line below):

- signals SIGTERM, SIGINT, SIGUSR1 (Kubernetes sends SIGTERM, then SIGKILL after
  ``terminationGracePeriodSeconds``, default 30 s; SLURM ``--signal=USR1@N``; torchrun forwards
  SIGTERM and kills 30 s later, pytorch#119856). The handler only sets a flag.
- AWS EC2 Spot: IMDSv2 token (``PUT /latest/api/token``), then ``spot/instance-action`` (2 min
  notice; AWS asks to poll every 5 s; ``action`` is ``terminate``, ``stop`` or ``hibernate``, kept
  in :attr:`Notice.action`) and ``events/recommendations/rebalance`` (early warning). Inside a
  container the token's answer is dropped when the instance's PUT hop limit is 1 (AWS's default
  outside EKS): without a token gpuwise reads IMDSv1 where the instance allows it, else says
  the documented fix once (a hop limit of 2).
- GCP: ``instance/preempted`` (Spot/preemptible, 30 s window) and ``instance/maintenance-event``
  (``TERMINATE_ON_HOST_MAINTENANCE``: GPU VMs cannot live-migrate and are stopped; GCP gives
  GPU VMs 1 h, other VMs 60 s; ``MIGRATE_ON_HOST_MAINTENANCE`` is ignored), ``Metadata-Flavor:
  Google``.
- Azure: Scheduled Events with ``Metadata: true``: ``Preempt`` (≥ 30 s) and ``Terminate``
  (scale sets, 5–15 min) stop training; ``Reboot`` and ``Redeploy`` ask for a save. Azure sends
  every VM of an availability set or scale-set placement group the events of all of them: an
  event counts only when its ``Resources`` name this VM (``compute/name`` from the instance
  metadata).

A daemon thread finds the cloud, then polls it and sets the flag. Each probe has a short timeout,
so start-up never waits on a metadata server; one that does not answer is asked again with
backoff (timeouts and pauses doubling up to :data:`PROBE_TIMEOUT_MAX_S` and
:data:`PROBE_RETRY_MAX_S`) for the whole run, after a WARNING that notices are not watched yet: a
metadata service that comes up late (a container network, a busy IMDS) is still watched. Environment:
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
GCP_MAINTENANCE_NOTICE_S = 60.0
"""GCP ``TERMINATE_ON_HOST_MAINTENANCE``: 60 s notice for VMs without GPUs, 1 h with GPUs
(cloud.google.com/compute/docs/gpus/gpu-host-maintenance); the shorter one is assumed."""
AZURE_API_VERSION = "2020-07-01"  # Scheduled Events
AZURE_IMDS_API_VERSION = "2021-02-01"  # instance metadata (compute/name)
AZURE_STOP_EVENTS = ("Preempt", "Terminate")
AZURE_SAVE_EVENTS = ("Reboot", "Redeploy")
PROBE_TIMEOUT_MAX_S = 2.0
PROBE_RETRY_FIRST_S = 1.0
PROBE_RETRY_MAX_S = 60.0
AWS_HOP_LIMIT_FIX = (
    "inside a container the instance's metadata PUT hop limit must be 2: aws ec2 "
    "modify-instance-metadata-options --instance-id <id> --http-put-response-hop-limit 2 "
    "--http-endpoint enabled (or a launch template's MetadataOptions HttpPutResponseHopLimit: 2)"
)


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
    action: str | None = None
    """What the cloud says will happen: AWS ``terminate``/``stop``/``hibernate``; Azure
    ``Preempt``/``Terminate``/``Reboot``/``Redeploy``; GCP ``preempted`` or the maintenance
    event. None for signals."""

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
        self.v1 = False  # no token reachable (hop limit): IMDSv1, where the instance allows it

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
        try:
            self.token = self._token()
        except OSError as exc:  # in a container with hop limit 1 the token's answer is dropped
            code, _ = self.http.call("GET", f"{self.base}/latest/meta-data/instance-id", {})
            if code == 200:
                self.v1 = True
                log.warning(
                    "no IMDSv2 token (%s): reading AWS notices through IMDSv1; %s",
                    exc,
                    AWS_HOP_LIMIT_FIX,
                )
                return True
            if code == 401:  # AWS, IMDSv2 required, token unreachable
                log.warning(
                    "the AWS metadata service answers but gives this process no IMDSv2 token "
                    "(%s): AWS notices are not watched; %s",
                    exc,
                    AWS_HOP_LIMIT_FIX,
                )
            raise
        return True

    def _get(self, path: str) -> tuple[int, str]:
        if self.v1:
            return self.http.call("GET", f"{self.base}{path}", {})
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
            action = str(data.get("action", "")) or None  # terminate, stop or hibernate
            deadline = _parse_time(str(data.get("time", "")))
            return Notice("aws", "preemption", time.time(), deadline, action)
        code, body = self._get("/latest/meta-data/events/recommendations/rebalance")
        if code == 200:
            return Notice("aws", "rebalance", time.time(), None, "rebalance")
        return None


class _Gcp:
    def __init__(self, base: str, http: _Http) -> None:
        self.base, self.http = base.rstrip("/"), http

    def _get(self, key: str = "preempted") -> tuple[int, str]:
        return self.http.call(
            "GET",
            f"{self.base}/computeMetadata/v1/instance/{key}",
            {"Metadata-Flavor": "Google"},
        )

    def probe(self) -> bool:
        code, body = self._get()
        return code == 200 and body.strip().upper() in ("TRUE", "FALSE")

    def poll(self) -> Notice | None:
        code, body = self._get()
        now = time.time()
        if code == 200 and body.strip().upper() == "TRUE":
            return Notice("gcp", "preemption", now, now + GCP_WINDOW_S, "preempted")
        code, body = self._get("maintenance-event")
        event = body.strip().upper() if code == 200 else ""
        if event.startswith("TERMINATE"):  # GPU VMs cannot live-migrate: they are stopped
            return Notice("gcp", "preemption", now, now + GCP_MAINTENANCE_NOTICE_S, event)
        return None


class _Azure:
    def __init__(self, base: str, http: _Http) -> None:
        self.base, self.http = base.rstrip("/"), http
        self.vm_name: str | None = None
        self._warned = False

    def _get(self) -> tuple[int, str]:
        return self.http.call(
            "GET",
            f"{self.base}/metadata/scheduledevents?api-version={AZURE_API_VERSION}",
            {"Metadata": "true"},
        )

    def _name(self) -> str | None:
        """This VM's name as Scheduled Events' ``Resources`` list it (IMDS ``compute/name``)."""
        with contextlib.suppress(OSError, ValueError):
            code, body = self.http.call(
                "GET",
                f"{self.base}/metadata/instance/compute/name"
                f"?api-version={AZURE_IMDS_API_VERSION}&format=text",
                {"Metadata": "true"},
            )
            if code == 200 and body.strip():
                return body.strip()
        return None

    def probe(self) -> bool:
        code, body = self._get()
        if not (code == 200 and "Events" in json.loads(body or "{}")):
            return False
        self.vm_name = self._name()
        return True

    def _ours(self, event: dict[str, Any]) -> bool:
        resources = [str(r).lower() for r in event.get("Resources") or []]
        if self.vm_name is None:
            self.vm_name = self._name()
        if self.vm_name is None:
            if not self._warned:
                self._warned = True
                log.warning(
                    "Azure: this VM's name is unknown (instance metadata compute/name did not "
                    "answer): every scheduled event is taken as this VM's"
                )
            return True
        return not resources or self.vm_name.lower() in resources

    def poll(self) -> Notice | None:
        code, body = self._get()
        if code != 200:
            return None
        found: Notice | None = None
        for event in json.loads(body or "{}").get("Events", []):
            kind = event.get("EventType")
            if kind not in AZURE_STOP_EVENTS + AZURE_SAVE_EVENTS or not self._ours(event):
                continue  # another VM's event (same availability set or scale set), or Freeze
            deadline = _parse_time(str(event.get("NotBefore", "")))
            if kind in AZURE_STOP_EVENTS:
                return Notice("azure", "preemption", time.time(), deadline, kind)
            found = found or Notice("azure", "rebalance", time.time(), deadline, kind)
        return found


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
        action: str | None = None,
    ) -> None:
        """Raise a notice by hand (used by the signal handler and the poller)."""
        notice = Notice(source, kind, time.time(), deadline_unix, action)
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

    def _detect(self, timeout_s: float | None = None) -> Any:
        http = _Http(timeout_s or self.probe_timeout_s)
        candidates = CLOUDS if self.cloud == "auto" else (self.cloud,)
        for name in candidates:
            provider = _PROVIDERS[name](self.metadata_url or DEFAULT_URLS[name], http)
            try:
                if provider.probe():
                    return name, provider
            except (OSError, ValueError) as exc:
                log.debug("no %s metadata server: %s", name, exc)
        return None, None

    def _find_cloud(self) -> Any:
        """Probe until a metadata server answers (or the watcher stops: ``(None, None)``),
        with backoff; a WARNING once when none answers at first (module docstring)."""
        timeout, pause, warned = self.probe_timeout_s, PROBE_RETRY_FIRST_S, False
        while True:
            name, provider = self._detect(timeout)
            if provider is not None:
                if warned:
                    log.warning("the %s metadata server answers now: watching its notices", name)
                return name, provider
            if not warned:
                warned = True
                where = self.metadata_url or (
                    "the default addresses" if self.cloud == "auto" else DEFAULT_URLS[self.cloud]
                )
                log.warning(
                    "no cloud metadata server answered (%s at %s): cloud notices are not watched "
                    "yet, only signals; asking again with backoff (up to every %.0f s) for the "
                    "whole run (GPUWISE_CLOUD=none turns this off)",
                    self.cloud,
                    where,
                    PROBE_RETRY_MAX_S,
                )
            if self._halt.wait(pause):
                return None, None
            pause = min(pause * 2, PROBE_RETRY_MAX_S)
            timeout = min(timeout * 2, max(PROBE_TIMEOUT_MAX_S, self.probe_timeout_s))

    def _poll_loop(self) -> None:
        name, provider = self._find_cloud()
        if provider is None:
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
                    "%s %s notice received (%s, deadline %s)",
                    name,
                    notice.kind,
                    notice.action,
                    notice.deadline_unix,
                )
                deadline = notice.deadline_unix
                if name == "gcp" and deadline is not None:  # GCP gives no time: the flag may
                    deadline -= self.poll_interval_s  # have been up for one poll interval
                self.trigger(name, notice.kind, deadline, notice.action)
            if self._halt.wait(self.poll_interval_s):
                return
