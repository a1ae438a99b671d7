"""NCCL's message sizes from its NVTX ranges' binary payloads (``ddp_profile.nsys.payloads``), on exports built
to the layout nsys writes them in (``synth.add_nccl_payloads``): the schema tables name NCCL's "Message size
[bytes]" entry, ``binaryData`` holds a 32-byte header and NCCL's struct (communicator id, size, ...)."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from ddp_profile.analysis import analyze
from ddp_profile.nsys import payloads, synth
from ddp_profile.nsys.loader import load_trace

US = 1000
# Per rank: 3 all-reduces then 1 reduce-scatter, each launched inside NCCL's range for it.
CALLS = ["ncclAllReduce", "ncclAllReduce", "ncclAllReduce", "ncclReduceScatter"]
SIZES = [4_000_000, 25_000_000, 512, 8_000_000]  # NCCL's message sizes, per call, the same on both ranks


def _export(path, *, with_payloads=True, explicit_offsets=True):
    k = {
        c: []
        for c in (
            "pid",
            "device",
            "stream",
            "start",
            "end",
            "name",
            "correlation_id",
            "launch_start",
            "launch_tid",
        )
    }
    n = {c: [] for c in ("pid", "tid", "start", "end", "text", "domain", "registered")}
    for r in range(2):
        pid = 100 + r
        for i, call in enumerate(CALLS):
            t = 1_000 * US + i * 100 * US
            kind = "AllReduce_Sum_f32" if "AllReduce" in call else "ReduceScatter_Sum_f32"
            for c, v in (
                ("pid", pid),
                ("device", r),
                ("stream", 20),
                ("start", t + 10 * US + r * US),
                ("end", t + 60 * US),
                ("name", f"ncclDevKernel_{kind}_RING_LL"),
                ("correlation_id", i + 1),
                ("launch_start", t + 2 * US),
                ("launch_tid", pid),
            ):
                k[c].append(v)
            for c, v in (
                ("pid", pid),
                ("tid", pid),
                ("start", t),
                ("end", t + 5 * US),
                ("text", call),
                ("domain", "NCCL"),
                ("registered", 1),
            ):
                n[c].append(v)
    synth.build_export(
        path,
        processes=[{"pid": 100, "device": 0}, {"pid": 101, "device": 1}],
        kernels={c: np.asarray(v) for c, v in k.items()},
        nvtx={c: np.asarray(v) for c, v in n.items()},
    )
    if with_payloads:
        synth.add_nccl_payloads(path, SIZES + SIZES, explicit_offsets=explicit_offsets)
    return path


@pytest.mark.parametrize("explicit_offsets", [True, False])
def test_message_sizes_are_decoded_into_the_collectives(tmp_path, explicit_offsets):
    # Without the harness's ranges, each kernel takes the size of NCCL's range around its launch. The
    # reduce-scatter's NCCL size is one rank's share: the collective's bytes are 2 ranks × 8 MB = 16 MB.
    path = _export(tmp_path / "p.sqlite", explicit_offsets=explicit_offsets)
    tr = load_trace(path)
    nccl = tr.nvtx[tr.nvtx["domain"] == "NCCL"].sort_values(["rank", "start_ns"])
    assert nccl["payload"].tolist() == SIZES + SIZES
    res = analyze(tr)
    c = res.collectives.sort_values(["rank", "start_ns"])
    assert c["bytes"].tolist() == [4_000_000, 25_000_000, 512, 16_000_000] * 2
    assert c["busbw_gb_per_s"].notna().all()
    assert not any(note.startswith("message sizes unknown") for note in res.notes)


def test_without_payloads_sizes_stay_unknown_and_the_note_says_which_export_would(tmp_path):
    res = analyze(load_trace(_export(tmp_path / "p.sqlite", with_payloads=False)))
    assert res.collectives["bytes"].isna().all()
    note = next(n for n in res.notes if n.startswith("message sizes unknown"))
    assert "were not exported" in note and "2026" in note


def test_a_payload_that_does_not_fit_is_skipped(tmp_path):
    # One blob cut short (its header says 24 payload bytes, 12 follow): that call's size stays unknown.
    path = _export(tmp_path / "p.sqlite")
    con = sqlite3.connect(path)
    rowid, blob = con.execute(
        "SELECT rowid, binaryData FROM NVTX_EVENTS WHERE binaryData IS NOT NULL ORDER BY start LIMIT 1"
    ).fetchone()
    con.execute("UPDATE NVTX_EVENTS SET binaryData = ? WHERE rowid = ?", (blob[:44], rowid))
    con.commit()
    con.close()
    nccl = load_trace(path).nvtx
    sizes = nccl.loc[nccl["domain"] == "NCCL", "payload"]
    assert sizes.isna().sum() == 1 and sizes.notna().sum() == 7


def test_decode_reads_the_size_entry_of_the_header_schema():
    fields = {5: (8, 8, False)}
    body = (7).to_bytes(8, "little") + (123_456).to_bytes(8, "little") + bytes(8)
    head = payloads.HEADER.pack(1, 0, 5, 0, len(body), 32 + len(body))
    assert payloads.decode(head + body, fields) == 123_456
    assert payloads.decode((head + body).hex(), fields) == 123_456  # a BLOB handed back as hex
    assert payloads.decode(payloads.HEADER.pack(1, 0, 9, 0, 24, 56) + body, fields) is None  # unknown schema
    assert payloads.decode(b"\x00" * 10, fields) is None
