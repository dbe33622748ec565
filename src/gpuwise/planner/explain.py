"""Sentences that say why the winner won and why the others lost."""

from __future__ import annotations

from collections.abc import Sequence

from gpuwise.planner.values import PlanOption, PlanRequest, Rejection


def fmt_hours(h: float) -> str:
    """``0.5`` → ``30 min``, ``12.3`` → ``12.3 h``, ``1234`` → ``1,234 h`` (also used by the planner)."""
    if h < 1:
        return f"{h * 60:.0f} min"
    return f"{h:.1f} h" if h < 100 else f"{h:,.0f} h"


def fmt_usd(v: float) -> str:
    """Cents below $100, whole dollars above (also used by the planner)."""
    return f"${v:,.2f}" if v < 100 else f"${v:,.0f}"


def fmt_pct(p: float) -> str:
    """A probability as a percentage that never rounds a miss up to 100 % (or a hit down to 0)."""
    if 0.995 <= p < 1.0:
        return ">99%"
    if 0.0 < p < 0.005:
        return "<1%"
    return f"{p:.0%}"


def _pct(a: float, b: float) -> str:
    """How much more ``a`` is than ``b``, as ``+12%`` or ``2.3×``."""
    if b <= 0:
        return "more"
    ratio = a / b
    return f"{ratio:.1f}×" if ratio >= 1.995 else f"+{(ratio - 1) * 100:.0f}%"


def _varied(rejected: Sequence[Rejection], n: int) -> list[Rejection]:
    """Up to ``n`` rejections: the first of each kind (in the given order), then the rest in order."""
    picked: list[Rejection] = []
    kinds: set[str] = set()
    for r in rejected:
        if r.kind not in kinds:
            kinds.add(r.kind)
            picked.append(r)
    taken = {id(r) for r in picked}
    picked += [r for r in rejected if id(r) not in taken]
    order = {id(r): i for i, r in enumerate(rejected)}
    return sorted(picked[:n], key=lambda r: order[id(r)])


def _choice(o: PlanOption) -> tuple[object, ...]:
    """A row of the plan table: the same GPU setup, cloud, instance and billing (any node count,
    any region). The CLI folds a choice's options into one row."""
    return (o.gpu, o.gpu_count, o.cloud, o.instance_type, o.billing)


def _other_choices(options: Sequence[PlanOption]) -> list[PlanOption]:
    """The best option of each choice after the winner's: runners-up that are real alternatives,
    not the winner (or one runner-up) again at another node count or in another region."""
    seen = {_choice(options[0])}
    out = []
    for o in options[1:]:
        if _choice(o) not in seen:
            seen.add(_choice(o))
            out.append(o)
    return out


def _quota_line(w: PlanOption) -> str | None:
    """A spot winner: how much of which spot quota it needs in its region (data/spot_quota.yaml)."""
    if w.billing != "spot":
        return None
    from importlib import resources

    import yaml

    table = yaml.safe_load(
        resources.files("gpuwise.planner").joinpath("data/spot_quota.yaml").read_text("utf-8")
    )
    entry = table.get(w.cloud)
    if not entry:
        return None
    if entry["unit"] == "gpus":
        amount = f"{w.total_gpus} spot GPUs"
    elif w.vcpus:
        amount = f"{w.vcpus * w.nodes:,.0f} spot vCPUs"
    else:
        return None
    return f"Quota: the winner asks for {amount} at once in {w.region}; check {entry['name']}."


def _memory_lines(w: PlanOption, request: PlanRequest) -> list[str]:
    """The winner's memory: the headroom it keeps, a datasheet capacity, the shipped alert."""
    import math

    from gpuwise.planner.values import MEMORY_ALERT_SHARE

    out = []
    if w.capacity_source == "datasheet":
        out.append(
            f"Memory: {w.gpu}'s {w.capacity_gib:.1f} GiB is the datasheet figure (no nvidia-smi "
            "figure known; the real one is likely a few percent lower): measure it with "
            "`gpuwise bench --calibrate` on one."
        )
    if w.memory_alert:
        hours = math.ceil(w.hours * 1.25)
        out.append(
            f"Memory: the winner's peak is {w.memory_share:.0%} of each GPU's memory "
            f"({w.per_gpu_memory_gib:.1f} of {w.capacity_gib:.1f} GiB, {request.memory_headroom:.0%} "
            f"of usable memory kept free), above the shipped {MEMORY_ALERT_SHARE:.0%} alert "
            "(GpuwiseGpuMemoryHigh), which would fire for the whole run. Silence it for this job "
            "only: amtool silence add alertname=GpuwiseGpuMemoryHigh 'host=~<the job's nodes>' "
            f"--duration={hours}h --comment='planned peak {w.memory_share:.0%}'."
        )
    return out


def _apart(o: PlanOption, w: PlanOption) -> str:
    """Whether the estimator can tell ``o``'s cost from the winner's: the error of the ratio of
    two estimates (:func:`~gpuwise.planner.pair_error.pair_width`), not each one's own range."""
    import math

    from gpuwise.planner.pair_error import pair_width

    width = pair_width(o.gpu, o.total_gpus, w.gpu, w.total_gpus)
    if width <= 0 or o.cost_usd <= 0 or w.cost_usd <= 0:
        return ""
    if abs(math.log(o.cost_usd / w.cost_usd)) > width:
        return ""
    kind = "one GPU model" if o.gpu == w.gpu else "two GPU models"
    return (
        f"; within the error between two estimates ({kind}: ×{math.exp(width):.2f} at p10–p90), "
        "so the estimator cannot tell their costs apart"
    )


def explain(
    options: Sequence[PlanOption],
    rejected: Sequence[Rejection],
    request: PlanRequest,
    *,
    runners_up: int = 3,
    rejections: int = 6,
) -> list[str]:
    """Winner first, then the nearest runners-up against it, then the main rejection groups."""
    lines: list[str] = []
    if options:
        w = options[0]
        what = {
            "cost": "lowest expected cost",
            "time": "shortest expected time",
            "balanced": "lowest cost × time",
        }[request.objective]
        if request.objective == "cost" and any(o.cost_usd < w.cost_usd * 0.995 for o in options):
            what = "the rule above"
        line = f"{w.label} wins on {what}: {fmt_usd(w.cost_usd)} in {fmt_hours(w.hours)}"
        if w.billing == "spot" and w.expected_interruptions is not None:
            line += f" (expected, incl. ~{w.expected_interruptions:.2g} interruptions"
            if w.p_meet_deadline is not None and w.p_meet_deadline_confidence == "low":
                line += (
                    "; chance to finish in time unknown: the interruption rates are placeholders"
                )
            elif w.p_meet_deadline is not None:
                line += f"; {fmt_pct(w.p_meet_deadline)} chance to finish within {fmt_hours(request.deadline_hours or 0)}"
            line += ")"
        lines.append(line + f", out of {len(options)} options that meet every constraint.")
        lines += _memory_lines(w, request)
        quota = _quota_line(w)
        if quota:
            lines.append(quota)
        for o in _other_choices(options)[:runners_up]:
            diffs = []
            if o.cost_usd > w.cost_usd * 1.005:
                diffs.append(f"costs {_pct(o.cost_usd, w.cost_usd)}")
            elif o.cost_usd < w.cost_usd * 0.995:
                diffs.append(f"is {(1 - o.cost_usd / w.cost_usd) * 100:.0f}% cheaper")
            if o.hours > w.hours * 1.005:
                diffs.append(f"takes {_pct(o.hours, w.hours)} longer")
            elif o.hours < w.hours * 0.995:
                diffs.append(f"is {_pct(w.hours, o.hours)} faster")
            lines.append(
                f"#{o.rank} {o.label}: {', '.join(diffs) or 'ties'} "
                f"({fmt_usd(o.cost_usd)}, {fmt_hours(o.hours)}){_apart(o, w)}."
            )
        fastest = min(options, key=lambda o: (o.hours, o.cost_usd))
        if fastest is not w and fastest.hours < w.hours * 0.9:
            lines.append(
                f"Fastest: {fastest.label} in {fmt_hours(fastest.hours)} for {fmt_usd(fastest.cost_usd)} "
                f"({_pct(fastest.cost_usd, w.cost_usd)} the cost); see the Pareto front."
            )
        if w.billing == "spot":
            od = next((o for o in options if o.billing == "on-demand"), None)
            if od is not None:
                lines.append(
                    f"Best on-demand: {od.label} at {fmt_usd(od.cost_usd)} in {fmt_hours(od.hours)} "
                    f"({_pct(od.cost_usd, w.cost_usd)} the cost, no interruption risk)."
                )
    for r in _varied(rejected, rejections):
        lines.append(
            f"Rejected: {r.reason}" + (f" [{r.offers} combinations]" if r.offers > 1 else "") + "."
        )
    if len(rejected) > rejections:
        lines.append(f"... and {len(rejected) - rejections} more rejection groups (see --json).")
    return lines
