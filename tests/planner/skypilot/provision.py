"""Run SkyPilot's own provisioning steps on every candidate of a task YAML, offline; print JSON.

Runs inside a virtualenv with SkyPilot installed (see ``optimize.py``). For each candidate of the
task's ``resources`` (``ordered`` / ``any_of``), in order:

1. ``Resources.get_required_cloud_features`` and the cloud's ``check_features_are_supported``
   (what refuses ``network_tier: best`` on Azure);
2. the cloud's ``make_deploy_resources_variables`` (the deploy variables SkyPilot renders into
   the cluster's provision config), ``dryrun=True``;
3. the provisioner step that builds the network from them:

   - AWS: ``sky.provision.aws.instance._create_instances`` with an EC2 stand-in that records the
     ``RunInstances`` request: how many EFA interfaces the instances get;
   - GCP: ``sky.provision.gcp.config._configure_subnet``: raises ``ValueError`` where SkyPilot
     cannot build GPUDirect for the machine type; its first call to the Compute API (a stand-in
     that stops there) means the config passed;
   - Azure: ``sky.provision.azure.instance._create_network_interface`` with a network client
     that records the NIC it is asked to create: whether it has accelerated networking.

What is faked is the cloud's API, nothing of SkyPilot's logic: the AWS ``describe-instance-types``
answer for the EFA interface count (argv JSON, from AWS's published table via gpuwise's network
data), the image look-ups (``ami-…`` / image names need the cloud), the GCP Compute client and
the Azure network client.

    python provision.py TASK.yaml EFA_COUNTS_JSON
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any


class _Reached(Exception):
    """The provisioner got past its checks to its first cloud API call."""


class _StopAtApi:
    def __getattr__(self, name: str) -> Any:
        raise _Reached(name)


class _Ec2:
    """Stands in for ``ec2_fail_fast`` (a boto3 EC2 resource): records ``create_instances``."""

    def __init__(self, region: str) -> None:
        self.requests: list[dict[str, Any]] = []

        class _Meta:
            class client:  # boto3's attribute names
                class meta:
                    region_name = region

        self.meta = _Meta

    def create_instances(self, **conf: Any) -> list[Any]:
        self.requests.append(conf)
        return []


def main() -> None:
    import sky
    from sky import clouds, skypilot_config
    from sky.clouds import aws as aws_cloud
    from sky.clouds import gcp as gcp_cloud
    from sky.utils import resources_utils

    path, efa_counts = sys.argv[1], json.loads(sys.argv[2])
    # the cloud APIs (the edge): EFA counts as AWS publishes them; images need the cloud
    aws_cloud._get_max_efa_interfaces = lambda itype, region: int(efa_counts.get(itype, 0))
    aws_cloud.AWS._get_image_id = classmethod(lambda cls, *a, **k: "ami-00000000")  # type: ignore[assignment]
    aws_cloud.AWS.get_image_root_device_name = classmethod(lambda cls, *a, **k: "/dev/sda1")  # type: ignore[assignment]
    # (one catalog module for every cloud: Azure's image IDs are publisher:offer:sku:version)
    gcp_cloud.catalog.get_image_id_from_tag = lambda tag, clouds=None: (
        "gpuwise:check:image:latest" if clouds == "azure" else f"image-for-{tag}"
    )

    task = sky.Task.from_yaml(path)
    cluster = resources_utils.ClusterName("gpuwise-check", "gpuwise-check")
    out = []
    for r in task.resources_pool if hasattr(task, "resources_pool") else task.resources:
        cloud = r.cloud
        region = r.region
        first = next(
            iter(
                type(cloud).zones_provision_loop(
                    region=region,
                    num_nodes=task.num_nodes,
                    instance_type=r.instance_type,
                    use_spot=r.use_spot,
                )
            ),
            None,
        )
        zone = r.zone or (first[0] if first else None)  # Azure: no zones
        zone_name = zone if isinstance(zone, str) or zone is None else zone.name
        row: dict[str, Any] = {
            "cloud": str(cloud).lower(),
            "region": region,
            "zone": zone_name,
            "instance_type": r.instance_type,
            "network_tier": None if r.network_tier is None else r.network_tier.value,
        }
        try:
            cloud.check_features_are_supported(r, r.get_required_cloud_features())
            launchable = r.copy(region=region, zone=zone_name)
            variables = cloud.make_deploy_resources_variables(
                launchable,
                cluster,
                clouds.Region(region),
                [clouds.Zone(zone_name)] if zone_name else None,
                task.num_nodes,
                dryrun=True,
            )
            row.update(_network(row["cloud"], r, variables, task.num_nodes, skypilot_config))
            row["ok"] = True
        except Exception as exc:  # SkyPilot refuses the candidate: report it
            row.update(ok=False, error=f"{type(exc).__name__}: {exc}")
        out.append(row)
    print(json.dumps(out, default=str))


def _network(
    cloud: str, r: Any, variables: dict[str, Any], num_nodes: int, skypilot_config: Any
) -> dict[str, Any]:
    if cloud == "aws":
        from sky.provision.aws import instance

        internal = skypilot_config.get_effective_region_config(
            cloud="aws", region=r.region, keys=("use_internal_ips",), default_value=False
        )
        ec2 = _Ec2(r.region)
        instance._create_instances(
            ec2,
            "gpuwise-check",
            {
                "InstanceType": r.instance_type,
                "ImageId": variables["image_id"],
                "SubnetIds": ["subnet-0"],
                "SecurityGroupIds": ["sg-0"],
            },
            {},
            num_nodes,
            associate_public_ip_address=not internal,
            max_efa_interfaces=int(variables["max_efa_interfaces"]),
        )
        nics = ec2.requests[0]["NetworkInterfaces"]
        return {
            "max_efa_interfaces": variables["max_efa_interfaces"],
            "efa_interfaces": sum(n["InterfaceType"] in ("efa", "efa-only") for n in nics),
            "use_internal_ips": bool(internal),
        }
    if cloud == "gcp":
        from sky.provision import common
        from sky.provision.gcp import config as gcp_config

        provision = common.ProvisionConfig(
            provider_config={
                "network_tier": variables.get("network_tier", "standard"),
                "enable_gpu_direct": variables.get("enable_gpu_direct", False),
                "enable_gvnic": variables.get("enable_gvnic", False),
                "project_id": "dryrun-project-id",
                "region": r.region,
            },
            authentication_config={},
            docker_config={},
            node_config={"machineType": r.instance_type},
            count=num_nodes,
            tags={},
            resume_stopped_nodes=False,
            ports_to_open_on_launch=None,
        )
        # _Reached: the checks passed; the next step asks the Compute API for the VPCs
        with contextlib.suppress(_Reached):
            gcp_config._configure_subnet(r.region, "gpuwise-check", provision, _StopAtApi())
        return {
            "gpu_direct": variables.get("network_tier") == "best"
            or bool(variables.get("enable_gpu_direct")),
        }
    if cloud == "azure":
        from types import SimpleNamespace

        from sky.provision.azure import instance as azure_instance

        made: list[Any] = []

        def create(**kw: Any) -> Any:
            made.append(kw["parameters"])
            done = SimpleNamespace(name="x", ip_address="203.0.113.1", id="/x")
            return SimpleNamespace(result=lambda: done)

        client = SimpleNamespace(
            public_ip_addresses=SimpleNamespace(begin_create_or_update=create),
            network_interfaces=SimpleNamespace(begin_create_or_update=create),
        )
        azure_instance._create_network_interface(
            client,
            "gpuwise-check",
            {"location": r.region, "resource_group": "rg", "subnet": "/subnets/x", "nsg": "/nsg/x"},
        )
        nic = made[-1]
        return {"accelerated_networking": bool(nic.enable_accelerated_networking)}
    return {}


if __name__ == "__main__":
    main()
