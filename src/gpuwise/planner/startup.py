"""Fixed costs of starting a job (provisioning, image pull, model download, start-up).

Defaults come from ``gpuwise/planner/data/startup.yaml`` (each labelled: they are placeholders, no
public figure holds across clouds); :class:`gpuwise.planner.PlanRequest` fields override them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any

from gpuwise.errors import DataFileError
from gpuwise.units import BYTES_PER_GIB


@dataclass(frozen=True)
class StartupCosts:
    """What starting one job costs before its first step."""

    provision_hours: float
    """Request to a usable machine."""
    image_gib: float
    """Container image (or environment) downloaded on each node."""
    download_gbit_s: float
    """Download rate of one node for the image and the model weights."""
    startup_hours: float
    """Imports, NCCL initialisation, weights into GPU memory."""
    scarce_gpus: tuple[str, ...]
    """GPUs whose spot options get a capacity-risk note."""
    sources: tuple[tuple[str, str], ...] = ()
    """(field, source) for each default."""

    def is_scarce(self, gpu: str) -> bool:
        """Whether ``gpu``'s spot capacity is scarce: a listed GPU or a variant of one (its name
        followed by ``-``: ``A100-80GB-PCIE`` of ``A100-80GB``, ``H100-NVL`` of ``H100``), so a
        form factor does not escape the list by name."""
        return _scarce(gpu, self.scarce_gpus)

    def hours(self, weights_gib: float | None) -> float:
        """Provision + image + weights download + start-up, in hours."""
        gib = self.image_gib + (weights_gib or 0.0)
        download_s = gib * BYTES_PER_GIB * 8 / (self.download_gbit_s * 1e9)
        return self.provision_hours + download_s / 3600 + self.startup_hours


@functools.lru_cache(maxsize=512)
def _scarce(gpu: str, scarce: tuple[str, ...]) -> bool:
    return any(gpu == s or gpu.startswith(s + "-") for s in scarce)


def _value(data: dict[str, Any], key: str) -> Any:
    entry = data.get(key)
    if not isinstance(entry, dict) or "value" not in entry:
        raise DataFileError(
            f"gpuwise/planner/data/startup.yaml: {key}.value is missing", hint="reinstall gpuwise"
        )
    return entry["value"]


@functools.lru_cache(maxsize=1)
def load_startup_defaults() -> StartupCosts:
    """The bundled defaults."""
    import yaml

    data = (
        yaml.safe_load(
            resources.files("gpuwise.planner").joinpath("data/startup.yaml").read_text("utf-8")
        )
        or {}
    )
    return StartupCosts(
        provision_hours=float(_value(data, "provision_minutes")) / 60,
        image_gib=float(_value(data, "image_gib")),
        download_gbit_s=float(_value(data, "download_gbit_s")),
        startup_hours=float(_value(data, "startup_minutes")) / 60,
        scarce_gpus=tuple(str(g) for g in _value(data, "scarce_gpus")),
        sources=tuple(
            (k, str(v.get("source", ""))) for k, v in data.items() if isinstance(v, dict)
        ),
    )
