"""Several ranks (FSDP2 over gloo) checkpointing to S3 (moto on loopback, behind a TCP proxy)
when the store hangs and a GCP notice arrives and stays up: every rank saves on local disk,
the local copy is committed, ``gpuwise run`` exits 75 inside the 30 s window without a restart,
and the next start resumes from the local copy to the same losses and final state as an
uninterrupted run. With a merely slow store, training goes on and the commits land."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from gpuwise.errors import StorageError
from gpuwise.train import Checkpointer, FakeMetadataServer
from gpuwise.train.chaos import StorageProxy
from tests.train.conftest import tiny_command, tiny_digest, tiny_losses

pytestmark = pytest.mark.slow

ARGS = ["--hidden", "64", "--batch", "16", "--fsdp", "--steps", "60", "--every", "5"]
GCP_WINDOW_S = 30


def _run_cmd(nproc: int, *args: str) -> list[str]:
    return tiny_command(nproc, *ARGS, *args)


def _options(s3, endpoint: str) -> dict:  # type: ignore[no-untyped-def,type-arg]
    """The S3 options through ``endpoint``, with a read timeout long enough for moto on a loaded
    machine with 4 ranks (the hung store is hung whatever the timeout)."""
    return {
        **s3.options,
        "client_kwargs": {**s3.options["client_kwargs"], "endpoint_url": endpoint},
        "config_kwargs": {**s3.options["config_kwargs"], "read_timeout": 30},
    }


def _committed(remote: Checkpointer) -> list[int]:
    """Committed steps; none while moto is too slow to answer (a loaded machine)."""
    try:
        return remote.committed_steps()
    except StorageError:
        return []


@pytest.mark.parametrize(
    "nproc",
    [
        2,  # the case: 4 of 4 runs were still alive 60 s after the notice
        4,  # more ranks waiting on rank 0's commit
    ],
)
def test_fsdp2_gcp_notice_with_s3_hung_exits_75_in_the_window_and_resumes_exactly(
    nproc: int, s3, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    env = {**os.environ, "GPUWISE_CLOUD": "none", "AWS_EC2_METADATA_DISABLED": "true"}
    ref = subprocess.run(
        _run_cmd(nproc, "--checkpoint-dir", str(tmp_path / "ref")),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert ref.returncode == 0, ref.stderr[-3000:]

    proxy = StorageProxy(s3.port)
    local = tmp_path / "local"
    ckpt_args = ["--checkpoint-dir", "s3://ckpt/run", "--local-dir", str(local)]
    remote = Checkpointer("s3://ckpt/run", storage_options=_options(s3, s3.url))
    out_path, err_path = tmp_path / "out.txt", tmp_path / "err.txt"
    with FakeMetadataServer() as md:
        env_md = {
            **env,
            "GPUWISE_CLOUD": "gcp",
            "GPUWISE_METADATA_URL": md.url,
            "GPUWISE_POLL_INTERVAL_S": "0.5",
        }
        with open(out_path, "w") as out, open(err_path, "w") as err:  # files: never a full pipe
            proc = subprocess.Popen(
                _run_cmd(
                    nproc,
                    *ckpt_args,
                    "--storage-options",
                    json.dumps(_options(s3, proxy.url)),
                    "--step-delay",
                    "0.2",
                ),
                stdout=out,
                stderr=err,
                env=env_md,
            )
        try:
            deadline = time.monotonic() + 400
            while not _committed(remote):  # a periodic save reached S3 through the proxy
                assert time.monotonic() < deadline and proc.poll() is None, err_path.read_text()[
                    -3000:
                ]
                time.sleep(0.2)
            proxy.hang()
            md.preempt(notice_s=GCP_WINDOW_S)  # stays up: this machine is going away
            noticed = time.monotonic()
            proc.wait(timeout=GCP_WINDOW_S + 60)  # generous: measured below
            exited_after_s = time.monotonic() - noticed
            print(
                f"\n{nproc} ranks: exit {proc.returncode} {exited_after_s:.1f} s after the notice"
            )
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
            proxy.close()
    err = err_path.read_text()
    assert proc.returncode == 75, err[-3000:]
    assert exited_after_s < GCP_WINDOW_S, (exited_after_s, err[-3000:])
    assert "attempt 2" not in err  # the notice stayed up: no restart on a machine going away
    assert "preemption notice is still up" in err
    steps = Checkpointer(local).committed_steps()
    assert steps, err[-3000:]  # every rank's shards on local disk, committed
    first = tiny_losses(out_path.read_text())
    assert steps[0] == max(first)  # the notice step itself

    again = subprocess.run(  # a start without a notice, the store answering again
        _run_cmd(nproc, *ckpt_args, "--storage-options", json.dumps(_options(s3, s3.url))),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resumed {steps[0]}" in again.stdout
    assert {**first, **tiny_losses(again.stdout)} == tiny_losses(ref.stdout)
    assert tiny_digest(again.stdout) == tiny_digest(ref.stdout)


def test_fsdp2_with_a_slow_store_keeps_training_and_commits(s3, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Every chunk to and from S3 waits 50 ms: the steps go on (saves are skipped while one is
    in flight, no rank waits for a marker) and the run ends with the final step committed."""
    proxy = StorageProxy(s3.port, delay_s=0.05)
    env = {**os.environ, "GPUWISE_CLOUD": "none", "AWS_EC2_METADATA_DISABLED": "true"}
    try:
        r = subprocess.run(
            _run_cmd(
                2,
                "--checkpoint-dir",
                "s3://ckpt/slow",
                "--local-dir",
                str(tmp_path / "local"),
                "--storage-options",
                json.dumps(_options(s3, proxy.url)),
            ),
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
    finally:
        proxy.close()
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(tiny_losses(r.stdout)) == list(range(1, 61))
    steps = Checkpointer("s3://ckpt/slow", storage_options=_options(s3, s3.url)).committed_steps()
    assert steps[0] == 60
