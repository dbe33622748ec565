"""SkyPilot's own engine on the exports: ``sky.Task.from_yaml`` parses each one and SkyPilot's
optimizer (and its zone order for provisioning) runs offline on gpuwise's bundled catalog; it
must choose the instance, region, zone and network tier the plan priced and timed. Then its
provisioning steps (``skypilot/provision.py``: deploy variables, the network the provisioner
builds) run on every candidate of multi-node exports for AWS p5/p6, GCP A3/A4 and Azure ND: none
may fail, and the plan must have timed the network they build.

SkyPilot lives in its own virtualenv (it pins packages that clash with the test venv):

    python3 -m venv ~/skyvenv && ~/skyvenv/bin/pip install 'skypilot[azure]==0.14.1'
    GPUWISE_SKYPILOT_PYTHON=~/skyvenv/bin/python pytest -m slow tests/planner/test_skypilot_engine.py

Offline: ``HOME`` holds SkyPilot catalog files: GCP's as recorded from SkyPilot's catalog (the
extract gpuwise's GCP offers are built from), AWS's written from gpuwise's bundled offers
(``src/gpuwise/catalog/data/offers.csv.gz``, itself an extract of SkyPilot's catalog), and an AWS
zone mapping for an account that has not opted into Local Zones (every account's default: regular
zones only, each named by its ID). The one fake is which clouds are enabled (``sky check`` needs
credentials), in ``skypilot/optimize.py``.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from gpuwise.estimate.workload import workload_from_options
from gpuwise.planner import PlanRequest, plan
from gpuwise.planner.export import skypilot_task, to_yaml

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SKY_PYTHON = os.path.expanduser(os.environ.get("GPUWISE_SKYPILOT_PYTHON", ""))
_HEADER = [
    "InstanceType",
    "AcceleratorName",
    "AcceleratorCount",
    "vCPUs",
    "MemoryGiB",
    "GpuInfo",
    "Price",
    "SpotPrice",
    "Region",
    "AvailabilityZone",
    "Arch",
]


@pytest.fixture(scope="module")
def sky_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not SKY_PYTHON or not Path(SKY_PYTHON).is_file():
        pytest.skip(
            "set GPUWISE_SKYPILOT_PYTHON to a Python with skypilot==0.14.1 installed "
            "(python3 -m venv ~/skyvenv && ~/skyvenv/bin/pip install skypilot==0.14.1)"
        )
    home = tmp_path_factory.mktemp("skyhome")
    path = ROOT / "src" / "gpuwise" / "catalog" / "data" / "offers.csv.gz"
    with gzip.open(path) as raw:
        every = list(csv.DictReader(io.TextIOWrapper(raw, "utf-8")))
    _gcp_catalog(home)
    rows = [r for r in every if r["cloud"] == "aws"]
    aws = home / ".sky" / "catalogs" / "v8" / "aws"
    aws.mkdir(parents=True)
    with open(aws / "vms.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(_HEADER)
        for r in rows:
            n = int(float(r["gpu_count"]))
            mib = int(float(r["gpu_memory_gib"] or 0) * 1024)
            info = (
                f"{{'Gpus': [{{'Name': '{r['gpu']}', 'Manufacturer': 'NVIDIA', 'Count': {n}, "
                f"'MemoryInfo': {{'SizeInMiB': {mib}}}}}], 'TotalGpuMemoryInMiB': {mib * n}}}"
            )
            out.writerow(
                [
                    r["instance_type"],
                    r["gpu"],
                    float(n),
                    r["vcpus"],
                    r["memory_gib"],
                    info,
                    r["on_demand_usd_per_hour"],
                    r["spot_usd_per_hour"],
                    r["region"],
                    r["zone"],
                    r["arch"],
                ]
            )
    regular = sorted({r["zone"] for r in rows if re.fullmatch(r"[a-z]+\d-az\d+", r["zone"])})
    (aws / "az_mappings-default.csv").write_text(
        "AvailabilityZone,AvailabilityZoneName\n" + "".join(f"{z},{z}\n" for z in regular)
    )
    return home


GCP_EXTRACT = ROOT / "tests" / "catalog" / "fixtures" / "skypilot-extract" / "gcp.csv.gz"


def _gcp_catalog(home: Path) -> None:
    """SkyPilot's own GCP rows, as recorded (the extract gpuwise's GCP offers come from; its
    SOURCE.md names the commit): host rows and accelerator rows priced apart, with SkyPilot's
    accelerator names (``H100-MEGA`` on a3-megagpu-8g), which a catalog rebuilt from gpuwise's
    offers would not have."""
    gcp = home / ".sky" / "catalogs" / "v8" / "gcp"
    gcp.mkdir(parents=True)
    (gcp / "vms.csv").write_bytes(gzip.decompress(GCP_EXTRACT.read_bytes()))


def _engine(
    sky_home: Path, doc: dict[str, object], tmp_path: Path, cloud: str
) -> dict[str, object]:
    task = tmp_path / "task.yaml"
    task.write_text(to_yaml(doc))
    env = {
        "HOME": str(sky_home),
        "PATH": os.environ.get("PATH", ""),
        "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
    }
    r = subprocess.run(
        [SKY_PYTHON, str(Path(__file__).parent / "skypilot" / "optimize.py"), str(task), cloud],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


README_JOB = {"model": "llama-3.1-8b", "task": "lora", "tokens": "2B"}
FINETUNE = {"model": "llama-3.1-8b", "task": "finetune", "tokens": "5B"}
CASES = [
    # the README job on AWS: a multi-node B200 spot plan (EFA)
    pytest.param("aws", README_JOB, {"deadline_hours": 24.0}, "ordered", id="readme-job-aws"),
    # a full fine-tune ranked by time: several EFA nodes
    pytest.param(
        "aws", FINETUNE, {"objective": "time", "billings": ("on-demand",)}, "ordered", id="aws-efa"
    ),
    # SkyPilot picks among any_of by its own prices: it must land on the planned one
    pytest.param(
        "aws", README_JOB, {"deadline_hours": 24.0, "max_nodes": 1}, "any_of", id="aws-any-of"
    ),
    # GCP: zone names pinned in infra; A3 High with GPUDirect-TCPX across nodes
    pytest.param(
        "gcp",
        FINETUNE,
        {"objective": "time", "billings": ("on-demand",), "gpus": ("H100",)},
        "ordered",
        id="gcp-a3-tcpx",
    ),
    pytest.param("gcp", README_JOB, {"deadline_hours": 24.0}, "ordered", id="readme-job-gcp"),
]


@pytest.mark.parametrize(("cloud", "job", "req", "mode"), CASES)
def test_skypilot_chooses_what_the_plan_priced(
    sky_home: Path,
    tmp_path: Path,
    cloud: str,
    job: dict[str, str],
    req: dict[str, object],
    mode: str,
) -> None:
    p = plan(workload_from_options(**job), PlanRequest(clouds=(cloud,), **req))  # type: ignore[arg-type]
    w = p.winner
    assert w is not None
    if cloud == "gcp":  # the GCP catalog written above holds the fixed-GPU machine types only
        assert w.instance_type.startswith(("a2-", "a3-", "a4-", "g2-")), w.instance_type
    doc = skypilot_task(p, mode=mode)  # type: ignore[arg-type]
    chosen = _engine(sky_home, doc, tmp_path, cloud)
    assert chosen["instance_type"] == w.instance_type
    assert chosen["region"] == w.region
    assert chosen["use_spot"] == (w.billing == "spot")
    assert chosen["num_nodes"] == w.nodes
    # the zone SkyPilot provisions first is the zone whose price the plan used
    assert chosen["zone"] == w.zone, (chosen, w.zone, w.zones_set_aside)
    expected_tier = "best" if w.nodes > 1 and w.network_tier == "best" else None
    assert chosen["network_tier"] == expected_tier
    recovery = chosen["job_recovery"]
    assert isinstance(recovery, dict) and recovery["recover_on_exit_codes"] == [75]


def _azure_catalog(home: Path, every: list[dict[str, str]]) -> None:
    """Azure rows from gpuwise's bundled offers (an extract of SkyPilot's Azure catalog)."""
    azure = home / ".sky" / "catalogs" / "v8" / "azure"
    azure.mkdir(parents=True, exist_ok=True)
    with open(azure / "vms.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow([*_HEADER[:-2], "Generation"])
        for r in every:
            if r["cloud"] == "azure":
                out.writerow(
                    [
                        r["instance_type"],
                        r["gpu"],
                        float(int(float(r["gpu_count"]))),
                        r["vcpus"],
                        r["memory_gib"],
                        "",
                        r["on_demand_usd_per_hour"],
                        r["spot_usd_per_hour"],
                        r["region"],
                        "V2",
                    ]
                )


def _provision(
    sky_home: Path, doc: dict[str, object], tmp_path: Path, config: str | None = None
) -> list[dict[str, object]]:
    """SkyPilot's own deploy-variable and network-building steps on every candidate."""
    from gpuwise.planner.network import instance_network

    task = tmp_path / "task.yaml"
    task.write_text(to_yaml(doc))
    env = {
        "HOME": str(sky_home),
        "PATH": os.environ.get("PATH", ""),
        "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
    }
    if config is not None:
        (tmp_path / "config.yaml").write_text(config)
        env["SKYPILOT_GLOBAL_CONFIG"] = str(tmp_path / "config.yaml")
    # what AWS's describe-instance-types answers for MaximumEfaInterfaces (AWS's published
    # table, as gpuwise's network data holds it): the one cloud API answer the check needs
    efa = {
        c["instance_type"]: (instance_network("aws", c["instance_type"]).rdma_resource or ("", 0))[
            1
        ]
        for c in doc["resources"]["ordered"]  # type: ignore[index]
    }
    r = subprocess.run(
        [
            SKY_PYTHON,
            str(Path(__file__).parent / "skypilot" / "provision.py"),
            str(task),
            json.dumps(efa),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


# Every candidate of a multi-node export passes SkyPilot's provisioning config step, and the plan
# timed the network that step builds.
PROVISION_CASES = [
    ("aws", "p5.48xlarge", "one"),
    ("aws", "p5.48xlarge", "all"),  # SkyPilot's config sets aws.use_internal_ips
    ("aws", "p6-b200.48xlarge", "one"),
    ("aws", "p6-b200.48xlarge", "all"),
    ("gcp", "a3-highgpu-8g", "one"),  # GPUDirect-TCPX: SkyPilot builds it
    ("gcp", "a3-megagpu-8g", "one"),  # best would raise ValueError: exported without it
    ("gcp", "a3-ultragpu-8g", "one"),
    ("gcp", "a4-highgpu-8g", "one"),
    ("azure", "Standard_ND96isr_H100_v5", "one"),
    ("azure", "Standard_ND96asr_v4", "one"),
]


@pytest.mark.parametrize(("cloud", "itype", "efa"), PROVISION_CASES)
def test_skypilot_provisions_what_the_plan_timed(
    sky_home: Path, tmp_path: Path, cloud: str, itype: str, efa: str
) -> None:
    from gpuwise.catalog import load_catalog
    from gpuwise.planner.network import instance_network

    path = ROOT / "src" / "gpuwise" / "catalog" / "data" / "offers.csv.gz"
    with gzip.open(path) as raw:
        _azure_catalog(sky_home, list(csv.DictReader(io.TextIOWrapper(raw, "utf-8"))))
    offers = [o for o in load_catalog().offers if o.instance_type == itype]
    request = PlanRequest(
        clouds=(cloud,),
        objective="time",
        billings=("on-demand",),
        max_nodes=4,
        aws_efa_interfaces=efa,  # type: ignore[arg-type]
    )
    import dataclasses

    p = plan(workload_from_options(**FINETUNE), request, offers=offers)
    # the multi-node options (on Azure's 10 Gbit/s one node is faster: export the others anyway)
    p = dataclasses.replace(p, options=tuple(o for o in p.options if o.nodes > 1))
    w = p.winner
    assert w is not None and w.nodes > 1
    doc = skypilot_task(p)
    config = "aws:\n  use_internal_ips: true\n  use_ssm: true\n" if efa == "all" else None
    rows = _provision(sky_home, doc, tmp_path, config)
    if any("No module named 'azure'" in str(r.get("error")) for r in rows):
        pytest.skip("SkyPilot's Azure SDK is missing: pip install 'skypilot[azure]==0.14.1'")
    assert rows and all(r["ok"] for r in rows), [r.get("error") for r in rows]
    table = instance_network(cloud, itype)
    for row in rows:
        if cloud == "aws":  # the EFA interfaces SkyPilot attaches, each an equal share
            count = (table.rdma_resource or ("", 1))[1]
            built = row["efa_interfaces"] * table.inter_node_gbit_s / count  # type: ignore[operator]
            assert row["efa_interfaces"] == (count if efa == "all" else 1)
            assert w.network == f"{built:g} Gbit/s EFA"
        elif cloud == "gcp":
            tcpx = itype == "a3-highgpu-8g"
            assert row["network_tier"] == ("best" if tcpx else None)
            assert row["gpu_direct"] == tcpx
            assert w.network == ("800 Gbit/s GPUDirect-TCPX" if tcpx else "200 Gbit/s TCP")
        else:  # Azure: no fabric, NICs without accelerated networking
            assert row["network_tier"] is None and row["accelerated_networking"] is False
            assert w.network.startswith("10 Gbit/s")


def test_skypilot_refuses_network_tier_best_on_gcp_a4_as_the_plan_says(
    sky_home: Path, tmp_path: Path
) -> None:
    """The check sees what gpuwise avoids: a4 with network_tier: best raises ValueError."""
    doc = {
        "name": "x",
        "num_nodes": 2,
        "resources": {
            "ordered": [
                {
                    "infra": "gcp/us-central1",
                    "instance_type": "a4-highgpu-8g",
                    "network_tier": "best",
                }
            ]
        },
        "run": "true",
    }
    rows = _provision(sky_home, doc, tmp_path)
    assert rows[0]["ok"] is False and "ValueError" in str(rows[0]["error"])
