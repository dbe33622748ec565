"""A real Prometheus behind a proxy that fails every 5th scrape: the shipped rules, sped up 60×
(one evaluation per second for one per minute, four scrapes per evaluation as 15 s scrapes give
per minute), still count the full cost and show an observed share of 80 %; the rules before
them lost a fifth of the money.

The rules are rewritten only in their time constants: ``interval: 1m`` → ``1s``, the 59 s
lookback → 999 ms, the 1-day window (1,440 evaluations) → 59.999 s (60 evaluations), the 15-minute billing lag and
bridge → 15 s (15.5 s for the middle of the minute), and
``/ 60`` (minutes per hour) → ``/ 3600`` (seconds per hour), so ``gpuwise:cost_usd:1d`` reads
"dollars over the last minute".
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpuwise.monitor.exporter import Exporter
from gpuwise.monitor.fake import FakeGpuReader
from gpuwise.monitor.pricing import PriceBook
from tests.monitor.conftest import free_port, wait_for

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.skipif(PROMETHEUS is None, reason="needs the prometheus binary (Debian)"),
    pytest.mark.slow,
]
PRICE = 3600.0  # $/h per GPU: $1 per second, so the 60-evaluation window is worth $60 per GPU


def _speed_up(rules: str) -> str:
    for old, new in (
        ("    interval: 1m\n", "    interval: 1s\n"),
        ("[59s]", "[999ms]"),
        ("[86399s]", "[59999ms]"),
        (" / 60\n", " / 3600\n"),
        ("[15m30s]", "[15500ms]"),
        ("offset 15m30s", "offset 15500ms"),
        ("[15m]", "[15s]"),
    ):
        if old.startswith(("[15", "offset 15")) and "offset 15m30s" not in rules:
            continue  # the old rules have no billing lag
        assert old in rules, old
        rules = rules.replace(old, new)
    return rules


class _FlakyProxy:
    """Forwards /metrics to the exporter; every 5th request gets a 503 (a failed scrape)."""

    def __init__(self, upstream: str) -> None:
        self.count = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.count += 1
                if outer.count % 5 == 0:
                    body, code = b"upstream failed\n", 503
                else:
                    with urllib.request.urlopen(upstream + self.path, timeout=5) as r:
                        body, code = r.read(), 200
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _query(base: str, q: str) -> list[Any]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': q})}"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return list(json.load(r)["data"]["result"])
    except OSError:
        return []


@pytest.fixture
def prometheus_behind_flaky_proxy(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    exp = Exporter(
        FakeGpuReader.from_scenario("idle"),
        port=free_port(),
        interval_s=0.1,
        prices=PriceBook(price_usd_per_hour=PRICE, offers=()),
    )
    exp.start()
    proxy = _FlakyProxy(exp.url)
    yield_rules = {
        "new": _speed_up((REPO / "deploy/prometheus/gpuwise-rules.yml").read_text()),
        "old": _speed_up((REPO / "tests/monitor/fixtures/rules_instant_vector.yml").read_text()),
    }
    for name, text in yield_rules.items():
        (tmp_path / f"{name}.yml").write_text(text.replace("name: gpuwise-", f"name: {name}-"))
    # the old rules record the same names: give them their own prefix
    old = (tmp_path / "old.yml").read_text().replace("gpuwise:", "old:")
    (tmp_path / "old.yml").write_text(old)
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 250ms, scrape_timeout: 200ms, evaluation_interval: 1s}\n"
        "rule_files: [new.yml, old.yml]\n"
        "scrape_configs:\n"
        f"  - job_name: gpuwise\n    static_configs: [{{targets: ['{proxy.address}']}}]\n"
    )
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            str(PROMETHEUS),
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        yield f"http://127.0.0.1:{port}", tmp_path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
        log.close()
        proxy.close()
        exp.stop()


def test_every_fifth_scrape_failing_costs_nothing(
    prometheus_behind_flaky_proxy: tuple[str, Path],
) -> None:
    base, _ = prometheus_behind_flaky_proxy

    def full_window() -> bool:  # the window holds only time with data
        # billing runs 15.5 s (sped up from 15m30s) behind the clock
        first = _query(base, "min(timestamp(gpuwise_exporter_reads_total offset 90s))")
        return bool(first)

    wait_for(full_window, 170, "90 s of scrapes")
    time.sleep(2)  # past the evaluation that straddles the start
    truth = 2 * 60.0  # two GPUs at $1/s over 60 evaluations of 1 s
    cost = float(_query(base, "gpuwise:cost_usd:1d")[0]["value"][1])
    old_cost = float(_query(base, "old:cost_usd:1d")[0]["value"][1])
    share = float(_query(base, "gpuwise:observed_share:1d")[0]["value"][1])
    # measured here: $120.00 of $120 (the old rules: $96.00); ±1 evaluation of 60 is the
    # resolution (1.7 %) and a loaded machine delays scrapes, hence the 5 % bound
    assert abs(cost - truth) / truth < 0.05, (cost, truth)
    assert abs(share - 0.8) < 0.05, share
    assert old_cost < 0.9 * truth, old_cost  # the old rules lost the minutes of failed scrapes
    up = _query(base, "avg_over_time(up[59s])")
    assert abs(float(up[0]["value"][1]) - 0.8) < 0.05  # the proxy did fail a fifth
