"""One meaning per flag name, durations with units, help without Python type names."""

from __future__ import annotations

import re

import pytest

# Every duration flag: a bare number used to mean hours (`exporter --interval 2` sampled every 2 h,
# `monitor --interval 10 --samples 2` slept 10 h). Now it is refused with the fix.
BARE_DURATIONS = [
    ["exporter", "--fake", "idle", "--once", "--interval", "2"],
    ["monitor", "--fake", "idle", "--samples", "2", "--interval", "10"],
    ["monitor", "--fake", "idle", "--samples", "1", "--duration", "8"],
    ["monitor", "--fake", "idle", "--samples", "1", "--retention", "90"],
    ["monitor", "--fake", "idle", "--samples", "1", "--downsample-after", "35"],
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
    r = cli("monitor", "--fake", "idle", "--samples", "1", "--interval", "2s", "--retention", "90d",
            "--db", tmp_path / "m.sqlite", "--json")
    assert r.code == 0, r.stderr
    assert r.json()["interval_s"] == 2.0  # type: ignore[index]


def test_monitor_cloud_flag_is_the_instance_cloud(cli) -> None:  # type: ignore[no-untyped-def]
    # `--cloud` filters offers in fleet/offers/plan/gpus/tco; exporter/report name this machine's cloud
    # with --instance-cloud instead.
    for command in ("exporter", "report"):
        r = cli(command, "--fake", "idle", "--cloud", "aws", "--once" if command == "exporter" else "--json")
        assert r.code == 2 and "No such option: --cloud" in r.stderr
    r = cli("report", "--fake", "idle", "--instance-type", "p4d.24xlarge", "--instance-cloud", "aws", "--json")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert isinstance(doc, dict)
    sources = {g["price_source"] for g in doc["gpus"]} if doc.get("gpus") else set()
    assert not sources or any("p4d.24xlarge" in s for s in sources), sources


def test_surface_gives_each_flag_one_meaning() -> None:
    """Flags that filter (`--cloud`) or count (`--gpus`) mean the same in every command that has them."""
    from tests.cli.test_surface import surface

    commands = {line.split(" :: ")[0]: set(line.split(" :: ")[1].split()) for line in surface().splitlines()}
    with_cloud = {c for c, flags in commands.items() if "--cloud" in flags}
    assert with_cloud == {"gpuwise fleet", "gpuwise gpus", "gpuwise offers", "gpuwise plan", "gpuwise tco"}
    # --count is GPUs per instance (offers); GPUs in total is --gpus (estimate, tco)
    assert {c for c, flags in commands.items() if "--count" in flags} == {"gpuwise offers"}
    assert {"gpuwise estimate", "gpuwise tco"} <= {c for c, flags in commands.items() if "--gpus" in flags}


_TYPE_NAME = re.compile(r"<(?:bool|int|float|str|text|integer|path|list\[[^>]*\]|[a-z_]+\[[^>]*\])>|\b(?:BOOLEAN|"
                        r"INTEGER|FLOAT|TEXT|PATH)\b", re.I)


def _all_help() -> dict[str, str]:
    import typer

    from gpuwise.cli.main import app

    root = typer.main.get_command(app)
    out: dict[str, str] = {}

    def walk(cmd, path: list[str]) -> None:  # type: ignore[no-untyped-def]
        import click

        ctx = click.Context(cmd, info_name=" ".join(path))
        out[" ".join(path)] = "\n".join(
            f"{p.opts} {p.make_metavar(ctx)}" for p in cmd.params if isinstance(p, click.Option) and not p.is_flag)
        for name, sub in sorted((getattr(cmd, "commands", None) or {}).items()):
            walk(sub, [*path, name])

    walk(root, ["gpuwise"])
    return out


def test_help_metavars_are_words_not_python_types() -> None:
    for command, text in _all_help().items():
        assert not _TYPE_NAME.search(text), f"{command}: {_TYPE_NAME.search(text)}"


@pytest.mark.parametrize("command", ["fleet", "bench", "report", "estimate", "tco"])
def test_rendered_help_shows_no_python_type_names(cli, command: str) -> None:  # type: ignore[no-untyped-def]
    r = cli(command, "--help")
    assert r.code == 0
    assert not re.search(r"<(bool|list\[[^>]*\]|int|float|str)>", r.stdout), r.stdout
