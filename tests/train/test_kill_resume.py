"""Kill injection: SIGKILL examples/train_tiny.py at random moments (mid-write included), at
least 30 times, and check the final digest and the loss curve against an uninterrupted run."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from gpuwise.train.chaos import reference_run, run_with_kills

ARGS = ["--steps", "1200", "--hidden", "256", "--every", "3", "--slow-write", "0.05"]
# Kills between shard and marker become likely: --slow-write stretches that window.
ENV = {"GPUWISE_CLOUD": "none"}


@pytest.fixture(scope="module")
def reference(tiny: ModuleType, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    ckpt = tmp_path_factory.mktemp("ref")
    return reference_run([*ARGS, "--checkpoint-dir", str(ckpt)], target=tiny.main, env=ENV)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kills", "seed", "extra"),
    [
        (18, 1, []),  # async writer process (the default)
        (12, 2, ["--compress", "zstd"]),  # compressed shards
    ],
)
def test_random_sigkills_resume_bit_exactly(
    kills: int, seed: int, extra: list[str], tiny: ModuleType, reference, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    ckpt = str(tmp_path / "ckpt")
    report = run_with_kills(
        [*ARGS, *extra, "--checkpoint-dir", ckpt],
        checkpoint_dir=ckpt,
        kills=kills,
        target=tiny.main,
        min_delay_s=0.08,
        max_delay_s=0.35,
        seed=seed,
        env=ENV,
        aim_mid_write=2,
    )  # the first two kills wait for a half-written checkpoint
    assert report.kills == kills
    assert report.digest == reference.digest
    assert report.losses == reference.losses  # the whole curve, bit for bit (float.hex)
    assert report.replay_mismatches == ()  # replayed steps printed the same losses
    assert sorted(report.losses) == list(range(1, 1201))
    resumed = [a.resumed_from for a in report.attempts if a.resumed_from is not None]
    assert resumed == sorted(resumed)  # never resumed from an older step than before
    assert report.mid_write_kills >= 1  # aimed, so it does not depend on the machine's load
