"""The torch measurements of the GPU proof, run in a child process so each has its own time limit
and a crash (CUDA error, out of memory) fails one step, not the run.

    python -m gpuwise.bench.proof.worker facts
    python -m gpuwise.bench.proof.worker copy --gib 1
    python -m gpuwise.bench.proof.worker train --quick
    python -m gpuwise.bench.proof.worker checkpoint --params 1e9 --scratch DIR

Each prints JSON objects, one per line, flushed as they are measured: a step that times out still
keeps what was finished before.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gpuwise.bench.proof.gpt import configs


def _emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj), flush=True)


def _facts() -> None:
    import torch

    cuda = torch.cuda.is_available()
    cap = torch.cuda.get_device_capability(0) if cuda else None
    cudnn = torch.backends.cudnn.version() if cuda else None  # type: ignore[no-untyped-call]
    _emit(
        {
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "cuda_available": cuda,
            "device_count": torch.cuda.device_count() if cuda else 0,
            "device_name": torch.cuda.get_device_name(0) if cuda else None,
            "compute_capability": f"{cap[0]}.{cap[1]}" if cap else None,
            "cudnn": cudnn,
        }
    )


def _device(name: str) -> str:
    import torch

    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit(
            "torch sees no CUDA device (a CPU-only torch build, or CUDA_VISIBLE_DEVICES hides the GPU)"
        )
    return name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuwise.bench.proof.worker")
    parser.add_argument("what", choices=("facts", "copy", "train", "checkpoint"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--gib", type=float, default=1.0, help="copy: buffer size")
    parser.add_argument(
        "--params", type=float, default=1e9, help="checkpoint: parameters in the state"
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--scratch", type=Path, default=Path("."))
    args = parser.parse_args(argv)
    if args.what == "facts":
        _facts()
        return 0
    from gpuwise.bench.proof import model

    device = _device(args.device)
    if args.what == "copy":
        _emit({"plain_copy_gb_s": model.plain_copy_gb_s(device, int(args.gib * 1024**3))})
    elif args.what == "train":
        warmup, steps = (2, 4) if args.quick else (3, 10)
        for config in configs(args.quick):
            try:
                _emit(
                    {"label": config.label, **model.measure_training(config, device, warmup, steps)}
                )
            except Exception as exc:  # one config out of memory must not lose the others
                _emit(
                    {
                        "label": config.label,
                        "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                    }
                )
                import torch

                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
    else:
        args.scratch.mkdir(parents=True, exist_ok=True)
        _emit(model.checkpoint_stall(int(args.params), device, args.scratch, args.repeats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
