"""The framework-factor model the estimator applies: :class:`EfficiencyModel` and the workload
classes it is keyed by.

The estimator applies a model; :mod:`.measured` fits one (it runs the estimator on each measured
row), and :mod:`.api` fills in the fitted default. Keeping the type here, below both, is what lets
the estimator not import the fit that calls it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuwise.estimate.workload import Workload

# A GPU with fewer measured rows than this gets the wider range (the 90th percentile of the held-out
# errors instead of the 80th): the fitted factor has not been checked on it (B200, GB200, H200, L4,
# L40S, A10G today).
THIN_GPU_ROWS = 5


def workload_class(wl: Workload) -> str:
    """``transformer-train``, ``transformer-infer``, ``cnn-train``, ``cnn-infer``, or
    ``transformer-moe-train`` for mixture-of-experts training: token routing, grouped GEMMs over small
    per-expert matrices and the dispatch all-to-alls make its framework factor its own."""
    kind = "transformer" if wl.model.is_transformer else "cnn"
    if wl.model.experts and wl.is_training:
        kind = "transformer-moe"
    return f"{kind}-{'train' if wl.is_training else 'infer'}"


@dataclass(frozen=True)
class EfficiencyModel:
    """Framework factors (measured ÷ named-parts step time) and error bars per workload class."""

    by_class: dict[str, tuple[float, int]] = field(default_factory=dict)
    """class → (central log factor, rows): the mean over the measured stacks of each stack's mean
    (each shrunk toward the overall mean by :data:`~gpuwise.estimate.measured.SHRINK_ROWS`
    pseudo-rows; every stack counts once, however many rows it has) — what a stack gpuwise has not
    measured gets."""
    by_stack: dict[str, dict[str, tuple[float, int]]] = field(default_factory=dict)
    """stack → class → (log factor, rows): the stack's own mean, shrunk toward the central one."""
    overall: float = 0.0
    """Mean log factor over all rows."""
    rows: int = 0
    """Measured rows fitted."""
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    """class → (p10, p90) multipliers of a predicted time (cross-validated residual quantiles)."""
    attention_factor: float = 1.0
    """Multiplies the FlashAttention-2-based attention time (one figure for all GPUs)."""
    run_efficiency: float = 1.0
    """Whole pretraining runs: share of the failure-model goodput that published runs reached
    (evaluation, checkpoint stalls, slower stacks than the benchmark tables); 1.0 = not fitted."""
    layer_overhead_s: float = 0.0
    """Inference: seconds every forward pass (prefill, each decode step) adds per layer beyond the
    compute and bandwidth rooflines (kernel launches, small kernels), fitted to measured serving rows
    (:func:`~gpuwise.estimate.measured.fit_layer_overhead`); 0 = none fitted."""
    gpu_rows: dict[str, int] = field(default_factory=dict)
    """GPU → measured rows fitted (a GPU below :data:`THIN_GPU_ROWS` gets the wider range)."""
    stack_architectures: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    """stack → class → the GPU architectures its measured rows ran on. A stack's narrower range holds
    only there: fms-fsdp measured on Ampere says nothing about how it runs on Hopper (its factor is
    still the best guess; its range is that of a stack never measured). A stack not listed here keeps
    the narrower range everywhere."""
    whole_run_gpu_hours: float | None = None
    """Stepping GPU-hours from which a pretraining job counts as a whole run (None: the estimator's
    ``WHOLE_RUN_GPU_HOURS``). The published runs are whole runs by definition, so
    :func:`~gpuwise.estimate.measured.run_gpu_hours` sets 0: their prediction must not jump by
    ``1 / run_efficiency`` when a refit moves a run's stepping estimate across the threshold."""

    def factor(self, gpu: str, klass: str, stack: str = "unknown") -> tuple[float, str]:
        """(factor, where it comes from)."""
        if not self.rows:
            return 1.0, "none fitted"
        if klass in self.by_stack.get(stack, {}):
            lf, n = self.by_stack[stack][klass]
            basis = f"fitted to {n} measured {stack} {klass} runs"
            if not self.stack_measured_on(stack, klass, gpu):
                from gpuwise.hardware import find_gpu

                archs = " and ".join(self.stack_architectures[stack][klass])
                basis += (
                    f", all on {archs}; none on {find_gpu(gpu).architecture}, so the range is"
                    " that of an unmeasured stack"
                )
            return math.exp(lf), basis
        if klass in self.by_class:
            lf, n = self.by_class[klass]
            return math.exp(lf), (
                f"central of the measured stacks' {klass} runs ({n}); "
                + ("no measured row from this stack" if stack != "unknown" else "--stack not given")
            )
        return math.exp(
            self.overall
        ), f"no measured {klass} run: mean of all {self.rows} measured runs"

    def stack_measured_on(self, stack: str, klass: str, gpu: str) -> bool:
        """Whether ``stack`` has measured ``klass`` rows on ``gpu``'s architecture (True where
        the model does not record architectures, or no GPU is named)."""
        archs = self.stack_architectures.get(stack, {}).get(klass)
        if not archs or not gpu:
            return True
        from gpuwise.hardware import find_gpu

        return find_gpu(gpu).architecture in archs

    def interval(
        self, klass: str, gpu: str = "", stack: str = "unknown"
    ) -> tuple[float, float] | None:
        """(p10, p90) multipliers of a predicted time for ``klass`` (``pretraining-run`` or a
        workload class; every workload class uses the ``throughput`` range — that of a stack the fit
        never saw — widened to ``throughput-thin-gpu`` on a GPU with few measured rows, narrowed to
        ``throughput-known-stack`` for a stack with measured rows of that class; and never narrower
        than ``class:<klass>``, the range of a class whose own rows stray further from its factor)."""
        if klass in self.intervals:
            return self.intervals[klass]
        base = self._workload_interval(klass, gpu, stack)
        own = self.intervals.get(f"class:{klass}")
        if own is None or (base is not None and base[1] >= own[1]):
            return base
        return own

    def _workload_interval(self, klass: str, gpu: str, stack: str) -> tuple[float, float] | None:
        if gpu and self.gpu_rows.get(gpu, 0) < THIN_GPU_ROWS:
            return self.intervals.get("throughput-thin-gpu") or self.intervals.get("throughput")
        if (
            klass in self.by_stack.get(stack, {})
            and "throughput-known-stack" in self.intervals
            and self.stack_measured_on(stack, klass, gpu)
        ):
            return self.intervals["throughput-known-stack"]
        if gpu:
            from gpuwise.hardware import find_gpu

            arch = find_gpu(gpu).architecture
            if f"throughput:{arch}" in self.intervals:
                return self.intervals[f"throughput:{arch}"]
        return self.intervals.get("throughput")


UNIT_EFFICIENCY = EfficiencyModel()
"""No framework factor (1.0) and no error bars: the named parts alone."""
