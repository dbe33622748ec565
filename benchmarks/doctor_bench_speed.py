"""How long `gpuwise doctor` and `gpuwise bench` take, and what bench measures, on this machine.

    PYTHONPATH=src python benchmarks/doctor_bench_speed.py [--full]

Prints one table: wall time of each command (as a subprocess, imports included) and, for the
bench runs, every result. `--full` adds the full-size bench (minutes on a CPU).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time


def timed(args: list[str]) -> tuple[float, dict[str, object]]:
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "gpuwise", *args, "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - t0
    if done.returncode not in (0, 3):
        raise SystemExit(f"gpuwise {' '.join(args)} failed: {done.stderr}")
    return seconds, json.loads(done.stdout)


def main() -> None:
    runs = [["doctor", "--no-torch"], ["doctor"], ["bench", "--quick"]]
    if "--full" in sys.argv:
        runs.append(["bench"])
    print(f"{'command':32} {'wall s':>8}")
    reports = []
    for args in runs:
        seconds, doc = timed(args)
        print(f"gpuwise {' '.join(args):24} {seconds:8.1f}")
        if args[0] == "bench":
            reports.append((" ".join(args), doc))
    for name, doc in reports:
        dev = doc["device"]
        assert isinstance(dev, dict)
        print(f"\ngpuwise {name} on {dev['name']} ({dev['kind']}, torch {dev['torch_version']})")
        print(f"{'result':20} {'value':>12} {'unit':10} {'peak':>10} {'ratio':>7}  note")
        for r in doc["results"]:  # type: ignore[union-attr]
            peak = "—" if r["peak"] is None else f"{r['peak']:.4g}"
            ratio = "—" if r["ratio"] is None else f"{r['ratio']:.1%}"
            print(
                f"{r['name']:20} {r['value']:12.4g} {r['unit']:10} {peak:>10} {ratio:>7}  {r['note']}"
            )


if __name__ == "__main__":
    main()
