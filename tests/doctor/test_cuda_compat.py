"""NVIDIA's CUDA compatibility rules (backward, minor-version, major) as a table."""

from __future__ import annotations

import pytest

from gpuwise.doctor import check_compatibility
from gpuwise.doctor.cuda_compat import driver_table


@pytest.mark.parametrize(
    ("driver", "driver_cuda", "runtime", "verdict"),
    [
        ("550.54.15", "12.4", "12.4", "compatible"),  # same version
        ("550.54.15", "12.4", "11.8", "compatible"),  # older runtime: backward compatibility
        ("550.54.15", "12.4", "12.8", "minor_compat"),  # newer minor, driver ≥ 525.60.13
        ("525.60.13", "12.0", "12.6", "minor_compat"),  # exactly the 12.x minimum
        ("470.82.01", "11.4", "11.8", "minor_compat"),  # 11.x family minimum is 450.80.02
        ("450.51.06", "11.0", "11.8", "minor_compat_driver_too_old"),  # 450.51 < 450.80.02
        ("550.54.15", "12.4", "13.0", "incompatible"),  # new major needs a new driver
        (
            "470.82.01",
            "11.4",
            "12.1",
            "incompatible",
        ),  # the seeds' "driver version is insufficient"
        ("580.65.06", "13.0", "12.8", "compatible"),
        ("550.54.15", None, "12.4", "unknown"),  # driver did not say
        ("550.54.15", "12.4", "twelve", "unknown"),  # garbage runtime version
    ],
)
def test_rules(driver: str, driver_cuda: str | None, runtime: str, verdict: str) -> None:
    assert check_compatibility(driver, driver_cuda, runtime).verdict == verdict


def test_runtime_toolkit_driver_is_named() -> None:
    c = check_compatibility("550.54.15", "12.4", "12.8")
    assert c.min_driver_for_runtime == "570.26"


def test_table_covers_every_family_and_is_ordered() -> None:
    table = driver_table()
    assert set(table.minor_compat) == {11, 12, 13}
    versions = sorted(table.toolkit)
    drivers = [tuple(int(p) for p in table.toolkit[v].split(".")) for v in versions]
    assert drivers == sorted(drivers), "a newer toolkit never needs an older driver"
