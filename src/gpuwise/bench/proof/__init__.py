"""The GPU proof: one run of every GPU-dependent check of gpuwise, written as a dated report.

``python benchmarks/gpu_proof.py [--out DIR] [--quick]`` runs it (see docs/benchmarks.md). It
lives in the package rather than only in ``benchmarks/`` so that its CPU-testable parts (report
assembly, the memory-table arithmetic, the GPT configurations and the estimator command) are
importable by the tests and type-checked with the rest; the script is a thin entry point.

Modules: :mod:`~.report` (step results → markdown and JSON), :mod:`~.gpt` (configurations,
``gpuwise estimate`` arguments, estimate-vs-measured arithmetic), :mod:`~.model` (the torch GPT and
the measurements; torch imported lazily), :mod:`~.worker` (child-process entry point for the torch
measurements), :mod:`~.steps` (child processes with time limits; each step through gpuwise's public CLI),
:mod:`~.scrape` (the exporter step, with Prometheus), :mod:`~.detect` (NVML facts
without torch), :mod:`~.runner` (time limits, orchestration, ``main``).

It is not part of the curated public API (``gpuwise.__all__``): a tool for the project's own
evidence, not for users' programs.
"""
