"""One meaning per flag name, durations with units, help without Python type names."""

from __future__ import annotations

import re

import pytest

# Every duration flag: a bare number used to mean hours (`exporter --interval 2` sampled every 2 h,
# `monitor --interval 10 --samples 2` slept 10 h). Now it is refused with the fix.
BARE_DURATIONS = [
    ["exporter", "--fake", "idle", "--once", "--interval", "2"],
    ["monitor", "--fake", "idle", "--reads", "2", "--interval", "10"],
    ["monitor", "--fake", "idle", "--reads", "1", "--duration", "8"],
    ["monitor", "--fake", "idle", "--reads", "1", "--retention", "90"],
    ["monitor", "--fake", "idle", "--reads", "1", "--downsample-after", "35"],
    ["report", "--fake", "idle", "--since", "24"],
    ["plan", "--model", "gpt2", "--task", "finetune", "--samples", "10k", "--deadline", "48"],
    ["plan", "--model", "gpt2", "--task", "finetune", "--samples", "10k", "--spot-mtbf", "72"],
    ["plan", "--model", "gpt2", "--task", "finetune", "--samples", "10k", "--restart-time", "10"],
]


@pytest.mark.parametrize("argv", BARE_DURATIONS, ids=lambda a: f"{a[0]} {a[-2]}")
def test_a_duration_without_a_unit_is_refused(cli, argv: list[str]) -> None:  # type: ignore[no-untyped-def]
    r = cli(*argv)
    assert r.code == 2, (r.stdout, r.stderr)
    line = r.stderr.strip()
    assert line.count("\n") == 0 and line.startswith("error: ")
    assert f"{argv[-2]} '{argv[-1]}' has no unit" in line and "To fix:" in line and "30s" in line


def test_a_duration_with_a_unit_is_taken(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = cli(
        "monitor",
        "--fake",
        "idle",
        "--reads",
        "1",
        "--interval",
        "2s",
        "--retention",
        "90d",
        "--db",
        tmp_path / "m.sqlite",
        "--json",
    )
    assert r.code == 0, r.stderr
    assert r.json()["interval_s"] == 2.0  # type: ignore[index]


def test_monitor_cloud_flag_is_the_instance_cloud(cli) -> None:  # type: ignore[no-untyped-def]
    # `--cloud` filters offers in fleet/offers/plan/gpus/tco; exporter/report name this machine's cloud
    # with --instance-cloud instead.
    for command in ("exporter", "report"):
        r = cli(
            command,
            "--fake",
            "idle",
            "--cloud",
            "aws",
            "--once" if command == "exporter" else "--json",
        )
        assert r.code == 2 and "No such option: --cloud" in r.stderr
    r = cli(
        "report",
        "--fake",
        "idle",
        "--instance-type",
        "p4d.24xlarge",
        "--instance-cloud",
        "aws",
        "--json",
    )
    assert r.code == 0, r.stderr
    doc = r.json()
    assert isinstance(doc, dict)
    sources = {g["price_source"] for g in doc["gpus"]} if doc.get("gpus") else set()
    assert not sources or any("p4d.24xlarge" in s for s in sources), sources


def test_surface_gives_each_flag_one_meaning() -> None:
    """Flags that filter (`--cloud`) or count (`--gpus`) mean the same in every command that has them."""
    from tests.cli.test_surface import surface

    commands = {
        line.split(" :: ")[0]: set(line.split(" :: ")[1].split()) for line in surface().splitlines()
    }
    with_cloud = {c for c, flags in commands.items() if "--cloud" in flags}
    assert with_cloud == {
        "gpuwise fleet",
        "gpuwise gpus",
        "gpuwise offers",
        "gpuwise plan",
        "gpuwise tco",
    }
    # --count is GPUs per instance (offers); GPUs in total is --gpus (estimate, tco)
    assert {c for c, flags in commands.items() if "--count" in flags} == {"gpuwise offers"}
    assert {"gpuwise estimate", "gpuwise tco"} <= {
        c for c, flags in commands.items() if "--gpus" in flags
    }
    # --samples is the training set's size (estimate, plan); monitor stops after N --reads
    assert {c for c, flags in commands.items() if "--samples" in flags} == {
        "gpuwise estimate",
        "gpuwise plan",
    }


def test_workload_flags_are_declared_once() -> None:
    """estimate and plan take the very same workload options (cli/_workload.py), help text and all."""
    from gpuwise.cli._workload import WORKLOAD_FLAGS
    from gpuwise.cli.main import get_cli

    cli = get_cli()

    def options(command: str) -> dict[str, tuple[object, ...]]:
        return {
            p.opts[0]: (p.help, p.default, p.metavar, p.rich_help_panel)
            for p in cli.commands[command].params
            if p.opts and p.opts[0] in WORKLOAD_FLAGS.values()
        }

    est, plan = options("estimate"), options("plan")
    shared = set(WORKLOAD_FLAGS.values()) - {
        "--gpus",
        "--gpus-per-node",
    }  # plan searches GPU counts itself
    assert shared <= set(est) and shared <= set(plan)
    assert {f: est[f] for f in shared} == {f: plan[f] for f in shared}


def _metavars() -> dict[str, str]:
    """``"gpuwise fleet --catalog": "PATH"`` for every option of every command, as help renders it."""
    import typer

    from gpuwise.cli.main import HELP_OPTION_NAMES, get_cli

    out: dict[str, str] = {}

    def walk(cmd, path: str) -> None:  # type: ignore[no-untyped-def]
        ctx = typer.Context(cmd, help_option_names=list(HELP_OPTION_NAMES))
        for p in cmd.get_params(ctx):
            if p.param_type_name == "option":
                out[f"{path} {max(p.opts, key=len)}"] = p.display_type_rich(ctx) or ""
        for name, sub in sorted((getattr(cmd, "commands", None) or {}).items()):
            walk(sub, f"{path} {name}")

    walk(get_cli(), "gpuwise")
    return out


def test_help_metavars_are_words_not_python_types() -> None:
    metavars = _metavars()
    odd = {
        k: v
        for k, v in metavars.items()
        if v not in ("", "N", "NUMBER", "COUNT", "DURATION", "TEXT", "PATH", "[DIR]")
        and not re.fullmatch(r"<[\w-]+(\|[\w-]+)+>", v)
    }
    assert odd == {}
    # flags: nothing
    assert metavars["gpuwise fleet --profile"] == "" and metavars["gpuwise fleet --help"] == ""
    assert metavars["gpuwise fleet --catalog"] == "PATH"  # was <list[Path]>
    assert (
        metavars["gpuwise plan --max-nodes"] == "N"
        and metavars["gpuwise fleet --profile-peak"] == "NUMBER"
    )
    assert (
        metavars["gpuwise estimate --tokens"] == "COUNT"
        and metavars["gpuwise monitor --interval"] == "DURATION"
    )


@pytest.mark.parametrize("command", ["fleet", "bench", "report", "estimate", "tco"])
def test_rendered_help_shows_no_python_type_names(cli, command: str) -> None:  # type: ignore[no-untyped-def]
    r = cli(command, "--help")
    assert r.code == 0
    assert not re.search(r"<(bool|list\[[^>]*\]|int|float|str)>", r.stdout), r.stdout


BAD_WORKLOADS = [
    {"zero": 4},
    {"tokens": "1B", "samples": "10k"},
    {"global_batch": 2, "micro_batch": 4},
    {"tensor_parallel": 5},
    {"seq_len": 0},
    {"model": "resnet-50", "task": "lora"},
    {"model": None, "params": "7B", "task": "qlora", "precision": "fp32"},
    {"params": "70B"},
    {"model": None},
    {"task": "teach"},
    {"epochs": "0"},
]


@pytest.mark.parametrize("bad", BAD_WORKLOADS, ids=lambda d: ",".join(d))
def test_library_errors_name_arguments_not_flags(bad: dict[str, object]) -> None:
    from gpuwise.errors import GpuwiseError
    from gpuwise.estimate import workload_from_options

    kwargs: dict[str, object] = {"model": "gpt2", "task": "finetune", "samples": "10k", **bad}
    with pytest.raises(GpuwiseError) as err:
        workload_from_options(**kwargs)  # type: ignore[arg-type]
    assert "--" not in err.value.one_line(), err.value.one_line()


def test_estimate_gpus_error_names_the_argument() -> None:
    from gpuwise.errors import InputError
    from gpuwise.estimate import estimate_workload, workload_from_options

    with pytest.raises(InputError, match=r"^gpus=0 is not a whole number") as err:
        estimate_workload(
            workload_from_options(model="gpt2", task="finetune", samples="10k"), "H100", 0
        )
    assert "--" not in err.value.one_line()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--zero", "4"], "error: --zero 4 is not a ZeRO stage — To fix: give --zero 0, 1, 2 or 3"),
        (
            ["--global-batch", "2", "--micro-batch", "4"],
            "--global-batch 2 is smaller than --micro-batch 4",
        ),
        (["--gpus", "0"], "--gpus 0 is not a whole number ≥ 1"),
        (["--tensor-parallel", "5"], "--tensor-parallel 5 does not divide"),
    ],
)
def test_the_cli_names_the_flags_for_the_same_errors(cli, argv: list[str], needle: str) -> None:  # type: ignore[no-untyped-def]
    r = cli("estimate", "--model", "llama-2-7b", "--task", "finetune", "--samples", "10k", *argv)
    assert r.code == 2 and needle in r.stderr, r.stderr


def test_as_flags_rewrites_only_name_value_pairs() -> None:
    from gpuwise.cli._flags import as_flags
    from gpuwise.cli._workload import WORKLOAD_FLAGS as F

    assert (
        as_flags("task='lora' needs a transformer; use task='finetune'", F)
        == "--task lora needs a transformer; use --task finetune"
    )
    assert (
        as_flags("tokens per sequence; give seq_len ≤ 1024", F)
        == "tokens per sequence; give seq_len ≤ 1024"
    )
    assert as_flags("gpus_per_node=3, gpus=8", F) == "--gpus-per-node 3, --gpus 8"
    assert (
        as_flags("no plan meets budget_usd=1", {"budget_usd": "--budget"})
        == "no plan meets --budget 1"
    )


def _every_option() -> list[tuple[str, object]]:
    """(command path, click option) for every option of every command."""
    from gpuwise.cli.main import get_cli

    out: list[tuple[str, object]] = []

    def walk(cmd, path: str) -> None:  # type: ignore[no-untyped-def]
        for p in cmd.params:
            if getattr(p, "param_type_name", "") == "option":
                out.append((path, p))
        for name, sub in sorted((getattr(cmd, "commands", None) or {}).items()):
            walk(sub, f"{path} {name}")

    walk(get_cli(), "gpuwise")
    return out


def test_a_workload_flag_means_the_same_in_every_command() -> None:
    """Over the whole CLI surface: wherever a flag of the options table appears, it has the table's
    type, default, help, metavar and panel — one definition, so `--inter-node-gbps` cannot default
    to 400 in one command and to the instance's own network in another."""
    from gpuwise.estimate.options import OPTIONS

    by_flag = {o.flag: o for o in OPTIONS.values()}
    seen: dict[str, set[str]] = {}
    for path, p in _every_option():
        flag = max(p.opts, key=len)  # type: ignore[attr-defined]
        if flag not in by_flag:
            continue
        spec = by_flag[flag]
        seen.setdefault(flag, set()).add(path)
        assert p.default == spec.default, (path, flag)  # type: ignore[attr-defined]
        assert p.help.startswith(spec.help), (path, flag)  # type: ignore[attr-defined]
        assert p.rich_help_panel == spec.panel, (path, flag)  # type: ignore[attr-defined]
        assert p.is_flag == (spec.kind == "switch"), (path, flag)  # type: ignore[attr-defined]
        described = (p.help, p.metavar)  # type: ignore[attr-defined]
        first = seen.setdefault(f"{flag} described", set())
        first.add(repr(described))
        assert len(first) == 1, (flag, first)
    workload_flags = {o.flag for o in OPTIONS.values() if o.name != "gpus_per_node"}
    # every workload flag reaches both commands that take a workload
    for flag in workload_flags:
        assert {"gpuwise estimate", "gpuwise plan"} <= seen.get(flag, set()), flag


def test_the_options_table_builds_the_library_request() -> None:
    """The library's request path takes the table's names and defaults; an unknown name is refused."""
    import inspect

    from gpuwise.errors import InputError
    from gpuwise.estimate import Workload, workload_from_options
    from gpuwise.estimate.options import WORKLOAD_OPTIONS, workload_defaults

    wl = workload_from_options(model="llama-3.1-8b")
    fields = {f for f in Workload.__dataclass_fields__}
    for (
        o
    ) in WORKLOAD_OPTIONS:  # every option lands on the Workload (attention_kernel as its version)
        assert o.name in fields or o.name in ("attention_kernel", "params"), o.name
    assert wl.flash_attention_version == int(str(workload_defaults()["attention_kernel"])[-1])
    assert wl.master_weights == workload_defaults()["master_weights"]
    assert "options" in str(inspect.signature(workload_from_options))
    with pytest.raises(InputError, match="sequence_paralel"):
        workload_from_options(model="gpt2", sequence_paralel="on")  # type: ignore[arg-type]


def test_new_options_are_echoed_in_json(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli(
        "estimate",
        "--model",
        "llama-3.1-70b",
        "--gpus",
        "64",
        "--tensor-parallel",
        "8",
        "--context-parallel",
        "2",
        "--pipeline-parallel",
        "2",
        "--virtual-pipeline",
        "4",
        "--zero",
        "1",
        "--seq-len",
        "16384",
        "--attention-kernel",
        "flash3",
        "--gpu",
        "H100",
        "--master-weights",
        "fp32",
        "--json",
    )
    assert r.code == 0, r.stderr
    w = r.json()["workload"]  # type: ignore[index]
    assert w["context_parallel"] == 2 and w["virtual_pipeline"] == 4
    assert w["sequence_parallel"] is True  # auto: on with tensor parallelism (Megatron-Core)
    assert w["fused_kernels"] is True  # auto: on with tensor/pipeline parallelism
    assert w["attention_kernel"] == "flash3" and w["expert_parallel"] == 1
    assert w["master_weights"] == "fp32" and w["optimizer_states"] == "fp32"
    assert w["offload"] == "none"


def test_calibration_file_sets_workload_defaults_and_flags_win(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    cal = tmp_path / "calibration.json"
    cal.write_text(
        json.dumps({"version": 1, "workload": {"master_weights": "bf16", "fused_kernels": "on"}})
    )
    base = ("estimate", "--model", "gpt2", "--task", "finetune")
    r = cli(*base, "--calibration", cal, "--json")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["workload"]["master_weights"] == "bf16"  # type: ignore[index]
    assert doc["workload"]["fused_kernels"] is True  # type: ignore[index]
    assert doc["memory"]["breakdown"]["master_weights"] == 0  # type: ignore[index]
    r = cli(*base, "--calibration", cal, "--master-weights", "fp32", "--json")
    assert r.json()["workload"]["master_weights"] == "fp32"  # type: ignore[index]
    cal.write_text(json.dumps({"version": 1, "workload": {"master_weight": "bf16"}}))
    r = cli(*base, "--calibration", cal)
    assert r.code == 2 and "master_weight" in r.stderr and "master_weights" in r.stderr
