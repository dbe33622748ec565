"""The exports validate against the real schemas: SkyPilot's JSON schemas (and SkyPilot itself
when importable), the Kubernetes client's models, and the Kubeflow training SDK's models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuwise.errors import PlanError
from gpuwise.planner import PlanRequest, load_spot_defaults, plan_offers
from gpuwise.planner.export import grace_period_seconds, k8s_manifest, skypilot_task, to_yaml

from .toy import NO_STARTUP, ToyModel, offer

SCHEMAS = json.loads((Path(__file__).parent / "data" / "skypilot_schemas.json").read_text())


OFFERS = [
    offer("aws", "us-east-1", "p4d.24xlarge", "A100", 8, 32.0, 12.0),
    offer("aws", "us-west-2", "p4d.24xlarge", "A100", 8, 32.0, 13.0),
    offer("gcp", "us-central1", "a2-highgpu-8g", "A100", 8, 29.4, 14.0),
    offer("aws", "us-east-1", "p5.48xlarge", "H100", 8, 98.0, 40.0),
]


def make_plan(**req: Any):  # type: ignore[no-untyped-def]
    request = PlanRequest(**{"max_nodes": 2, **req})
    return plan_offers(
        OFFERS, ToyModel(), request, spot=load_spot_defaults(), reserved={}, startup=NO_STARTUP
    )


def validate_skypilot(doc: dict[str, Any]) -> None:
    import jsonschema

    jsonschema.validate(doc, SCHEMAS["task"])
    jsonschema.validate(doc["resources"], SCHEMAS["resources"])
    for mount in doc.get("file_mounts", {}).values():
        if isinstance(mount, dict):
            jsonschema.validate(mount, SCHEMAS["storage"])


def strict_model(data: Any, klass: Any, path: str = "$") -> None:
    """Check ``data`` against an OpenAPI-generated client model: every key known, every required
    field present, nested models checked the same way (ApiClient.deserialize ignores unknown keys)."""
    import re

    import kubernetes.client.models as k8s
    from kubeflow.training import models as kf

    def resolve(name: str) -> Any:
        return getattr(k8s, name, None) or getattr(kf, name)

    if isinstance(klass, str):
        m = re.fullmatch(r"list\[(.+)\]", klass)
        if m:
            assert isinstance(data, list), f"{path}: expected a list"
            for i, item in enumerate(data):
                strict_model(item, m.group(1), f"{path}[{i}]")
            return
        m = re.fullmatch(r"dict\(str, (.+)\)", klass)
        if m:
            assert isinstance(data, dict), f"{path}: expected a mapping"
            for k, v in data.items():
                strict_model(v, m.group(1), f"{path}.{k}")
            return
        prim = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object}
        if klass in prim:
            assert isinstance(data, prim[klass]), f"{path}: {data!r} is not {klass}"
            return
        klass = resolve(klass)
    assert isinstance(data, dict), f"{path}: expected an object for {klass.__name__}"
    by_json = {v: k for k, v in klass.attribute_map.items()}
    unknown = set(data) - set(by_json)
    assert not unknown, f"{path}: unknown field(s) {sorted(unknown)} for {klass.__name__}"
    for key, value in data.items():
        strict_model(value, klass.openapi_types[by_json[key]], f"{path}.{key}")
    # the generated constructor enforces required fields (client-side validation)
    if klass.__module__.startswith("kubeflow"):
        from kubeflow.training.api_client import ApiClient
    else:
        from kubernetes.client import ApiClient
    ApiClient()._ApiClient__deserialize(data, klass)  # type: ignore[attr-defined]


def test_skypilot_export_validates_and_carries_the_ranking() -> None:
    plan = make_plan(billings=("on-demand", "spot"), spot_mtbf_hours=1e6)
    doc = skypilot_task(plan, bucket="my-ckpts", command="python train.py --lr 3e-4")
    validate_skypilot(doc)
    ordered = doc["resources"]["ordered"]
    assert ordered[0] == {
        "infra": "aws/us-east-1",
        "instance_type": "p4d.24xlarge",
        "use_spot": True,
    }
    # spot: A100 $150 (us-east-1), $162.50 (us-west-2), H100 $166.67, A100 on GCP $175, then on-demand
    assert [(c["infra"], c["instance_type"], c["use_spot"]) for c in ordered[:5]] == [
        ("aws/us-east-1", "p4d.24xlarge", True),
        ("aws/us-west-2", "p4d.24xlarge", True),
        ("aws/us-east-1", "p5.48xlarge", True),
        ("gcp/us-central1", "a2-highgpu-8g", True),
        ("gcp/us-central1", "a2-highgpu-8g", False),
    ]
    assert doc["num_nodes"] == 1
    assert doc["resources"]["job_recovery"]["strategy"] == "EAGER_NEXT_REGION"
    assert doc["file_mounts"]["/checkpoints"] == {"name": "my-ckpts", "mode": "MOUNT_CACHED"}
    # torchrun is gpuwise run's job; the VM gets gpuwise and the user's code from setup and workdir
    assert doc["run"] == "gpuwise run --nproc-per-node 8 -- python train.py --lr 3e-4"
    # never an unpublished release pin: the override, else the wheel shipped in the workdir
    assert doc["workdir"] == "." and "GPUWISE_PIP_SPEC" in doc["setup"]
    assert "gpuwise[train]==" not in doc["setup"] and ".gpuwise-dist/gpuwise-*.whl" in doc["setup"]
    assert "requirements.txt" in doc["setup"]
    # a clean preemption (exit 75) is a recovery; other failures get a small restart budget
    recovery = doc["resources"]["job_recovery"]
    assert recovery["recover_on_exit_codes"] == [75] and recovery["max_restarts_on_errors"] == 2
    # one node: nothing to ask of the network
    assert all("network_tier" not in c for c in ordered)
    assert yaml.safe_load(to_yaml(doc)) == doc
    validate_skypilot(skypilot_task(plan, mode="any_of", command="bash run.sh"))


def test_skypilot_multi_node_candidates_share_the_node_count() -> None:
    plan = make_plan(objective="time", billings=("on-demand",))
    doc = skypilot_task(plan)
    validate_skypilot(doc)
    assert doc["num_nodes"] == 2
    # fastest first; equal hours (A100 ×16) → cheaper first; p4d is one option in two regions
    assert [c["instance_type"] for c in doc["resources"]["ordered"]] == [
        "p5.48xlarge",
        "a2-highgpu-8g",
        "p4d.24xlarge",
        "p4d.24xlarge",
    ]
    # the EFA instances' times assume EFA: SkyPilot attaches it only with network_tier: best;
    # A2 runs on plain TCP (nothing to ask for)
    tiers = {c["instance_type"]: c.get("network_tier") for c in doc["resources"]["ordered"]}
    assert tiers == {"p5.48xlarge": "best", "p4d.24xlarge": "best", "a2-highgpu-8g": None}
    assert doc["resources"]["job_recovery"]["recover_on_exit_codes"] == [75]


def test_network_tier_standard_times_the_default_network_and_asks_for_nothing() -> None:
    best = make_plan(objective="time", billings=("on-demand",))
    standard = make_plan(objective="time", billings=("on-demand",), network_tier="standard")
    p5 = next(o for o in best.options if o.instance_type == "p5.48xlarge" and o.nodes == 2)
    p5_std = next(o for o in standard.options if o.instance_type == "p5.48xlarge" and o.nodes == 2)
    assert p5.network_tier == "best" and p5_std.network_tier == "standard"
    assert p5_std.network_fabric == "unknown"  # default network not published: conservative 10
    doc = skypilot_task(standard)
    assert all("network_tier" not in c for c in doc["resources"]["ordered"])


def test_run_arguments_expand_variables_and_settings_reach_the_job() -> None:
    plan = make_plan(billings=("on-demand",), max_nodes=1)
    doc = skypilot_task(plan, command='python train.py --checkpoint-dir "$GPUWISE_CHECKPOINT_DIR"')
    # as written: the launcher's shell expands the variable (it was single-quoted before)
    assert doc["run"].endswith('-- python train.py --checkpoint-dir "$GPUWISE_CHECKPOINT_DIR"')
    import subprocess

    out = subprocess.run(
        ["bash", "-c", doc["run"].replace("gpuwise run --nproc-per-node 8 --", "echo")],
        env={"GPUWISE_CHECKPOINT_DIR": "/checkpoints", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "python train.py --checkpoint-dir /checkpoints"


def test_skypilot_itself_accepts_the_export(tmp_path: Path) -> None:
    sky = pytest.importorskip("sky", reason="SkyPilot is not installed in this environment")
    plan = make_plan(billings=("on-demand", "spot"), spot_mtbf_hours=1e6)
    path = tmp_path / "task.yaml"
    path.write_text(to_yaml(skypilot_task(plan)))
    task = sky.Task.from_yaml(str(path))
    assert task.num_nodes == 1


def test_k8s_single_node_is_a_job() -> None:
    plan = make_plan(billings=("on-demand", "spot"), spot_mtbf_hours=1e6, max_nodes=1)
    doc = k8s_manifest(plan, image="ghcr.io/me/train:1")
    from kubernetes.client import V1Job

    strict_model(doc, V1Job)
    pod = doc["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    keys = {e["key"]: e["values"] for t in terms for e in t["matchExpressions"]}
    # any one label schedules the pod: GKE's, GPU Feature Discovery's, or (no GFD) the instance type
    assert keys == {
        "cloud.google.com/gke-accelerator": ["nvidia-tesla-a100"],
        "nvidia.com/gpu.product": ["NVIDIA-A100-SXM4-40GB"],
        "node.kubernetes.io/instance-type": [plan.winner.instance_type],
    }
    assert len(terms) == 3  # separate terms are ORed
    assert (
        pod["securityContext"]["fsGroup"] == 1000
    )  # the image's non-root trainer writes /checkpoints
    assert (
        "preferredDuringSchedulingIgnoredDuringExecution" in pod["affinity"]["nodeAffinity"]
    )  # spot won
    assert pod["terminationGracePeriodSeconds"] == grace_period_seconds(plan.winner)
    # spot won: the grace fits AWS's two-minute notice
    assert 60 <= pod["terminationGracePeriodSeconds"] <= 120
    assert container["command"][-1] == "exec gpuwise run --nproc-per-node 8 -- python train.py"
    assert container["image"] == "ghcr.io/me/train:1"
    default = k8s_manifest(plan)["spec"]["template"]["spec"]["containers"][0]["image"]
    assert default.startswith("gpuwise-job:")  # users build it from deploy/docker/job.Dockerfile
    assert pod["restartPolicy"] == "Never"  # required by the pod failure policy
    rule = doc["spec"]["podFailurePolicy"]["rules"][0]
    assert rule["action"] == "Ignore" and rule["onPodConditions"][0]["type"] == "DisruptionTarget"
    assert yaml.safe_load(to_yaml(doc)) == doc


def test_grace_period_covers_the_checkpoint_write() -> None:
    # 50 GiB at 0.1 GB/s = 537 s → 1.5 × 537 + 30 = 836 s
    plan = make_plan(
        checkpoint_gib=50, checkpoint_bandwidth_gb_s=0.1, max_nodes=1, billings=("on-demand",)
    )
    assert plan.winner is not None and plan.winner.checkpoint_hours is not None
    write_s = 50 * 2**30 / 0.1e9
    assert grace_period_seconds(plan.winner) == pytest.approx(1.5 * write_s + 30, abs=1)
    # on spot the node goes after the provider's notice whatever the pod asks: AWS gives 120 s
    spot = make_plan(
        checkpoint_gib=50, checkpoint_bandwidth_gb_s=0.1, max_nodes=1, billings=("spot",)
    )
    assert spot.winner is not None and spot.winner.cloud == "aws"
    assert grace_period_seconds(spot.winner) == 120


def test_the_checkpoint_claim_is_shared_only_with_read_write_many() -> None:
    from kubernetes.client import V1PersistentVolumeClaim

    from gpuwise.planner.export import k8s_checkpoint_pvc

    multi = make_plan(objective="time", billings=("on-demand",), checkpoint_gib=40)
    single = make_plan(billings=("on-demand",), checkpoint_gib=40, max_nodes=1)
    for p, mode in ((multi, "ReadWriteMany"), (single, "ReadWriteOnce")):
        claim = k8s_checkpoint_pvc(p)
        strict_model(claim, V1PersistentVolumeClaim)
        assert claim["spec"]["accessModes"] == [mode]
        assert claim["spec"]["resources"]["requests"]["storage"] == "120Gi"  # three checkpoints
        assert claim["metadata"]["name"] == k8s_manifest(p)["metadata"]["name"] + "-checkpoints"


def test_k8s_multi_node_is_a_pytorchjob() -> None:
    plan = make_plan(objective="time", billings=("on-demand",))
    doc = k8s_manifest(plan, pvc="ckpt-pvc")
    from kubeflow.training.models import KubeflowOrgV1PyTorchJob

    strict_model(doc, KubeflowOrgV1PyTorchJob)
    assert doc["kind"] == "PyTorchJob" and doc["apiVersion"] == "kubeflow.org/v1"
    specs = doc["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 1
    pod = specs["Worker"]["template"]["spec"]
    assert pod["containers"][0]["name"] == "pytorch"  # the training operator looks for this name
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ckpt-pvc"}} in pod[
        "volumes"
    ]
    # the operator's PET_*/MASTER_* variables give gpuwise run the node count, rank and rendezvous
    assert (
        pod["containers"][0]["command"][-1]
        == "exec gpuwise run --nproc-per-node 8 -- python train.py"
    )
    assert "torchrun" not in pod["containers"][0]["command"][-1]


def test_the_strict_validator_catches_mistakes() -> None:
    from kubernetes.client import V1Job

    plan = make_plan(max_nodes=1)
    doc = k8s_manifest(plan)
    doc["spec"]["template"]["spec"]["containers"][0]["resource"] = {}  # typo
    with pytest.raises(AssertionError, match="unknown field"):
        strict_model(doc, V1Job)
    doc = k8s_manifest(plan)
    del doc["spec"]["template"]["spec"]["containers"][0]["name"]  # required
    with pytest.raises(ValueError):
        strict_model(doc, V1Job)


def test_exporting_an_empty_plan_says_why() -> None:
    plan = make_plan(deadline_hours=0.1)
    assert plan.options == ()
    with pytest.raises(PlanError, match="nothing to export"):
        skypilot_task(plan)
    with pytest.raises(PlanError):
        k8s_manifest(plan)


def test_the_job_reads_back_what_the_export_sets() -> None:
    from gpuwise.errors import InputError
    from gpuwise.planner import job_settings
    from gpuwise.planner.export import settings_env

    plan = make_plan(billings=("on-demand",), max_nodes=1)
    w = plan.options[0]
    # the toy model has no settings: give the winner some, as the estimator's search does
    import dataclasses

    w = dataclasses.replace(
        w,
        settings={
            "zero": 3,
            "recompute": "selective",
            "micro_batch": 2,
            "accumulation": 8,
            "global_batch": 128,
            "data_parallel": 8,
            "tensor_parallel": 1,
            "text": "ZeRO-3, selective recompute, micro-batch 2 × 8 acc. × 8 GPUs = 128",
        },
    )
    env = settings_env(w)
    s = job_settings(env)
    assert (s.zero, s.recompute, s.micro_batch, s.accumulation) == (3, "selective", 2, 8)
    assert (s.global_batch, s.data_parallel, s.checkpoint_dir) == (128, 8, "/checkpoints")
    assert s.micro_batch * s.accumulation * s.data_parallel == s.global_batch
    k8s_env = {
        e["name"]: e["value"]
        for e in k8s_manifest(plan)["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert set(k8s_env) >= {"GPUWISE_CHECKPOINT_DIR"}
    assert job_settings({}).micro_batch is None
    with pytest.raises(InputError, match="GPUWISE_ZERO"):
        job_settings({"GPUWISE_ZERO": "three"})


# Spot on Kubernetes, per cloud: the spot nodes' label preferred (so on-demand nodes remain the
# fallback) and the taint their pools put on them tolerated (AKS spot pools always taint).
@pytest.mark.parametrize(
    ("cloud", "itype", "prefer", "tolerate"),
    [
        (
            "azure",
            "Standard_ND96asr_v4",
            {"kubernetes.azure.com/scalesetpriority": ["spot"]},
            {("kubernetes.azure.com/scalesetpriority", "spot", "NoSchedule")},
        ),
        (
            "gcp",
            "a2-highgpu-8g",
            {"cloud.google.com/gke-spot": ["true"]},
            {("cloud.google.com/gke-spot", "true", "NoSchedule")},
        ),
        (
            "aws",
            "p4d.24xlarge",
            {"eks.amazonaws.com/capacityType": ["SPOT"], "karpenter.sh/capacity-type": ["spot"]},
            set(),
        ),
    ],
)
@pytest.mark.parametrize("billing", ["spot", "on-demand"])
def test_k8s_spot_is_scheduled_per_cloud_with_an_on_demand_fallback(
    cloud: str,
    itype: str,
    prefer: dict[str, list[str]],
    tolerate: set[tuple[str, ...]],
    billing: str,
) -> None:
    from kubernetes.client import V1Job

    offers = [offer(cloud, "r1", itype, "A100", 8, 32.0, 12.0)]
    plan = plan_offers(
        offers,
        ToyModel(),
        PlanRequest(max_nodes=1, billings=(billing,), spot_mtbf_hours=1e6),  # type: ignore[arg-type]
        spot=load_spot_defaults(),
        reserved={},
        startup=NO_STARTUP,
    )
    doc = k8s_manifest(plan)
    strict_model(doc, V1Job)
    pod = doc["spec"]["template"]["spec"]
    affinity = pod["affinity"]["nodeAffinity"]
    taints = {
        (t["key"], t.get("value"), t["effect"])
        for t in pod["tolerations"]
        if t["key"] != "nvidia.com/gpu"
    }
    from gpuwise.planner.export import k8s_spot_note

    if billing == "on-demand":  # no spot node is preferred or tolerated
        assert "preferredDuringSchedulingIgnoredDuringExecution" not in affinity and not taints
        assert k8s_spot_note(plan) is None
        return
    assert f"prefer {cloud} spot nodes" in (k8s_spot_note(plan) or "")
    preferred = {
        e["key"]: e["values"]
        for p in affinity["preferredDuringSchedulingIgnoredDuringExecution"]
        for e in p["preference"]["matchExpressions"]
    }
    assert preferred == prefer and taints == tolerate
    # preferred, never required: with no spot node the pod runs on an on-demand one
    required = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert not any(k in str(required) for k in prefer)


def _scarce_h100_plan(**req: Any):  # type: ignore[no-untyped-def]
    import dataclasses

    offers = [
        dataclasses.replace(offer("aws", r, "p5.48xlarge", "H100", 8, 98.0, spot), vcpus=192.0)
        for r, spot in (("us-east-1", 40.0), ("us-west-2", 41.0))
    ]
    request = PlanRequest(**{"max_nodes": 1, "spot_mtbf_hours": 1e6, **req})
    startup = dataclasses.replace(NO_STARTUP, scarce_gpus=("H100",))
    return plan_offers(
        offers, ToyModel(), request, spot=load_spot_defaults(), reserved={}, startup=startup
    )


def test_scarce_spot_exports_keep_an_on_demand_candidate_with_its_price() -> None:
    from gpuwise.planner.export import skypilot_notes

    plan = _scarce_h100_plan()
    assert plan.winner is not None and plan.winner.billing == "spot" and plan.winner.capacity_note
    doc = skypilot_task(plan, candidates=2)
    validate_skypilot(doc)
    listed = doc["resources"]["ordered"]
    assert [c["use_spot"] for c in listed] == [True, False]  # the last slot: on-demand
    assert listed[1]["instance_type"] == "p5.48xlarge"
    note = " ".join(skypilot_notes(plan))
    assert "spot capacity is flagged scarce" in note and "$98.00/h" in note
    # room for every candidate: the on-demand ones are listed anyway, no note about a swap
    assert [c["use_spot"] for c in skypilot_task(plan)["resources"]["ordered"]] == [
        True,
        True,
        False,
        False,
    ]


def test_scarcity_is_by_gpu_family_not_exact_name() -> None:
    import dataclasses

    costs = dataclasses.replace(NO_STARTUP, scarce_gpus=("A100-80GB", "H100"))
    assert costs.is_scarce("A100-80GB-PCIE")  # a form factor of a listed GPU
    assert costs.is_scarce("H100-NVL") and costs.is_scarce("H100")
    assert not costs.is_scarce("A100")  # the 40 GB A100 is not the 80 GB one
    assert not costs.is_scarce("H200")


def test_a_spot_winner_names_the_quota_it_needs() -> None:
    plan = _scarce_h100_plan(billings=("spot",))
    text = "\n".join(plan.explanation)
    assert "Quota: the winner asks for 192 spot vCPUs at once in us-east-1" in text
    assert "All P Spot Instance Requests" in text


def test_inference_replicas_ask_for_no_fabric() -> None:
    import dataclasses

    plan = make_plan(objective="time", billings=("on-demand",))
    assert plan.winner is not None and plan.winner.nodes == 2
    tiers = [c.get("network_tier") for c in skypilot_task(plan)["resources"]["ordered"]]
    assert "best" in tiers  # training: the nodes all-reduce over EFA
    served = dataclasses.replace(plan, workload={**plan.workload, "task": "inference"})
    tiers = [c.get("network_tier") for c in skypilot_task(served)["resources"]["ordered"]]
    assert "best" not in tiers  # replicas never talk to each other

    def efa(p):  # type: ignore[no-untyped-def]
        spec = k8s_manifest(p)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        return spec["containers"][0]["resources"]["limits"].get("vpc.amazonaws.com/efa")

    assert efa(plan) == "32" and efa(served) is None  # nor EFA devices on Kubernetes


def test_the_skypilot_header_says_which_network_skypilot_builds() -> None:
    from gpuwise.planner.export import skypilot_notes

    plan = make_plan(objective="time", billings=("on-demand",))
    assert plan.winner is not None and plan.winner.instance_type == "p5.48xlarge"
    assert plan.winner.network == "100 Gbit/s EFA"  # one of the 32 interfaces
    text = " ".join(skypilot_notes(plan))
    assert "the one EFA interface SkyPilot attaches by default (of 32)" in text
    plan = make_plan(objective="time", billings=("on-demand",), aws_efa_interfaces="all")
    assert plan.winner is not None and plan.winner.network == "3200 Gbit/s EFA"
    assert "only with aws.use_internal_ips: true" in " ".join(skypilot_notes(plan))
