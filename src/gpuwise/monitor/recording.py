"""How ``gpuwise monitor`` records: what each sample ran on, and how long it stands for.

A sample stands for the time since the previous read, not for the nominal interval: a monitor
that stalls (a paused process, a slow disk) and then reads again bills the GPU-seconds in
between once, in one row, instead of reading back to back to catch up (the old loop wrote
several reads into the same second, each overwriting the last, and lost 29 % of a 10 s stall).
Gaps longer than :data:`MAX_BRIDGE_S` are not billed: past that, nothing shows the GPU was still
rented (the Prometheus rules bridge the same 15 minutes).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from gpuwise.base import settings
from gpuwise.monitor.history import SampleContext
from gpuwise.monitor.node import NodeInfoMode, detect_node

MAX_BRIDGE_S = 900.0
"""Longest gap between two reads billed as rented (15 minutes; the rules' bridge, see
deploy/prometheus/gpuwise-rules.yml)."""


def sample_context(
    node_info: NodeInfoMode | str = "off", env: Mapping[str, str] | None = None
) -> SampleContext:
    """This node's facts (settings, or ``node_info`` detection) and this process's
    ``GPUWISE_PLAN_ID``; a GPU's own processes may carry another plan id (recorded instead)."""
    env = os.environ if env is None else env
    node = detect_node(node_info, env=env)  # type: ignore[arg-type]  # checked inside
    return SampleContext(
        instance_type=node.instance_type,
        cloud=node.cloud,
        region=node.region,
        capacity_type=node.capacity_type,
        plan_id=settings.text("GPUWISE_PLAN_ID", env),
    )


def read_duration(now_s: float, last_read_s: float | None, interval_s: float) -> float:
    """Seconds a read at ``now_s`` stands for: the time since the previous read (the first read:
    one interval), at most :data:`MAX_BRIDGE_S`."""
    if last_read_s is None:
        return interval_s
    return max(0.0, min(now_s - last_read_s, MAX_BRIDGE_S))


def next_read_time(scheduled_s: float, interval_s: float, now_s: float) -> float:
    """When to read next: one interval after the last scheduled read, or, when the loop fell
    behind, one interval from now (no back-to-back reads to catch up: the next read's duration
    covers the stall)."""
    nxt = scheduled_s + interval_s
    return nxt if nxt > now_s else now_s + interval_s
