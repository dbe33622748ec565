"""Per-node prices: the node's instance type, region and capacity type from the Kubernetes API or
the cloud's metadata service (real HTTP servers on loopback play both), priced from the catalog;
an unknown instance is labelled, never priced as the cheapest GPU."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpuwise.catalog import Offer
from gpuwise.monitor.exporter import GpuCollector
from gpuwise.monitor.fake import FakeGpuReader
from gpuwise.monitor.node import NodeFacts, detect_node, facts_from_node, read_cloud_metadata
from gpuwise.monitor.pricing import PriceBook


def _offer(cloud: str, region: str, it: str, gpus: int, od: float, spot: float | None) -> Offer:
    return Offer(
        cloud=cloud,
        region=region,
        zone=None,
        instance_type=it,
        gpu="H100",
        gpu_count=gpus,
        gpu_memory_gib=80,
        vcpus=192,
        memory_gib=2048,
        on_demand_usd_per_hour=od,
        spot_usd_per_hour=spot,
        arch="x86_64",
        source="test",
        as_of="2026-11",
    )


# tiny catalog: the p5 in two regions (spot in one), an A3, and a cheap H100 elsewhere
OFFERS = (
    _offer("aws", "us-east-1", "p5.48xlarge", 8, 55.04, 24.0),  # $6.88/GPU-h, spot $3.00
    _offer("aws", "eu-west-1", "p5.48xlarge", 8, 60.0, None),  # $7.50/GPU-h
    _offer("gcp", "us-central1", "a3-highgpu-8g", 8, 88.25, None),  # $11.03/GPU-h
    _offer("nebius", "eu-north1", "gpu-h100-sxm", 1, 2.95, None),  # the cheapest H100
)


class _Server:
    """A loopback HTTP server answering from a {(method, path): (status, headers needed, body)}."""

    def __init__(self, routes: dict[tuple[str, str], tuple[int, dict[str, str], str]]) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                outer.requests.append((self.command, self.path, dict(self.headers)))
                status, need, body = routes.get((self.command, self.path), (404, {}, "no"))
                if any(self.headers.get(k) != v for k, v in need.items()):
                    status, body = 401, "missing header"
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[_Server] = []

    def start(routes: dict[tuple[str, str], tuple[int, dict[str, str], str]]) -> _Server:
        s = _Server(routes)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


NODE = {
    "metadata": {
        "name": "ip-10-0-0-5",
        "labels": {
            "node.kubernetes.io/instance-type": "p5.48xlarge",
            "topology.kubernetes.io/region": "us-east-1",
            "eks.amazonaws.com/capacityType": "SPOT",
        },
    },
    "spec": {"providerID": "aws:///us-east-1a/i-0123"},
}


def test_node_labels_from_the_api_server_price_the_gpus(serve: Any) -> None:
    """An EKS spot p5 node: the exporter reads its Node (bearer token sent), and its H100s cost
    the p5's spot price per GPU, not the catalog's cheapest H100 ($2.95)."""
    api = serve(
        {
            ("GET", "/api/v1/nodes/ip-10-0-0-5"): (
                200,
                {"Authorization": "Bearer t0k"},
                json.dumps(NODE),
            )
        }
    )
    from gpuwise.monitor.node import read_kubernetes_node

    facts = read_kubernetes_node("ip-10-0-0-5", api_url=api.url, token="t0k")
    assert facts == NodeFacts("p5.48xlarge", "us-east-1", "spot", "aws", "kubernetes node labels")
    price = PriceBook(node=facts, offers=OFFERS, fallback_cheapest=False).price("H100")
    assert price.usd_per_gpu_hour == pytest.approx(3.0)
    assert (price.instance_type, price.region, price.capacity_type) == (
        "p5.48xlarge",
        "us-east-1",
        "spot",
    )


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        # GKE spot A3: GKE's own labels
        (
            {
                "node.kubernetes.io/instance-type": "a3-highgpu-8g",
                "topology.kubernetes.io/region": "us-central1",
                "cloud.google.com/gke-spot": "true",
            },
            ("a3-highgpu-8g", "us-central1", "spot"),
        ),
        # Karpenter on-demand
        (
            {
                "node.kubernetes.io/instance-type": "p5.48xlarge",
                "karpenter.sh/capacity-type": "on-demand",
            },
            ("p5.48xlarge", None, "on-demand"),
        ),
        # AKS regular priority; the old beta instance-type label
        (
            {
                "beta.kubernetes.io/instance-type": "Standard_ND96isr_H100_v5",
                "kubernetes.azure.com/scalesetpriority": "regular",
            },
            ("Standard_ND96isr_H100_v5", None, "on-demand"),
        ),
        # nothing known
        ({}, (None, None, None)),
    ],
)
def test_capacity_and_instance_labels_of_each_cloud(
    labels: dict[str, str], expected: tuple[str | None, ...]
) -> None:
    f = facts_from_node({"metadata": {"labels": labels}})
    assert (f.instance_type, f.region, f.capacity_type) == expected


def test_region_the_catalog_lacks_uses_another_region_and_says_so() -> None:
    facts = NodeFacts("p5.48xlarge", "ap-south-1", "on-demand", "aws", "settings")
    price = PriceBook(node=facts, offers=OFFERS, fallback_cheapest=False).price("H100")
    assert price.usd_per_gpu_hour == pytest.approx(6.88)
    assert "region ap-south-1 not in the catalog" in price.source


def test_unknown_instance_is_labelled_and_never_priced_as_the_cheapest_gpu() -> None:
    reader = FakeGpuReader.from_scenario("idle")
    for facts in (NodeFacts("p9.mystery", "us-east-1", None, "aws", "aws metadata"), None):
        book = PriceBook(node=facts, offers=OFFERS, fallback_cheapest=False)
        collector = GpuCollector(book)
        collector.update(reader.read())
        fams = {f.name: f for f in collector.collect()}
        assert not fams["gpuwise_gpu_cost_usd_per_hour"].samples  # no price rather than $2.95
        info = fams["gpuwise_node_price_info"].samples
        assert info and all(s.labels["price_source"].startswith("unknown") for s in info)
    # an explicit --instance-type the catalog lacks is a user error, as before
    from gpuwise.errors import InputError

    with pytest.raises(InputError):
        PriceBook(instance_type="p9.mystery", offers=OFFERS).price("H100")


def test_cloud_metadata_services_on_loopback(serve: Any) -> None:
    """AWS IMDSv2 (token first, then every read carries it), GCP (Metadata-Flavor header) and
    Azure IMDS (Metadata: true), each played by a real HTTP server."""
    tok = {"X-aws-ec2-metadata-token": "abc"}
    aws = serve(
        {
            ("PUT", "/latest/api/token"): (
                200,
                {"X-aws-ec2-metadata-token-ttl-seconds": "60"},
                "abc",
            ),
            ("GET", "/latest/meta-data/instance-type"): (200, tok, "p5.48xlarge"),
            ("GET", "/latest/meta-data/placement/region"): (200, tok, "us-east-1"),
            ("GET", "/latest/meta-data/instance-life-cycle"): (200, tok, "on-demand"),
        }
    )
    assert read_cloud_metadata(aws.url, timeout_s=2) == NodeFacts(
        "p5.48xlarge", "us-east-1", "on-demand", "aws", "aws metadata"
    )
    g = {"Metadata-Flavor": "Google"}
    base = "/computeMetadata/v1/instance"
    gcp = serve(
        {
            ("GET", f"{base}/machine-type"): (200, g, "projects/1/machineTypes/a3-highgpu-8g"),
            ("GET", f"{base}/zone"): (200, g, "projects/1/zones/us-central1-a"),
            ("GET", f"{base}/scheduling/preemptible"): (200, g, "TRUE"),
        }
    )
    assert read_cloud_metadata(gcp.url, timeout_s=2) == NodeFacts(
        "a3-highgpu-8g", "us-central1", "spot", "gcp", "gcp metadata"
    )
    body = json.dumps(
        {"vmSize": "Standard_NC24ads_A100_v4", "location": "eastus", "priority": "Spot"}
    )
    az = serve(
        {
            ("GET", "/metadata/instance/compute?api-version=2021-02-01"): (
                200,
                {"Metadata": "true"},
                body,
            )
        }
    )
    assert read_cloud_metadata(az.url, timeout_s=2) == NodeFacts(
        "Standard_NC24ads_A100_v4", "eastus", "spot", "azure", "azure metadata"
    )


def test_a_metadata_service_that_never_answers_times_out() -> None:
    """A listening socket that accepts and never replies: detection gives up after its timeout
    and the exporter goes on unpriced (nothing hangs)."""
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        t0 = time.monotonic()
        assert read_cloud_metadata(url, timeout_s=0.2) is None
        assert time.monotonic() - t0 < 5


def test_settings_win_and_off_fetches_nothing(serve: Any) -> None:
    api = serve({("GET", "/api/v1/nodes/n1"): (200, {}, json.dumps(NODE))})
    env = {"NODE_NAME": "n1", "GPUWISE_INSTANCE_TYPE": "a3-highgpu-8g"}
    assert detect_node("auto", env=env, api_url=api.url).instance_type == "a3-highgpu-8g"
    assert detect_node("off", env={"NODE_NAME": "n1"}, api_url=api.url).instance_type is None
    assert not api.requests  # neither call reached the API server
    facts = detect_node(
        "kubernetes", env={"NODE_NAME": "n1", "GPUWISE_CAPACITY_TYPE": "on-demand"}, api_url=api.url
    )
    assert (facts.instance_type, facts.capacity_type) == ("p5.48xlarge", "on-demand")


def test_an_ipv6_api_server_address_is_bracketed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """KUBERNETES_SERVICE_HOST=fd00::1 (an IPv6 cluster) makes https://[fd00::1]:443; the URL used
    to lack the brackets, and the failure's hint blamed RBAC. A connection failure now points at
    the address; a 403 still at RBAC."""
    import urllib.error

    from gpuwise.monitor import node as node_mod

    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setattr(node_mod, "SERVICE_ACCOUNT", Path("/nonexistent"))
    urls: list[str] = []

    def refuse(url: str, headers: Any, **kw: Any) -> str:
        urls.append(url)
        raise urllib.error.URLError("connection refused")

    monkeypatch.setattr(node_mod, "_get", refuse)
    assert node_mod.read_kubernetes_node("n1") is None
    assert urls == ["https://[fd00::1]:443/api/v1/nodes/n1"]
    assert "KUBERNETES_SERVICE_HOST" in caplog.text and "rbac" not in caplog.text.lower()
