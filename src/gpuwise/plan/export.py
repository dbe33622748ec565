"""Hand a plan to a launcher: a SkyPilot task YAML, or a Kubernetes Job / Kubeflow PyTorchJob.

Both are plain dicts (dump them with :func:`to_yaml`); the tests validate them against
SkyPilot's own schema and the Kubernetes / Kubeflow client models. What the documents carry:

- SkyPilot: our ranking as ``resources.ordered`` (or ``any_of``) candidates of the winner's
  node count, ``use_spot`` per candidate, ``job_recovery`` (SkyPilot's default strategy
  ``EAGER_NEXT_REGION``, docs "managed jobs"), ``num_nodes``, a checkpoint bucket mounted
  ``MOUNT_CACHED`` (SkyPilot's recommendation for checkpoints), and ``run:`` through
  ``gpuwise run``.
- Kubernetes: a Job whose pod failure policy ignores disruptions (preemption, drain) so only
  real failures count against ``backoffLimit``; ``nvidia.com/gpu`` limits, a required node affinity for the GPU model (GKE's
  ``cloud.google.com/gke-accelerator`` or GPU Feature Discovery's ``nvidia.com/gpu.product``,
  labels in ``data/k8s_gpu_labels.yaml``), a preference for spot nodes when the plan chose
  spot, and ``terminationGracePeriodSeconds`` long enough for an emergency checkpoint:
  1.5 × the checkpoint write time + 30 s for shutdown, at least 60 s (gpuwise's rule; the
  Kubernetes default of 30 s is too short for most checkpoints, see docs/plan.md).
"""

from __future__ import annotations

import functools
import math
import re
import shlex
from importlib import resources
from typing import Any, Literal

from gpuwise.errors import PlanError
from gpuwise.plan.values import Plan, PlanOption

CHECKPOINT_DIR = "/checkpoints"
DEFAULT_COMMAND = "python train.py"
DEFAULT_IMAGE = "pytorch/pytorch:latest"


def _name(plan: Plan, name: str | None) -> str:
    if name:
        raw = name
    else:
        w = plan.workload
        model = w.get("model")
        model = model.get("name") if isinstance(model, dict) else model
        raw = "-".join(str(v) for v in (model, w.get("task")) if v) or "job"
        raw = f"gpuwise-{raw}"
    slug = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")[:50].strip("-")
    return slug or "gpuwise-job"


def _winner(plan: Plan) -> PlanOption:
    if plan.winner is None:
        raise PlanError("nothing to export: no option meets the constraints",
                        hint="loosen --deadline/--budget (see the nearest miss) and export again")
    return plan.winner


def _script(command: str) -> str:
    """The user's command; ``python X`` becomes ``torchrun ... X`` so every GPU gets a rank."""
    parts = shlex.split(command)
    if not parts:
        raise PlanError("empty --run command", hint="give the training command, e.g. 'python train.py'")
    return " ".join(shlex.quote(p) for p in parts[1:]) if parts[0] in ("python", "python3") else ""


def skypilot_task(plan: Plan, *, name: str | None = None, command: str = DEFAULT_COMMAND,
                  bucket: str | None = None, candidates: int = 8,
                  mode: Literal["ordered", "any_of"] = "ordered") -> dict[str, Any]:
    """A SkyPilot task (managed job) for the plan's winner and its closest alternatives."""
    w = _winner(plan)
    task_name = _name(plan, name)
    chosen: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str, bool]] = set()
    for o in plan.options:  # same node count and GPUs per node as the winner: num_nodes is per task
        if o.nodes != w.nodes or o.gpu_count != w.gpu_count:
            continue
        for region in o.regions:
            key = (o.cloud, region, o.instance_type, o.billing == "spot")
            if key in seen:
                continue
            seen.add(key)
            chosen.append({"infra": f"{o.cloud}/{region}", "instance_type": o.instance_type,
                           "use_spot": o.billing == "spot"})
            if len(chosen) >= candidates:
                break
        if len(chosen) >= candidates:
            break
    script = _script(command)
    if script:
        run = ("gpuwise run -- torchrun --nnodes=$SKYPILOT_NUM_NODES "
               "--nproc-per-node=$SKYPILOT_NUM_GPUS_PER_NODE --node-rank=$SKYPILOT_NODE_RANK "
               "--master-addr=$(echo \"$SKYPILOT_NODE_IPS\" | head -n1) --master-port=29500 "
               f"{script}")
    else:
        run = f"gpuwise run -- {command}"
    resources_doc: dict[str, Any] = {
        mode: chosen,
        "job_recovery": {"strategy": "EAGER_NEXT_REGION", "max_restarts_on_errors": 3},
    }
    return {
        "name": task_name,
        "num_nodes": w.nodes,
        "resources": resources_doc,
        "envs": {"GPUWISE_CHECKPOINT_DIR": CHECKPOINT_DIR},
        "file_mounts": {CHECKPOINT_DIR: {"name": bucket or f"{task_name}-checkpoints", "mode": "MOUNT_CACHED"}},
        "run": run,
    }


@functools.lru_cache(maxsize=1)
def _labels() -> dict[str, dict[str, list[str]]]:
    import yaml

    raw = yaml.safe_load(resources.files("gpuwise.plan").joinpath("data/k8s_gpu_labels.yaml").read_text("utf-8"))
    out: dict[str, dict[str, list[str]]] = {}
    for gpu, entry in (raw or {}).items():
        out[str(gpu)] = {k: [v] if isinstance(v, str) else list(v) for k, v in (entry or {}).items()}
    return out


def gpu_node_affinity(gpu: str, spot: bool) -> dict[str, Any]:
    """Required affinity for the GPU model (GKE label OR GPU Feature Discovery label); spot preferred."""
    labels = _labels().get(gpu, {})
    terms = []
    if labels.get("gke"):
        terms.append({"matchExpressions": [{"key": "cloud.google.com/gke-accelerator", "operator": "In",
                                            "values": labels["gke"]}]})
    product = labels.get("product") or [f"NVIDIA-{gpu}"]
    terms.append({"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": product}]})
    affinity: dict[str, Any] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
    if spot:  # GKE Spot, EKS managed node groups, Karpenter
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": 100, "preference": {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}}
            for key, value in (("cloud.google.com/gke-spot", "true"), ("eks.amazonaws.com/capacityType", "SPOT"),
                               ("karpenter.sh/capacity-type", "spot"))
        ]
    return {"nodeAffinity": affinity}


def grace_period_seconds(option: PlanOption) -> int:
    """1.5 × checkpoint write time + 30 s, at least 60 s (module docstring)."""
    write_s = (option.checkpoint_hours or 0.0) * 3600
    return max(60, math.ceil(1.5 * write_s + 30))


def _pod_spec(w: PlanOption, container: str, image: str, argv: list[str], pvc: str,
              restart: str | None) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    volumes.append({"name": "checkpoints", "persistentVolumeClaim": {"claimName": pvc}})
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": grace_period_seconds(w),
        "affinity": gpu_node_affinity(w.gpu, w.billing == "spot"),
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{
            "name": container,
            "image": image,
            "command": argv,
            "env": [{"name": "GPUWISE_CHECKPOINT_DIR", "value": CHECKPOINT_DIR}],
            "resources": {"limits": {"nvidia.com/gpu": str(w.gpu_count)}},
            "volumeMounts": [{"name": "checkpoints", "mountPath": CHECKPOINT_DIR},
                             {"name": "dshm", "mountPath": "/dev/shm"}],
        }],
        "volumes": volumes,
    }
    if restart:
        spec["restartPolicy"] = restart
    return spec


def k8s_manifest(plan: Plan, *, name: str | None = None, command: str = DEFAULT_COMMAND,
                 image: str = DEFAULT_IMAGE, pvc: str | None = None, backoff_limit: int = 10) -> dict[str, Any]:
    """A ``batch/v1`` Job for one node, a ``kubeflow.org/v1`` PyTorchJob for several."""
    w = _winner(plan)
    job_name = _name(plan, name)
    pvc = pvc or f"{job_name}-checkpoints"
    script = _script(command)
    labels = {"app.kubernetes.io/name": job_name, "app.kubernetes.io/managed-by": "gpuwise"}
    if w.nodes == 1:
        inner = f"torchrun --standalone --nproc-per-node={w.gpu_count} {script}" if script else command
        argv = ["sh", "-c", f"exec gpuwise run -- {inner}"]
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": job_name, "labels": labels},
            "spec": {
                "backoffLimit": backoff_limit,
                # a preempted or drained node is not the program's fault: retry without counting it
                # (Job pod failure policy, Kubernetes ≥ 1.26; needs restartPolicy Never)
                "podFailurePolicy": {"rules": [
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                ]},
                "template": {"metadata": {"labels": labels},
                             "spec": _pod_spec(w, "train", image, argv, pvc, "Never")},
            },
        }
    # The training operator sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE (= nodes) and RANK per pod.
    inner = (f"torchrun --nnodes=$WORLD_SIZE --node-rank=$RANK --nproc-per-node={w.gpu_count} "
             f"--master-addr=$MASTER_ADDR --master-port=$MASTER_PORT {script}") if script else command
    argv = ["sh", "-c", f"exec gpuwise run -- {inner}"]

    def replica(count: int) -> dict[str, Any]:
        return {"replicas": count, "restartPolicy": "OnFailure",
                "template": {"metadata": {"labels": labels},
                             "spec": _pod_spec(w, "pytorch", image, argv, pvc, None)}}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": job_name, "labels": labels},
        "spec": {
            "runPolicy": {"backoffLimit": backoff_limit},
            "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(w.nodes - 1)},
        },
    }


def to_yaml(doc: dict[str, Any]) -> str:
    """Block-style YAML, keys in the order built, no anchors/aliases."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return str(yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000))
