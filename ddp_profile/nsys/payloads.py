"""Message sizes from NCCL's own NVTX ranges: their extended (binary, schema-described) payloads.

NCCL (2.19 and later) wraps each API call in an NVTX range of domain ``NCCL`` (``ncclAllReduce``,
``ncclReduceScatter``...) whose payload is a C struct described by a registered schema; the collectives'
schemas have an entry named ``"Message size [bytes]"`` (NCCL's ``src/include/nvtx_payload_schemas.h``: the
buffer size for AllReduce and Broadcast, one rank's share, ``recvcount`` or ``sendcount`` × type size, for
ReduceScatter and AllGather). An nsys export that keeps them holds:

* ``NVTX_PAYLOAD_SCHEMA_ENTRIES``: one row per entry of a schema: ``schemaId``, ``idx``, ``type`` (NVTX's
  ``NVTX_PAYLOAD_ENTRY_TYPE_*`` ids: 22 = ``size_t``...), ``name``, ``offset`` (bytes into the payload; NULL
  for an entry at its natural alignment after the previous one, e.g. the first);
* ``NVTX_EVENTS.binaryData``: per event, a 32-byte header (little-endian uint32 domain id, uint32 reserved,
  uint32 schema id, uint32 reserved, uint64 payload size, uint64 total size) followed by the payload.

That layout is the one third-party readers of 2026.x exports decode (the nsys-ai project's
``nccl_payload_breakdown``); it is not in NVIDIA's export documentation, so a row whose header or size does
not fit is skipped, never guessed. The nsys 2025.3 exports committed here have a ``binaryData`` column left
NULL and no schema tables: there, sizes stay unknown and the analysis says so.

Only this package knows the table names; the rest of ddp-profile sees the sizes as the NVTX rows' payload.
"""

from __future__ import annotations

import sqlite3
import struct

import numpy as np

from ddp_profile.nsys.sql import NVTX, PID_SQL, TID_SQL, columns

SCHEMA_ENTRIES = "NVTX_PAYLOAD_SCHEMA_ENTRIES"
SCHEMAS = "NVTX_PAYLOAD_SCHEMAS"
TABLES = (SCHEMAS, SCHEMA_ENTRIES, "NVTX_PAYLOAD_ENUMS", "NVTX_PAYLOAD_ENUM_ENTRIES")
"""The payload tables an export may carry (a slim scrub keeps them)."""
MESSAGE_SIZE = "Message size [bytes]"
HEADER = struct.Struct("<IIIIQQ")  # domain id, reserved, schema id, reserved, payload size, total size
# NVTX_PAYLOAD_ENTRY_TYPE_* ids of the fixed-size integer types: id -> (bytes, signed)
INT_TYPES = {
    1: (1, True),
    2: (1, False),
    3: (2, True),
    4: (2, False),
    5: (4, True),
    6: (4, False),
    7: (8, True),
    8: (8, False),
    9: (8, True),
    10: (8, False),
    11: (1, True),
    12: (1, False),
    13: (2, True),
    14: (2, False),
    15: (4, True),
    16: (4, False),
    17: (8, True),
    18: (8, False),
    22: (8, False),
    23: (8, False),
}
FLOAT_SIZES = {19: 4, 20: 8}


def size_fields(con: sqlite3.Connection, have: set[str]) -> dict[int, tuple[int, int, bool]]:
    """schemaId -> (offset, width, signed) of its ``"Message size [bytes]"`` entry, for the schemas that
    have one of an integer type. An entry without an offset follows the previous one at its natural
    alignment (NVTX's rule for unset offsets); a schema with an entry of unknown size before it is left out."""
    if SCHEMA_ENTRIES not in have:
        return {}
    cols = columns(con, SCHEMA_ENTRIES)
    if not {"schemaId", "idx", "type", "name"} <= set(cols):
        return {}
    offset = '"offset"' if "offset" in cols else "NULL"
    rows = con.execute(
        f'SELECT schemaId, idx, "type", name, {offset} FROM {SCHEMA_ENTRIES} ORDER BY schemaId, idx'
    ).fetchall()
    out: dict[int, tuple[int, int, bool]] = {}
    at: dict[int, int | None] = {}  # per schema: the byte after the previous entry (None: unknown)
    for sid, _idx, typ, name, off in rows:
        if not isinstance(sid, int) or not isinstance(typ, int):
            continue
        width = INT_TYPES.get(typ, (FLOAT_SIZES.get(typ), False))[0]
        cur = at.get(sid, 0)
        if isinstance(off, int) and off >= 0:
            pos: int | None = off
        elif cur is not None and width:
            pos = -(-cur // width) * width  # natural alignment
        else:
            pos = None
        if name == MESSAGE_SIZE and pos is not None and typ in INT_TYPES and sid not in out:
            out[sid] = (pos, INT_TYPES[typ][0], INT_TYPES[typ][1])
        at[sid] = pos + width if pos is not None and width else None
    return out


def _blob(value) -> bytes | None:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):  # a hex string (how some readers hand a BLOB back)
        try:
            return bytes.fromhex(value)
        except ValueError:
            return None
    return None


def decode(blob, fields: dict[int, tuple[int, int, bool]]) -> int | None:
    """The message size in one ``binaryData`` value (module docstring), None when it holds none."""
    data = _blob(blob)
    if data is None or len(data) < HEADER.size:
        return None
    _domain, _r1, schema, _r2, size, _total = HEADER.unpack_from(data)
    field = fields.get(schema)
    if field is None:
        return None
    off, width, signed = field
    if off + width > min(size, len(data) - HEADER.size):
        return None
    value = int.from_bytes(data[HEADER.size + off : HEADER.size + off + width], "little", signed=signed)
    return value if value >= 0 else None


def message_sizes(con: sqlite3.Connection, have: set[str]) -> np.ndarray:
    """Rows (pid, tid, start, bytes) of the NVTX events whose binary payload holds a message size (int64,
    shape (n, 4); empty when the export has no payload schema with one, or no ``binaryData``)."""
    empty = np.empty((0, 4), dtype=np.int64)
    if NVTX not in have or "binaryData" not in columns(con, NVTX):
        return empty
    fields = size_fields(con, have)
    if not fields:
        return empty
    sql = (
        f"SELECT {PID_SQL.format(col='globalTid')}, {TID_SQL.format(col='globalTid')}, start, binaryData "
        f"FROM {NVTX} WHERE binaryData IS NOT NULL"
    )
    out = []
    for pid, tid, start, blob in con.execute(sql):
        value = decode(blob, fields)
        if value is not None and isinstance(pid, int) and isinstance(tid, int) and isinstance(start, int):
            out.append((pid, tid, start, value))
    return np.array(out, dtype=np.int64).reshape(-1, 4) if out else empty


def attach(ints: np.ndarray, sizes: np.ndarray) -> int:
    """Write each message size into the payload of the NVTX row (``sql.nvtx_ranges``' int rows, ordered by
    start) with its process, thread and start: column 5 = bytes, column 8 (has payload) = 1, in place.
    Returns how many rows got one."""
    if len(ints) == 0 or len(sizes) == 0:
        return 0
    starts = ints[:, 3]
    lo = np.searchsorted(starts, sizes[:, 2], "left")
    hi = np.searchsorted(starts, sizes[:, 2], "right")
    n = 0
    for (pid, tid, _start, value), a, b in zip(sizes, lo, hi, strict=True):
        for i in range(int(a), int(b)):
            if ints[i, 0] == pid and ints[i, 1] == tid:
                ints[i, 5], ints[i, 8] = value, 1
                n += 1
                break
    return n
