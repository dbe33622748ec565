"""``nvidia-smi -q`` text → GpuInfo, for both the driver ≥ 535 and the older wording."""

from __future__ import annotations

from gpuwise.doctor import parse_nvidia_smi_q
from gpuwise.doctor.nvml import decode_clock_event_reasons
from tests.doctor.machines import fixture_text


def test_h100_fields() -> None:
    info = parse_nvidia_smi_q(fixture_text("nvidia-smi/h100x2-healthy.txt"))
    assert (info.driver_version, info.cuda_driver_version, len(info.devices)) == (
        "550.54.15",
        "12.4",
        2,
    )
    d = info.devices[1]
    assert d.name == "NVIDIA H100 80GB HBM3" and d.pci_bus_id == "00000000:2A:00.0"
    assert d.uuid == "GPU-b2a94d17-5e3c-4f10-8a6b-91c0d4e7f352"
    assert (d.persistence_mode, d.mig_current, d.ecc_enabled) == (True, False, True)
    assert (d.ecc_volatile_uncorrected, d.remapped_rows_pending, d.remapping_failed) == (
        0,
        False,
        False,
    )
    assert (d.pcie_gen_current, d.pcie_gen_max, d.pcie_width_current, d.pcie_width_max) == (
        5,
        5,
        16,
        16,
    )
    assert (d.performance_state, d.clock_event_reasons) == (0, ("gpu_idle",))
    assert (
        d.retired_pages_pending is None
    )  # "N/A" on Hopper: row remapping replaced page retirement


def test_consumer_card_with_throttle_wording() -> None:
    (d,) = parse_nvidia_smi_q(fixture_text("nvidia-smi/rtx3090-driver525.txt")).devices
    assert (d.ecc_enabled, d.ecc_volatile_uncorrected, d.mig_current) == (None, None, None)
    assert (d.pcie_gen_current, d.performance_state, d.clock_event_reasons) == (1, 8, ("gpu_idle",))


def test_empty_text_is_no_gpus() -> None:
    info = parse_nvidia_smi_q("")
    assert info.devices == () and info.driver_version is None


def test_nvml_reason_bits() -> None:
    assert decode_clock_event_reasons(0x1 | 0x40) == ("gpu_idle", "hw_thermal")
    assert decode_clock_event_reasons(0) == ()
