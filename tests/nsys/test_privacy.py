"""Privacy: ``scrub`` is the only path to sharing an export, so nothing of the environment, paths,
host or user names, secrets or captured program output may survive it -- checked on the output FILE BYTES
(after --slim and after --compress xz too, decompressed), on a fixture seeded with fake secrets and on the
real sample export; and the profiling scripts scrub by default and never leave the raw export behind.
"""

from __future__ import annotations

import lzma
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLE, sha256

from ddp_profile.nsys import scrub, synth
from ddp_profile.nsys.loader import load_trace

ROOT = Path(__file__).resolve().parents[2]
USER = "bobsmith42"
HOST = "dgx-h100-node17.internal.example.org"
# Every one of these is planted in the fixture and must be absent from every scrubbed byte.
SECRETS = {
    "github token (env)": "ghp_FAKEfake1234567890abcdEFGH",
    "custom token (env, no known prefix)": "zq7XvQ2mSECRETVALUE9931",
    "aws access key id": "AKIAIOSFODNN7EXAMPLE",
    "aws secret key (env)": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "aws key in a command line": "AKIAZZZZFAKEKEY12345",
    "hf token in NVTX text": "hf_FAKEhuggingfaceTOKEN77",
    "user name": USER,
    "host name": HOST,
    "short host name": "dgx-h100-node17",
    "home path": f"/home/{USER}",
    "private folder in a path": "privateproj-7731",
    "stdout text": "STDOUT-SECRET-LINE epoch=3",
    "stderr text": "STDERR-SECRET-WARNING rank0",
    "env block value": "envblockSECRET5521",
}


@pytest.fixture
def seeded(tmp_path) -> Path:
    """An export holding fake secrets everywhere nsys keeps such things."""
    n = 4
    kernels = {
        "pid": np.array([7] * n),
        "device": np.zeros(n, int),
        "stream": np.full(n, 7),
        "start": np.arange(n) * 100,
        "end": np.arange(n) * 100 + 60,
        "name": np.array(["gemm"] * n),
        "correlation_id": np.arange(1, n + 1),
        "launch_start": np.arange(n) * 100 - 10,
    }
    nvtx = {
        "pid": np.array([7, 7]),
        "tid": np.array([7, 7]),
        "start": np.array([0, 10]),
        "end": np.array([500, 90]),
        "text": np.array(
            [
                "step 0",
                f"load /home/{USER}/privateproj-7731/data.bin token={SECRETS['hf token in NVTX text']}",
            ]
        ),
    }
    env = {
        "GITHUB_TOKEN": SECRETS["github token (env)"],
        "MY_SERVICE_TOKEN": SECRETS["custom token (env, no known prefix)"],
        "AWS_ACCESS_KEY_ID": SECRETS["aws access key id"],
        "AWS_SECRET_ACCESS_KEY": SECRETS["aws secret key (env)"],
        "HOME": f"/home/{USER}",
        "USER": USER,
        "HOSTNAME": HOST,
    }
    path = synth.build_export(
        tmp_path / "seeded.sqlite",
        processes=[
            {"pid": 7, "name": f"/home/{USER}/privateproj-7731/.venv/bin/python", "device": 0},
            {"pid": 99, "name": "sshd: bobsmith42@pts/0"},
        ],
        kernels=kernels,
        nvtx=nvtx,
        host=HOST,
        environment=env,
        stdout=SECRETS["stdout text"],
        meta_extra={
            "EXPORT_USER": USER,
            "EXPORT_PARAM_INPUT_PATH_ABS": f"/home/{USER}/privateproj-7731/run.nsys-rep",
        },
    )
    con = sqlite3.connect(path)
    ids = {"err": 90001, "errfile": 90002, "blk": 90003}
    con.executemany(
        "INSERT INTO StringIds VALUES (?, ?)",
        [
            (ids["err"], SECRETS["stderr text"]),
            (ids["errfile"], f"/home/{USER}/privateproj-7731/pid_7_stderr.log"),
            (ids["blk"], f"LANG=C.UTF-8\x00SECRET_BLOCK={SECRETS['env block value']}\x00PATH=/usr/bin"),
        ],
    )
    con.execute(
        "INSERT INTO ProcessStreams VALUES (?, ?, ?)", (int(synth.global_pid(7)), ids["errfile"], ids["err"])
    )
    con.executemany(
        "INSERT INTO META_DATA_CAPTURE VALUES (?, ?)",
        [
            ("PROCESS_0:COMMAND", f"/home/{USER}/privateproj-7731/.venv/bin/torchrun"),
            ("PROCESS_0:ARGUMENT_2", f"--data=/home/{USER}/privateproj-7731/corpus"),
            ("PROCESS_0:ARGUMENT_3", f"--aws-key={SECRETS['aws key in a command line']}"),
            ("PROCESS_0:WORKING_DIR", f"/home/{USER}/privateproj-7731"),
            ("PROCESS_0:USER_NAME", USER),
        ],
    )
    con.execute("CREATE TABLE DIAGNOSTIC_EVENT (timestamp INTEGER, text TEXT, globalPid INTEGER)")
    con.execute(
        "INSERT INTO DIAGNOSTIC_EVENT VALUES (0, ?, 0)",
        (f"see /home/{USER}/privateproj-7731/out.log on {HOST.split('.')[0]}",),
    )
    con.commit()
    con.close()
    return path


def _variants(src: Path, out: Path) -> dict[str, bytes]:
    """Scrubbed bytes of ``src`` through every route: library default, --slim, --compress xz (decompressed),
    --slim --compress xz, and the two command lines the scripts and users run."""
    out.mkdir()
    got = {}
    scrub.scrub_file(src, out / "plain.sqlite")
    got["default"] = (out / "plain.sqlite").read_bytes()
    scrub.scrub_file(src, out / "slim.sqlite", slim=True)
    got["slim"] = (out / "slim.sqlite").read_bytes()
    scrub.scrub_file(src, out / "x.sqlite", compress="xz")
    got["xz"] = lzma.decompress((out / "x.sqlite.xz").read_bytes())
    scrub.scrub_file(src, out / "sx.sqlite", slim=True, compress="xz")
    got["slim+xz"] = lzma.decompress((out / "sx.sqlite.xz").read_bytes())
    for label, cmd in (
        ("python -m ddp_profile scrub", [sys.executable, "-m", "ddp_profile", "scrub"]),
        ("python -m ddp_profile.nsys.scrub", [sys.executable, "-m", "ddp_profile.nsys.scrub"]),
    ):
        dst = out / f"cli{len(got)}.sqlite"
        res = subprocess.run(
            [*cmd, str(src), "-o", str(dst), "--slim", "--compress", "xz"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr
        got[label] = lzma.decompress(dst.with_name(dst.name + ".xz").read_bytes())
    return got


def _text_cells(data: bytes, tmp: Path) -> list[str]:
    path = tmp / "cells.sqlite"
    path.write_bytes(data)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    cells = []
    for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'"):
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
        for col in cols:
            cells += [
                v for (v,) in con.execute(f'SELECT "{col}" FROM "{table}" WHERE typeof("{col}") = \'text\'')
            ]
    con.close()
    path.unlink()
    return cells


ABS_DIR = re.compile(r"(?<![\w.~\-])/[\w.\-]+/")  # an absolute path with at least one folder in it


def test_seeded_secrets_never_survive(seeded, tmp_path):
    raw = seeded.read_bytes()
    for what, secret in SECRETS.items():  # the fixture really plants each one
        assert secret.encode() in raw, what
    before = sha256(seeded)
    for route, data in _variants(seeded, tmp_path / "out").items():
        low = data.lower()
        for what, secret in SECRETS.items():
            assert secret.lower().encode() not in low, f"{what} survived {route}"
        cells = _text_cells(data, tmp_path)
        assert not [c for c in cells if ABS_DIR.search(c)], route
        assert not [c for c in cells if re.search(r"\b[A-Z_]{3,}=", c) and "=" in c and "\x00" in c], route
    assert sha256(seeded) == before  # the input is only read


def test_seeded_scrub_keeps_what_the_analysis_reads(seeded, tmp_path):
    out = tmp_path / "clean.sqlite"
    scrub.scrub_file(seeded, out, slim=True)
    a, b = load_trace(seeded), load_trace(out)
    assert a.kernels[["start_ns", "end_ns", "name"]].equals(b.kernels[["start_ns", "end_ns", "name"]])
    assert b.meta["scrubbed"] and not a.meta["scrubbed"]
    assert b.ranks["host"].iloc[0] == scrub.pseudonym(HOST)  # the same host stays recognisable, by pseudonym


def test_real_sample_leaks_nothing(tmp_path):
    """On the real 2025.3 export: its host name ('vm'), working folder, unrelated host processes (kworker...)
    and every absolute path are gone from every route's bytes; what the analysis reads is unchanged."""
    src = tmp_path / SAMPLE.name
    src.write_bytes(SAMPLE.read_bytes())
    raw_con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    host = raw_con.execute("SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_HOST'").fetchone()[0]
    workdir = raw_con.execute(
        "SELECT value FROM META_DATA_CAPTURE WHERE name = 'PROCESS_0:WORKING_DIR'"
    ).fetchone()[0]
    kworkers = [n for (n,) in raw_con.execute("SELECT name FROM PROCESSES WHERE name LIKE 'kworker/%'")]
    raw_con.close()
    assert host and workdir.startswith("/") and kworkers  # what there is to remove
    for route, data in _variants(src, tmp_path / "out").items():
        cells = _text_cells(data, tmp_path)
        assert not [c for c in cells if re.search(rf"(?<![\w-]){re.escape(host)}(?![\w-])", c)], route
        assert workdir not in cells, route
        assert not [c for c in cells if ABS_DIR.search(c)], (
            route,
            [c for c in cells if ABS_DIR.search(c)][:5],
        )
        assert not set(kworkers) & set(cells), route
    plain = load_trace(SAMPLE)
    slim = load_trace(tmp_path / "out" / "sx.sqlite.xz")
    assert plain.kernels.drop(columns=[]).equals(slim.kernels)


# ---- the profiling scripts -----------------------------------------------------------------------------------


def _shell_lines(path: Path) -> list[str]:
    return [
        ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.strip().startswith("#")
    ]


def test_profile_script_scrubs_by_default():
    """profile.sh post-processes by default (POST=1) through post_process, which exports to a temporary
    ``*.unscrubbed.sqlite``, runs the scrubber (slim + xz by default) and deletes the raw copy."""
    profile = _shell_lines(ROOT / "scripts/profile.sh")
    helpers = (ROOT / "scripts/_nsys.sh").read_text()
    assert "POST=${POST:-1}" in profile
    assert any("post_process " in ln and "POST" in ln for ln in profile)  # every path, behind POST=1
    body = helpers[helpers.index("post_process()") :]
    body = body[: body.index("\n}\n")]
    assert "-m ddp_profile.nsys.scrub" in body and "--slim --compress xz" in body
    assert re.search(r'rm -f "\$raw"', body)
    assert (ROOT / ".gitignore").read_text().count("unscrubbed") >= 1  # never committable


@pytest.mark.skipif(not Path("/bin/bash").exists(), reason="needs bash")
@pytest.mark.parametrize("scrub_ok", [True, False])
def test_post_process_never_leaves_the_raw_export(tmp_path, scrub_ok):
    """Run the script's own post_process with a stand-in nsys (copies the sample as the 'export') and a
    scrubber that works or fails: either way no unscrubbed file is left in the run folder, and a failure is
    reported even under `&&` (as profile_all.sh calls it), where bash's set -e is off."""
    run = tmp_path / "traces" / "run1"
    run.mkdir(parents=True)
    (run / "run1.nsys-rep").write_bytes(b"report")
    fake = SAMPLE  # stands for what `nsys export` would write
    nsys = tmp_path / "nsys"
    nsys.write_text(
        "#!/bin/bash\n# stand-in: nsys export --type sqlite --force-overwrite=true -o OUT REP\n"
        'while [ $# -gt 0 ]; do if [ "$1" = -o ]; then out=$2; fi; shift; done\n'
        f'cp {fake} "$out"\n'
    )
    nsys.chmod(0o755)
    python = sys.executable if scrub_ok else "false"
    script = f'source "{ROOT}/scripts/_nsys.sh"; NSYS="{nsys}"; PYTHON="{python}"; post_process "{run}" && echo POST-OK'
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run(
        ["bash", "-c", f"set -euo pipefail; {script}"], capture_output=True, text=True, env=env, timeout=120
    )
    left = sorted(p.name for p in run.iterdir())
    assert not [n for n in left if "unscrubbed" in n], (left, res.stderr)
    if scrub_ok:
        assert res.returncode == 0, res.stderr
        assert "run1.sqlite.xz" in left and load_trace(run / "run1.sqlite.xz").meta["scrubbed"]
    else:
        assert res.returncode != 0 and not [n for n in left if n.endswith((".sqlite", ".xz"))]
    assert ("POST-OK" in res.stdout) == scrub_ok
