"""The Kubernetes objects install on a stock kube-prometheus-stack: the monitors and the
PrometheusRule validate against prometheus-operator's CRD schemas (recorded in fixtures/) and
carry the `release` label the chart selects on; the rules and the dashboard are generated from
the files promtool and the dashboard tests check; the base DaemonSet meets Pod Security
"baseline" and the overlays that do not say so."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.monitor.test_monitor_deploy import OVERLAYS, _render

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy/kubernetes"
CRDS = REPO / "tests/monitor/fixtures/prometheus-operator-crds"
KUBECTL = shutil.which("kubectl")


def _monitoring_objects() -> list[dict[str, Any]]:
    """The monitoring kustomization rendered: by `kubectl kustomize` where kubectl is installed,
    else its resources with its labels applied here."""
    if KUBECTL:
        out = subprocess.run(
            [KUBECTL, "kustomize", str(K8S / "monitoring")],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        return [d for d in yaml.safe_load_all(out) if d]
    kust = yaml.safe_load((K8S / "monitoring/kustomization.yaml").read_text())
    docs = [yaml.safe_load((K8S / "monitoring" / f).read_text()) for f in kust["resources"]]
    for d in docs:
        for entry in kust.get("labels", []):
            d["metadata"].setdefault("labels", {}).update(entry["pairs"])
    return docs


def _crd_schema(kind: str) -> dict[str, Any]:
    plural = {
        "PrometheusRule": "prometheusrules",
        "ServiceMonitor": "servicemonitors",
        "PodMonitor": "podmonitors",
    }[kind]
    crd = yaml.safe_load((CRDS / f"monitoring.coreos.com_{plural}.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return dict(version["schema"]["openAPIV3Schema"])


def _validate_crd(obj: dict[str, Any]) -> None:
    import jsonschema

    schema = _crd_schema(obj["kind"])
    jsonschema.Draft7Validator(schema).validate(obj)
    # structural schemas prune unknown fields: every field we write must be declared
    _no_unknown_fields(obj["spec"], schema["properties"]["spec"], obj["kind"] + ".spec")


def _no_unknown_fields(value: Any, schema: dict[str, Any], path: str) -> None:
    if isinstance(value, dict) and "properties" in schema:
        for key, item in value.items():
            assert key in schema["properties"], f"{path}.{key}: not in the CRD schema"
            _no_unknown_fields(item, schema["properties"][key], f"{path}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for k, item in enumerate(value):
            _no_unknown_fields(item, schema["items"], f"{path}[{k}]")


def test_monitoring_objects_validate_against_the_operator_crds() -> None:
    objs = _monitoring_objects()
    kinds = sorted(o["kind"] for o in objs)
    assert kinds == ["ConfigMap", "PrometheusRule", "ServiceMonitor"]
    for obj in objs:
        if obj["kind"] != "ConfigMap":
            _validate_crd(obj)
    _validate_crd(yaml.safe_load((K8S / "monitoring/podmonitor.yaml").read_text()))


def test_a_wrong_field_fails_the_crd_check() -> None:
    """The check can fail: a typo'd endpoint field and a rule without expr are caught."""
    import jsonschema

    sm = next(o for o in _monitoring_objects() if o["kind"] == "ServiceMonitor")
    sm["spec"]["endpoints"][0]["intervall"] = "15s"
    with pytest.raises(AssertionError, match="intervall"):
        _validate_crd(sm)
    rule = next(o for o in _monitoring_objects() if o["kind"] == "PrometheusRule")
    del rule["spec"]["groups"][0]["rules"][0]["expr"]
    with pytest.raises(jsonschema.ValidationError):
        _validate_crd(rule)


def test_kube_prometheus_stack_selects_every_object() -> None:
    """kube-prometheus-stack's Prometheus selects monitors and rules by `release: <release>`
    (its serviceMonitorSelector / ruleSelector defaults) and Grafana's sidecar loads ConfigMaps
    labelled grafana_dashboard: "1". The ServiceMonitor must also match the Service."""
    objs = {o["kind"]: o for o in _monitoring_objects()}
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert objs[kind]["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    base = _render(None)
    svc, sm = base["Service"], objs["ServiceMonitor"]
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert svc["metadata"]["namespace"] in sm["spec"]["namespaceSelector"]["matchNames"]
    assert {e["port"] for e in sm["spec"]["endpoints"]} <= {p["name"] for p in svc["spec"]["ports"]}
    cm = objs["ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads((REPO / "deploy/grafana/gpuwise-dashboard.json").read_text())
    assert json.loads(cm["data"]["gpuwise-dashboard.json"]) == dashboard
    rules = yaml.safe_load((REPO / "deploy/prometheus/gpuwise-rules.yml").read_text())
    assert objs["PrometheusRule"]["spec"]["groups"] == rules["groups"]
    pm = yaml.safe_load((K8S / "monitoring/podmonitor.yaml").read_text())
    assert pm["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_generated_files_are_up_to_date() -> None:
    spec = importlib.util.spec_from_file_location(
        "render_k8s_monitoring", REPO / "scripts/render_k8s_monitoring.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for path, text in module.rendered().items():
        assert path.read_text() == text, (
            f"{path.name} is stale: run scripts/render_k8s_monitoring.py"
        )


# -- Pod Security Standards, "baseline" profile ------------------------------------------------
# The controls of https://kubernetes.io/docs/concepts/security/pod-security-standards/ (baseline),
# as a table: (control, check of the pod spec returning the offending fields).
BASELINE_CAPS = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        *pod.get("initContainers", []),
        *pod.get("containers", []),
        *pod.get("ephemeralContainers", []),
    ]


def baseline_violations(pod: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            out.append(f"host namespaces: {field}")
    psc = pod.get("securityContext", {})
    if psc.get("windowsOptions", {}).get("hostProcess"):
        out.append("HostProcess")
    out += [f"hostPath volume {v['name']}" for v in pod.get("volumes", []) if "hostPath" in v]
    for sysctl in psc.get("sysctls", []):
        if sysctl["name"] not in SAFE_SYSCTLS:
            out.append(f"sysctl {sysctl['name']}")
    contexts = [("pod", psc)] + [
        (c["name"], c.get("securityContext", {})) for c in _containers(pod)
    ]
    for name, sc in contexts:
        if sc.get("privileged"):
            out.append(f"privileged: {name}")
        added = set(sc.get("capabilities", {}).get("add", [])) - BASELINE_CAPS
        if added:
            out.append(f"capabilities {sorted(added)}: {name}")
        if sc.get("seccompProfile", {}).get("type") == "Unconfined":
            out.append(f"seccomp Unconfined: {name}")
        if sc.get("appArmorProfile", {}).get("type") == "Unconfined":
            out.append(f"AppArmor Unconfined: {name}")
        if sc.get("procMount", "Default") != "Default":
            out.append(f"procMount: {name}")
        se = sc.get("seLinuxOptions", {})
        if (
            se.get("type")
            not in (
                None,
                "",
                "container_t",
                "container_init_t",
                "container_kvm_t",
                "container_engine_t",
            )
            or se.get("user")
            or se.get("role")
        ):
            out.append(f"SELinux options: {name}")
    for c in _containers(pod):
        for port in c.get("ports", []):
            if port.get("hostPort"):
                out.append(f"hostPort {port['hostPort']}: {c['name']}")
    return out


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pod_security_baseline(overlay: str | None) -> None:
    """The base (and the GPU Operator overlay) meet "baseline" and the namespace enforces it;
    each overlay that does not meet it is labelled privileged and names why."""
    docs = _render(overlay)
    pod = docs["DaemonSet"]["spec"]["template"]["spec"]
    enforce = docs["Namespace"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
    found = baseline_violations(pod)
    expected = {
        None: [],
        "gpu-operator": [],
        "gke": ["hostPath volume nvidia-install-dir-host", "privileged: exporter"],
        "pod-resources": ["hostPath volume pod-resources"],
        "privileged": ["host namespaces: hostPID", "hostPath volume pod-logs"],
    }[overlay]
    assert sorted(found) == sorted(expected)
    assert enforce == ("baseline" if not found else "privileged")


def test_the_baseline_check_catches_what_the_old_daemonset_did() -> None:
    old = {
        "hostPID": True,
        "containers": [
            {
                "name": "exporter",
                "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}},
            }
        ],
        "volumes": [{"name": "pod-logs", "hostPath": {"path": "/var/log/pods"}}],
    }
    assert sorted(baseline_violations(old)) == [
        "capabilities ['SYS_ADMIN']: exporter",
        "host namespaces: hostPID",
        "hostPath volume pod-logs",
        "privileged: exporter",
    ]


def test_monitors_honor_the_exporters_pod_labels() -> None:
    """honorLabels: the pod-info, per-process and DCGM-compat series keep namespace/pod/container
    of the pod using the GPU; without it they became exported_* and every GPU "belonged" to the
    gpuwise namespace. The PodMonitor (not in the kustomization) says the same."""
    monitor = next(d for d in _monitoring_objects() if d["kind"] == "ServiceMonitor")
    assert all(e.get("honorLabels") is True for e in monitor["spec"]["endpoints"])
    pod = yaml.safe_load((K8S / "monitoring/podmonitor.yaml").read_text())
    assert all(e.get("honorLabels") is True for e in pod["spec"]["podMetricsEndpoints"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_a_network_policy_admits_prometheus_only(overlay: str | None) -> None:
    objs = _render(overlay)
    policy, ds = objs["NetworkPolicy"], objs["DaemonSet"]
    spec = policy["spec"]
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert spec["podSelector"]["matchLabels"].items() <= pod_labels.items()  # selects the exporter
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    (source,) = rule["from"]  # one source: Prometheus pods, any namespace; no ipBlock
    assert source["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    (port,) = rule["ports"]
    names = {p["name"] for c in ds["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
    assert port["port"] in names
