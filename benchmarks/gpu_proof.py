"""Prove it on a GPU: every GPU-dependent check of gpuwise in one run, written as a dated report.

    python benchmarks/gpu_proof.py [--out DIR] [--quick] [--gpu NAME] [--only STEPS]

On a machine with an NVIDIA GPU it runs, each step in child processes under its own time limit
(about 10 minutes on one H100; ``--quick`` about 4): ``gpuwise doctor --json``; ``gpuwise bench
--json`` with each figure's ratio to the datasheet and to the best-known measured figure; the
exporter on real NVML scraped for 30 s (by Prometheus when installed); estimated vs measured memory
and tokens/s for small GPTs; the async checkpoint stall of a ~1B-parameter state vs torch.save;
and ``pytest -m gpu``. It writes ``gpu_proof_<UTC date>Z.md`` and ``.json`` under ``--out``; a step
that fails is reported with its reason and the others still run. Exit 0: every step finished;
3: a step failed or timed out; 2: no NVIDIA GPU (one line, in well under 5 s: NVML is asked
before torch is imported). Figures and targets: docs/benchmarks.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))  # this checkout's gpuwise: the report names its commit

from gpuwise.bench.proof.runner import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(repo=REPO))
