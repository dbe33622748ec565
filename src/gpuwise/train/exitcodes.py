"""Exit codes shared by training scripts, ``resilient`` and ``gpuwise run``.

``EXIT_PREEMPTED`` is 75, ``EX_TEMPFAIL`` in BSD ``sysexits.h`` ("temporary failure, the user
is invited to retry"). Put it in SkyPilot's ``job_recovery.recover_on_exit_codes: [75]`` so a
preempted job is recovered while a real bug (any other non-zero code) is not retried forever.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_PREEMPTED = 75
"""A preemption notice or stop signal arrived; a checkpoint was committed; run again to resume."""
EXIT_USAGE = 2
"""Bad command line or environment (the CLI's usual code)."""
EXIT_RESTARTS_EXHAUSTED = 76
"""``gpuwise run``: the command kept failing (not preemptions) and --max-restarts ran out."""
