"""Which data-parallel replica a rank is: given, from a DeviceMesh, or every rank its own.

The data position (which samples come next) is kept per replica, so ``resilient()`` needs the
replica's index and count; tensor, pipeline and context parallel peers see the same samples.
"""

from __future__ import annotations

from typing import Any

from gpuwise.errors import InputError

DP_MESH_DIMS = ("dp", "dp_replicate", "dp_shard", "fsdp", "ddp", "hsdp")
"""Device-mesh dimension names taken as data parallel (torchtitan's and PyTorch's tutorials'
names). Tensor, pipeline and context parallel peers (``tp``, ``pp``, ``cp``) see the same
samples, so they do not count. A flattened ``dp`` dimension wins over its parts."""


def data_parallel(
    dp_rank: int | None, dp_size: int | None, mesh: Any, rank: int, world: int
) -> tuple[int, int]:
    """(rank, size) of data parallelism: given, from a DeviceMesh, else every rank a replica."""
    if mesh is not None:
        if dp_rank is not None or dp_size is not None:
            raise InputError(
                "pass either mesh or dp_rank/dp_size, not both", hint="the mesh has both"
            )
        names = tuple(getattr(mesh, "mesh_dim_names", None) or ())
        dims = ["dp"] if "dp" in names else [n for n in names if n in DP_MESH_DIMS]
        if not names or (not dims and mesh.ndim > 1):
            raise InputError(
                f"cannot tell the data-parallel dimension of a mesh with dims {names or '(unnamed)'}",
                hint=f"name it one of {', '.join(DP_MESH_DIMS)} (init_device_mesh(..., "
                "mesh_dim_names=...)), or pass dp_rank and dp_size",
            )
        if not dims:  # a 1-D mesh named otherwise (e.g. tp only): one replica
            return 0, 1
        size, local = 1, 0
        for name in dims:  # row-major over the DP dims, like DeviceMesh's own flattening
            sub = mesh[name]
            local = local * sub.size() + sub.get_local_rank()
            size *= sub.size()
        return local, size
    if dp_rank is None and dp_size is None:
        return rank, world
    if dp_rank is None or dp_size is None:
        raise InputError("pass dp_rank and dp_size together", hint="e.g. dp_rank=0, dp_size=2")
    if not (dp_size >= 1 and 0 <= dp_rank < dp_size and world % dp_size == 0):
        raise InputError(
            f"dp_rank={dp_rank}, dp_size={dp_size} do not fit {world} process(es)",
            hint="dp_size divides the world size; 0 <= dp_rank < dp_size",
        )
    return dp_rank, dp_size
