"""``python -m gpuwise.train._torchrun ARGS``: torchrun that exits with its workers' exit code.

torchrun turns any worker failure into its own exit code 1, which hides what ``gpuwise run``
needs to decide on a restart: 75 (preempted) and 2 (usage error: retrying cannot help). When
every failed worker exited with the same positive code, this wrapper exits with that code;
otherwise (mixed codes, signals) with 1, as torchrun does.

Joining a rendezvous that another node has closed (several nodes: the survivors of a lost node
are still ending the previous attempt) is not a failure of the command: the wrapper writes
``rendezvous-closed`` into ``GPUWISE_RUN_DIR`` so that ``gpuwise run`` joins again without
counting a crash.

When workers fail, the wrapper writes ``failures.json`` (``exitcodes``: local rank → exit code,
negative for a signal; ``first``: the local rank that failed first) into ``GPUWISE_RUN_DIR``: a worker killed by a signal after it finished (a crash in the
framework's teardown) is not a failure of the training.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

from gpuwise.base import settings

RENDEZVOUS_CLOSED_MARKER = "rendezvous-closed"
FAILURES_FILE = "failures.json"


def main(argv: list[str]) -> int:
    from gpuwise.train._worker import PARENT_ENV, die_with_parent

    die_with_parent()  # gpuwise run died (even of SIGKILL): so do we, and so our workers
    os.environ[PARENT_ENV] = str(os.getpid())  # the workers' parent is this process
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousClosedError
    from torch.distributed.run import parse_args, run

    try:
        run(parse_args(argv))  # type: ignore[no-untyped-call]
    except SignalException as exc:  # stopped by a signal: torchrun has stopped the workers
        print(f"torchrun: stopped by signal {int(exc.sigval)}", file=sys.stderr)
        return 128 + int(exc.sigval)
    except RendezvousClosedError:
        print(
            "torchrun: the rendezvous is closed (another node is ending the previous attempt)",
            file=sys.stderr,
        )
        run_dir = settings.text("GPUWISE_RUN_DIR")
        if run_dir:
            with open(os.path.join(run_dir, RENDEZVOUS_CLOSED_MARKER), "w") as f:
                f.write("closed\n")
        return 1
    except ChildFailedError as exc:
        run_dir = settings.text("GPUWISE_RUN_DIR")
        if run_dir and exc.failures:
            first = exc.get_first_failure()[1].local_rank  # the others may be torchrun's SIGTERM
            failed = {str(x.local_rank): int(x.exitcode) for x in exc.failures.values()}
            with (  # a report that cannot be written must not replace the exit code
                contextlib.suppress(OSError),
                open(os.path.join(run_dir, FAILURES_FILE), "w") as f,
            ):
                json.dump({"first": first, "exitcodes": failed}, f)
        codes = {int(f.exitcode) for f in exc.failures.values()}
        code = codes.pop() if len(codes) == 1 else 1
        return code if 0 < code < 256 else 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
