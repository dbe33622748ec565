"""``gpuwise exporter``, ``gpuwise monitor`` and ``gpuwise report``: see where the GPU money goes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gpuwise.cli._output import JsonFlag, console, emit_json, money, number
from gpuwise.cli._prices import MaxPriceAgeFlag, prices_age, print_price_age
from gpuwise.cli._runs import PlanFilesOpt, RunsReportOpt

FakeFlag = Annotated[
    str | None,
    typer.Option(
        "--fake",
        help="Read a fake GPU instead of NVML: a scenario (idle, leak, thermal, xid, mig) or a trace file "
        "(JSON/YAML). On `report` the scenario is replayed as the history of the window.",
    ),
]
PriceFlag = Annotated[
    str | None,
    typer.Option(
        "--price-usd-per-hour",
        help="What one GPU-hour costs here (default: GPUWISE_GPU_PRICE_USD_PER_HOUR, else the "
        "catalog price of --instance-type, else the catalog's cheapest on-demand price of the GPU model).",
    ),
]
InstanceFlag = Annotated[
    str | None,
    typer.Option(
        "--instance-type",
        help="This machine's instance type, priced from the catalog (default: GPUWISE_INSTANCE_TYPE).",
    ),
]
# Not `--cloud`: everywhere else `--cloud` filters offers; here it names the cloud this machine runs in.
InstanceCloudFlag = Annotated[
    str | None,
    typer.Option(
        "--instance-cloud",
        help="Cloud of --instance-type, for its catalog price (default: GPUWISE_CLOUD).",
    ),
]


NodeInfoFlag = Annotated[
    str,
    typer.Option(
        "--node-info",
        metavar="<off|kubernetes|metadata|auto>",
        help="Where to learn this node's instance type, region and capacity type for its "
        "price: off, kubernetes (the Node's labels through the API server), metadata (the "
        "cloud's metadata service) or auto (both). Settings (--instance-type, "
        "GPUWISE_INSTANCE_TYPE) win. An instance not found is left unpriced, never guessed.",
    ),
]


def _seconds(text: str, what: str) -> float:
    """A duration flag in seconds; it needs a unit (`10s`, `5m`, `2h`): a bare number is an error."""
    from gpuwise.units import parse_duration_seconds

    return parse_duration_seconds(text, what)


def _reader(fake: str | None) -> Any:
    if fake:
        from gpuwise.monitor import resolve_fake

        return resolve_fake(fake)
    from gpuwise.monitor import NvmlGpuReader

    return NvmlGpuReader()


def _prices(price: str | None, instance_type: str | None, cloud: str | None) -> Any:
    from gpuwise.monitor import PriceBook

    return PriceBook(price_usd_per_hour=price, instance_type=instance_type, cloud=cloud)


def _logging() -> None:
    import logging

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def exporter(
    host: Annotated[
        str,
        typer.Option("--host", help="Address to listen on (0.0.0.0 exposes it to the network)."),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 9835,
    interval: Annotated[
        str,
        typer.Option(
            "--interval",
            metavar="DURATION",
            help="How often to read the GPUs, with a unit: e.g. 1s, 0.5s or 500ms.",
        ),
    ] = "1s",
    fake: FakeFlag = None,
    price_usd_per_hour: PriceFlag = None,
    instance_type: InstanceFlag = None,
    instance_cloud: InstanceCloudFlag = None,
    node_info: NodeInfoFlag = "off",
    dcgm_compat: Annotated[
        bool,
        typer.Option(
            "--dcgm-compat",
            help="Also expose dcgm-exporter's names and units (DCGM_FI_DEV_GPU_UTIL in %, "
            "DCGM_FI_DEV_FB_USED in MiB, ...) so its dashboards and alerts keep working.",
        ),
    ] = False,
    process_command: Annotated[
        str,
        typer.Option(
            "--process-command",
            metavar="<off|executable|hash>",
            help="The command label of per-process series: off (default: command lines can hold "
            "secrets), executable (program name only) or hash (a short SHA-256).",
        ),
    ] = "off",
    pod_resources_socket: Annotated[
        str | None,
        typer.Option(
            "--pod-resources-socket",
            metavar="PATH",
            help="The kubelet's pod-resources socket (/var/lib/kubelet/pod-resources/kubelet.sock):"
            " which pod each GPU is assigned to, without hostPID. Needs gpuwise[exporter-k8s].",
        ),
    ] = None,
    once: Annotated[
        bool, typer.Option("--once", help="Print the metrics once (Prometheus text) and exit.")
    ] = False,
    json: JsonFlag = False,
) -> None:
    """Serve GPU metrics for Prometheus on /metrics (and /healthz); keeps serving through NVML errors."""
    from gpuwise.errors import InputError
    from gpuwise.monitor import Exporter

    if not 0 <= port <= 65535:
        raise InputError(
            f"--port must be 0-65535, got {port}", hint="give a free TCP port, e.g. 9835"
        )
    interval_s = _seconds(interval, "--interval")
    from gpuwise.monitor import PROCESS_COMMANDS, GpuCollector, PriceBook, detect_node

    if process_command not in PROCESS_COMMANDS:
        raise InputError(
            f"--process-command must be one of {', '.join(PROCESS_COMMANDS)}, got {process_command!r}",
            hint="give off, executable or hash",
        )
    node = detect_node(node_info)  # type: ignore[arg-type]  # checked inside
    prices = PriceBook(
        price_usd_per_hour=price_usd_per_hour,
        instance_type=instance_type,
        cloud=instance_cloud,
        node=node,
        strict=False,  # an instance the catalog lacks is labelled unknown: no crash loop
    )
    from gpuwise.base import settings

    collector = GpuCollector(
        prices,
        process_command=process_command,  # type: ignore[arg-type]
        dcgm_compat=dcgm_compat,
        plan_id=settings.text("GPUWISE_PLAN_ID"),
    )
    pods = None
    if pod_resources_socket:
        from gpuwise.monitor import PodResourcesClient

        pods = PodResourcesClient(pod_resources_socket)
    if once:
        from prometheus_client import CollectorRegistry, generate_latest

        from gpuwise.monitor import Sampler

        reader = _reader(fake)
        Sampler(reader, collector, interval_s, pods).read_once()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        text = generate_latest(registry).decode()
        reader.close()
        if pods is not None:
            pods.close()
        if json:
            emit_json({"metrics": text})
        else:
            typer.echo(text, nl=False)
        return
    _logging()
    exp = Exporter(
        _reader(fake),
        host=host,
        port=port,
        interval_s=interval_s,
        collector=collector,
        pods=pods,
    )
    exp.prepare()
    info = {
        "url": exp.url,
        "metrics": f"{exp.url}/metrics",
        "healthz": f"{exp.url}/healthz",
        "interval_s": interval_s,
        "fake": fake,
        "node": {
            "instance_type": node.instance_type,
            "region": node.region,
            "capacity_type": node.capacity_type,
            "source": node.source,
        },
    }
    if json:
        emit_json(info)
        import sys

        sys.stdout.flush()
    else:
        console(stderr=True).print(
            f"gpuwise exporter on {info['metrics']} (every {interval_s:g} s); Ctrl-C stops"
        )
    import contextlib

    with contextlib.suppress(KeyboardInterrupt):
        exp.serve_forever()


def monitor(
    interval: Annotated[
        str,
        typer.Option(
            "--interval", metavar="DURATION", help="Sampling interval, with a unit: e.g. 10s or 1m."
        ),
    ] = "10s",
    db: Annotated[
        Path | None,
        typer.Option("--db", help="SQLite history file (default: <data dir>/monitor.sqlite)."),
    ] = None,
    duration: Annotated[
        str | None,
        typer.Option(
            "--duration",
            metavar="DURATION",
            help="Stop after this long, with a unit: e.g. 30m or 8h (default: run until Ctrl-C).",
        ),
    ] = None,
    # not `--samples`: in estimate/plan that is the training set's size
    max_reads: Annotated[
        int | None, typer.Option("--reads", help="Stop after this many reads of the GPUs.")
    ] = None,
    retention: Annotated[
        str,
        typer.Option(
            "--retention",
            metavar="DURATION",
            help="Delete samples older than this, with a unit: e.g. 90d.",
        ),
    ] = "90d",
    downsample_after: Annotated[
        str,
        typer.Option(
            "--downsample-after",
            metavar="DURATION",
            help="Fold samples older than this into 5-minute rows, with a unit: e.g. 35d.",
        ),
    ] = "35d",
    fake: FakeFlag = None,
    node_info: NodeInfoFlag = "off",
    json: JsonFlag = False,
) -> None:
    """Record GPU samples into the local SQLite history (WAL mode, with retention and downsampling).

    Each sample is recorded with this node's instance type, cloud, region and capacity type
    (settings, or --node-info) and the plan id of the job on the GPU (its processes'
    GPUWISE_PLAN_ID, else this process's), so `report` prices it from its own node. A sample
    stands for the time since the previous read: a stalled monitor catches up without losing
    or double-counting GPU-seconds."""
    import time

    from gpuwise.errors import InputError
    from gpuwise.monitor import HistoryStore, next_read_time, read_duration, sample_context

    interval_s = _seconds(interval, "--interval")
    if interval_s < 1:
        raise InputError(
            f"--interval must be ≥ 1 s for the history, got {interval}",
            hint="the store keeps one row per GPU per second; use e.g. 1s or 10s",
        )
    stop_after = _seconds(duration, "--duration") if duration else None
    retention_s = _seconds(retention, "--retention")
    downsample_s = _seconds(downsample_after, "--downsample-after")
    if max_reads is not None and max_reads < 1:
        raise InputError(
            f"--reads must be ≥ 1, got {max_reads}", hint="give a positive count or leave it out"
        )
    if not json:
        _logging()
    context = sample_context(node_info)
    reader = _reader(fake)
    written = reads = 0
    started = time.monotonic()
    with HistoryStore(db) as store:
        store.lock_writer()  # a second monitor on this file exits 2 now, not after double-counting
        store.maintain(retention_s=retention_s, downsample_after_s=downsample_s)
        last_maintain = started
        next_t = started
        last_read: float | None = None
        try:
            while True:
                snap = reader.read()
                now = time.monotonic()
                written += store.append(snap, read_duration(now, last_read, interval_s), context)
                last_read = now
                reads += 1
                if now - last_maintain > 3600:
                    store.maintain(retention_s=retention_s, downsample_after_s=downsample_s)
                    last_maintain = now
                if (max_reads is not None and reads >= max_reads) or (
                    stop_after is not None and now - started >= stop_after
                ):
                    break
                next_t = next_read_time(next_t, interval_s, time.monotonic())
                time.sleep(max(0.0, next_t - time.monotonic()))
        except KeyboardInterrupt:
            pass
        finally:
            reader.close()
        result = {
            "db": str(store.path),
            "reads": reads,
            "rows_written": written,
            "interval_s": interval_s,
            "size_bytes": store.size_bytes(),
        }
    if json:
        emit_json(result)
    else:
        console().print(f"{reads} reads, {written} rows → {result['db']}")


def report(
    since: Annotated[
        str,
        typer.Option(
            "--since",
            metavar="DURATION",
            help="Window length back from now (or --until), with a unit: e.g. 24h, 7d.",
        ),
    ] = "24h",
    until: Annotated[
        float | None, typer.Option("--until", help="Window end as Unix time (default: now).")
    ] = None,
    db: Annotated[
        Path | None,
        typer.Option("--db", help="SQLite history file (default: <data dir>/monitor.sqlite)."),
    ] = None,
    prometheus: Annotated[
        str | None,
        typer.Option(
            "--prometheus",
            help="Read history from this Prometheus server instead, e.g. http://127.0.0.1:9090.",
        ),
    ] = None,
    fake: FakeFlag = None,
    html: Annotated[
        Path | None, typer.Option("--html", help="Also write a self-contained HTML report here.")
    ] = None,
    price_usd_per_hour: PriceFlag = None,
    instance_type: InstanceFlag = None,
    instance_cloud: InstanceCloudFlag = None,
    max_price_age: MaxPriceAgeFlag = "30d",  # issue 13
    runs: RunsReportOpt = None,
    plan: PlanFilesOpt = None,
    json: JsonFlag = False,
) -> None:
    """Efficiency and waste report: allocated vs active GPU-hours, idle stretches, cost, right-sizing in dollars.

    With --runs DIR: plan vs actual per run from its run records (throughput, step time, memory, hours, dollars, interruptions) and the estimator's error on your jobs.
    """
    if runs is not None or plan:
        from gpuwise.cli._runs import runs_report

        return runs_report(runs, plan, html=html, json=json, other=(db, prometheus, fake))
    import time

    from gpuwise.errors import InputError
    from gpuwise.monitor import build_report, report_to_dict
    from gpuwise.units import check_finite

    window_s = _seconds(since, "--since")
    if window_s > 10 * 8760 * 3600:
        raise InputError(
            f"--since {since} is longer than 10 years",
            hint="give a shorter window, e.g. 24h or 30d",
        )
    # Unix time up to 2100-01-01: what datetime and SQLite handle everywhere
    end = time.time() if until is None else check_finite(until, "--until", maximum=4_102_444_800)
    if end - window_s < 0:
        raise InputError(
            "the window starts before 1970", hint="give a later --until or a shorter --since"
        )
    if sum(x is not None for x in (db, prometheus, fake)) > 1:
        raise InputError(
            "give only one of --db, --prometheus and --fake", hint="pick one history source"
        )
    if fake:
        from gpuwise.monitor import replay_history, resolve_fake

        history = replay_history(resolve_fake(fake), window_s, end)
    elif prometheus:
        from gpuwise.monitor import PrometheusHistory

        history = PrometheusHistory(prometheus).read(end - window_s, end)
    else:
        from gpuwise.monitor import HistoryStore, default_db_path

        path = db or default_db_path()
        if not path.exists():
            raise InputError(
                f"no history at {path}",
                hint="record some with `gpuwise monitor`, read Prometheus with "
                "--prometheus URL, or try `gpuwise report --fake idle`",
            )
        with HistoryStore(path, create=False) as store:  # a reader never writes a schema
            history = store.read(end - window_s, end)
    prices_age((), max_price_age)  # issue 13: a bad --max-price-age fails early
    book = _prices(price_usd_per_hour, instance_type, instance_cloud)
    rep = build_report(history, book)
    doc = report_to_dict(rep)
    age = _report_price_age(book, price_usd_per_hour, rep, max_price_age)  # issue 13
    if age is not None:
        doc.update(age.to_dict())
    if html is not None:
        from gpuwise.monitor import render_html

        try:
            from gpuwise.base.paths import write_text_atomic

            write_text_atomic(html, render_html(rep, history, doc))
        except OSError as exc:
            from gpuwise.errors import StorageError

            raise StorageError(
                f"cannot write {html}: {exc.strerror}", hint="give a writable --html path"
            ) from exc
    if json:
        emit_json(doc)
        if age is not None:
            print_price_age(age, json=True)
        return
    _print_report(rep, html)
    if age is not None:
        print_price_age(age, json=False)


def _report_price_age(book: Any, price: str | None, rep: Any, max_price_age: str) -> Any:
    """issue 13: the age of the catalog prices a report used (None with --price-usd-per-hour or no GPU)."""
    if price is not None or book.configured is not None or not rep.gpus:
        return None
    used = [
        o
        for o in book.offers
        if (book.instance_type is None or o.instance_type == book.instance_type)
        and (book.cloud is None or o.cloud == book.cloud)
    ]
    return prices_age(used, max_price_age)


def _print_report(rep: Any, html: Path | None) -> None:
    from rich.table import Table

    out = console()
    if not rep.gpus:
        out.print(
            f"no GPU samples between the window's start and end in {rep.source} — To fix: record some "
            "with `gpuwise monitor`, or widen --since"
        )
        return
    span = (
        f"{rep.observed_hours:.1f} h"
        if rep.observed_hours >= 0.1
        else f"{rep.observed_hours * 60:.0f} min"
    )
    asked = (
        ""
        if abs(rep.observed_hours - rep.window_hours) < 0.05 * rep.window_hours
        else f" of the {rep.window_hours:.1f} h asked"
    )
    unpriced = (
        f" [yellow](+ {rep.unpriced_hours:.1f} GPU-hours unpriced: no known instance type — "
        "To fix: give --instance-type or --price-usd-per-hour, or record with --node-info)[/yellow]"
        if rep.unpriced_hours > 0
        else ""
    )
    out.print(
        f"[bold]GPU efficiency[/bold] over {span} observed{asked} ({rep.source}): "
        f"{rep.active_hours:.1f} of {rep.allocated_hours:.1f} GPU-hours active; "
        f"cost {money(rep.cost_usd)}, wasted {money(rep.wasted_usd)}{unpriced}"
    )
    t = Table(
        "GPU",
        "model",
        "alloc h",
        "active h",
        "idle h",
        "eff.",
        "peak mem",
        "cost",
        "wasted",
        "unpriced h",
    )
    for g in rep.gpus:
        flag = (
            " [red]LOST[/red]"
            if g.lost
            else (f" [red]XID {','.join(map(str, g.xid_codes))}[/red]" if g.xid_codes else "")
        )
        t.add_row(
            f"{g.index} {g.host}{flag}",
            g.model + (" (MIG)" if g.mig_active_share is not None else ""),
            number(g.allocated_hours),
            number(g.active_hours),
            number(g.idle_hours),
            number(g.efficiency, ".0%"),
            number(g.peak_memory_fraction, ".0%"),
            money(g.cost_usd),
            money(g.wasted_usd),
            number(g.unpriced_hours),
        )
    out.print(t)
    for title, rows in (("workload", rep.workloads), ("plan", rep.plans)):
        if not rows:
            continue
        w = Table(title, "alloc h", "active h", "idle h", "cost", "wasted", "unpriced h")
        for u in rows:
            w.add_row(
                getattr(u, "workload", None) or getattr(u, "plan_id", ""),
                number(u.allocated_hours),
                number(u.active_hours),
                number(u.idle_hours),
                money(u.cost_usd),
                money(u.wasted_usd),
                number(u.unpriced_hours),
            )
        out.print(w)
    for r in rep.recommendations:
        saves = (
            ""
            if r.saving_usd_per_month is None
            else f", saves {money(r.saving_usd_per_month)}/month"
        )
        out.print(f"• [bold]{r.action}[/bold] ({r.host} GPU {r.gpu_index}{saves}): {r.reason}")
    for warning in rep.warnings:
        out.print(f"[yellow]warning:[/yellow] {warning}")
    if html is not None:
        out.print(f"HTML report: {html}")
