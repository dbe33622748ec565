"""PreemptionWatcher against the fake metadata server over real HTTP, and signals."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request

import pytest

from gpuwise.errors import InputError
from gpuwise.train import FakeMetadataServer, PreemptionWatcher


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(predicate, timeout_s: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def md():  # type: ignore[no-untyped-def]
    with FakeMetadataServer() as server:
        yield server


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_each_cloud_protocol_raises_a_preemption_notice(cloud: str, md: FakeMetadataServer) -> None:
    watcher = PreemptionWatcher(cloud=cloud, metadata_url=md.url, poll_interval_s=0.05, signals=())
    with watcher:
        assert _wait_for(lambda: watcher.detected_cloud == cloud)
        time.sleep(0.2)
        assert not watcher.should_stop() and not watcher.save_requested()
        md.preempt(notice_s=30)
        assert _wait_for(watcher.should_stop)
    notice = watcher.notice
    assert notice is not None and notice.source == cloud and notice.kind == "preemption"
    assert watcher.save_requested()
    assert notice.deadline_unix is not None
    assert 20 < notice.deadline_unix - notice.received_unix <= 31  # the announced ~30 s window
    assert md.requests[cloud] >= 3


def test_auto_detects_the_first_cloud_that_answers(md: FakeMetadataServer) -> None:
    with PreemptionWatcher(metadata_url=md.url, poll_interval_s=0.05, signals=()) as watcher:
        assert _wait_for(lambda: watcher.detected_cloud is not None)
    assert watcher.detected_cloud == "aws"  # the fake speaks all three; AWS is probed first


def test_aws_rebalance_asks_for_a_save_but_not_a_stop(md: FakeMetadataServer) -> None:
    with PreemptionWatcher(
        cloud="aws", metadata_url=md.url, poll_interval_s=0.05, signals=()
    ) as watcher:
        md.rebalance()
        assert _wait_for(watcher.save_requested)
        assert not watcher.should_stop()
        watcher.mark_saved()
        time.sleep(0.2)
        assert not watcher.save_requested()  # asked once
        md.preempt(notice_s=120)
        assert _wait_for(watcher.should_stop)
        assert watcher.save_requested()  # the final save is asked for again


@pytest.mark.parametrize(
    ("method", "path", "headers", "code"),
    [
        ("GET", "/latest/meta-data/spot/instance-action", {}, 401),  # IMDSv2: no token
        ("PUT", "/latest/api/token", {}, 400),  # token without TTL
        ("GET", "/computeMetadata/v1/instance/preempted", {}, 403),  # no Metadata-Flavor
        ("GET", "/metadata/scheduledevents?api-version=2020-07-01", {}, 400),  # no Metadata: true
        ("GET", "/computeMetadata/v1/instance/preempted", {"Metadata-Flavor": "Google"}, 200),
    ],
)
def test_fake_server_enforces_each_protocols_headers(
    method: str, path: str, headers: dict[str, str], code: int, md: FakeMetadataServer
) -> None:
    req = urllib.request.Request(md.url + path, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            got = resp.status
    except urllib.error.HTTPError as exc:
        got = exc.code
    assert got == code


def test_gcp_wait_for_change_hangs_until_the_notice(md: FakeMetadataServer) -> None:
    req = urllib.request.Request(
        md.url + "/computeMetadata/v1/instance/preempted?wait_for_change=true",
        headers={"Metadata-Flavor": "Google"},
    )
    t0 = time.monotonic()
    import threading

    threading.Timer(0.3, md.preempt).start()
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.read() == b"TRUE"
    assert time.monotonic() - t0 >= 0.25


def test_azure_document_lists_the_preempt_event(md: FakeMetadataServer) -> None:
    md.preempt(notice_s=30)
    req = urllib.request.Request(
        md.url + "/metadata/scheduledevents?api-version=2020-07-01", headers={"Metadata": "true"}
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        doc = json.loads(resp.read())
    (event,) = doc["Events"]
    assert event["EventType"] == "Preempt" and event["NotBefore"]


def test_control_endpoint_triggers_from_another_process(md: FakeMetadataServer) -> None:
    urllib.request.urlopen(
        urllib.request.Request(md.url + "/_gpuwise/preempt?notice_s=5", method="POST"), timeout=5
    )
    assert md.preempt_at is not None
    urllib.request.urlopen(
        urllib.request.Request(md.url + "/_gpuwise/clear", method="POST"), timeout=5
    )
    assert md.preempt_at is None


def test_start_never_waits_for_a_silent_metadata_server() -> None:
    """A metadata server that accepts the connection and never answers: ``start`` returns while
    the probe is still in flight (behaviour, not a timing: the probe's timeout is long)."""
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.settimeout(60)
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        watcher = PreemptionWatcher(
            cloud="aws", metadata_url=url, signals=(), probe_timeout_s=5
        ).start()
        conn, _ = server.accept()  # the probe reached the server after start() had returned ...
        try:
            assert (
                watcher.detected_cloud is None and not watcher.should_stop()
            )  # ... and is still waiting
            assert watcher._thread is not None and watcher._thread.is_alive()
        finally:
            conn.close()
    watcher.stop()
    assert watcher.detected_cloud is None and not watcher.should_stop()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1, signal.SIGINT])
def test_signals_only_set_the_flag(sig: int) -> None:
    before = signal.getsignal(sig)
    with PreemptionWatcher(cloud="none", grace_period_s=30) as watcher:
        os.kill(os.getpid(), sig)
        assert _wait_for(watcher.should_stop, 2)
        notice = watcher.notice
        assert notice is not None and notice.source == f"signal:{signal.Signals(sig).name}"
        assert notice.seconds_left is not None and 25 < notice.seconds_left <= 30
    assert signal.getsignal(sig) == before  # handlers restored


def test_unknown_cloud_is_an_input_error() -> None:
    with pytest.raises(InputError, match="aws, gcp or azure"):
        PreemptionWatcher(cloud="oracle")


def test_a_second_ctrl_c_interrupts_at_once() -> None:
    with PreemptionWatcher(cloud="none") as watcher:
        os.kill(os.getpid(), signal.SIGINT)
        assert _wait_for(watcher.should_stop, 2)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)


def test_public_names_resolve() -> None:
    import gpuwise
    import gpuwise.train as gt

    for name in gt.__all__:
        assert getattr(gt, name) is not None
    assert gpuwise.resilient is gt.resilient and gpuwise.Checkpointer is gt.Checkpointer


def test_fake_server_command_line_rehearsal() -> None:
    """The documented rehearsal: ``python -m gpuwise.train.fake_metadata --port P --preempt-after S``."""
    import subprocess
    import sys

    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuwise.train.fake_metadata",
            "--port",
            str(port),
            "--preempt-after",
            "0.2",
            "--notice",
            "30",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert f"GPUWISE_METADATA_URL=http://127.0.0.1:{port}" in proc.stdout.readline()
        assert proc.stdout.readline().strip() == "preemption announced"
        watcher = PreemptionWatcher(
            cloud="gcp", metadata_url=f"http://127.0.0.1:{port}", poll_interval_s=0.05, signals=()
        )
        with watcher:
            assert _wait_for(watcher.should_stop)
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
