"""The scheduled refresh: the Kubernetes CronJob and the systemd timer run `catalog update --fetch`
into a shared store (GPUWISE_CATALOG_DIR), and a long-running reader (the exporter's PriceBook)
picks the refreshed store up without a restart."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "kubernetes"
SYSTEMD = REPO / "deploy" / "systemd"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


def test_cronjob_runs_fetch_into_the_store_the_exporter_patch_reads() -> None:
    from kubernetes.client import ApiClient

    docs = {d["kind"]: d for d in _docs(K8S / "catalog-refresh" / "catalog-refresh-cronjob.yaml")}
    assert set(docs) == {"PersistentVolumeClaim", "CronJob"}
    api = ApiClient()

    class _Resp:  # ApiClient.deserialize reads .data
        def __init__(self, doc: dict[str, Any]) -> None:
            import json

            self.data = json.dumps(doc)

    cron = api.deserialize(_Resp(docs["CronJob"]), "V1CronJob")
    pvc = api.deserialize(_Resp(docs["PersistentVolumeClaim"]), "V1PersistentVolumeClaim")
    job = cron.spec.job_template.spec
    (c,) = job.template.spec.containers
    assert c.command == ["/bin/sh", "-c"] and len(c.args) == 1
    assert c.args[0].startswith("gpuwise catalog update --fetch;")
    env = {e.name: e.value for e in c.env}
    store = env["GPUWISE_CATALOG_DIR"]
    assert any(m.mount_path == store for m in c.volume_mounts)
    assert cron.spec.concurrency_policy == "Forbid"
    assert job.active_deadline_seconds > float(env["GPUWISE_FETCH_RUN_DEADLINE_S"])
    assert "ReadWriteMany" in pvc.spec.access_modes

    (patch,) = _docs(K8S / "catalog-refresh" / "exporter-store-patch.yaml")
    (daemonset,) = [d for d in _docs(K8S / "base" / "daemonset.yaml") if d["kind"] == "DaemonSet"]
    assert patch["metadata"]["name"] == daemonset["metadata"]["name"]  # the patch applies to it
    (pc,) = patch["spec"]["template"]["spec"]["containers"]
    assert pc["name"] in {c["name"] for c in daemonset["spec"]["template"]["spec"]["containers"]}
    assert _env(pc)["GPUWISE_CATALOG_DIR"] == store
    (vol,) = patch["spec"]["template"]["spec"]["volumes"]
    assert vol["persistentVolumeClaim"]["claimName"] == pvc.metadata.name
    assert all(m["readOnly"] for m in pc["volumeMounts"])


@pytest.mark.parametrize(("gpuwise_exit", "job_exit"), [(0, 0), (3, 0), (2, 2), (1, 1)])
def test_the_cronjob_completes_on_a_partial_refresh_and_fails_on_nothing_fetched(
    tmp_path: Path, gpuwise_exit: int, job_exit: int
) -> None:
    """The CronJob's shell line, run with a stand-in `gpuwise` that exits as the real one does."""
    docs = {d["kind"]: d for d in _docs(K8S / "catalog-refresh" / "catalog-refresh-cronjob.yaml")}
    spec = docs["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    fake = tmp_path / "gpuwise"
    fake.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\nexit {gpuwise_exit}\n')
    fake.chmod(0o755)
    r = subprocess.run(
        [*c["command"], *c["args"]], env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, check=False
    )
    assert r.returncode == job_exit
    assert (tmp_path / "args").read_text().split() == ["catalog", "update", "--fetch"]
    unit = (SYSTEMD / "gpuwise-catalog-refresh.service").read_text()
    assert "SuccessExitStatus=3" in unit.splitlines()


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kustomize_builds_the_refresh_overlay() -> None:
    r = subprocess.run(
        ["kubectl", "kustomize", str(K8S / "catalog-refresh")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    kinds = {(d["kind"], d["metadata"].get("namespace")) for d in yaml.safe_load_all(r.stdout)}
    assert kinds == {("CronJob", "gpuwise"), ("PersistentVolumeClaim", "gpuwise")}


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)
def test_systemd_units_verify(tmp_path: Path) -> None:
    for unit in SYSTEMD.glob("*"):
        text = unit.read_text()
        # verify checks that ExecStart's program exists: point it at this interpreter
        text = text.replace("/opt/gpuwise/bin/gpuwise", f"{sys.executable} -m gpuwise")
        (tmp_path / unit.name).write_text(text)
    service = (tmp_path / "gpuwise-catalog-refresh.service").read_text()
    assert "catalog update --fetch" in service and "GPUWISE_CATALOG_DIR=" in service
    r = subprocess.run(
        ["systemd-analyze", "verify", *sorted(str(p) for p in tmp_path.iterdir())],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "gpuwise-catalog-refresh" not in r.stderr, r.stderr


HEADER = (
    "cloud,region,zone,instance_type,gpu,gpu_count,gpu_memory_gib,vcpus,memory_gib,"
    "on_demand_usd_per_hour,spot_usd_per_hour,arch,source,as_of\n"
)


def test_exporter_prices_follow_a_refreshed_shared_store(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from gpuwise.monitor.pricing import PriceBook

    monkeypatch.setenv("GPUWISE_CATALOG_DIR", str(tmp_path / "shared"))
    new = tmp_path / "new.csv"
    new.write_text(
        HEADER + "aws,us-east-1,,p5.48xlarge,H100,8,80,192,2048,4.0,,x86_64,mine,2026-11-20\n"
    )
    assert cli("catalog", "update", "--from-csv", new, "--replace").code == 0
    assert (tmp_path / "shared" / "offers.csv").is_file()
    book = PriceBook(instance_type="p5.48xlarge", cloud="aws", region="us-east-1")
    assert book.price("NVIDIA H100 80GB HBM3").usd_per_gpu_hour == 0.5
    new.write_text(
        HEADER + "aws,us-east-1,,p5.48xlarge,H100,8,80,192,2048,3.2,,x86_64,mine,2026-11-21\n"
    )
    assert cli("catalog", "update", "--from-csv", new, "--replace").code == 0
    assert book.price("NVIDIA H100 80GB HBM3").usd_per_gpu_hour == 0.5  # checked once a minute
    book.store_check_s = 0
    assert book.price("NVIDIA H100 80GB HBM3").usd_per_gpu_hour == 0.4
