"""Hand a plan to a launcher: a SkyPilot task YAML, or a Kubernetes Job / Kubeflow PyTorchJob.

Both are plain dicts (dump them with :func:`to_yaml`); the tests validate them against
SkyPilot's own schema and the Kubernetes / Kubeflow client models. What the documents carry:

- SkyPilot: our ranking as ``resources.ordered`` (or ``any_of``) candidates of the winner's
  node count and settings, each pinned to the zone its price comes from, ``use_spot`` per
  candidate, ``network_tier: best`` on every candidate of a multi-node job whose time assumes
  EFA/InfiniBand/RDMA/GPUDirect-TCPX (SkyPilot attaches them only then), ``job_recovery``
  (strategy ``EAGER_NEXT_REGION``; ``recover_on_exit_codes: [75]`` so ``gpuwise run``'s exit on a
  spot notice is a recovery, not an error; ``max_restarts_on_errors`` :data:`RESTARTS_ON_ERRORS`),
  ``num_nodes``, ``workdir`` (the user's code), ``setup`` (gpuwise from :data:`PIP_SPEC_ENV` or a
  wheel shipped in the workdir, never an unpublished release pin; then the user's requirements), the
  searched settings as ``GPUWISE_*`` variables (read with :func:`gpuwise.planner.job_settings`), a
  checkpoint bucket mounted ``MOUNT_CACHED`` (SkyPilot's recommendation for checkpoints), and
  ``run:`` through ``gpuwise run`` with the user's command as written (variables expand).
- Kubernetes: an image with gpuwise and the EFA libraries (``deploy/docker/job.Dockerfile``),
  CPU/memory requests sized to fit the chosen instance's allocatable share (:func:`_requests`),
  EFA devices on AWS multi-node jobs; a Job whose pod failure policy ignores disruptions
  (preemption, drain) so only real failures count against ``backoffLimit``; ``nvidia.com/gpu``
  limits; a required node affinity that any of three labels satisfies — GKE's
  ``cloud.google.com/gke-accelerator``, GPU Feature Discovery's ``nvidia.com/gpu.product`` (only
  where GFD runs), or the well-known ``node.kubernetes.io/instance-type`` every kubelet sets (the
  fallback on stock EKS/AKS); when the plan chose spot, a preference for the cloud's spot nodes
  and the tolerations its spot pools need (AKS ``kubernetes.azure.com/scalesetpriority=spot``;
  data/k8s_spot.yaml), preferred rather than required so the pod falls back to on-demand; ``fsGroup``
  1000 so the image's non-root trainer can write the checkpoint volume; a checkpoint
  PersistentVolumeClaim (:func:`k8s_checkpoint_pvc`: ReadWriteMany when several pods share it);
  and ``terminationGracePeriodSeconds`` long enough for an emergency checkpoint (1.5 × the write
  time + 30 s, at least 60 s; gpuwise's rule) but, on spot, no longer than the provider's notice.
"""

from __future__ import annotations

import functools
import math
import re
import shlex
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal

from gpuwise.errors import PlanError
from gpuwise.planner.values import Plan, PlanOption

if TYPE_CHECKING:
    from gpuwise.base.recipe import PlanFile

CHECKPOINT_DIR = "/checkpoints"
DEFAULT_COMMAND = "python train.py"
PIP_SPEC_ENV = "GPUWISE_PIP_SPEC"
"""Environment variable the SkyPilot ``setup`` honours first: ``pip install`` arguments (a wheel
path, a local checkout, ``gpuwise[train]==X`` from an index that has it); how a test installs the
tree under test. Set it in the task's ``envs`` or with ``sky jobs launch --env``."""
WHEEL_DIR = ".gpuwise-dist"
"""Folder of the task's ``workdir`` that :func:`write_wheel` fills with the gpuwise wheel the plan
ran with; ``setup`` installs it when :data:`PIP_SPEC_ENV` is not set."""
REQUIREMENTS = "requirements.txt"
RESTARTS_ON_ERRORS = 2
"""Managed-job restarts after the user's program fails with another code than 75: gpuwise's rule
(a transient fault such as an NCCL timeout or a lost node gets two more tries; a deterministic bug
stops after three runs instead of paying for more). Exit 75 (preempted) is always recovered."""
RECOVER_ON_EXIT_CODES = (75,)
"""``gpuwise run`` exits 75 (``EX_TEMPFAIL``) when a spot notice stopped the job after a checkpoint."""


def default_image() -> str:
    """``gpuwise-job:<version>``: the image users build from ``deploy/docker/job.Dockerfile``."""
    return f"gpuwise-job:{_version()}"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpuwise")
    except PackageNotFoundError:  # a source checkout without an install
        return "0.1.0"


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
        raise PlanError(
            "nothing to export: no option meets the constraints",
            hint="loosen the deadline or budget (see the nearest miss) and export again",
        )
    return plan.winner


def _script(command: str) -> list[str]:
    """The user's command as argv; ``torchrun`` is refused: ``gpuwise run`` starts it itself."""
    parts = shlex.split(command)
    if not parts:
        raise PlanError(
            "empty run command", hint="give the training command, e.g. 'python train.py'"
        )
    if parts[0] == "torchrun" or parts[:3] == ["python", "-m", "torch.distributed.run"]:
        raise PlanError(
            "the run command starts torchrun; gpuwise run already does",
            hint="give the script as 'python train.py ARGS' (gpuwise run wraps it in torchrun)",
        )
    return parts


def run_line(option: PlanOption, command: str, plan_path: str | None = None) -> str:
    """``gpuwise run --nproc-per-node N -- COMMAND``: torchrun is gpuwise run's job.

    The user's command is passed as written (after the torchrun check), so the launcher's shell
    expands its variables and honours its quoting: ``--checkpoint-dir "$GPUWISE_CHECKPOINT_DIR"``
    reaches the script as the folder's path. One node: the GPU count is written out. Several
    nodes: ``gpuwise run`` reads the launcher's variables (SkyPilot's ``SKYPILOT_*``, the
    PyTorchJob's ``PET_*``) for node count, rank and rendezvous.
    """
    _script(command)  # validates: not empty, not torchrun
    plan = f"--plan {shlex.quote(plan_path)} " if plan_path else ""
    return f"gpuwise run {plan}--nproc-per-node {option.gpu_count} -- {command.strip()}"


def setup_script(requirements: str = REQUIREMENTS) -> str:
    """Install gpuwise, then the user's requirements.

    gpuwise comes from ``$GPUWISE_PIP_SPEC`` when set, else from the wheel :func:`write_wheel` put
    in the workdir's :data:`WHEEL_DIR` (the exact code the plan ran with); with neither, setup
    stops with the fix, instead of installing a release pin that may not exist on the index."""
    req = shlex.quote(requirements)
    return (
        "set -e\n"
        f'if [ -n "${{{PIP_SPEC_ENV}:-}}" ]; then\n'
        f"  python -m pip install --upgrade ${PIP_SPEC_ENV}\n"
        f"elif ls {WHEEL_DIR}/gpuwise-*.whl >/dev/null 2>&1; then\n"
        f'  python -m pip install --upgrade "$(ls {WHEEL_DIR}/gpuwise-*.whl | head -n 1)[train]"\n'
        "else\n"
        f'  echo "error: no gpuwise to install — To fix: export with --workdir so the wheel is '
        f'written to {WHEEL_DIR}/, or set {PIP_SPEC_ENV}" >&2\n'
        "  exit 2\n"
        "fi\n"
        f"if [ -f {req} ]; then python -m pip install -r {req}; fi\n"
    )


# AWS zone IDs (use1-az4, use1-atl2-az1): the same physical zone in every account. SkyPilot's
# `infra:` takes zone *names* (us-east-1a), which AWS maps to IDs differently per account.
_AWS_ZONE_ID = re.compile(r"^[a-z]{2,6}\d-(?:[a-z]+\d+-)?az\d+$")


def _is_aws_zone_id(o: PlanOption) -> bool:
    return o.cloud == "aws" and bool(o.zone) and bool(_AWS_ZONE_ID.match(o.zone or ""))


def _infra(o: PlanOption, region: str) -> str:
    """``cloud/region`` or, where the option's price is one zone's, ``cloud/region/zone``.

    An AWS zone ID cannot be written as a zone name without the user's account, so those
    candidates name the region and :func:`zone_id_notes` says which zone the price is from."""
    if o.zone and region == o.region and not _is_aws_zone_id(o):
        return f"{o.cloud}/{region}/{o.zone}"
    return f"{o.cloud}/{region}"


def zone_id_notes(plan: Plan, candidates: int = 8) -> list[str]:
    """One line per exported AWS candidate whose price is one zone's, given by zone ID: how to
    pin that zone by the name it has in the user's account."""
    w = _winner(plan)
    notes: list[str] = []
    listed: list[PlanOption] = []
    for o, _ in _listed(plan, candidates):  # only the exported candidates
        if not any(o is x for x in listed):
            listed.append(o)
    for o in listed:
        if _is_aws_zone_id(o) and (o.zone_pinned or o is w or o.zones_set_aside):
            aside = (
                f" SkyPilot, given only the region, picks its cheapest zone, which may be one gpuwise "
                f"set aside as a price outlier ({', '.join(o.zones_set_aside)}, e.g. a Local Zone)."
                if o.zones_set_aside
                else ""
            )
            notes.append(
                f"{o.instance_type} in {o.region}: the ${o.price_usd_per_hour:,.2f}/h price is zone ID "
                f"{o.zone}'s.{aside} To pin it, add its name in your account to infra (aws/{o.region}/NAME; "
                f"aws ec2 describe-availability-zones --region {o.region} --zone-ids {o.zone})"
            )
        if len(notes) >= candidates:
            break
    return notes


def skypilot_task(
    plan: Plan,
    *,
    name: str | None = None,
    command: str = DEFAULT_COMMAND,
    bucket: str | None = None,
    candidates: int = 8,
    mode: Literal["ordered", "any_of"] = "ordered",
    workdir: str = ".",
    requirements: str = REQUIREMENTS,
    plan_file: PlanFile | None = None,
) -> dict[str, Any]:
    """A SkyPilot task (managed job) for the plan's winner and its closest alternatives.

    Candidates keep the winner's node count, GPUs per node and settings (``num_nodes`` is per
    task); each names the zone its price comes from. ``setup`` installs gpuwise and the user's
    requirements on a fresh VM; ``workdir`` syncs the user's code; ``run`` goes through
    ``gpuwise run`` (which reads ``SKYPILOT_*`` for multi-node rendezvous). With ``plan_file``
    the job runs that recipe: the caller writes it to :data:`SKYPILOT_PLAN_PATH` in the workdir
    (synced with the code) and ``gpuwise run --plan`` hands it to every worker.
    """
    w = _winner(plan)
    task_name = _name(plan, name)
    # inference replicas never talk to each other: no fabric to ask for
    talks = str(plan.workload.get("task", "")) != "inference"
    chosen: list[dict[str, Any]] = []
    for o, region in _listed(plan, candidates):
        candidate: dict[str, Any] = {
            "infra": _infra(o, region),
            "instance_type": o.instance_type,
            "use_spot": o.billing == "spot",
        }
        if o.nodes > 1 and o.network_tier == "best" and talks:
            # EFA / InfiniBand / GPUDirect are attached only when asked: the plan timed them
            candidate["network_tier"] = "best"
        chosen.append(candidate)
    envs = settings_env(w, plan_file, SKYPILOT_PLAN_PATH)
    return {
        "name": task_name,
        "workdir": workdir,
        "num_nodes": w.nodes,
        "resources": {
            mode: chosen,
            # exit 75 (spot notice, checkpoint saved) is a recovery; other failures get a small budget
            "job_recovery": {
                "strategy": "EAGER_NEXT_REGION",
                "max_restarts_on_errors": RESTARTS_ON_ERRORS,
                "recover_on_exit_codes": list(RECOVER_ON_EXIT_CODES),
            },
        },
        "envs": envs,
        "file_mounts": {
            CHECKPOINT_DIR: {"name": bucket or f"{task_name}-checkpoints", "mode": "MOUNT_CACHED"}
        },
        "setup": setup_script(requirements),
        "run": run_line(w, command, SKYPILOT_PLAN_PATH if plan_file else None),
    }


def _listed(plan: Plan, candidates: int = 8) -> list[tuple[PlanOption, str]]:
    """(option, region) of each SkyPilot candidate, in order: options with the winner's node
    count, GPUs per node and settings, one per region (the same infra, instance type and billing
    once); when every one is spot on a GPU whose spot capacity is flagged scarce, the last is the
    best on-demand option instead (:func:`skypilot_notes` says so)."""
    w = _winner(plan)
    same = [
        o
        for o in plan.options
        if o.nodes == w.nodes and o.gpu_count == w.gpu_count and o.settings == w.settings
    ]
    out: list[tuple[PlanOption, str]] = []
    seen: set[tuple[str, str, bool]] = set()
    for o in same:
        for region in o.regions:
            key = (_infra(o, region), o.instance_type, o.billing == "spot")
            if key not in seen:
                seen.add(key)
                out.append((o, region))
            if len(out) >= candidates:
                break
        if len(out) >= candidates:
            break
    scarce = any(o.billing == "spot" and o.capacity_note for o, _ in out)
    if scarce and all(o.billing == "spot" for o, _ in out):
        od = next((o for o in same if o.billing != "spot"), None)
        if od is not None:
            out[min(len(out), candidates - 1) :] = [(od, od.region)]
    return out


def _full_efa(o: PlanOption) -> float:
    from gpuwise.planner.network import instance_network

    return instance_network(o.cloud, o.instance_type).inter_node_gbit_s


def skypilot_notes(plan: Plan) -> list[str]:
    """Header lines of the SkyPilot task beyond the zone notes: the network SkyPilot builds where
    it is not the instance's fabric, and the on-demand fallback for scarce spot capacity (which
    option, at what price)."""
    from gpuwise.planner.network import NO_ACCELNET, NOT_BUILT

    notes = []
    said: set[str] = set()
    for o, _ in _listed(plan):
        if o.nodes < 2 or o.instance_type in said:
            continue
        said.add(o.instance_type)
        if o.network_fabric == "efa" and o.rdma_resource and o.rdma_resource[1] > 1:
            if o.network.startswith(f"{_full_efa(o):g} "):
                notes.append(
                    f"{o.instance_type}: timed on all {o.rdma_resource[1]} EFA interfaces, which "
                    "SkyPilot attaches only with aws.use_internal_ips: true (and use_ssm or an "
                    "ssh_proxy_command) in its config; without it, one."
                )
            else:
                notes.append(
                    f"{o.instance_type}: timed on {o.network}, the one EFA interface SkyPilot "
                    f"attaches by default (of {o.rdma_resource[1]}); with aws.use_internal_ips: "
                    "true in SkyPilot's config it attaches all: plan with --aws-efa-interfaces all."
                )
        elif o.instance_type.startswith(("a3-megagpu", "a3-ultragpu", "a4-")):
            notes.append(
                f"{o.instance_type}: exported without network_tier: best ({NOT_BUILT['manual']}); "
                f"timed on {o.network}, the default interface SkyPilot attaches."
            )
        elif o.cloud == "azure":
            notes.append(f"{o.instance_type}: timed on {o.network}: {NO_ACCELNET}.")
    listed = _listed(plan)
    od = listed[-1][0] if listed and listed[-1][0].billing != "spot" else None
    w = _winner(plan)
    if od is not None and w.billing == "spot" and w.capacity_note:
        notes.append(
            f"{w.gpu} spot capacity is flagged scarce: the last candidate is on-demand, "
            f"{od.instance_type} in {od.region} at ${od.price_usd_per_hour:,.2f}/h "
            f"(${od.cost_usd:,.0f} for the job, against ${w.cost_usd:,.0f} on spot)."
        )
    return notes


SETTINGS_ENV = {
    "zero": "GPUWISE_ZERO",
    "recompute": "GPUWISE_RECOMPUTE",
    "micro_batch": "GPUWISE_MICRO_BATCH",
    "accumulation": "GPUWISE_ACCUMULATION",
    "global_batch": "GPUWISE_GLOBAL_BATCH",
    "data_parallel": "GPUWISE_DATA_PARALLEL",
    "tensor_parallel": "GPUWISE_TENSOR_PARALLEL",
}
"""Settings field → the variable the exports set; :func:`gpuwise.planner.job_settings` reads them."""


SKYPILOT_PLAN_PATH = f"{WHEEL_DIR}/plan.json"
"""Where a SkyPilot job finds its plan file: in the workdir, beside the wheel."""
K8S_PLAN_DIR = "/etc/gpuwise/plan"
"""Where a Kubernetes job mounts its plan file (a ConfigMap, :func:`k8s_plan_configmap`)."""


def settings_env(
    w: PlanOption, plan_file: PlanFile | None = None, plan_path: str | None = None
) -> dict[str, str]:
    """The variables every export sets: the checkpoint folder, the searched settings and, with a
    plan file, where it is and its id (the exporter and monitor label the job's GPUs with it)."""
    envs = {"GPUWISE_CHECKPOINT_DIR": CHECKPOINT_DIR}
    if plan_file is not None and plan_path is not None:
        envs["GPUWISE_PLAN"] = plan_path
        envs["GPUWISE_PLAN_ID"] = plan_file.plan_id
    if w.settings:
        envs["GPUWISE_SETTINGS"] = str(w.settings.get("text", ""))
        for field_name, var in SETTINGS_ENV.items():
            value = w.settings.get(field_name)
            if value is not None:
                envs[var] = str(value)
    return envs


@functools.lru_cache(maxsize=1)
def _labels() -> dict[str, dict[str, list[str]]]:
    import yaml

    raw = yaml.safe_load(
        resources.files("gpuwise.planner").joinpath("data/k8s_gpu_labels.yaml").read_text("utf-8")
    )
    out: dict[str, dict[str, list[str]]] = {}
    for gpu, entry in (raw or {}).items():
        out[str(gpu)] = {
            k: [v] if isinstance(v, str) else list(v) for k, v in (entry or {}).items()
        }
    return out


def _spot_scheduling(cloud: str) -> dict[str, Any]:
    """``{"prefer": {label: value}, "tolerate": [taint]}`` of ``cloud``'s spot nodes
    (data/k8s_spot.yaml, sourced per cloud; ``default`` for others)."""
    import yaml

    raw = yaml.safe_load(
        resources.files("gpuwise.planner").joinpath("data/k8s_spot.yaml").read_text("utf-8")
    )
    return dict(raw.get(cloud) or raw["default"])


def spot_tolerations(cloud: str) -> list[dict[str, str]]:
    """The tolerations a pod needs for ``cloud``'s spot nodes (AKS taints them)."""
    return [
        {"key": t["key"], "operator": "Equal", "value": str(t["value"]), "effect": t["effect"]}
        for t in _spot_scheduling(cloud)["tolerate"]
    ]


def k8s_spot_note(plan: Plan) -> str | None:
    """What the manifest does on spot, with the on-demand fallback's price (None: not spot)."""
    w = _winner(plan)
    if w.billing != "spot":
        return None
    od = next(
        (
            o
            for o in plan.options
            if o.billing == "on-demand"
            and (o.cloud, o.instance_type, o.nodes) == (w.cloud, w.instance_type, w.nodes)
        ),
        None,
    )
    taint = " and tolerate their taint" if spot_tolerations(w.cloud) else ""
    price = (
        f"${od.price_usd_per_hour:,.2f}/h on-demand instead of ${w.price_usd_per_hour:,.2f}/h spot"
        if od is not None
        else "the on-demand price"
    )
    return (
        f"Spot: the pods prefer {w.cloud} spot nodes{taint}; where none is free they run on "
        f"on-demand nodes ({price})."
    )


def gpu_node_affinity(
    gpu: str, spot: bool, instance_type: str | None = None, cloud: str = "default"
) -> dict[str, Any]:
    """Required affinity for the GPU model: GKE's label OR GPU Feature Discovery's OR the instance
    type (the fallback where GFD does not run); spot: ``cloud``'s spot nodes preferred, so the pod
    falls back to on-demand nodes when there is no spot node."""
    labels = _labels().get(gpu, {})
    terms = []
    if labels.get("gke"):
        terms.append(
            {
                "matchExpressions": [
                    {
                        "key": "cloud.google.com/gke-accelerator",
                        "operator": "In",
                        "values": labels["gke"],
                    }
                ]
            }
        )
    product = labels.get("product") or [f"NVIDIA-{gpu}"]
    terms.append(
        {
            "matchExpressions": [
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": product}
            ]
        }
    )
    if instance_type:  # set by every cloud's kubelet: no GPU Feature Discovery needed
        terms.append(
            {
                "matchExpressions": [
                    {
                        "key": "node.kubernetes.io/instance-type",
                        "operator": "In",
                        "values": [instance_type],
                    }
                ]
            }
        )
    affinity: dict[str, Any] = {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
    }
    if spot:  # AKS spot pools, GKE Spot, EKS managed node groups, Karpenter
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {
                "weight": 100,
                "preference": {
                    "matchExpressions": [{"key": key, "operator": "In", "values": [str(value)]}]
                },
            }
            for key, value in _spot_scheduling(cloud)["prefer"].items()
        ]
    return {"nodeAffinity": affinity}


def grace_period_seconds(option: PlanOption) -> int:
    """1.5 × checkpoint write time + 30 s, at least 60 s; on spot, at most the provider's notice
    (AWS 120 s, GCP and Azure 30 s: spot.yaml), since the node goes away then whatever the pod asks."""
    write_s = (option.checkpoint_hours or 0.0) * 3600
    grace = max(60, math.ceil(1.5 * write_s + 30))
    if option.billing == "spot":
        from gpuwise.planner.spot import load_spot_defaults

        notice = load_spot_defaults(fetched=False).for_cloud(option.cloud).notice_seconds
        if notice is not None:
            grace = min(grace, int(notice))
    return grace


REQUEST_FRACTION = 0.8
"""Share of the instance's vCPUs and memory the pod requests: gpuwise's rule, leaving room for
what the node reserves (kubelet, system, eviction threshold: GKE and EKS reserve a few percent of
CPU and up to about a tenth of memory on large nodes) and for DaemonSets (device plugins, EFA,
logging), so the pod fits the chosen instance."""


def _requests(w: PlanOption) -> dict[str, str]:
    """CPU and memory requests: :data:`REQUEST_FRACTION` of the chosen instance."""
    out: dict[str, str] = {}
    if w.vcpus:
        out["cpu"] = str(max(1, math.floor(w.vcpus * REQUEST_FRACTION)))
    if w.memory_gib:
        out["memory"] = f"{max(1, math.floor(w.memory_gib * REQUEST_FRACTION))}Gi"
    return out


def k8s_checkpoint_pvc(
    plan: Plan, *, name: str | None = None, pvc: str | None = None
) -> dict[str, Any]:
    """The checkpoint volume claim the manifests mount: ReadWriteMany when several pods (nodes)
    share it (EFS, Filestore, Azure Files: a storage class that supports it), ReadWriteOnce for one;
    sized for three checkpoints (the newest, the one before, one being written)."""
    w = _winner(plan)
    claim = pvc or f"{_name(plan, name)}-checkpoints"
    if w.checkpoint_gib is None:
        raise PlanError(
            "the checkpoint size is unknown, so the volume cannot be sized",
            hint="give --checkpoint-size, or create the PVC yourself and pass --pvc",
        )
    size_gib = max(1, math.ceil(3 * w.checkpoint_gib))
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim},
        "spec": {
            "accessModes": ["ReadWriteMany" if w.nodes > 1 else "ReadWriteOnce"],
            "resources": {"requests": {"storage": f"{size_gib}Gi"}},
        },
    }


@dataclass(frozen=True)
class _PlanMount:
    """A plan file shipped to Kubernetes pods as a ConfigMap volume."""

    plan_file: PlanFile
    job_name: str

    @property
    def path(self) -> str:
        return f"{K8S_PLAN_DIR}/plan.json"

    @property
    def configmap(self) -> str:
        return f"{self.job_name}-plan"


def k8s_plan_configmap(
    plan: Plan, plan_file: PlanFile, *, name: str | None = None
) -> dict[str, Any]:
    """The ConfigMap that holds the plan file the job's pods mount (``k8s_manifest(plan_file=)``)."""
    mount = _PlanMount(plan_file, _name(plan, name))
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": mount.configmap,
            "labels": {
                "app.kubernetes.io/managed-by": "gpuwise",
                "gpuwise/plan-id": plan_file.plan_id,
            },
        },
        "data": {"plan.json": plan_file.to_json()},
    }


def _pod_spec(
    w: PlanOption,
    container: str,
    image: str,
    argv: list[str],
    pvc: str,
    restart: str | None,
    ship: _PlanMount | None = None,
    fabric: bool = True,
) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    volumes.append({"name": "checkpoints", "persistentVolumeClaim": {"claimName": pvc}})
    mounts: list[dict[str, Any]] = [
        {"name": "checkpoints", "mountPath": CHECKPOINT_DIR},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    if ship is not None:
        volumes.append({"name": "plan", "configMap": {"name": ship.configmap}})
        mounts.append({"name": "plan", "mountPath": K8S_PLAN_DIR, "readOnly": True})
    limits = {"nvidia.com/gpu": str(w.gpu_count)}
    if w.rdma_resource is not None and w.nodes > 1 and fabric:  # EFA: else NCCL uses TCP
        limits[w.rdma_resource[0]] = str(w.rdma_resource[1])
    resources_doc: dict[str, Any] = {"limits": limits}
    requests = _requests(w)
    if requests:
        resources_doc["requests"] = {**requests, **limits}
    shipped = settings_env(w, ship.plan_file, ship.path) if ship is not None else settings_env(w)
    env = [{"name": k, "value": v} for k, v in shipped.items()]
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": grace_period_seconds(w),
        # the image's trainer (uid 1000) must be able to write the mounted checkpoint volume
        "securityContext": {"fsGroup": 1000, "fsGroupChangePolicy": "OnRootMismatch"},
        "affinity": gpu_node_affinity(w.gpu, w.billing == "spot", w.instance_type, w.cloud),
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        + (spot_tolerations(w.cloud) if w.billing == "spot" else []),
        "containers": [
            {
                "name": container,
                "image": image,
                "command": argv,
                "env": env,
                "resources": resources_doc,
                "volumeMounts": mounts,
            }
        ],
        "volumes": volumes,
    }
    if restart:
        spec["restartPolicy"] = restart
    return spec


def k8s_manifest(
    plan: Plan,
    *,
    name: str | None = None,
    command: str = DEFAULT_COMMAND,
    image: str | None = None,
    pvc: str | None = None,
    backoff_limit: int = 10,
    plan_file: PlanFile | None = None,
) -> dict[str, Any]:
    """A ``batch/v1`` Job for one node, a ``kubeflow.org/v1`` PyTorchJob for several.

    ``image`` must contain gpuwise and the user's code (default :func:`default_image`, built from
    ``deploy/docker/job.Dockerfile``). The PyTorchJob operator sets ``PET_NNODES``,
    ``PET_NODE_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``, which ``gpuwise run`` reads. With
    ``plan_file`` the pods mount it from :func:`k8s_plan_configmap` (the caller applies both)
    and ``gpuwise run --plan`` hands it to every worker.
    """
    w = _winner(plan)
    ship = _PlanMount(plan_file, _name(plan, name)) if plan_file is not None else None
    image = image or default_image()
    job_name = _name(plan, name)
    pvc = pvc or f"{job_name}-checkpoints"
    labels = {"app.kubernetes.io/name": job_name, "app.kubernetes.io/managed-by": "gpuwise"}
    if w.nodes == 1:
        argv = ["sh", "-c", f"exec {run_line(w, command, ship.path if ship else None)}"]
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": job_name, "labels": labels},
            "spec": {
                "backoffLimit": backoff_limit,
                # a preempted or drained node is not the program's fault: retry without counting it
                # (Job pod failure policy, Kubernetes ≥ 1.26; needs restartPolicy Never)
                "podFailurePolicy": {
                    "rules": [
                        {
                            "action": "Ignore",
                            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                        },
                    ]
                },
                "template": {
                    "metadata": {"labels": labels},
                    "spec": _pod_spec(w, "train", image, argv, pvc, "Never", ship),
                },
            },
        }
    argv = ["sh", "-c", f"exec {run_line(w, command, ship.path if ship else None)}"]
    talks = str(plan.workload.get("task", "")) != "inference"

    def replica(count: int) -> dict[str, Any]:
        return {
            "replicas": count,
            "restartPolicy": "OnFailure",
            "template": {
                "metadata": {"labels": labels},
                # inference replicas never talk to each other: no EFA devices to hold
                "spec": _pod_spec(w, "pytorch", image, argv, pvc, None, ship, talks),
            },
        }

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
    """Block-style YAML, keys in the order built, no anchors/aliases; multi-line strings as ``|`` blocks."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
        style = "|" if "\n" in data else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    _Dumper.add_representer(str, _str)
    return str(
        yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)
    )
