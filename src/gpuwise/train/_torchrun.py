"""``python -m gpuwise.train._torchrun ARGS``: torchrun that exits with its workers' exit code.

torchrun turns any worker failure into its own exit code 1, which hides what ``gpuwise run``
needs to decide on a restart: 75 (preempted) and 2 (usage error: retrying cannot help). When
every failed worker exited with the same positive code, this wrapper exits with that code;
otherwise (mixed codes, signals) with 1, as torchrun does.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    try:
        run(parse_args(argv))  # type: ignore[no-untyped-call]
    except SignalException as exc:  # stopped by a signal: torchrun has stopped the workers
        print(f"torchrun: stopped by signal {int(exc.sigval)}", file=sys.stderr)
        return 128 + int(exc.sigval)
    except ChildFailedError as exc:
        codes = {int(f.exitcode) for f in exc.failures.values()}
        code = codes.pop() if len(codes) == 1 else 1
        return code if 0 < code < 256 else 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
