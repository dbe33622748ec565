"""The base layer: what every capability may use and what uses none of them.

- :mod:`~gpuwise.base.paths`: where user files live; atomic writes.
- :mod:`~gpuwise.base.datafiles`: reading the text of bundled and user data files.
- :mod:`~gpuwise.base.validate`: checks for numbers read from data files.
- :mod:`~gpuwise.base.settings`: every ``GPUWISE_*`` environment variable, read on call.
- :mod:`~gpuwise.base.nvml`: the one NVML choke point and the throttle-reason table;
  :mod:`~gpuwise.base.nvml_fake` the fake NVML library (the same surface, real error classes)
  and :mod:`~gpuwise.base.nvml_trace` the trace files it replays.
- :mod:`~gpuwise.base.xid`: what NVIDIA Xid errors mean.
- :mod:`~gpuwise.base.interval`: Young/Daly checkpoint-interval maths.
- :mod:`~gpuwise.base.lazy`: how packages export names lazily (typed, light imports).
- :mod:`~gpuwise.base.version`: the package version.

Together with :mod:`gpuwise.errors` and :mod:`gpuwise.units` (public modules of their own) this
is the bottom layer of ``ARCHITECTURE.md``; the import contract in ``pyproject.toml`` keeps it
free of imports from any capability. Nothing here imports numpy, torch or an HTTP client.
"""
