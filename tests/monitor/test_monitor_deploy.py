"""The deploy files: rules pass promtool's unit tests, the dashboard queries only series that exist,
the DaemonSet is well-formed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian package prometheus)"
)


@pytest.mark.slow
@needs_promtool
@pytest.mark.slow
def test_rules_pass_promtool_unit_tests() -> None:
    r = subprocess.run(
        [PROMTOOL, "test", "rules", "gpuwise-rules.test.yml"],
        cwd=DEPLOY / "prometheus",  # type: ignore[list-item]
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout + r.stderr


@pytest.mark.slow
@needs_promtool
def test_promtool_unit_tests_catch_day_scaled_rules(tmp_path: Path) -> None:
    """The same unit tests fail on the old `avg_over_time(x[1d]) * 24` rules, which turned 2 hours
    at $10/h into $240 of waste."""
    shutil.copy(
        REPO / "tests/monitor/fixtures/rules_avg_over_time_1d.yml", tmp_path / "gpuwise-rules.yml"
    )
    shutil.copy(DEPLOY / "prometheus/gpuwise-rules.test.yml", tmp_path)
    r = subprocess.run(
        [PROMTOOL, "test", "rules", "gpuwise-rules.test.yml"],
        cwd=tmp_path,  # type: ignore[list-item]
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "FAILED" in out
    assert 'gpuwise:gpu_wasted_usd:1d", time: 2h' in out and "2.4E+02" in out


@needs_promtool
def test_rules_and_example_config_check() -> None:
    for args in (
        ["check", "rules", "gpuwise-rules.yml"],
        ["check", "config", "prometheus.example.yml"],
    ):
        r = subprocess.run(
            [PROMTOOL, *args],
            cwd=DEPLOY / "prometheus",
            capture_output=True,
            text=True,  # type: ignore[list-item]
            timeout=60,
            check=False,
        )
        assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_the_issue_asks_for_is_there() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus/gpuwise-rules.yml").read_text())
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}
    records = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    assert {
        "GpuwiseGpuMemoryHigh",
        "GpuwiseGpuAllocatedIdle",
        "GpuwiseGpuTemperatureHigh",
        "GpuwiseGpuThermalThrottling",
        "GpuwiseXidError",
        "GpuwiseExporterDown",
    } <= set(alerts)
    assert (
        alerts["GpuwiseGpuMemoryHigh"]["for"] == "10m"
        and "0.85" in alerts["GpuwiseGpuMemoryHigh"]["expr"]
    )
    assert (
        alerts["GpuwiseGpuAllocatedIdle"]["for"] == "1h"
        and "0.05" in alerts["GpuwiseGpuAllocatedIdle"]["expr"]
    )
    assert {
        "gpuwise:gpu_hours_active:1d",
        "gpuwise:gpu_hours_idle:1d",
        "gpuwise:gpu_cost_usd:1d",
        "gpuwise:gpu_wasted_usd:1d",
    } <= records


def _exported_names() -> set[str]:
    from gpuwise.monitor.exporter import GpuCollector
    from gpuwise.monitor.fake import FakeGpuReader
    from gpuwise.monitor.pricing import PriceBook

    names: set[str] = set()
    for scenario in ("idle", "xid", "mig", "thermal"):
        collector = GpuCollector(PriceBook(price_usd_per_hour=1))
        reader = FakeGpuReader.from_scenario(scenario)
        from gpuwise.monitor.podresources import PodDevice

        for _ in range(5):
            snap = reader.read()
            ids = [m.uuid for g in snap.gpus for m in g.mig_devices] or [snap.gpus[0].uuid]
            pod = PodDevice("ns", "pod", "c", "nvidia.com/gpu", ids[0])
            collector.update(snap, pods={ids[0]: (pod,)})  # the kubelet assigned one device
        for fam in collector.collect():
            names.update(s.name for s in fam.samples)
    return names


def _metric_names(expr: str) -> set[str]:
    expr = re.sub(r'"[^"]*"', '""', expr)  # drop label values
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    words = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr))
    return {w for w in words if w.startswith("gpuwise")}


def test_dashboard_panels_query_series_that_exist() -> None:
    dash = json.loads((DEPLOY / "grafana/gpuwise-dashboard.json").read_text())
    rules = yaml.safe_load((DEPLOY / "prometheus/gpuwise-rules.yml").read_text())
    known = _exported_names() | {
        r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r
    }
    titles = " ".join(p["title"].lower() for p in dash["panels"])
    for topic in ("utilization", "memory", "power", "temperature", "cost", "wasted"):
        assert topic in titles, topic
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        for target in panel["targets"]:
            unknown = _metric_names(target["expr"]) - known
            assert not unknown, (panel["title"], unknown)


def test_every_dollar_panel_shows_the_observed_share() -> None:
    """Dollars count only observed minutes: each dollar figure carries how much was observed, the
    idle share is a ratio (0-1, not a count of GPUs), and MIG instances count as idle too."""
    dash = json.loads((DEPLOY / "grafana/gpuwise-dashboard.json").read_text())
    dollar = [
        p
        for p in dash["panels"]
        if p.get("fieldConfig", {}).get("defaults", {}).get("unit") == "currencyUSD"
    ]
    assert len(dollar) >= 3
    for panel in dollar:
        shares = [t for t in panel["targets"] if "gpu_samples:1m" in t["expr"]]
        assert shares, panel["title"]
        overrides = panel["fieldConfig"]["overrides"]
        assert any(
            o["matcher"]["options"] == shares[0]["refId"]
            and {"id": "unit", "value": "percentunit"} in o["properties"]
            for o in overrides
        ), panel["title"]
    idle = next(p for p in dash["panels"] if p["title"].startswith("Idle GPU share"))
    assert idle["fieldConfig"]["defaults"]["unit"] == "percentunit"
    assert "/ count(" in idle["targets"][0]["expr"]
    alloc_idle = next(p for p in dash["panels"] if p["title"].startswith("Allocated but idle"))
    assert "mig_activity" in alloc_idle["targets"][0]["expr"]
    assert any("Activity definition" in p["title"] for p in dash["panels"])


def test_rules_use_only_series_that_exist() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus/gpuwise-rules.yml").read_text())
    known = _exported_names() | {
        r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r
    }
    for g in rules["groups"]:
        for r in g["rules"]:
            assert not _metric_names(r["expr"]) - known, r


def _k8s_validate(obj: dict[str, Any], type_name: str, path: str = "") -> None:
    """Check ``obj`` against the official Kubernetes client model ``type_name`` (the API's OpenAPI
    schema): unknown fields, wrong types and missing required fields fail."""
    from kubernetes import client

    if type_name.startswith("list["):
        assert isinstance(obj, list), f"{path}: expected a list"
        for k, item in enumerate(obj):
            _k8s_validate(item, type_name[5:-1], f"{path}[{k}]")
        return
    if type_name.startswith("dict("):
        assert isinstance(obj, dict), f"{path}: expected a mapping"
        for key, item in obj.items():
            _k8s_validate(item, type_name[5:-1].split(", ", 1)[1], f"{path}.{key}")
        return
    primitive = {
        "str": str,
        "int": int,
        "bool": bool,
        "float": (int, float),
        "object": (str, int, dict, list),
    }
    if type_name in primitive:
        assert isinstance(obj, primitive[type_name]), f"{path}: expected {type_name}, got {obj!r}"  # type: ignore[arg-type]
        return
    model = getattr(client.models, type_name)
    fields = {v: k for k, v in model.attribute_map.items()}
    assert isinstance(obj, dict), f"{path}: expected a {type_name} mapping"
    for key, value in obj.items():
        assert key in fields, f"{path}.{key}: not a field of {type_name}"
        _k8s_validate(value, model.openapi_types[fields[key]], f"{path}.{key}")

    class _Response:
        data = json.dumps(obj)

    client.ApiClient().deserialize(_Response(), type_name)  # raises on a missing required field


_MODELS = {
    "Namespace": "V1Namespace",
    "DaemonSet": "V1DaemonSet",
    "Service": "V1Service",
    "PriorityClass": "V1PriorityClass",
    "ServiceAccount": "V1ServiceAccount",
    "ClusterRole": "V1ClusterRole",
    "ClusterRoleBinding": "V1ClusterRoleBinding",
    "NetworkPolicy": "V1NetworkPolicy",
}
KUBECTL = shutil.which("kubectl")


def _merge(base: Any, patch: Any) -> Any:
    """A strategic merge patch as kustomize applies ours: mappings merge, lists of named items merge
    by name, other lists are replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        return {**base, **{k: _merge(base[k], v) if k in base else v for k, v in patch.items()}}
    if (
        isinstance(base, list)
        and isinstance(patch, list)
        and all(isinstance(x, dict) and "name" in x for x in base + patch)
    ):
        out = {x["name"]: x for x in base}
        for x in patch:
            out[x["name"]] = _merge(out[x["name"]], x) if x["name"] in out else x
        return list(out.values())
    return patch


def _render(overlay: str | None) -> dict[str, dict[str, Any]]:
    """The overlay's objects by kind: with `kubectl kustomize` where kubectl is installed, else by
    applying its patches to the base here."""
    k8s = DEPLOY / "kubernetes"
    if overlay is not None and KUBECTL:
        out = subprocess.run(
            [KUBECTL, "kustomize", str(k8s / "overlays" / overlay)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        return {d["kind"]: d for d in yaml.safe_load_all(out)}
    base = yaml.safe_load((k8s / "base/kustomization.yaml").read_text())
    docs = {
        d["kind"]: d
        for f in base["resources"]
        for d in yaml.safe_load_all((k8s / "base" / f).read_text())
    }
    if overlay is not None:
        kust = yaml.safe_load((k8s / "overlays" / overlay / "kustomization.yaml").read_text())
        for p in kust["patches"]:
            patch = yaml.safe_load((k8s / "overlays" / overlay / p["path"]).read_text())
            docs[patch["kind"]] = _merge(docs[patch["kind"]], patch)
    return docs


OVERLAYS = [None, "gke", "gpu-operator", "pod-resources", "privileged"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_manifests_validate_against_the_kubernetes_schema(overlay: str | None) -> None:
    docs = _render(overlay)
    assert set(docs) == set(_MODELS)
    for kind, doc in docs.items():
        _k8s_validate(doc, _MODELS[kind], kind)
    ds, ns, pc = docs["DaemonSet"], docs["Namespace"], docs["PriorityClass"]
    pod = ds["spec"]["template"]["spec"]
    assert (
        ds["spec"]["selector"]["matchLabels"].items()
        <= ds["spec"]["template"]["metadata"]["labels"].items()
    )
    assert docs["Service"]["spec"]["selector"] == ds["spec"]["selector"]["matchLabels"]
    assert ds["metadata"]["namespace"] == ns["metadata"]["name"]
    # a plain priority class (system-node-critical is refused outside kube-system without a quota)
    assert pod["priorityClassName"] == pc["metadata"]["name"] != "system-node-critical"
    # the service account the RBAC binding names, allowed to read nodes (for --node-info auto)
    assert pod["serviceAccountName"] == docs["ServiceAccount"]["metadata"]["name"]
    assert docs["ClusterRole"]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}
    ]
    container = pod["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    args = container["args"]
    assert container["ports"][0]["containerPort"] == 9835 and "0.0.0.0" in args
    assert args[args.index("--node-info") + 1] == "auto"  # priced by the node's instance type
    assert "--process-command" not in args  # no command line becomes a label
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    keys = {e["key"] for t in terms for e in t["matchExpressions"]}
    enforce = ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
    if overlay == "gke":
        assert keys == {"cloud.google.com/gke-accelerator"}  # GKE's stock GPU node label
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        vols = {v["name"]: v for v in pod["volumes"]}
        assert (
            vols[mounts["/usr/local/nvidia"]["name"]]["hostPath"]["path"]
            == "/home/kubernetes/bin/nvidia"
        )
        assert env["LD_LIBRARY_PATH"]["value"] == "/usr/local/nvidia/lib64"
        assert enforce == "privileged"
    elif overlay == "gpu-operator":
        assert pod["runtimeClassName"] == "nvidia" and keys == {"nvidia.com/gpu.present"}
        assert enforce == "baseline"
    elif overlay == "pod-resources":
        sock = args[args.index("--pod-resources-socket") + 1]
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert sock.startswith("/var/lib/kubelet/pod-resources/")
        assert mounts["/var/lib/kubelet/pod-resources"]["readOnly"] is True
        assert "hostPID" not in pod and enforce == "privileged"
    elif overlay == "privileged":
        assert pod["hostPID"] is True and enforce == "privileged"
    else:
        # with GPU Feature Discovery (its label) and without it (NFD's PCI vendor label, the
        # clouds' own GPU node labels)
        assert {
            "nvidia.com/gpu.present",
            "feature.node.kubernetes.io/pci-10de.present",
            "cloud.google.com/gke-accelerator",
            "kubernetes.azure.com/accelerator",
            "karpenter.k8s.aws/instance-gpu-manufacturer",
        } <= keys
        assert "hostPID" not in pod and enforce == "baseline"


def test_podmonitor_selects_the_exporter_pods() -> None:
    pm = yaml.safe_load((DEPLOY / "kubernetes/monitoring/podmonitor.yaml").read_text())
    ds = _render(None)["DaemonSet"]
    assert pm["apiVersion"] == "monitoring.coreos.com/v1" and pm["kind"] == "PodMonitor"
    assert (
        pm["spec"]["selector"]["matchLabels"].items()
        <= ds["spec"]["template"]["metadata"]["labels"].items()
    )
    ports = {p["name"] for p in ds["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert {e["port"] for e in pm["spec"]["podMetricsEndpoints"]} <= ports


def test_rules_do_not_depend_on_the_job_name() -> None:
    text = (DEPLOY / "prometheus/gpuwise-rules.yml").read_text()
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert "job=" not in body and 'job="' not in body


def test_exporter_image_command_runs_in_a_plain_venv() -> None:
    """The Dockerfile's entrypoint and command, run here with the fake GPU (no container builder
    on the test machines); its command is the DaemonSet's."""
    text = (DEPLOY / "docker/exporter.Dockerfile").read_text()
    entry = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", text, re.M).group(1))  # type: ignore[union-attr]
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", text, re.M).group(1))  # type: ignore[union-attr]
    user = re.search(r"^USER (\S+)$", text, re.M)
    assert user is not None and user.group(1) not in ("root", "0")
    code = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    pip_line = code.split("pip install --no-cache-dir ", 2)[2].split("\n")[0]
    assert "torch" not in code and pip_line == '".[exporter-k8s]"'  # grpcio only, no torch
    assert "COPY src ./src" in code
    ds_args = _render(None)["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert entry == ["gpuwise"] and ds_args == [*cmd, "--node-info", "auto"]
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "gpuwise", *cmd, "--fake", "idle", "--once"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**__import__("os").environ, "NODE_NAME": "node-a"},
    )
    assert r.returncode == 0, r.stderr
    assert 'gpuwise_gpu_up{gpu="0",host="fake-idle"' in r.stdout  # a trace names its host


def _unit_of(expr: str) -> str | set[str]:
    """The unit a query's values are in, read from the names it uses (base units in the name:
    ``_ratio`` 0–1, ``_celsius``, ``_watts``, ``_bytes``, ``_usd``; hours; counts)."""
    if expr.lstrip("(").startswith("count("):
        return {"none", "short"}  # a number of GPUs
    if "_usd" in expr:
        return "currencyUSD"
    if "hours" in expr:
        return "h"
    if "energy_joules" in expr:
        assert "/ 3.6e6" in expr, expr  # J → kWh
        return "kwatth"
    if "_celsius" in expr:
        return "celsius"
    if (
        "ratio" in expr
        or "observed_share" in expr
        or "gpu_samples:1m" in expr
        or re.search(r"_bytes\b.*/ .*_bytes\b", expr)
        or re.search(r"_slices\b.*/ .*_slices\b", expr)
    ):
        return "percentunit"
    if "_watts" in expr:
        return "watt"
    if "_bytes" in expr:
        return "bytes"
    return {"none", "short"}  # counts: processes, XIDs, replays, remapped rows, GPUs


def test_every_panel_shows_each_query_in_its_unit() -> None:
    """Each query of every panel is shown in the unit of what it returns (its override by
    refId, else the panel's): 62 °C used to read as 6,200 %, kWh and counts as percentages."""
    dash = json.loads((DEPLOY / "grafana/gpuwise-dashboard.json").read_text())
    wrong = []
    for panel in dash["panels"]:
        if panel.get("type") == "table":
            continue  # shows labels, not values
        conf = panel.get("fieldConfig", {})
        default = conf.get("defaults", {}).get("unit", "none")
        by_ref = {
            o["matcher"]["options"]: p["value"]
            for o in conf.get("overrides", [])
            if o["matcher"]["id"] == "byFrameRefID"
            for p in o["properties"]
            if p["id"] == "unit"
        }
        for t in panel["targets"]:
            shown, want = by_ref.get(t["refId"], default), _unit_of(t["expr"])
            if shown != want and not (isinstance(want, set) and shown in want):
                wrong.append((panel["title"], t["refId"], shown, want))
    assert not wrong, wrong


def test_unpriced_gpus_have_an_alert_and_a_panel_beside_every_dollar_figure() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus/gpuwise-rules.yml").read_text())
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}
    assert "gpuwise:gpu_unpriced:bool" in alerts["GpuwiseGpuUnpriced"]["expr"]
    dash = json.loads((DEPLOY / "grafana/gpuwise-dashboard.json").read_text())
    for panel in dash["panels"]:
        if panel.get("fieldConfig", {}).get("defaults", {}).get("unit") == "currencyUSD":
            assert any("hours_unpriced" in t["expr"] for t in panel["targets"]), panel["title"]
    assert any(
        "hours_unpriced" in t["expr"] and p["type"] == "timeseries"
        for p in dash["panels"]
        for t in p["targets"]
    )
