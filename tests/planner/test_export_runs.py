"""The exported SkyPilot task runs the way SkyPilot runs it: ``setup`` then ``run`` with bash, in an
empty folder holding only the synced ``workdir``, in a fresh virtualenv, with the ``SKYPILOT_*``
variables set; ``examples/train_tiny.py`` must train to its end.

The virtualenv sees the test interpreter's site-packages (torch, numpy, typer, ...) through a
``.pth`` line, so nothing is downloaded; gpuwise itself is installed by the export's *default*
setup, with no override: from the wheel the export writes into the workdir (``.gpuwise-dist/``),
the way ``gpuwise plan --export skypilot`` does. A command the export names that does not exist
fails the test.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from gpuwise.catalog import Offer
from gpuwise.planner import PlanRequest, load_spot_defaults, plan_offers
from gpuwise.planner.export import WHEEL_DIR, skypilot_task
from gpuwise.planner.wheel import write_wheel
from tests.train.conftest import run_records

from .toy import NO_STARTUP, ToyModel

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _offers() -> list[Offer]:
    return [
        Offer(
            cloud="aws",
            region="us-east-1",
            zone=None,
            instance_type="p4d.24xlarge",
            gpu="A100",
            gpu_count=8,
            gpu_memory_gib=None,
            vcpus=96.0,
            memory_gib=1152.0,
            on_demand_usd_per_hour=32.0,
            spot_usd_per_hour=None,
            arch="x86_64",
            source="test",
            as_of="2026-11",
        )
    ]


def _task(nodes: int, command: str) -> dict[str, object]:
    request = PlanRequest(
        max_nodes=nodes, billings=("on-demand",), objective="time" if nodes > 1 else "cost"
    )
    plan = plan_offers(
        _offers(), ToyModel(), request, spot=load_spot_defaults(), reserved={}, startup=NO_STARTUP
    )
    assert plan.winner is not None and plan.winner.nodes == nodes
    return skypilot_task(plan, command=command)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv that sees the test interpreter's packages but not its gpuwise."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next(root.glob("lib/python*/site-packages"))
    paths = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "parent.pth").write_text("\n".join(sorted(paths)) + "\n")
    return root


def _env(venv: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env.pop("GPUWISE_PIP_SPEC", None)  # the default setup: no override
    env["PIP_NO_INDEX"] = "1"  # everything it needs is already there; a download would be a bug
    env.update(extra)
    return env


def _names_exist(script: str, env: dict[str, str]) -> None:
    """Every command the script starts is on the PATH it will run with (after setup)."""
    for line in script.splitlines():
        words = shlex.split(line)
        if not words or words[0] in ("set", "if", "then", "fi", "exec"):
            continue
        assert shutil.which(words[0], path=env["PATH"]), (
            f"the export runs {words[0]!r}, which does not exist"
        )


def _setup(task: dict[str, object], workdir: Path, env: dict[str, str]) -> None:
    write_wheel(workdir, WHEEL_DIR)  # what the CLI export does next to the task
    r = subprocess.run(
        ["bash", "-c", str(task["setup"])],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_one_node_task_sets_up_and_trains(venv: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "work"  # what SkyPilot syncs from `workdir: .`
    workdir.mkdir()
    shutil.copy(ROOT / "examples" / "train_tiny.py", workdir / "train_tiny.py")
    ckpt = tmp_path / "checkpoints"
    task = _task(1, f"python train_tiny.py --steps 12 --hidden 32 --checkpoint-dir {ckpt}")
    # the toy plan's winner has 8 GPUs per node; on this CPU box one worker stands for them
    run = str(task["run"]).replace("--nproc-per-node 8", "--nproc-per-node 1")
    envs = {str(k): str(v) for k, v in dict(task["envs"]).items()}  # type: ignore[call-overload]
    env = _env(
        venv,
        {
            **envs,
            "GPUWISE_CHECKPOINT_DIR": str(ckpt),
            "SKYPILOT_NUM_NODES": "1",
            "SKYPILOT_NODE_RANK": "0",
            "SKYPILOT_NODE_IPS": "127.0.0.1",
            "SKYPILOT_NUM_GPUS_PER_NODE": "1",
        },
    )
    _setup(task, workdir, env)
    _names_exist(run, env)
    r = subprocess.run(
        ["bash", "-c", run],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "digest " in r.stdout
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import gpuwise; print(gpuwise.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(venv) in installed  # the venv's own gpuwise ran, not the source tree's


def test_two_node_task_on_loopback(venv: Path, tmp_path: Path) -> None:
    """Needs `gpuwise run --nnodes` reading SKYPILOT_* (issue 15's branch)."""
    help_text = subprocess.run(
        [sys.executable, "-m", "gpuwise", "run", "--help"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    if "--nnodes" not in help_text:
        pytest.skip("gpuwise run has no multi-node mode on this branch (needs issue 15 merged)")
    workdir = tmp_path / "work"
    workdir.mkdir()
    shutil.copy(ROOT / "examples" / "train_tiny.py", workdir / "train_tiny.py")
    task = _task(2, "python train_tiny.py --steps 12 --hidden 32 --checkpoint-dir CKPT")
    run = str(task["run"]).replace("--nproc-per-node 8", "--nproc-per-node 1")
    base = {
        "SKYPILOT_NUM_NODES": "2",
        "SKYPILOT_NODE_IPS": "127.0.0.1\n127.0.0.1",
        "SKYPILOT_NUM_GPUS_PER_NODE": "1",
    }
    env0 = _env(venv, {**base, "SKYPILOT_NODE_RANK": "0"})
    _setup(task, workdir, env0)
    _names_exist(run, env0)
    procs = []
    logs = [tmp_path / f"node{rank}.log" for rank in (0, 1)]
    for rank in (0, 1):
        ckpt = tmp_path / f"ckpt{rank}"
        env = _env(
            venv, {**base, "SKYPILOT_NODE_RANK": str(rank), "GPUWISE_CHECKPOINT_DIR": str(ckpt)}
        )
        # to files, not pipes: the two nodes wait for each other, so a node blocked on a full
        # pipe while the test waits on the other would hang both
        with open(logs[rank], "w") as log:
            procs.append(
                subprocess.Popen(
                    ["bash", "-c", run.replace("CKPT", str(ckpt))],
                    cwd=workdir,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,  # bash and everything it starts, ended together
                )
            )
    try:
        for p in procs:
            p.wait(timeout=240)
    except subprocess.TimeoutExpired:
        tails = [log.read_text()[-3000:] for log in logs]
        pytest.fail(f"the two nodes did not finish; node 0:\n{tails[0]}\nnode 1:\n{tails[1]}")
    finally:  # a hung rendezvous must not leave the two "nodes" running into the next test
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    outs = [log.read_text() for log in logs]
    assert [p.returncode for p in procs] == [0, 0], outs
    # c10d hands out global ranks in the order the nodes join, so either node may hold rank 0
    assert any("digest " in out for out in outs), outs


def _exported(tmp_path: Path, *limits: str, steps: int) -> tuple[dict[str, object], Path, Path]:
    """`gpuwise plan --export skypilot` as a user runs it: the task, its workdir (the wheel and
    the plan file inside) and the checkpoint folder its command writes to."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    shutil.copy(ROOT / "examples" / "train_tiny.py", workdir / "train_tiny.py")
    ckpt = tmp_path / "checkpoints"
    command = f"python train_tiny.py --steps {steps} --hidden 32 --checkpoint-dir {ckpt}"
    r = subprocess.run(
        [
            *(sys.executable, "-m", "gpuwise", "plan", "--model", "llama-3.1-8b"),
            *("--task", "lora", "--tokens", "2B", "--deadline", "48h", *limits),
            *("--export", "skypilot", "-o", str(workdir / "task.yaml")),
            *("--workdir", str(workdir), "--run", command),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    task = yaml.safe_load((workdir / "task.yaml").read_text())
    return task, workdir, ckpt


def _run_task(task: dict[str, object], workdir: Path, venv: Path, nproc: int) -> str:
    envs = {str(k): str(v) for k, v in dict(task["envs"]).items()}  # type: ignore[call-overload]
    skypilot = {
        "SKYPILOT_NUM_NODES": "1",
        "SKYPILOT_NODE_RANK": "0",
        "SKYPILOT_NODE_IPS": "127.0.0.1",
        "SKYPILOT_NUM_GPUS_PER_NODE": str(nproc),
        "GPUWISE_CLOUD": "none",
    }
    env = _env(venv, {**envs, **skypilot})
    _setup(task, workdir, env)
    r = subprocess.run(
        ["bash", "-c", str(task["run"])],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return f"{r.returncode}\n{r.stdout}{r.stderr}"


def test_an_exported_8_gpu_plan_on_2_ranks_is_refused(venv: Path, tmp_path: Path) -> None:
    # the fastest plan on one node of at most 8 GPUs (the cheapest may use fewer)
    task, workdir, ckpt = _exported(
        tmp_path, "--max-gpus", "8", "--max-nodes", "1", "--objective", "time", steps=3
    )
    assert "--nproc-per-node 8" in str(task["run"])
    # a machine with 2 GPUs where 8 were planned (one CPU rank stands for each)
    task["run"] = str(task["run"]).replace("--nproc-per-node 8", "--nproc-per-node 2")
    code, _, out = _run_task(task, workdir, venv, 2).partition("\n")
    assert code == "2", out
    assert "world size 2 is not the plan's 8" in out and "Traceback" not in out
    assert "loss " not in out and not ckpt.exists()  # refused before any step


def test_an_exported_plan_runs_its_global_batch_with_nothing_retyped(
    venv: Path, tmp_path: Path
) -> None:
    # the fastest plan on at most 2 GPUs: the cheapest would be one GPU
    task, workdir, ckpt = _exported(
        tmp_path, "--max-gpus", "2", "--max-nodes", "1", "--objective", "time", steps=2
    )
    plan = json.loads((workdir / str(dict(task["envs"])["GPUWISE_PLAN"])).read_text())  # type: ignore[call-overload]
    recipe = plan["recipe"]
    assert recipe["world_size"] == 2 and "--nproc-per-node 2" in str(task["run"])
    code, _, out = _run_task(task, workdir, venv, 2).partition("\n")  # the run line as exported
    assert code == "0", out
    micro, accumulation, global_batch = (
        recipe["micro_batch"],
        recipe["accumulation"],
        recipe["global_batch"],
    )
    assert f"batch {micro} {accumulation} {global_batch}" in out

    (record,) = run_records(str(ckpt))
    assert (record.outcome, record.plan_id, record.step_end) == ("done", plan["plan_id"], 2)
    assert (record.micro_batch, record.accumulation, record.global_batch) == (
        micro,
        accumulation,
        global_batch,
    )
