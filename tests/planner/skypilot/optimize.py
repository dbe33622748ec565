"""Run SkyPilot's own optimizer on a task YAML, offline, and print what it chose (JSON).

Runs inside a virtualenv with SkyPilot installed (not the test venv: SkyPilot pins packages that
clash with it). HOME must hold ``.sky/catalogs/<version>/<cloud>/vms.csv`` (the test writes them
from gpuwise's bundled catalog), so nothing is downloaded. Which clouds are enabled is the one
thing faked: ``sky check`` needs credentials, so the clouds the task names are declared enabled.

    python optimize.py TASK.yaml CLOUD [CLOUD ...]
"""

from __future__ import annotations

import json
import sys

import sky
from sky import check, clouds, optimizer


def main() -> None:
    path, names = sys.argv[1], sys.argv[2:]
    registry = {
        "aws": clouds.AWS,
        "gcp": clouds.GCP,
        "azure": clouds.Azure,
        "nebius": clouds.Nebius,
    }
    enabled = [registry[n]() for n in names]
    check.get_cached_enabled_clouds_or_refresh = lambda *a, **k: enabled  # credentials: the edge
    optimizer.sky_check.get_cached_enabled_clouds_or_refresh = (
        check.get_cached_enabled_clouds_or_refresh
    )
    task = sky.Task.from_yaml(path)
    with sky.Dag() as dag:
        dag.add(task)
    optimizer.Optimizer.optimize(dag, minimize=sky.OptimizeTarget.COST, quiet=True)
    best = task.best_resources
    # the zone SkyPilot's provisioner tries first in the chosen region (cheapest there first)
    first = next(
        iter(
            type(best.cloud).zones_provision_loop(
                region=best.region,
                num_nodes=task.num_nodes,
                instance_type=best.instance_type,
                use_spot=best.use_spot,
            )
        ),
        [],
    )
    print(
        json.dumps(
            {
                "cloud": str(best.cloud).lower(),
                "instance_type": best.instance_type,
                "region": best.region,
                "zone": best.zone or (first[0].name if first else None),
                "use_spot": best.use_spot,
                "network_tier": None if best.network_tier is None else best.network_tier.value,
                "num_nodes": task.num_nodes,
                "job_recovery": best.job_recovery,
            },
            default=str,
        )
    )


if __name__ == "__main__":
    main()
