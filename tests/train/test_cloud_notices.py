"""Cloud notices as the clouds serve them: the documented answers replayed over HTTP (with
their sources in data/metadata_answers.json), Azure events for other VMs of a scale set, GCP
maintenance events, AWS interruption kinds, a token that a container never gets (PUT hop limit
1), and a metadata server that comes up late."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpuwise.train import FakeMetadataServer, PreemptionWatcher
from gpuwise.train.preemption import _PROVIDERS, _Http, _parse_time
from tests.train.conftest import EXAMPLE, free_port

AWS_TTL = "X-aws-ec2-metadata-token-ttl-seconds"
ANSWERS = json.loads((Path(__file__).parent / "data" / "metadata_answers.json").read_text())[
    "answers"
]


def _wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


class _Replay:
    """A loopback HTTP server answering fixed bodies by path (query ignored)."""

    def __init__(self, routes: dict[str, tuple[int, str]]) -> None:
        routes = dict(routes)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def _answer(self) -> None:
                status, body = routes.get(self.path.split("?", 1)[0], (404, "Not Found"))
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = _answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("answer", ANSWERS, ids=lambda a: f"{a['cloud']}-{a['body'][:40]}")
def test_each_documented_answer_is_read_as_the_cloud_means_it(answer: dict[str, Any]) -> None:
    assert answer["source"].startswith("https://") and answer["read"]
    routes = {answer["path"]: (answer["status"], answer["body"])}
    routes["/latest/api/token"] = (200, "token")
    routes["/computeMetadata/v1/instance/preempted"] = routes.get(
        "/computeMetadata/v1/instance/preempted", (200, "FALSE")
    )
    if "vm_name" in answer:
        routes["/metadata/instance/compute/name"] = (200, answer["vm_name"])
    server = _Replay(routes)
    try:
        provider = _PROVIDERS[answer["cloud"]](server.url, _Http(5.0))
        before = time.time()
        notice = provider.poll()
    finally:
        server.close()
    expect = answer["expect"]
    if expect is None:
        assert notice is None
        return
    assert notice is not None
    assert (notice.kind, notice.action) == (expect["kind"], expect["action"])
    deadline = expect["deadline"]
    if deadline is None:
        assert notice.deadline_unix is None
    elif deadline.startswith("+"):
        assert notice.deadline_unix is not None
        assert notice.deadline_unix - before == pytest.approx(float(deadline[1:]), abs=5)
    else:
        assert notice.deadline_unix == _parse_time(deadline)


def test_the_fake_serves_the_documented_shapes() -> None:
    documented = {
        (a["cloud"], a["path"]): a["body"] for a in ANSWERS if a["expect"] and a["status"] == 200
    }
    with FakeMetadataServer() as md:
        md.preempt(notice_s=30)
        md.maintenance()
        md.rebalance()
        http = _Http(5.0)
        token = http.call("PUT", f"{md.url}/latest/api/token", {AWS_TTL: "60"})[1]
        headers = {
            "aws": {"X-aws-ec2-metadata-token": token},
            "gcp": {"Metadata-Flavor": "Google"},
            "azure": {"Metadata": "true"},
        }
        for (cloud, path), body in documented.items():
            query = "?api-version=2020-07-01" if cloud == "azure" else ""
            code, text = http.call("GET", f"{md.url}{path}{query}", headers[cloud])
            assert code == 200, (cloud, path)
            if body.startswith("{"):
                want, have = json.loads(body), json.loads(text)
                if cloud == "azure":
                    assert set(have) == set(want)
                    want, have = want["Events"][0], have["Events"][0]
                assert set(have) == set(want), (cloud, path)
            else:
                assert re.fullmatch(r"[A-Z_]+", text), (cloud, path, text)


@pytest.fixture
def md() -> Iterator[FakeMetadataServer]:
    with FakeMetadataServer(vm_name="gpu-node_3") as server:
        yield server


def _polled(md: FakeMetadataServer, cloud: str, times: int) -> Callable[[], bool]:
    start = md.requests[cloud]
    return lambda: md.requests[cloud] >= start + times


def test_an_azure_event_for_another_vm_is_ignored_one_for_this_vm_stops(
    md: FakeMetadataServer,
) -> None:
    with PreemptionWatcher(
        cloud="azure", metadata_url=md.url, poll_interval_s=0.05, signals=()
    ) as watcher:
        assert _wait_for(lambda: watcher.detected_cloud == "azure")
        md.preempt(notice_s=30, resources=["gpu-node_1", "gpu-node_2"])
        assert _wait_for(_polled(md, "azure", 4))  # read it several times ...
        assert not watcher.should_stop() and not watcher.save_requested()  # ... and ignored it
        md.preempt(notice_s=30, resources=["gpu-node_2", "GPU-NODE_3"])  # names this VM
        assert _wait_for(watcher.should_stop)
    assert watcher.notice is not None and watcher.notice.action == "Preempt"


@pytest.mark.parametrize(("event", "stops"), [("Terminate", True), ("Reboot", False)])
def test_azure_terminate_stops_and_reboot_asks_for_a_save(
    event: str, stops: bool, md: FakeMetadataServer
) -> None:
    with PreemptionWatcher(
        cloud="azure", metadata_url=md.url, poll_interval_s=0.05, signals=()
    ) as watcher:
        assert _wait_for(lambda: watcher.detected_cloud == "azure")
        md.preempt(notice_s=600, event=event)
        assert _wait_for(watcher.save_requested)
        assert _wait_for(_polled(md, "azure", 3))
        assert watcher.should_stop() is stops
    assert watcher.notice is not None and watcher.notice.action == event


@pytest.mark.parametrize(
    ("event", "stops"),
    [("TERMINATE_ON_HOST_MAINTENANCE", True), ("MIGRATE_ON_HOST_MAINTENANCE", False)],
)
def test_gcp_maintenance_that_stops_a_gpu_vm_is_a_notice(
    event: str, stops: bool, md: FakeMetadataServer
) -> None:
    with PreemptionWatcher(
        cloud="gcp", metadata_url=md.url, poll_interval_s=0.05, signals=()
    ) as watcher:
        assert _wait_for(lambda: watcher.detected_cloud == "gcp")
        md.maintenance(event)
        assert _wait_for(_polled(md, "gcp", 6))
        assert watcher.should_stop() is stops
    if stops:
        assert watcher.notice is not None and watcher.notice.action == event


@pytest.mark.parametrize("action", ["terminate", "stop", "hibernate"])
def test_aws_interruption_kinds_are_told_apart(action: str, md: FakeMetadataServer) -> None:
    with PreemptionWatcher(
        cloud="aws", metadata_url=md.url, poll_interval_s=0.05, signals=()
    ) as watcher:
        md.preempt(notice_s=120, action=action)
        assert _wait_for(watcher.should_stop)
    assert watcher.notice is not None and watcher.notice.action == action


@pytest.mark.parametrize("imdsv1", [True, False])
def test_a_token_that_never_arrives_falls_back_to_imdsv1_or_says_the_fix(
    imdsv1: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """In a container behind a PUT hop limit of 1 the token's answer never arrives."""
    caplog.set_level(logging.WARNING, logger="gpuwise.train.preemption")
    with FakeMetadataServer(imdsv1=imdsv1, token_delay_s=3.0) as md:
        watcher = PreemptionWatcher(
            cloud="aws", metadata_url=md.url, poll_interval_s=0.05, signals=(), probe_timeout_s=0.3
        )
        with watcher:
            md.preempt(notice_s=120)
            if imdsv1:
                assert _wait_for(watcher.should_stop)
            else:
                assert _wait_for(lambda: "hop-limit 2" in caplog.text)
                assert not watcher.should_stop()
    assert "--http-put-response-hop-limit 2" in caplog.text


@pytest.mark.slow
def test_a_metadata_server_that_comes_up_5_s_late_is_still_watched(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="gpuwise.train.preemption")
    port = free_port()
    watcher = PreemptionWatcher(
        cloud="auto", metadata_url=f"http://127.0.0.1:{port}", poll_interval_s=0.05, signals=()
    ).start()
    try:
        assert _wait_for(lambda: "no cloud metadata server answered" in caplog.text)
        time.sleep(5.0)  # the late server: nothing listens on the port yet
        assert watcher.detected_cloud is None
        with FakeMetadataServer(port=port) as md:
            assert _wait_for(lambda: watcher.detected_cloud is not None, timeout_s=90)
            md.preempt(notice_s=30)
            assert _wait_for(watcher.should_stop)
    finally:
        watcher.stop()
    assert "answers now" in caplog.text


@pytest.mark.slow
def test_training_goes_on_through_another_vms_azure_eviction_and_stops_on_its_own(
    tmp_path: Path,
) -> None:
    log = tmp_path / "out.txt"
    with FakeMetadataServer(vm_name="trainer_0") as md:
        env = {
            **os.environ,
            "GPUWISE_CLOUD": "azure",
            "GPUWISE_METADATA_URL": md.url,
            "GPUWISE_POLL_INTERVAL_S": "0.2",
        }
        cmd = [
            *(sys.executable, "-m", "gpuwise", "run", "--restart-delay", "0s", "--"),
            *(sys.executable, str(EXAMPLE), "--steps", "100000", "--hidden", "32"),
            *("--step-delay", "0.02", "--checkpoint-dir", str(tmp_path / "ck")),
        ]
        with open(log, "w") as out:
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:

            def steps() -> int:
                found = re.findall(r"^loss (\d+) ", log.read_text(), re.M)
                return int(found[-1]) if found else 0

            assert _wait_for(lambda: steps() > 0, timeout_s=240), log.read_text()[-3000:]
            md.preempt(notice_s=30, resources=["trainer_1"])  # another VM of the scale set
            assert _wait_for(_polled(md, "azure", 5))
            reached = steps()
            assert _wait_for(lambda: steps() > reached + 20)
            assert proc.poll() is None  # still training
            md.preempt(notice_s=30, resources=["trainer_0", "trainer_1"])
            code = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = log.read_text()
    assert code == 75, text[-3000:]
    assert "azure preemption notice is still up (Preempt;" in text
    committed = sorted((tmp_path / "ck").glob("step-*/COMMIT.json"))
    assert committed, text[-2000:]


@pytest.mark.slow
def test_a_rehearsal_withdrawn_once_read_restarts_and_finishes(tmp_path: Path) -> None:
    """``clear_after_reads=1``: the workers see the notice, save and stop; the launcher then
    finds it withdrawn (the replacement machine) and restarts, whatever the save took."""
    log = tmp_path / "out.txt"
    with FakeMetadataServer() as md:
        env = {
            **os.environ,
            "GPUWISE_CLOUD": "gcp",
            "GPUWISE_METADATA_URL": md.url,
            "GPUWISE_POLL_INTERVAL_S": "0.2",
        }
        cmd = [
            *(sys.executable, "-m", "gpuwise", "run", "--restart-delay", "0s", "--json", "--"),
            *(sys.executable, str(EXAMPLE), "--steps", "300", "--hidden", "32"),
            *("--step-delay", "0.02", "--checkpoint-dir", str(tmp_path / "ck")),
        ]
        with open(log, "w") as err:
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
            try:
                assert _wait_for(lambda: "loss 5 " in log.read_text(), timeout_s=240)
                md.preempt(notice_s=30, clear_after_reads=1)
                out, _ = proc.communicate(timeout=300)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    doc = json.loads(out)
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert [a["outcome"] for a in doc["attempts"]] == ["preempted", "done"]
    assert md.preempt_at is None  # withdrawn after the one read
