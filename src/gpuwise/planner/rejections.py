"""What a plan drops on the way, grouped by why, and the reason an empty plan gives (module: core)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuwise.planner.candidate import Candidate, meets_deadline
from gpuwise.planner.explain import fmt_hours, fmt_usd
from gpuwise.planner.sites import Site
from gpuwise.planner.values import (
    PlanRequest,
    Rejection,
    RejectKind,
)

KIND_ORDER: dict[RejectKind, int] = {
    "deadline": 0,
    "budget": 1,
    "no-fit": 2,
    "max-gpus": 3,
    "no-estimate": 4,
    "reserved-unknown": 5,
    "no-price": 6,
    "fractional": 7,
    "batch": 8,
}


@dataclass
class Group:
    """A rejection group while it is being filled (typed; becomes a frozen Rejection at the end)."""

    kind: RejectKind
    gpu: str | None = None
    gpu_count: float | None = None
    cloud: str | None = None
    billing: str | None = None
    reason: str = ""
    offers: int = 0
    nodes: set[int] = field(default_factory=set)
    capacity_gib: float = 0.0
    need_gib: dict[int, float] = field(default_factory=dict)
    searched: bool = False
    """no-fit: the model tried more than one setting."""
    kept_free: bool = False
    """no-fit: ``capacity_gib`` is the memory left after the plan's headroom."""
    best: Candidate | None = None


class Rejects:
    """Rejection groups keyed by kind and what they share."""

    def __init__(self) -> None:
        self.groups: dict[tuple[object, ...], Group] = {}

    def add(
        self,
        kind: RejectKind,
        *,
        gpu: str | None = None,
        gpu_count: float | None = None,
        cloud: str | None = None,
        billing: str | None = None,
        nodes: int | None = None,
        reason: Callable[[], str] | None = None,
        capacity_gib: float = 0.0,
        count: int = 1,
    ) -> Group:
        """Count one more member of the group (made on first use; ``reason`` is called then)."""
        key = (kind, gpu, gpu_count, cloud, billing)
        g = self.groups.get(key)
        if g is None:
            g = Group(
                kind,
                gpu=gpu,
                gpu_count=gpu_count,
                cloud=cloud,
                billing=billing,
                reason=reason() if reason is not None else "",
                capacity_gib=capacity_gib,
            )
            self.groups[key] = g
        g.offers += count
        if nodes is not None:
            g.nodes.add(nodes)
        return g


def _span(nodes: set[int]) -> str:
    lo, hi = min(nodes), max(nodes)
    if lo == hi:
        return "" if lo == 1 else f" on {lo} nodes"
    return f" on {lo}–{hi} nodes"


def finish_rejections(rejects: Rejects, request: PlanRequest) -> tuple[Rejection, ...]:
    out: list[tuple[tuple[int, float], Rejection]] = []
    for g in rejects.groups.values():
        nodes = tuple(sorted(g.nodes))
        if g.kind == "no-fit":
            top = max(nodes)
            need = g.need_gib[top]
            where = f" on {top} nodes" if len(nodes) > 1 or top > 1 else ""
            digits = 1 if round(need) == round(g.capacity_gib) else 0
            tried = " with any settings tried" if g.searched else ""
            reason = (
                f"{g.gpu} ×{g.gpu_count}{_span(g.nodes)}: does not fit{tried} (needs {need:.{digits}f} "
                f"GiB/GPU{where}, has {g.capacity_gib:.{digits}f}"
                + (
                    f" with {request.memory_headroom:.0%} of usable memory kept free)"
                    if g.kept_free and request.memory_headroom
                    else ")"
                )
            )
            out.append(
                (
                    (KIND_ORDER[g.kind], need - g.capacity_gib),
                    Rejection(
                        kind=g.kind,
                        reason=reason,
                        offers=g.offers,
                        gpu=g.gpu,
                        gpu_count=g.gpu_count,
                        nodes=nodes,
                    ),
                )
            )
            continue
        best = g.best
        if g.kind in ("deadline", "budget") and best is not None:
            setup = f"{best.gpu} ×{best.gpn}{_span(g.nodes)} {best.billing}"
            if g.kind == "deadline":
                deadline = request.deadline_hours or 0.0
                if (
                    best.billing == "spot"
                    and best.p is not None
                    and best.outcome is not None
                    and best.outcome.failure_free_hours + best.fixed_hours <= deadline
                ):
                    why = (
                        f"{best.p:.0%} chance to finish within {fmt_hours(deadline)} "
                        f"(needs {request.confidence:.0%}; best {best.label})"
                    )
                else:
                    why = f"misses the {fmt_hours(deadline)} deadline (fastest {fmt_hours(best.hours)}, {best.label})"
                metric = best.hours
            else:
                why = f"over the {fmt_usd(request.budget_usd or 0)} budget (cheapest {fmt_usd(best.cost)}, {best.label})"
                metric = best.cost
            out.append(
                (
                    (KIND_ORDER[g.kind], metric),
                    Rejection(
                        kind=g.kind,
                        reason=f"{setup}: {why}",
                        offers=g.offers,
                        gpu=best.gpu,
                        gpu_count=best.gpn,
                        nodes=nodes,
                        billing=best.billing,
                        cloud=best.site.cloud,
                        example=best.label,
                        hours=best.hours,
                        cost_usd=best.cost,
                    ),
                )
            )
            continue
        reason = g.reason
        if g.kind == "batch":
            head, _, tail = reason.partition(":")
            counts = ", ".join(str(n) for n in sorted(g.nodes))
            reason = f"{head} on {counts} node(s):{tail} — give --global-batch as a multiple of the GPU count"
        out.append(
            (
                (KIND_ORDER[g.kind], 0.0),
                Rejection(
                    kind=g.kind,
                    reason=reason,
                    offers=g.offers,
                    gpu=g.gpu,
                    gpu_count=g.gpu_count,
                    billing=g.billing,
                    cloud=g.cloud,
                ),
            )
        )
    out.sort(key=lambda x: (x[0], x[1].reason))
    return tuple(r for _, r in out)


def why_empty(
    request: PlanRequest, cands: Sequence[Candidate], rejects: Rejects, sites: Sequence[Site]
) -> tuple[str, str | None]:
    if not sites:
        return ("no offer matches the cloud/region/GPU filters", None)
    if not cands:
        misses = [g for g in rejects.groups.values() if g.kind == "no-fit"]
        if not misses:
            return ("no offer can be priced for the requested billing models (see rejected)", None)
        best = min(misses, key=lambda g: g.need_gib[max(g.nodes)] / g.capacity_gib)
        top = max(best.nodes)
        total = int(best.gpu_count or 1) * top
        return (
            "the workload fits on no GPU setup in the catalog",
            f"closest: {total}×{best.gpu} needs {best.need_gib[top]:.0f} GiB/GPU, has "
            f"{best.capacity_gib:.0f} (try more nodes, a smaller model or sequence, or another precision)",
        )
    on_time = [c for c in cands if meets_deadline(c, request)]
    if not on_time:
        fastest = min(cands, key=lambda c: (c.hours, c.cost))
        return (
            "no option meets the deadline",
            f"fastest possible: {fmt_hours(fastest.hours)} on {fastest.label}, {fmt_usd(fastest.cost)}",
        )
    cheapest = min(on_time, key=lambda c: (c.cost, c.hours))
    reason = (
        "no option that meets the deadline is within the budget"
        if request.deadline_hours is not None
        else "no option is within the budget"
    )
    return (
        reason,
        f"cheapest possible: {fmt_usd(cheapest.cost)} on {cheapest.label} in {fmt_hours(cheapest.hours)}",
    )
