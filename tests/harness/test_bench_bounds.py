"""``bench`` checks every number against sane bounds before anything starts: a value that
parses but makes no sense for a run is exit 2 with one line naming the field (no process spawned, no file)."""

from __future__ import annotations

import pytest

from ddp_profile.cli import main

SENSELESS = [
    (["--bucket-mb", "inf"], "bucket_mb"),
    (["--bucket-mb", "nan"], "bucket_mb"),
    (["--lr", "1e308"], "lr"),
    (["--lr", "-1"], "lr"),
    (["--batch", "1e12"], "--batch"),
    (["--batch", "1000000000000"], "batch"),
    (["--nproc", "100000"], "--nproc"),
    (["--nproc", "0"], "--nproc"),
    (["--steps", "99999999"], "steps"),
    (["--warmup", "-3"], "warmup"),
    (["--seq-len", "10000000"], "seq_len"),
    (["--seed", "-1"], "seed"),
    (["--mlp-depth", "100000"], "mlp_depth"),
    (["--first-bucket-mb", "inf", "--strategy", "bucketed"], "first_bucket_mb"),
    (["--out", "/dev/null"], "--out"),
]


@pytest.mark.parametrize("argv,field", SENSELESS, ids=[" ".join(a) for a, _ in SENSELESS])
def test_bench_refuses_senseless_numbers_with_one_line(argv, field, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    strategy = [] if "--strategy" in argv else ["--strategy", "naive"]
    assert main(["bench", *strategy, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0] and "Traceback" not in err[0], err
    assert list(tmp_path.iterdir()) == []  # nothing was written


def test_sane_values_pass_the_bounds():
    from ddp_profile.harness.config import RunConfig

    RunConfig(
        strategy="bucketed",
        bucket_mb=1000.0,
        lr=1e-3,
        batch=4096,
        seq_len=64,
        steps=1000,
        warmup=0,
        first_bucket_mb=0.5,
    )
