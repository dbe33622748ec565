"""`gpuwise plan` end to end on the bundled catalog: the README's main job, JSON fields, exit
codes, did-you-mean, bad input, exports."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import yaml

MAIN = ("plan", "--model", "llama-3.1-8b", "--task", "lora", "--tokens", "2B", "--deadline", "24h")
OPTION_FIELDS = {
    "cloud",
    "region",
    "instance_type",
    "gpu",
    "gpu_count",
    "nodes",
    "billing",
    "price_usd_per_hour",
    "hours",
    "cost_usd",
    "fits",
    "p_meet_deadline",
}


@pytest.fixture(scope="module")
def main_json() -> dict:  # type: ignore[type-arg]
    import contextlib
    import io

    from gpuwise.cli.main import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main([*MAIN, "--json", "--limit", "0"])
    assert code == 0
    return json.loads(buf.getvalue())  # type: ignore[no-any-return]


def test_main_job_json_fields(main_json: dict) -> None:  # type: ignore[type-arg]
    doc = main_json
    assert doc["workload"]["task"] == "lora" and doc["workload"]["model"]["name"] == "llama-3.1-8b"
    assert doc["options"] and doc["options_total"] == len(doc["options"])
    for o in doc["options"]:
        assert set(o) >= OPTION_FIELDS
        assert o["billing"] in ("on-demand", "spot", "reserved-1y", "reserved-3y")
        assert o["fits"] is True and 0.9 <= o["p_meet_deadline"] <= 1.0
        assert o["cost_usd"] == pytest.approx(o["price_usd_per_hour"] * o["hours"], rel=1e-9)
        assert o["per_gpu_memory_gib"] <= o["capacity_gib"]
    costs = [o["cost_usd"] for o in doc["options"]]
    top = doc["options"][0]
    # the "done when": the default winner is the cheapest option meeting the constraints,
    # or within 2% of it (then the faster); the rest by cost after the tied ones
    assert top["cost_usd"] <= min(costs) * 1.02 + 1e-9
    tied = sum(c <= min(costs) * 1.02 + 1e-9 for c in costs)
    assert all(a <= b + 1e-6 for a, b in itertools.pairwise(costs[tied:]))
    assert doc["ranking_note"].startswith("Chosen by lowest expected cost")
    assert doc["explanation"][0] == doc["ranking_note"]
    assert top["per_gpu_memory_gib"] <= top["capacity_gib"]
    assert len({o["settings"]["global_batch"] for o in doc["options"]}) == 1
    assert doc["pareto"] and all(p["on_pareto_front"] for p in doc["pareto"])
    assert doc["rejected"] and all(r["reason"] for r in doc["rejected"])
    # the bundled reserved.yaml has no known discounts: reserved billing is rejected with a reason
    assert any(r["kind"] == "reserved-unknown" for r in doc["rejected"])
    assert "wins on lowest expected cost" in doc["explanation"][1]


def test_pareto_front_is_not_dominated(main_json: dict) -> None:  # type: ignore[type-arg]
    front = main_json["pareto"]
    for p in front:
        for o in main_json["options"]:
            assert not (o["cost_usd"] < p["cost_usd"] - 1e-9 and o["hours"] < p["hours"] - 1e-9)


def test_main_job_table(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli(*MAIN)
    assert r.code == 0, r.stderr
    assert "wins on" in r.stdout and "Pareto front" in r.stdout
    # the first line says which rule chose the winner
    assert r.stdout.lstrip().startswith("Chosen by lowest expected cost")
    # spot rates are placeholders: the chance is unknown, never "100%?"
    assert "P unknown" in r.stdout and "%?" not in r.stdout
    assert "mem " in r.stdout  # each row shows its memory
    # the winner's Azure price is undated: said in the first lines, not only at the end
    assert "The winner's azure price is undated" in "\n".join(r.stdout.splitlines()[:6])


def test_impossible_deadline_exit_code_3(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli(
        "plan",
        "--model",
        "llama-3.1-70b",
        "--task",
        "pretrain",
        "--tokens",
        "1T",
        "--deadline",
        "2h",
        "--zero",
        "3",
        "--json",
    )
    assert r.code == 3, r.stderr
    doc = r.json()
    assert doc["options"] == [] and doc["reason"] == "no option meets the deadline"
    assert doc["nearest_miss"].startswith("fastest possible: ")
    table = cli(
        "plan",
        "--model",
        "llama-3.1-70b",
        "--task",
        "pretrain",
        "--tokens",
        "1T",
        "--deadline",
        "2h",
        "--zero",
        "3",
    )
    assert table.code == 3 and "Nearest miss — fastest possible" in table.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--cloud", "awz"), "did you mean 'aws'"),
        (("--region", "us-eats-1"), "did you mean 'us-east-1'"),
        (("--gpu", "H10O"), "did you mean"),
        (("--billing", "spto"), "did you mean 'spot'"),
        (("--objective", "cheap"), "unknown objective"),
        (("--export", "skypilt"), "did you mean 'skypilot'"),
        (("--skypilot-candidates", "anyof"), "did you mean 'any_of'"),
    ],
)
def test_unknown_names_get_did_you_mean(cli, args: tuple[str, ...], needle: str) -> None:  # type: ignore[no-untyped-def]
    r = cli(*MAIN, *args)
    assert r.code == 2
    assert r.stderr.startswith("error: ") and needle in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("--deadline", "-5h"),
        ("--deadline", "nan"),
        ("--deadline", "soon"),
        ("--budget", "lots"),
        ("--budget", "-1"),
        ("--max-gpus", "0"),
        ("--max-nodes", "0"),
        ("--confidence", "2"),
        ("--spot-mtbf", "0h"),
        ("--checkpoint-bandwidth", "0"),
        ("--limit", "-1"),
        ("--max-zero", "7"),
        ("--checkpoint-size", "inf"),
        ("--max-nodes", "65"),
        ("--inter-node-gbps", "0"),
        ("--memory-headroom", "60%"),
        ("--memory-headroom", "lots"),
        ("--prefer-faster-within", "-5%"),
        ("--deadline-confidence", "1.5"),
    ],
)
def test_bad_input_is_one_line_exit_2(cli, args: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    r = cli(*MAIN, *args)
    assert r.code == 2, (r.code, r.stderr)
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr


def test_contradictory_constraints_do_not_crash(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli(*MAIN, "--budget", "1", "--json")
    assert r.code == 3
    assert r.json()["nearest_miss"].startswith("cheapest possible: ")
    r = cli(*MAIN, "--cloud", "lambda", "--billing", "spot", "--json")  # Lambda sells no spot
    assert r.code == 3 and r.json()["options"] == []


def test_export_skypilot_prints_yaml(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import jsonschema

    r = cli(
        *MAIN, "--export", "skypilot", "--run", "python finetune.py --lora", "--workdir", tmp_path
    )
    assert r.code == 0, r.stderr
    doc = yaml.safe_load(r.stdout)
    schemas = json.loads((Path(__file__).parent / "data" / "skypilot_schemas.json").read_text())
    jsonschema.validate(doc, schemas["task"])
    jsonschema.validate(doc["resources"], schemas["resources"])
    assert doc["name"] == "gpuwise-llama-3-1-8b-lora"
    assert doc["run"].endswith("finetune.py --lora")
    assert "wins on" in r.stderr  # the table goes to stderr when YAML owns stdout
    # the setup installs the wheel the export wrote into the workdir
    assert doc["workdir"] == str(tmp_path)
    assert list((tmp_path / ".gpuwise-dist").glob("gpuwise-*-py3-none-any.whl"))
    any_of = yaml.safe_load(
        cli(
            *MAIN, "--export", "skypilot", "--skypilot-candidates", "any-of", "--workdir", tmp_path
        ).stdout
    )
    jsonschema.validate(any_of["resources"], schemas["resources"])
    assert "any_of" in any_of["resources"] and "ordered" not in any_of["resources"]


def test_export_k8s_to_file_and_json(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "job.yaml"
    r = cli(*MAIN, "--export", "k8s", "-o", out, "--json", "--limit", "3", "--workdir", tmp_path)
    assert r.code == 0, r.stderr
    doc = r.json()
    assert len(doc["options"]) == 3 and doc["export"]["format"] == "k8s"
    configmap, claim, manifest = yaml.safe_load_all(out.read_text())
    assert manifest["kind"] in ("Job", "PyTorchJob")
    # the plan file rides along: a ConfigMap the pods mount, its id in their environment
    assert configmap["kind"] == "ConfigMap"
    shipped = json.loads(configmap["data"]["plan.json"])
    beside = json.loads((tmp_path / "job.plan.json").read_text())
    assert shipped == beside and shipped["plan_id"] == doc["plan_file"]["plan_id"]
    pod = (
        manifest["spec"]["template"]["spec"]
        if manifest["kind"] == "Job"
        else manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    )
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["GPUWISE_PLAN_ID"] == shipped["plan_id"]
    assert f"--plan {env['GPUWISE_PLAN']} " in pod["containers"][0]["command"][-1]
    assert {"name": "plan", "configMap": {"name": configmap["metadata"]["name"]}} in pod["volumes"]
    # the checkpoint claim it mounts: shared by several pods only with ReadWriteMany
    assert claim["kind"] == "PersistentVolumeClaim"
    assert claim["spec"]["accessModes"] == [
        "ReadWriteMany" if manifest["kind"] == "PyTorchJob" else "ReadWriteOnce"
    ]
    assert list((tmp_path / ".gpuwise-dist").glob("gpuwise-*.whl"))  # the image installs it
    assert doc["export"]["text"] == out.read_text()


def test_a_workload_without_size_is_a_usage_error(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("plan", "--model", "llama-3.1-8b", "--task", "finetune")
    assert r.code == 2 and "--tokens" in r.stderr and "Traceback" not in r.stderr


def test_library_plan_is_a_plain_function() -> None:
    import gpuwise
    from gpuwise.estimate import workload_from_options

    wl = workload_from_options(model="llama-3.1-8b", task="lora", tokens="2B")
    plan = gpuwise.plan(wl, gpuwise.PlanRequest(deadline_hours=24, clouds=("lambda",), max_nodes=1))
    assert plan.winner is not None and plan.winner.cloud == "lambda"
    assert all(o.nodes == 1 for o in plan.options)


@pytest.mark.parametrize(
    ("values", "text"), [([], ""), ([2, 3, 4, 7], "2–4, 7"), ([8], "8"), ([5, 3, 4], "3–5")]
)
def test_node_ranges(values: list[int], text: str) -> None:
    from gpuwise.cli.plan import _ranges

    assert _ranges(values) == text


def test_table_collapses_node_counts(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli(*MAIN, "--limit", "3")
    assert r.code == 0
    assert (
        "3 of " in r.stdout
        and "choices" in r.stdout
        and "# = its best one's rank, other node counts and regions folded"
        in " ".join(r.stdout.split())
    )


def test_runners_up_are_other_rows_of_the_table(cli) -> None:  # type: ignore[no-untyped-def]
    # the lines under the table named #2, #3, #4: the winner's row again at 2, 4 and 8 nodes
    import re

    r = cli(*MAIN, "--limit", "0", "--model", "llama-3.1-8b", "--gpu", "H100")
    assert r.code == 0, r.stderr
    ranks_in_table = {int(m) for m in re.findall(r"^│ +(\d+)★? │", r.stdout, re.M)}
    runners_up = [int(m) for m in re.findall(r"^#(\d+) ", r.stdout, re.M)]
    assert len(runners_up) == 3
    assert set(runners_up) <= ranks_in_table  # each names a row, not a folded variant

    # piped output is not forced wide: every line fits 80 columns
    assert max(len(line) for line in r.stdout.splitlines()) <= 80


def test_reserved_with_a_user_discount(cli, isolated_env: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = isolated_env / "config"
    cfg.mkdir(exist_ok=True)
    (cfg / "reserved.yaml").write_text("aws:\n  1y: {discount: 0.4, source: my contract}\n")
    r = cli(*MAIN, "--cloud", "aws", "--billing", "on-demand,reserved-1y", "--json", "--limit", "0")
    assert r.code == 0, r.stderr
    doc = r.json()
    reserved = [o for o in doc["options"] if o["billing"] == "reserved-1y"]
    on_demand = {
        (o["instance_type"], o["region"], o["nodes"]): o
        for o in doc["options"]
        if o["billing"] == "on-demand"
    }
    assert reserved
    for o in reserved:
        od = on_demand.get((o["instance_type"], o["region"], o["nodes"]))
        if od is not None:
            assert o["price_usd_per_hour"] == pytest.approx(0.6 * od["price_usd_per_hour"])
    assert doc["options"][0]["billing"] == "reserved-1y"  # 40% off wins on cost


@pytest.mark.slow  # a fresh interpreter pays every import and the full plan: 2–5 s
def test_main_job_end_to_end_in_a_subprocess() -> None:
    from tests.conftest import run_module

    r = run_module([*MAIN, "--json", "--limit", "1"])
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["options"]) == 1
    impossible = run_module([*MAIN[:-1], "1m", "--json"])
    assert impossible.returncode == 3


def test_output_without_export_writes_the_plan_json(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "plan.json"
    r = cli(*MAIN, "--limit", "2", "-o", path)
    assert r.code == 0 and "wrote the plan (JSON)" in r.stdout
    doc = json.loads(path.read_text())
    assert len(doc["options"]) == 2 and doc["options"][0]["settings"]["text"]


def test_an_export_run_command_must_not_start_torchrun(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli(*MAIN, "--export", "skypilot", "--run", "torchrun --nproc-per-node 8 train.py")
    assert r.code == 2 and "gpuwise run already does" in r.stderr and "Traceback" not in r.stderr


def test_a_bad_network_tier_is_a_usage_error(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli(*MAIN, "--network-tier", "fastest")
    assert r.code == 2 and "network tier" in r.stderr and "Traceback" not in r.stderr
