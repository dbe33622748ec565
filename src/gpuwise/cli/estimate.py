"""``gpuwise estimate``: memory per GPU, FLOPs, throughput and hours for one workload on one GPU setup."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuwise.cli._flags import named_as_flags
from gpuwise.cli._output import JsonFlag, console, emit_json, make_table, number
from gpuwise.cli._workload import (
    DEFAULT_GPU,
    WORKLOAD_FLAGS,
    GpuOpt,
    GpusOpt,
    WorkloadRequest,
    workload_options,
)

if TYPE_CHECKING:
    from gpuwise.estimate import Calibration, Estimate, Workload


_P = "Parallelism and memory"


@workload_options(setup=("gpus_per_node", "inter_node_gbps"))
def estimate(
    workload_request: WorkloadRequest,
    gpu: GpuOpt = None,
    gpus: GpusOpt = 1,
    instance_type: Annotated[
        str | None,
        typer.Option(
            "--instance-type",
            help="Instance type the job runs on, e.g. p5.48xlarge: its GPU, GPUs per node and "
            "network (the same table `plan` uses) unless given.",
            rich_help_panel=_P,
        ),
    ] = None,
    instance_cloud: Annotated[
        str | None,
        typer.Option(
            "--instance-cloud",
            help="Cloud of --instance-type (default: the one cloud the catalog lists it in).",
            rich_help_panel=_P,
        ),
    ] = None,
    calibration: Annotated[
        Path | None,
        typer.Option(
            "--calibration",
            help="Calibration file (default: calibration.json in the config dir, when present).",
        ),
    ] = None,
    no_calibration: Annotated[
        bool, typer.Option("--no-calibration", help="Ignore any calibration file.")
    ] = False,
    list_models: Annotated[
        bool, typer.Option("--list-models", help="List the model presets and exit.")
    ] = False,
    json: JsonFlag = False,
) -> None:
    """Memory per GPU (broken down), FLOPs, MFU, throughput, wall-clock and GPU-hours for one workload.

    When it does not fit, says by how much and lists fixes that fit, cheapest in speed first.
    """
    from gpuwise.estimate import estimate_workload, preset_names

    if list_models:
        _list_models(json, preset_names())
        return
    inputs = _inputs(
        workload_request, gpu, gpus, instance_type, instance_cloud, calibration, no_calibration
    )
    with named_as_flags(WORKLOAD_FLAGS):
        est = estimate_workload(
            inputs.workload,
            inputs.setup.gpu,
            inputs.gpus,
            calibration=inputs.calibration,
            **inputs.setup.kwargs(),
        )
    if json:
        emit_json(est.to_dict())
        return
    _render(est)


@dataclass(frozen=True)
class Setup:
    """The GPU and wiring an estimate runs on, after --instance-type is looked up."""

    gpu: str
    gpus_per_node: int | None
    inter_node_gbit_s: float | None

    def kwargs(self) -> dict[str, Any]:
        return {"gpus_per_node": self.gpus_per_node, "inter_node_gbit_s": self.inter_node_gbit_s}


@dataclass(frozen=True)
class EstimateInputs:
    """What ``gpuwise estimate`` hands the library for one command line."""

    workload: Workload
    setup: Setup
    gpus: int
    calibration: Calibration | None


def _inputs(
    request: WorkloadRequest,
    gpu: str | None,
    gpus: int,
    instance_type: str | None,
    instance_cloud: str | None,
    calibration: Path | None,
    no_calibration: bool,
) -> EstimateInputs:
    from gpuwise.estimate import load_calibration

    if no_calibration and calibration is not None:  # the file used to be ignored without a word
        from gpuwise.errors import InputError

        raise InputError(
            "--calibration and --no-calibration contradict each other",
            hint="give --calibration FILE to use a file, or --no-calibration to use none",
        )
    cal = None if no_calibration else load_calibration(calibration)
    wl = request.workload(cal)
    return EstimateInputs(wl, _setup(request, gpu, instance_type, instance_cloud), gpus, cal)


def estimate_inputs(args: Sequence[str]) -> EstimateInputs:
    """The library inputs ``gpuwise estimate ARGS`` would estimate, parsed by the command's own
    parser and option table (``benchmarks/estimate_accuracy.py`` measures through this)."""
    from gpuwise.cli._workload import request_from_context

    # this command alone, parsed as `gpuwise estimate` parses it (no import of cli.main: a circle)
    only = typer.Typer(add_completion=False)
    only.command("estimate")(estimate)
    command: Any = typer.main.get_command(only)
    ctx = command.make_context("estimate", list(args))
    p = ctx.params
    return _inputs(
        request_from_context(ctx, p),
        p["gpu"],
        p["gpus"],
        p["instance_type"],
        p["instance_cloud"],
        p["calibration"],
        p["no_calibration"],
    )


def estimate_argv(args: Sequence[str]) -> Estimate:
    """The estimate ``gpuwise estimate ARGS`` would print, without calibration or suggestions: how
    the accuracy benchmarks price a published row written as a command line."""
    from gpuwise.estimate import estimate_workload

    inputs = estimate_inputs([*args, "--no-calibration"])
    return estimate_workload(
        inputs.workload,
        inputs.setup.gpu,
        inputs.gpus,
        calibration=None,
        suggest=False,
        **inputs.setup.kwargs(),
    )


def _setup(
    request: WorkloadRequest,
    gpu: str | None,
    instance_type: str | None,
    instance_cloud: str | None,
) -> Setup:
    """--gpu/--gpus-per-node/--inter-node-gbps, filled from --instance-type where not given: the
    catalog's GPU and count for that instance, the planner's network table for its network."""
    gpn = request.setup("gpus_per_node")
    gbps = request.setup("inter_node_gbps")
    if gbps is not None:
        from gpuwise.units import check_finite

        check_finite(gbps, "--inter-node-gbps", strict=True)
    if instance_type is None:
        if instance_cloud is not None:
            from gpuwise.errors import InputError

            raise InputError(
                "--instance-cloud names the cloud of --instance-type, which is missing",
                hint="add --instance-type, e.g. --instance-type p5.48xlarge --instance-cloud aws",
            )
        return Setup(gpu or DEFAULT_GPU, gpn, gbps)
    from gpuwise.catalog import load_catalog
    from gpuwise.errors import InputError, did_you_mean
    from gpuwise.planner import instance_network

    offers = [o for o in load_catalog().offers if o.instance_type == instance_type]
    if instance_cloud is not None:
        offers = [o for o in offers if o.cloud == instance_cloud.lower()]
    clouds = sorted({o.cloud for o in offers})
    if not offers:
        known = sorted({o.instance_type for o in load_catalog().offers})
        raise InputError(
            f"instance type {instance_type!r} is not in the catalog"
            + (f" for {instance_cloud}" if instance_cloud else ""),
            hint="give one `gpuwise offers` lists, or --gpu with --inter-node-gbps",
            suggestions=did_you_mean(instance_type, known),
        )
    if len(clouds) > 1:
        raise InputError(
            f"instance type {instance_type!r} is listed by {', '.join(clouds)}",
            hint="add --instance-cloud to say which",
        )
    offer = offers[0]
    net = instance_network(offer.cloud, instance_type)
    return Setup(
        offer.gpu if gpu is None else gpu,
        gpn if gpn is not None else max(1, int(offer.gpu_count)),
        gbps if gbps is not None else net.inter_node_gbit_s,
    )


def _list_models(as_json: bool, names: list[str]) -> None:
    from gpuwise.estimate import get_preset

    rows: list[dict[str, Any]] = []
    for name in names:
        m = get_preset(name)
        rows.append(
            {
                "name": name,
                "arch": m.arch,
                "params": m.total_params,
                "hidden": m.hidden or None,
                "layers": m.total_layers or None,
                "heads": m.heads or None,
                "kv_heads": m.n_kv if m.heads else None,
                "vocab": m.vocab or None,
                "source": m.source,
            }
        )
    if as_json:
        emit_json(rows)
        return
    table = make_table(
        ("name", "arch", "params", "hidden", "layers", "heads/kv", "vocab"),
        title="Model presets (gpuwise estimate --model NAME)",
        left=("name", "arch"),
    )
    for r in rows:
        table.add_row(
            r["name"],
            r["arch"],
            _count(r["params"]),
            str(r["hidden"] or "—"),
            str(r["layers"] or "—"),
            f"{r['heads']}/{r['kv_heads']}" if r["heads"] else "—",
            str(r["vocab"] or "—"),
        )
    console().print(table)


def _count(n: float | None) -> str:
    if n is None:
        return "—"
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.3g}{suffix}"
    return f"{n:.3g}"


def _hours(h: float | None) -> str:
    if h is None:
        return "—"
    if h < 1:
        return f"{h * 60:.1f} min"
    if h < 72:
        return f"{h:,.1f} h"
    return f"{h:,.0f} h ({h / 24:,.1f} days)"


_LABELS = {
    "weights": "weights",
    "gradients": "gradients",
    "optimizer_states": "optimizer states",
    "master_weights": "fp32 master weights",
    "activations": "activations",
    "logits": "logits + loss",
    "kv_cache": "KV cache",
    "comm_buffers": "communication buffers",
    "allocator_overhead": "allocator fragmentation",
    "cuda_context": "CUDA context",
}


def _render(est: Estimate) -> None:
    from rich.table import Table

    out = console()
    wl = est.workload
    m = wl.model
    head = (
        f"[bold]{m.name}[/bold] · {wl.task} · {wl.precision}"
        + (f" · {wl.optimizer}" if wl.is_training else "")
        + f" on [bold]{est.gpus} × {est.gpu}[/bold]"
        + (f" ({est.nodes} nodes)" if est.nodes > 1 else "")
    )
    out.print(head)
    parallel = [f"data-parallel {est.data_parallel}"]
    if wl.zero:
        parallel.append(f"ZeRO-{wl.zero}")
    if wl.tensor_parallel > 1:
        parallel.append(f"tensor-parallel {wl.tensor_parallel}")
    if wl.pipeline_parallel > 1:
        parallel.append(f"pipeline-parallel {wl.pipeline_parallel}")
    if wl.is_training:
        parallel.append(
            f"seq {wl.effective_seq_len}, micro-batch {wl.micro_batch}, global batch {wl.global_batch}"
        )
        parallel.append(f"recompute {wl.grad_ckpt}")
    else:
        parallel.append(f"batch {wl.micro_batch}, prompt {wl.prompt_len}, output {wl.output_len}")
    out.print("[dim]" + " · ".join(parallel) + "[/dim]")

    mem = est.memory
    table = Table(title="Memory per GPU")
    table.add_column("term")
    table.add_column("GiB", justify="right")
    table.add_column("share", justify="right")
    for key, gib in mem.breakdown.items():
        if gib <= 0 and key not in ("weights", "activations"):
            continue
        table.add_row(
            _LABELS.get(key, key),
            f"{gib:,.2f}",
            f"{gib / mem.per_gpu_gib:.0%}" if mem.per_gpu_gib else "—",
        )
    table.add_row("[bold]total[/bold]", f"[bold]{mem.per_gpu_gib:,.2f}[/bold]", "")
    out.print(table)
    if mem.fits:
        out.print(
            f"[green]Fits[/green]: {mem.per_gpu_gib:,.1f} of the {mem.capacity_gib:,.1f} GiB the GPU "
            f"reports ({mem.headroom_gib:,.1f} GiB free)."
        )
    elif mem.verdict == "tight":
        frag = mem.breakdown.get("allocator_overhead", 0.0)
        out.print(
            f"[yellow]Tight[/yellow]: {mem.per_gpu_gib:,.1f} GiB per GPU with the assumed "
            f"{frag:,.1f} GiB of allocator fragmentation, {mem.per_gpu_gib - frag:,.1f} GiB without, "
            f"of the {mem.capacity_gib:,.1f} GiB the GPU reports: it may run out of memory. "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reduces fragmentation; the planner "
            "and gpuwise's fixes only use settings that fit with the allowance."
        )
    else:
        short = -mem.headroom_gib
        out.print(
            f"[red]Does not fit[/red]: needs {mem.per_gpu_gib:,.1f} GiB per GPU, the {est.gpu} reports "
            f"{mem.capacity_gib:,.1f} GiB — short by [bold]{short:,.1f} GiB[/bold] "
            f"({short / mem.capacity_gib:.0%} over)."
        )

    perf = Table(title="Compute and time", show_header=False)
    perf.add_column("what")
    perf.add_column("value", justify="right")
    perf.add_row(
        "parameters", f"{_count(est.params_total)} total, {_count(est.params_trainable)} trained"
    )
    perf.add_row("FLOPs per token", f"{est.flops_per_token:.3g}")
    if est.flops_total is not None:
        perf.add_row("FLOPs in total", f"{est.flops_total:.3g}")
    perf.add_row("peak per GPU", f"{est.peak_tflops:,.0f} TFLOP/s ({wl.precision}, dense)")
    perf.add_row(
        "MFU",
        f"{est.mfu:.1%}"
        + (
            f" (compute {est.mfu_compute:.1%}, scaling {est.scaling_efficiency:.0%})"
            if est.scaling_efficiency < 0.995
            else ""
        ),
    )
    perf.add_row("interconnect", est.interconnect)
    if est.inference is None:
        perf.add_row("tokens/s (all GPUs)", number(est.tokens_per_second, ",.0f"))
        perf.add_row("samples/s", number(est.samples_per_second, ",.2f"))
        perf.add_row("step time", f"{est.step_time_s:,.2f} s")
    else:
        inf = est.inference
        perf.add_row("prefill tokens/s", number(inf.prefill_tokens_per_second, ",.0f"))
        perf.add_row("decode tokens/s (all sequences)", number(est.tokens_per_second, ",.0f"))
        perf.add_row("time to first token", f"{inf.time_to_first_token_s * 1000:,.0f} ms")
        perf.add_row(
            "latency per output token",
            f"{inf.latency_per_output_token_ms:,.1f} ms ({inf.decode_bound}-bound)",
        )
        perf.add_row("KV cache per sequence", f"{inf.kv_cache_gib_per_sequence:,.3f} GiB")
        perf.add_row("max concurrent sequences", f"{inf.max_batch_that_fits:,}")
    if est.total_tokens is not None:
        perf.add_row("tokens in total", _count(est.total_tokens))
    wall = _hours(est.wall_hours)
    if (
        est.wall_hours is not None
        and est.wall_hours_p10 is not None
        and est.wall_hours_p90 is not None
    ):
        wall += f" (p10–p90 {_hours(est.wall_hours_p10)} – {_hours(est.wall_hours_p90)})"
    if mem.verdict == "does not fit" and est.total_tokens is not None:
        wall = "— (does not fit: it would not run; see the fixes)"
    perf.add_row("wall-clock", wall)
    if est.inference is None and est.wall_hours is not None:
        perf.add_row("goodput", f"{est.goodput:.0%} (failures, restarts, start-up)")
    perf.add_row("GPU-hours", _hours(est.gpu_hours) if est.gpu_hours is not None else "—")
    out.print(perf)
    out.print(f"[dim]MFU basis: {est.mfu_basis}[/dim]")

    if est.suggestions:
        # the order of estimate.suggest_fixes: changes on the GPUs given (least slowdown first),
        # then a bigger GPU or more GPUs, which may well be faster
        fixes = Table(
            title="Fixes that fit: settings on these GPUs first (least speed cost first), "
            "then a bigger GPU or more GPUs"
        )
        fixes.add_column("#", justify="right")
        fixes.add_column("fix")
        fixes.add_column("GiB/GPU", justify="right")
        fixes.add_column("speed")
        for i, s in enumerate(est.suggestions, 1):
            fixes.add_row(str(i), s.fix, f"{s.per_gpu_gib:,.1f}", s.speed_cost)
        out.print(fixes)
    elif not mem.fits:
        if (
            mem.breakdown.get("activations", 0.0) + mem.breakdown.get("logits", 0.0)
            > mem.per_gpu_gib / 2
        ):
            out.print(
                "[yellow]No single fix found that fits. Activations dominate: more data-parallel GPUs do not "
                "shrink them; split the sequence (context parallelism), recompute activations, or use a "
                "chunked/fused cross-entropy.[/yellow]"
            )
        else:
            out.print(
                "[yellow]No single fix found that fits; try a bigger GPU or more GPUs with --zero 3.[/yellow]"
            )
    for note in est.notes:
        out.print(f"[dim]note: {note}[/dim]")
