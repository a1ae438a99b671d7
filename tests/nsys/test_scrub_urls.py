"""Credentials in URLs, every shape, removed by scrub from every text and BLOB column: an empty user name
(``redis://:pw@host``), a user alone (``https://token@host``), user and password, percent-encoded, a raw
``@`` inside the password, secret-named query parameters (``?password=``, ``X-Amz-Signature=``,
``X-Amz-Credential=``, ``?sig=``, ``?key=``, ``access_token=``), each also inside ``--flag=URL`` and a JSON
string. The secret values are written independently of the scrubber's patterns: any that survives fails."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from ddp_profile.nsys import scrub
from ddp_profile.nsys.secrets import Scrubber
from ddp_profile.nsys.synth import synth_ddp_run

# (URL, the secret in it that must not survive)
URLS = [
    ("redis://:R3disPassw0rd@10.0.0.5:6379/", "R3disPassw0rd"),
    ("https://ghTok3nAl0ne@github.com/org/repo.git", "ghTok3nAl0ne"),
    ("postgres://admin:PgPassw0rd9@db.internal:5432/prod", "PgPassw0rd9"),
    ("https://alice:p%40ssW%3Ard77@git.example.com/x", "p%40ssW%3Ard77"),
    ("https://alice:raw@Passw0rd@git.example.com/x", "Passw0rd"),
    ("mongodb+srv://svc:M0ngoPassw0rd@cluster0.example.net/db?retryWrites=true", "M0ngoPassw0rd"),
    ("https://h.example.com/login?user=bob&password=Qu3ryPassw0rd&next=1", "Qu3ryPassw0rd"),
    (
        "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAEXAMPLEKEY%2F2026"
        "&X-Amz-Signature=5a1f0c9e8d7b6a5f4e3d2c1b",
        "5a1f0c9e8d7b6a5f4e3d2c1b",
    ),
    ("https://b.s3.amazonaws.com/k?X-Amz-Credential=CredV4lue77%2F2026&X-Amz-Date=20260101", "CredV4lue77"),
    ("https://acct.blob.core.windows.net/c/b?sv=2022&sig=Az5ig4tureV4lue%3D", "Az5ig4tureV4lue"),
    ("https://maps.example.com/api?key=G00gleKeyV4lue&q=x", "G00gleKeyV4lue"),
    ("https://api.example.com/v1?access_token=Acc3ssT0kenV4l", "Acc3ssT0kenV4l"),
]
WRAPS = {
    "bare": "URL",
    "in a sentence": "connecting to URL now",
    "flag": "--db-url=URL",
    "json": json.dumps({"endpoint": "URL", "note": "me@example.com"}),
}


@pytest.mark.parametrize(
    "url,secret", URLS, ids=[u.split(":", 1)[0] + str(i) for i, (u, _) in enumerate(URLS)]
)
@pytest.mark.parametrize("wrap", list(WRAPS))
def test_url_credentials_of_every_shape_are_removed(url, secret, wrap):
    text = WRAPS[wrap].replace("URL", url)
    scrubbed = Scrubber(set(), set()).text(text)
    assert secret not in scrubbed and "<secret>" in scrubbed
    blob = Scrubber(set(), set()).text(text.encode())  # the same text in a BLOB column
    assert isinstance(blob, bytes) and secret.encode() not in blob


@pytest.mark.parametrize(
    "text",
    [
        "see https://example.com/docs?page=2&lang=en",
        "mail me@example.com",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
        "step 12",
        "design=wide",
    ],
)
def test_text_without_credentials_keeps_what_it_says(text):
    scrubbed = Scrubber(set(), set()).text(text)
    assert "<secret>" not in scrubbed
    assert scrubbed.rsplit("/", 1)[-1] == text.rsplit("/", 1)[-1]  # paths shorten; nothing else changes


def test_every_text_and_blob_column_of_an_export_loses_them(tmp_path):
    src = tmp_path / "planted.sqlite"
    synth_ddp_run(src, n_ranks=1, n_steps=1)
    texts = [WRAPS[w].replace("URL", u) for u, _ in URLS for w in WRAPS]
    con = sqlite3.connect(src)
    next_id = con.execute("SELECT max(id) + 1 FROM StringIds").fetchone()[0]
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(next_id + i, t) for i, t in enumerate(texts)])
    tid = con.execute("SELECT globalTid FROM NVTX_EVENTS LIMIT 1").fetchone()[0]
    con.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, binaryData) VALUES "
        "(1, NULL, 34, ?, ?, ?)",
        [(t, tid, t.encode()) for t in texts],
    )
    con.execute("CREATE TABLE planted (c CLOB, j JSON, n NUMERIC, b BLOB, i INTEGER)")
    con.executemany(
        "INSERT INTO planted VALUES (?, ?, ?, ?, ?)",
        [(t, t, t, t.encode("latin-1", "replace"), t) for t in texts],
    )
    con.commit()
    con.close()
    dst = tmp_path / "scrubbed.sqlite"
    scrub.scrub_file(src, dst)
    raw = dst.read_bytes()
    left = [s for _, s in URLS if s.encode() in raw]
    assert left == []
    con = sqlite3.connect(dst)
    assert con.execute("SELECT count(*) FROM planted WHERE c LIKE '%<secret>%'").fetchone()[0] == len(texts)
    con.close()


def test_the_rules_are_not_only_in_this_file():
    """The module's documented shape list names the URL forms this test plants."""
    doc = Path(scrub.__file__).with_name("secrets.py").read_text()
    for shape in ("redis://:password@host", "X-Amz-Signature", "?password="):
        assert shape in doc
