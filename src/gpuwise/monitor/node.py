"""What machine the exporter runs on: instance type, region and capacity type, for its prices.

Sources, first hit wins:

1. explicit settings: ``--instance-type`` / ``GPUWISE_INSTANCE_TYPE``, ``GPUWISE_REGION``,
   ``GPUWISE_CAPACITY_TYPE`` (``on-demand`` or ``spot``), ``GPUWISE_CLOUD``;
2. ``kubernetes``: the exporter's own Node object from the API server (``NODE_NAME`` from the
   downward API; the downward API itself cannot read node labels), through the pod's service
   account (``get`` on ``nodes``): the well-known labels ``node.kubernetes.io/instance-type`` and
   ``topology.kubernetes.io/region``, and the capacity-type labels of EKS, Karpenter, GKE and AKS;
3. ``metadata``: the cloud's instance metadata service (AWS IMDSv2, GCP, Azure IMDS).

Nothing is fetched unless asked (``--node-info``); every request has a timeout; a source that
does not answer is skipped. Facts not found stay None, and the price is then unknown: gpuwise
never guesses a machine's price from the cheapest offer of its GPU model.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from gpuwise.errors import InputError

log = logging.getLogger(__name__)

NodeInfoMode = Literal["off", "kubernetes", "metadata", "auto"]
NODE_INFO_MODES: tuple[str, ...] = ("off", "kubernetes", "metadata", "auto")
CapacityType = Literal["on-demand", "spot", "reserved"]
CAPACITY_TYPES: tuple[str, ...] = ("on-demand", "spot", "reserved")
METADATA_URL = "http://169.254.169.254"
GCP_METADATA_URL = "http://metadata.google.internal"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TIMEOUT_S = 1.0

INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
REGION_LABELS = ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")
# label → {value: capacity type}; values compared lower-case
CAPACITY_LABELS: dict[str, dict[str, CapacityType]] = {
    "eks.amazonaws.com/capacityType": {"spot": "spot", "on_demand": "on-demand"},
    "karpenter.sh/capacity-type": {"spot": "spot", "on-demand": "on-demand"},
    "cloud.google.com/gke-spot": {"true": "spot"},
    "cloud.google.com/gke-preemptible": {"true": "spot"},
    "kubernetes.azure.com/scalesetpriority": {"spot": "spot", "regular": "on-demand"},
}
PROVIDERS = {"aws": "aws", "gce": "gcp", "azure": "azure"}


@dataclass(frozen=True)
class NodeFacts:
    """What is known about this machine for pricing."""

    instance_type: str | None = None
    """Cloud instance type, e.g. ``p5.48xlarge`` or ``a3-highgpu-8g``."""
    region: str | None = None
    """Cloud region, e.g. ``us-east-1``."""
    capacity_type: CapacityType | None = None
    """``on-demand``, ``spot`` (preemptible) or ``reserved`` (committed use, capacity blocks)."""
    cloud: str | None = None
    """gpuwise's cloud name (aws, gcp, azure), where known."""
    source: str = "none"
    """Where the facts came from: settings, kubernetes node labels, aws/gcp/azure metadata."""


def parse_capacity_type(raw: str | None, what: str) -> CapacityType | None:
    if raw in (None, ""):
        return None
    value = raw.strip().lower().replace("_", "-")
    if value in ("spot", "preemptible"):
        return "spot"
    if value in ("on-demand", "ondemand", "regular", "standard"):
        return "on-demand"
    if value in ("reserved", "committed", "capacity-block"):
        return "reserved"
    raise InputError(
        f"cannot read {what} {raw!r} as a capacity type",
        hint="give on-demand, spot or reserved",
    )


def facts_from_env(env: Mapping[str, str] | None = None) -> NodeFacts:
    from gpuwise.base import settings

    return NodeFacts(
        instance_type=settings.text("GPUWISE_INSTANCE_TYPE", env),
        region=settings.text("GPUWISE_REGION", env),
        capacity_type=parse_capacity_type(
            settings.text("GPUWISE_CAPACITY_TYPE", env), "GPUWISE_CAPACITY_TYPE"
        ),
        cloud=settings.text("GPUWISE_CLOUD", env),
        source="settings",
    )


def facts_from_node(node: Mapping[str, object]) -> NodeFacts:
    """Facts from a Kubernetes Node object (its labels and ``spec.providerID``)."""
    meta = node.get("metadata")
    labels = meta.get("labels", {}) if isinstance(meta, dict) else {}
    labels = labels if isinstance(labels, dict) else {}

    def first(keys: tuple[str, ...]) -> str | None:
        return next((str(labels[k]) for k in keys if labels.get(k)), None)

    capacity: CapacityType | None = None
    for key, values in CAPACITY_LABELS.items():
        hit = values.get(str(labels.get(key, "")).lower())
        if hit is not None:
            capacity = hit
            break
    spec = node.get("spec")
    provider_id = str(spec.get("providerID", "")) if isinstance(spec, dict) else ""
    cloud = PROVIDERS.get(provider_id.split(":", 1)[0]) if ":" in provider_id else None
    return NodeFacts(
        instance_type=first(INSTANCE_TYPE_LABELS),
        region=first(REGION_LABELS),
        capacity_type=capacity,
        cloud=cloud,
        source="kubernetes node labels",
    )


def _get(
    url: str,
    headers: Mapping[str, str],
    *,
    method: str = "GET",
    context: ssl.SSLContext | None = None,
    timeout_s: float = TIMEOUT_S,
) -> str:
    req = urllib.request.Request(url, headers=dict(headers), method=method)
    with urllib.request.urlopen(req, timeout=timeout_s, context=context) as resp:
        return str(resp.read(1 << 20).decode("utf-8", "replace"))


def _bracket(host: str) -> str:
    """A host for a URL: an IPv6 address in brackets (``KUBERNETES_SERVICE_HOST=fd00::1`` on an
    IPv6 cluster gives ``https://[fd00::1]:443``)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def read_kubernetes_node(
    node_name: str,
    *,
    api_url: str | None = None,
    token: str | None = None,
    ca_file: str | None = None,
    timeout_s: float = TIMEOUT_S,
) -> NodeFacts | None:
    """The node's facts from the API server, or None when it cannot be read (logged)."""
    if api_url is None:
        host, port = (
            os.environ.get("KUBERNETES_SERVICE_HOST"),
            os.environ.get("KUBERNETES_SERVICE_PORT", "443"),
        )
        if not host:
            return None
        api_url = f"https://{_bracket(host)}:{port}"
        token_file, ca = SERVICE_ACCOUNT / "token", SERVICE_ACCOUNT / "ca.crt"
        if token is None and token_file.is_file():
            token = token_file.read_text().strip()
        if ca_file is None and ca.is_file():
            ca_file = str(ca)
    context = ssl.create_default_context(cafile=ca_file) if api_url.startswith("https") else None
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        body = _get(
            f"{api_url}/api/v1/nodes/{node_name}", headers, context=context, timeout_s=timeout_s
        )
        return facts_from_node(json.loads(body))
    except (OSError, ValueError, urllib.error.URLError) as exc:
        denied = isinstance(exc, urllib.error.HTTPError) and exc.code in (401, 403)
        log.warning(
            "cannot read node %s from the Kubernetes API at %s (%s); To fix: %s",
            node_name,
            api_url,
            exc,
            "give the service account `get` on nodes (deploy/kubernetes/base/rbac.yaml)"
            if denied
            else "check the API server address (KUBERNETES_SERVICE_HOST) and the network policy",
        )
        return None


def read_cloud_metadata(
    base_url: str = METADATA_URL, *, gcp_url: str | None = None, timeout_s: float = TIMEOUT_S
) -> NodeFacts | None:
    """Ask AWS (IMDSv2), then GCP, then Azure; None when none answers."""
    for probe in (_aws, _gcp, _azure):
        try:
            facts = probe((gcp_url or base_url) if probe is _gcp else base_url, timeout_s)
        except (OSError, ValueError, KeyError, urllib.error.URLError):
            continue
        if facts is not None and facts.instance_type:
            return facts
    return None


def _aws(base: str, timeout_s: float) -> NodeFacts:
    token = _get(
        f"{base}/latest/api/token",
        {"X-aws-ec2-metadata-token-ttl-seconds": "60"},
        method="PUT",
        timeout_s=timeout_s,
    )
    h = {"X-aws-ec2-metadata-token": token}
    meta = f"{base}/latest/meta-data"
    lifecycle = _get(f"{meta}/instance-life-cycle", h, timeout_s=timeout_s).strip()
    return NodeFacts(
        instance_type=_get(f"{meta}/instance-type", h, timeout_s=timeout_s).strip(),
        region=_get(f"{meta}/placement/region", h, timeout_s=timeout_s).strip(),
        capacity_type="spot" if lifecycle == "spot" else "on-demand",
        cloud="aws",
        source="aws metadata",
    )


def _gcp(base: str, timeout_s: float) -> NodeFacts:
    h = {"Metadata-Flavor": "Google"}
    meta = f"{base}/computeMetadata/v1/instance"
    machine = _get(f"{meta}/machine-type", h, timeout_s=timeout_s).rsplit("/", 1)[-1]
    zone = _get(f"{meta}/zone", h, timeout_s=timeout_s).rsplit("/", 1)[-1]
    preemptible = _get(f"{meta}/scheduling/preemptible", h, timeout_s=timeout_s).strip()
    return NodeFacts(
        instance_type=machine.strip(),
        region=zone.strip().rsplit("-", 1)[0],
        capacity_type="spot" if preemptible.upper() == "TRUE" else "on-demand",
        cloud="gcp",
        source="gcp metadata",
    )


def _azure(base: str, timeout_s: float) -> NodeFacts:
    body = _get(
        f"{base}/metadata/instance/compute?api-version=2021-02-01",
        {"Metadata": "true"},
        timeout_s=timeout_s,
    )
    compute = json.loads(body)
    return NodeFacts(
        instance_type=str(compute["vmSize"]),
        region=str(compute["location"]),
        capacity_type="spot" if str(compute.get("priority", "")).lower() == "spot" else "on-demand",
        cloud="azure",
        source="azure metadata",
    )


def detect_node(
    mode: NodeInfoMode,
    *,
    env: Mapping[str, str] | None = None,
    api_url: str | None = None,
    metadata_url: str = METADATA_URL,
    gcp_metadata_url: str | None = None,
) -> NodeFacts:
    """Settings first; then, as ``mode`` allows, the Kubernetes node, then cloud metadata."""
    if mode not in NODE_INFO_MODES:
        raise InputError(
            f"--node-info must be one of {', '.join(NODE_INFO_MODES)}, got {mode!r}",
            hint="give --node-info auto in a cluster, off elsewhere",
        )
    env = os.environ if env is None else env
    facts = facts_from_env(env)
    if facts.instance_type or mode == "off":
        return facts
    found: NodeFacts | None = None
    node_name = env.get("NODE_NAME")
    if mode in ("kubernetes", "auto") and node_name:
        found = read_kubernetes_node(node_name, api_url=api_url)
    if (found is None or not found.instance_type) and mode in ("metadata", "auto"):
        found = read_cloud_metadata(metadata_url, gcp_url=gcp_metadata_url) or found
    if found is None:
        return replace(facts, source="none")
    # settings win field by field (e.g. GPUWISE_CAPACITY_TYPE over a missing label)
    return NodeFacts(
        instance_type=found.instance_type,
        region=facts.region or found.region,
        capacity_type=facts.capacity_type or found.capacity_type,
        cloud=facts.cloud or found.cloud,
        source=found.source,
    )
