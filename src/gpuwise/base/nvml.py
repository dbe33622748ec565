"""The one choke point for NVML calls, shared by ``monitor``, ``doctor`` and ``bench``.

:class:`NvmlSession` is the only place that calls the NVML library (``pynvml`` from
nvidia-ml-py, or a fake with the same surface such as :class:`gpuwise.base.nvml_fake.FakeNvml`).
It maps errors once:

* ``NotSupported`` / ``FunctionNotFound`` / ``NoPermission`` → the metric is absent (``None``),
  logged once per GPU and metric, and listed in :attr:`NvmlSession.unsupported`;
* ``GpuIsLost`` → :class:`GpuLostError`, which readers turn into "this GPU is lost";
* library or driver missing at start → :class:`~gpuwise.errors.DeviceError` with a fix;
* any other NVML error on one field → that field is absent for this read, counted in
  :attr:`NvmlSession.error_counts`, logged once per kind; reading goes on.

The clock-event ("throttle") reason table lives here too: both the monitor and the doctor name
reasons from it. What is read, and into which record, is each capability's own business.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from gpuwise.errors import DeviceError

log = logging.getLogger(__name__)

# Clock-event ("throttle") reason bits, from nvml.h / pynvml ``nvmlClocksEventReason*``
# (nvidia-ml-py 13.615.71). Name → bit. ``gpu_idle`` is not a slowdown and is reported apart.
THROTTLE_REASONS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clocks": 0x100,
}


def nvml_text(value: Any) -> str:
    """A string NVML returned: ``bytes`` in older nvidia-ml-py, ``str`` in newer; bytes that are
    not UTF-8 (a vendor string) are replaced, never an error that hides the rest of a read."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def throttle_reason_names(mask: int) -> tuple[str, ...]:
    """The reason names set in an NVML clock-event bitmask, in table order."""
    return tuple(name for name, bit in THROTTLE_REASONS.items() if mask & bit)


class GpuLostError(Exception):
    """Internal: NVML said the GPU fell off the bus during this read."""


def _error_classes(
    lib: Any,
) -> tuple[type[BaseException], tuple[type[BaseException], ...], type[BaseException]]:
    base = lib.NVMLError
    absent = tuple(
        getattr(lib, n)
        for n in ("NVMLError_NotSupported", "NVMLError_FunctionNotFound", "NVMLError_NoPermission")
        if hasattr(lib, n)
    )
    return base, absent, lib.NVMLError_GpuIsLost


_INIT_FIXES = {
    "NVMLError_LibraryNotFound": "install the NVIDIA driver (it ships libnvidia-ml.so.1); in a container "
    "run with the NVIDIA container toolkit (--gpus all), or use --fake idle to try gpuwise without a GPU",
    "NVMLError_DriverNotLoaded": "load the NVIDIA kernel module (sudo modprobe nvidia) or reboot after installing the driver",
    "NVMLError_NoPermission": "run as a user that may open /dev/nvidia* (group video) or as root",
    "NVMLError_LibRmVersionMismatch": "the driver library and kernel module differ: reboot, or reinstall one driver version",
}


class NvmlSession:
    """The one choke point for NVML calls; see the module docstring for the error mapping."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self._base, self._absent, self._lost = _error_classes(lib)
        self._not_found: type[BaseException] = getattr(lib, "NVMLError_NotFound", self._lost)
        self._timeout: type[BaseException] = getattr(lib, "NVMLError_Timeout", self._lost)
        self.unsupported: set[str] = set()
        """Metrics found unsupported (on any GPU), by metric name."""
        self._logged: set[tuple[int | None, str]] = set()
        self.error_counts: dict[str, int] = {}
        """NVML errors other than "unsupported", counted per metric name."""

    def init(self) -> None:
        try:
            self.lib.nvmlInit()
        except self._base as exc:
            name = type(exc).__name__
            raise DeviceError(
                f"cannot start NVML: {exc}",
                hint=_INIT_FIXES.get(name, "check `nvidia-smi` works on this machine"),
            ) from exc
        except OSError as exc:  # a broken libnvidia-ml.so
            raise DeviceError(
                f"cannot load NVML: {exc}", hint=_INIT_FIXES["NVMLError_LibraryNotFound"]
            ) from exc

    def call(
        self,
        metric: str,
        fn_name: str,
        *args: Any,
        gpu: int | None = None,
        not_found_ok: bool = False,
        timeout_ok: bool = False,
    ) -> Any:
        """``lib.fn_name(*args)``, or None where the metric is unsupported or failed this time.

        ``not_found_ok``: ``NotFound`` is an answer, not an error (an empty MIG slot, no process
        utilization sample yet). ``timeout_ok``: ``Timeout`` is an answer (no event pending).
        Raises :class:`GpuLostError` when the GPU fell off the bus.
        """
        fn = getattr(self.lib, fn_name, None)
        if fn is None:
            self._absent_once(gpu, metric, f"{fn_name} is not in this nvidia-ml-py")
            return None
        try:
            return fn(*args)
        except self._not_found as exc:
            if not_found_ok:
                return None
            return self._failed(metric, fn_name, gpu, exc)
        except self._timeout as exc:
            if timeout_ok:
                return None
            return self._failed(metric, fn_name, gpu, exc)
        except self._absent as exc:
            self._absent_once(gpu, metric, str(exc))
            return None
        except self._lost as exc:
            raise GpuLostError(str(exc)) from exc
        except self._base as exc:
            return self._failed(metric, fn_name, gpu, exc)

    def _failed(self, metric: str, fn_name: str, gpu: int | None, exc: BaseException) -> None:
        self.error_counts[metric] = self.error_counts.get(metric, 0) + 1
        key = (gpu, f"{metric}:{type(exc).__name__}")
        if key not in self._logged:
            self._logged.add(key)
            log.warning("NVML %s on GPU %s failed: %s (logged once)", fn_name, gpu, exc)
        return None

    def _absent_once(self, gpu: int | None, metric: str, why: str) -> None:
        self.unsupported.add(metric)
        if (gpu, metric) not in self._logged:
            self._logged.add((gpu, metric))
            log.info("GPU %s: %s not supported (%s); the metric is left out", gpu, metric, why)

    def shutdown(self) -> None:
        with contextlib.suppress(Exception):
            self.lib.nvmlShutdown()


@contextlib.contextmanager
def nvml_errors() -> Iterator[None]:
    """Translate a stray ``pynvml.NVMLError`` into :class:`DeviceError` at an API edge."""
    import pynvml

    try:
        yield
    except pynvml.NVMLError as exc:
        raise DeviceError(
            f"NVML error: {exc}", hint="check `nvidia-smi` works on this machine"
        ) from exc
