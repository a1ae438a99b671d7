"""Secrets planted into copies of committed real exports (the
harness's ``traces/naive_small_fp32_2xh200`` capture, decompressed, and ``tests/data/ddp_mlp_2xh200.sqlite``)
wherever text can live -- StringIds, NVTX text and BLOB payloads, the recorded command line (one row per
argument), a table whose name holds a double quote and whose columns are declared CLOB, STRING, JSON, NUMERIC
and BLOB -- then every value of every table of the scrubbed copy is scanned for the planted values and for
the secret shapes listed here (written independently of the scrubber's own patterns, so a pattern the
scrubber lost fails here). The scrubbed copy must analyse exactly as its source.
"""

from __future__ import annotations

import lzma
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import SAMPLE

from ddp_profile.nsys import scrub

ROOT = Path(__file__).resolve().parents[2]
HARNESS_XZ = ROOT / "traces" / "naive_small_fp32_2xh200" / "naive_small_fp32_2xh200.sqlite.xz"

# The planted values: none may survive anywhere (user and host names included).
PLANTED = {
    "hf": "hf_Zq8LmN2pRt5vXy7BcD",
    "ghp": "ghp_4aB7cD9eF1gH3iJ5kL7m",
    "aws": "AKIAQWERTYUIOPASDFGH",
    "gitlab": "glpat-x7Yz9AbCdEf3GhIj",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sgnatur3",
    "url_password": "hunter2Pa55",
    "flag_value": "tOk3nV4lue9",
    "flag_eq_value": "s3cr3tEqV4l",
    "wandb_value": "wandbV4lueX1",
    "assign_value": "p4ssw0rdV4l",
    "user": "alicesmith",
}
PROJECT = "skunkworks"  # a folder inside a path: only the last component of a path is kept (documented)
# Secret shapes (docs/privacy.md): any match after scrubbing is a leak.
SHAPES = [
    r"hf_[A-Za-z0-9]{8,}",
    r"gh[pousr]_[A-Za-z0-9]{8,}",
    r"AKIA[0-9A-Z]{12,}",
    r"glpat-\w{8,}",
    r"eyJ[\w-]{8,}\.[\w-]{8,}\.",
    r"[a-z]+://[^/\s:@<>]+:[^/\s@<>]+@",
    r"--\w*token\w*[= ][^<\s]",
    r"[A-Z_]*(?:KEY|TOKEN|SECRET|PASSWORD)=[^<\s]",
    r"(?:/home|/Users|/scratch)/\w",
    r"BEGIN [A-Z ]*PRIVATE KEY",
]


def _text_of(value) -> str | None:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return value if isinstance(value, str) else None


def _leaks(path: Path) -> list[str]:
    """Every value of every table (BLOBs read as Latin-1) checked for planted values and secret shapes."""
    con = sqlite3.connect(path)
    found = []
    for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'"):
        qt = '"' + table.replace('"', '""') + '"'
        for row in con.execute(f"SELECT * FROM {qt}"):
            for value in row:
                text = _text_of(value)
                if text is None:
                    continue
                found += [
                    f"{table}: {name} in {text[:80]!r}"
                    for name, v in PLANTED.items()
                    if v.lower() in text.lower()
                ]
                found += [f"{table}: shape {s} in {text[:80]!r}" for s in SHAPES if re.search(s, text)]
    con.close()
    return found


def _plant(path: Path) -> None:
    p = PLANTED
    con = sqlite3.connect(path)
    next_id = con.execute("SELECT max(id) + 1 FROM StringIds").fetchone()[0]
    strings = [
        f"launched with HF token {p['hf']} and {p['ghp']}",
        f"aws {p['aws']} gitlab {p['gitlab']} bearer {p['jwt']}",
        f"git clone https://{p['user']}:{p['url_password']}@git.example.com/{PROJECT}.git",
        f"python3 train.py --token {p['flag_value']} --hf-token={p['flag_eq_value']}",
        f"env WANDB_API_KEY={p['wandb_value']} python3 t.py",
        f"db password: {p['assign_value']}",
        f"/home/{p['user']}/{PROJECT}/train.py",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
    ]
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(next_id + i, s) for i, s in enumerate(strings)])
    # NVTX text and payloads: a mark with secret text, and BLOB payloads in UTF-8 and Latin-1.
    con.execute(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, binaryData) VALUES "
        "(1, NULL, 34, ?, (SELECT globalTid FROM NVTX_EVENTS LIMIT 1), ?)",
        (
            f"run by {p['user']} from https://{p['user']}:{p['url_password']}@host/x",
            f"payload {p['hf']} /home/{p['user']}/x".encode(),
        ),
    )
    con.execute(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, binaryData) VALUES "
        "(2, NULL, 34, (SELECT globalTid FROM NVTX_EVENTS LIMIT 1), ?)",
        (f"caf\xe9 {p['ghp']} AWS {p['aws']}".encode("latin-1"),),
    )
    # A table with an awkward name and every declared type that holds text.
    con.execute('CREATE TABLE "odd""table" (c CLOB, s STRING, j JSON, n NUMERIC, b BLOB, i INTEGER)')
    con.execute(
        'INSERT INTO "odd""table" VALUES (?, ?, ?, ?, ?, ?)',
        (
            f"token {p['hf']}",
            f"/home/{p['user']}/{PROJECT}",
            f'{{"api_key": "{p["assign_value"]}"}}',
            f"{p['aws']}",
            f"--token={p['flag_eq_value']}".encode(),
            42,
        ),
    )
    # The recorded command line, one row per argument, as nsys stores it.
    rows = [
        ("PROCESS_0:ARGUMENT_90", f"WANDB_API_KEY={p['wandb_value']}"),
        ("PROCESS_0:ARGUMENT_91", "--token"),
        ("PROCESS_0:ARGUMENT_92", p["flag_value"]),
        ("PROCESS_0:ARGUMENT_93", f"https://{p['user']}:{p['url_password']}@hub.example.com/"),
    ]
    con.executemany("INSERT INTO META_DATA_CAPTURE (name, value) VALUES (?, ?)", rows)
    con.commit()
    con.close()


@pytest.fixture
def harness_export(tmp_path) -> Path:
    dst = tmp_path / "naive.sqlite"
    with lzma.open(HARNESS_XZ) as fin, open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    return dst


@pytest.mark.parametrize("source", ["harness capture", "sample"])
def test_scan_of_every_value_after_scrub_finds_no_secret(source, harness_export, tmp_path):
    src = (
        harness_export
        if source == "harness capture"
        else Path(shutil.copyfile(SAMPLE, tmp_path / "s.sqlite"))
    )
    _plant(src)
    assert len(_leaks(src)) > 20  # the scan sees what was planted (it can fail)
    out = tmp_path / "clean.sqlite"
    scrub.scrub_file(src, out)
    assert _leaks(out) == []


def test_scrubbed_export_analyses_identically_to_its_source(harness_export, tmp_path):
    """With a user named like the harness's NVTX domain (``ddp_profile`` under ``/scratch/ddp_profile``) and
    secrets planted everywhere, the scrubbed copy gives the same analysis, number for number."""
    from ddp_profile.analysis import analyze
    from ddp_profile.nsys.loader import load_trace

    _plant(harness_export)
    con = sqlite3.connect(harness_export)
    con.execute("UPDATE META_DATA_CAPTURE SET value = 'ddp_profile' WHERE name = 'PROCESS_0:USER_NAME'")
    con.execute(
        "INSERT INTO META_DATA_CAPTURE (name, value) VALUES ('PROCESS_0:ARGUMENT_94', "
        "'/scratch/ddp_profile/ddp_profile/train.py')"
    )
    con.commit()
    con.close()
    out = tmp_path / "clean.sqlite"
    scrub.scrub_file(harness_export, out)
    before, after = load_trace(harness_export), load_trace(out)
    assert set(after.nvtx["domain"]) == set(before.nvtx["domain"]) >= {"ddp_profile"}
    mine = before.nvtx["name"].fillna("").str.contains(PLANTED["user"]).to_numpy()  # the planted mark
    assert after.nvtx["name"][~mine].equals(before.nvtx["name"][~mine])
    a, b = analyze(before).to_json_dict(), analyze(after).to_json_dict()
    assert a == b


@pytest.mark.parametrize(
    "text,kept",
    [
        ("ddp_profile", "ddp_profile"),
        ("ddp_profile.rank 1/2", "ddp_profile.rank 1/2"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", None),
        ("at::native::tokenizer::apply(float)", None),
        ("allreduce b3 1048576B", None),
    ],
)
def test_scrubber_never_rewrites_text_the_analysis_reads(text, kept):
    s = scrub.Scrubber(hosts={"ddp_profile", "sum"}, users={"ddp_profile", "f32", "profile", "allreduce"})
    assert s.text(text) == (kept or text)
