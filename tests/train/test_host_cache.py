"""The sharded staging cache is built from empty host tensors, never from copies of the state
(DCP's own builder deep-copies every DTensor first: up to twice the share for a moment)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed._state_dict_utils import _copy_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

from gpuwise.train.sharded import host_cache


@pytest.fixture
def one_rank(tmp_path: Path) -> Iterator[None]:
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_the_cache_keeps_each_dtensors_spec_around_new_host_memory(
    one_rank: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    mesh = init_device_mesh("cpu", (1,))
    weight = distribute_tensor(torch.arange(12.0).reshape(4, 3), mesh, [Shard(0)])
    state = {
        "model": {"w": weight, "b": torch.ones(3), "step": torch.tensor(5)},
        "optim": [weight * 2, "adamw", 3, None, torch.empty(0)],
    }

    def no_copies(*_: object, **__: object) -> None:
        raise AssertionError("the cache was built from a copy of the state")

    monkeypatch.setattr(DTensor, "__deepcopy__", no_copies, raising=False)
    cache = host_cache(state, pin_memory=False)

    w = cache["model"]["w"]
    assert isinstance(w, DTensor)
    assert (w.placements, w.shape, w.device_mesh) == (weight.placements, weight.shape, mesh)
    assert w._local_tensor.data_ptr() != weight._local_tensor.data_ptr()
    assert cache["model"]["b"].data_ptr() != state["model"]["b"].data_ptr()
    assert cache["optim"][1:4] == ["adamw", 3, None]
    assert cache["optim"][4].numel() == 0

    staged = _copy_state_dict(state, cache)  # what the stager does at every save
    assert torch.equal(staged["model"]["w"].full_tensor(), weight.full_tensor())
    assert torch.equal(staged["optim"][0].full_tensor(), (weight * 2).full_tensor())
    assert torch.equal(staged["model"]["b"], state["model"]["b"])
    assert int(staged["model"]["step"]) == 5
