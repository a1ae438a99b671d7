"""One report-cache entry as data only: a zip archive holding ``entry.json`` (every value but the frames, as
tagged JSON) and one Arrow IPC file per DataFrame (zstd-compressed). Reading an entry executes nothing it
holds: JSON is parsed, Arrow buffers are decoded and validated, and only the few classes named in
:data:`CLASSES` (plain dataclasses of the toolkit) are built, from their declared fields. Anything else in
an entry (an unknown tag or class, a field a class does not declare, a member that is not ours, an
extension type, a malformed buffer) is an :class:`EntryError`: the report recomputes that run.

Tagged JSON: JSON's own types stand for themselves (lists are lists; a dict is a JSON object when its keys
are strings that do not start with ``$``); otherwise a one-key object names the type:
``{"$map": [[k, v], ...]}``, ``{"$tuple": [...]}``, ``{"$path": "..."}``, ``{"$np": [dtype, value]}``,
``{"$frame": i}`` (member ``frame-i.arrow``), ``{"$obj": [class name, {field: value}]}``. Object
columns of a frame (mixed Python values: None, numbers, lists) are stored cell by cell as tagged JSON text,
so they come back as they were; every other column goes through Arrow with pandas' own dtype metadata.
"""

from __future__ import annotations

import dataclasses
import io
import json
import zipfile
from pathlib import Path, PurePosixPath

import numpy as np
import pandas as pd
import pyarrow as pa

from ddp_profile.memory import python_strings

FORMAT = 2
"""Bumped whenever the layout of an entry changes (it is also part of every entry's key)."""
JSON_MEMBER = "entry.json"
JSON_LIMIT = 256 << 20
"""Largest ``entry.json`` read (uncompressed); real ones are a few hundred kB."""
MEMBER_LIMIT = 4096
COMPRESSION = "zstd"


class EntryError(ValueError):
    """An entry that cannot be written as data, or that fails validation when read."""


def _classes() -> dict[str, type]:
    from ddp_profile.analysis import Analysis
    from ddp_profile.analysis.launches import LaunchAnalysis
    from ddp_profile.trace import Trace

    return {c.__name__: c for c in (Trace, Analysis, LaunchAnalysis)}


CLASSES = ("Trace", "Analysis", "LaunchAnalysis")
"""The only classes an entry may name (see :func:`_classes`)."""
FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "pd.DataFrame": (pd.DataFrame,),
    "pd.DataFrame|None": (pd.DataFrame, type(None)),
    "dict": (dict,),
    "dict|None": (dict, type(None)),
    "list[str]": (list,),
    "list[Path]": (list,),
    "str": (str,),
}
"""What a field of those classes must hold, by its annotation (fields annotated otherwise are not checked)."""


# ---- writing ----------------------------------------------------------------------------------------------


class _Writer:
    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def value(self, v):
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, (int, float)) and type(v) in (int, float):
            return v
        if isinstance(v, np.generic) and v.dtype.kind in "biuf":
            return {"$np": [v.dtype.str, v.item()]}
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, tuple):
            return {"$tuple": [self.value(x) for x in v]}
        if isinstance(v, dict):
            if all(isinstance(k, str) and not k.startswith("$") for k in v):
                return {k: self.value(x) for k, x in v.items()}
            return {"$map": [[self.value(k), self.value(x)] for k, x in v.items()]}
        if isinstance(v, Path):
            return {"$path": str(v)}
        if isinstance(v, pd.DataFrame):
            self.frames.append(_frame_bytes(v))
            return {"$frame": len(self.frames) - 1}
        name = type(v).__name__
        if dataclasses.is_dataclass(v) and name in CLASSES and _classes()[name] is type(v):
            return {"$obj": [name, self._fields(v)]}
        raise EntryError(f"a {type(v).__module__}.{type(v).__qualname__} is not data the cache stores")

    def _fields(self, obj) -> dict:
        deferred = obj.__dict__.get("_deferred") or {}
        for name in list(deferred):  # an analysis's sections computed on first read: computed now
            getattr(obj, name)
        declared = {f.name for f in dataclasses.fields(obj)}
        state = {k: v for k, v in vars(obj).items() if k != "_deferred"}
        if not set(state) <= declared:
            raise EntryError(
                f"{type(obj).__name__} holds undeclared attributes {sorted(set(state) - declared)}"
            )
        return {k: self.value(v) for k, v in state.items()}


def _cell_text(v) -> str:
    return json.dumps(_Writer().value(v))


def _frame_bytes(df: pd.DataFrame) -> bytes:
    """Arrow IPC (zstd) of ``df`` with positional column names; its labels, object columns (as tagged JSON
    text per cell) and attrs go into the schema's metadata as tagged JSON."""
    w = _Writer()
    labels = w.value(list(df.columns))
    data = df.copy(deep=False)
    data.columns = [str(i) for i in range(df.shape[1])]
    objects = []
    for i in range(df.shape[1]):
        col = data.iloc[:, i]
        if col.dtype == object:
            objects.append(i)
            data[str(i)] = [_cell_text(v) for v in col]
    meta = {"labels": labels, "objects": objects, "attrs": w.value(dict(df.attrs))}
    if w.frames:
        raise EntryError("a frame nested in a frame's labels or attrs")
    table = pa.Table.from_pandas(data, preserve_index=None)
    table = table.replace_schema_metadata(
        {**(table.schema.metadata or {}), b"ddp_profile": json.dumps(meta).encode()}
    )
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression=COMPRESSION)) as f:
        f.write_table(table)
    return sink.getvalue()


def dumps(value, key: str) -> bytes:
    """``value`` (the report's per-run result) as an entry's bytes; EntryError when it holds anything but
    data and the classes of :data:`CLASSES`."""
    w = _Writer()
    try:
        tree = w.value(value)
        text = json.dumps(
            {"format": FORMAT, "key": key, "frames": len(w.frames), "value": tree}, separators=(",", ":")
        )
    except (TypeError, ValueError, pa.ArrowException) as exc:
        raise EntryError(f"not data the cache stores: {exc}") from exc
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(zipfile.ZipInfo(JSON_MEMBER), text, compress_type=zipfile.ZIP_DEFLATED)
        for i, frame in enumerate(w.frames):  # already compressed: stored as they are
            z.writestr(zipfile.ZipInfo(f"frame-{i}.arrow"), frame, compress_type=zipfile.ZIP_STORED)
    return buf.getvalue()


# ---- reading ----------------------------------------------------------------------------------------------


class _Reader:
    def __init__(self, frames: list[pd.DataFrame] | None):
        self.frames = frames
        self.classes = _classes()

    def value(self, v):
        if v is None or isinstance(v, (bool, str, int)):
            return v
        if isinstance(v, float):
            return v
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if not isinstance(v, dict):
            raise EntryError(f"unexpected JSON value {type(v).__name__}")
        if len(v) != 1 or not next(iter(v)).startswith("$"):
            if any(k.startswith("$") for k in v):
                raise EntryError("a '$' key outside a tag")
            return {k: self.value(x) for k, x in v.items()}
        ((tag, body),) = v.items()
        if tag == "$tuple" and isinstance(body, list):
            return tuple(self.value(x) for x in body)
        if (
            tag == "$map"
            and isinstance(body, list)
            and all(isinstance(p, list) and len(p) == 2 for p in body)
        ):
            out = {}
            for k, x in body:
                k = self.value(k)
                if not isinstance(k, (str, int, float, bool, tuple, np.generic)) and k is not None:
                    raise EntryError("an unhashable map key")
                out[k] = self.value(x)
            return out
        if tag == "$path" and isinstance(body, str):
            return Path(body)
        if tag == "$np" and isinstance(body, list) and len(body) == 2 and isinstance(body[0], str):
            dtype = np.dtype(body[0]) if len(body[0]) <= 4 else None
            if dtype is None or dtype.kind not in "biuf" or not isinstance(body[1], (bool, int, float)):
                raise EntryError(f"not a numeric scalar: {body!r:.80}")
            return dtype.type(body[1])
        if tag == "$frame" and type(body) is int and self.frames is not None and 0 <= body < len(self.frames):
            return self.frames[body]
        if (
            tag == "$obj"
            and isinstance(body, list)
            and len(body) == 2
            and body[0] in self.classes
            and isinstance(body[1], dict)
        ):
            cls = self.classes[body[0]]
            declared = {f.name for f in dataclasses.fields(cls) if f.init} - {"_deferred"}
            if not set(body[1]) <= declared:
                raise EntryError(f"{body[0]} has no field(s) {sorted(set(body[1]) - declared)}")
            values = {k: self.value(x) for k, x in body[1].items()}
            types = {f.name: f.type for f in dataclasses.fields(cls)}
            for k, v in values.items():
                kinds = FIELD_TYPES.get(str(types[k]).replace(" ", ""))
                if kinds is not None and not isinstance(v, kinds):
                    raise EntryError(f"{body[0]}.{k} is a {type(v).__name__}, not {types[k]}")
            try:
                return cls(**values)
            except TypeError as exc:  # a required field missing
                raise EntryError(f"{body[0]}: {exc}") from None
        raise EntryError(f"unknown or malformed tag {tag!r}")


def _read_frame(data: bytes) -> pd.DataFrame:
    table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
    table.validate(full=True)
    for field in table.schema:
        if isinstance(field.type, pa.ExtensionType):
            raise EntryError(f"column of extension type {field.type}")
    meta = json.loads((table.schema.metadata or {}).get(b"ddp_profile", b"null"))
    if not isinstance(meta, dict) or not {"labels", "objects", "attrs"} <= set(meta):
        raise EntryError("a frame without its labels")
    reader = _Reader(None)
    df = table.to_pandas()
    labels = reader.value(meta["labels"])
    if (
        not isinstance(labels, list)
        or len(labels) != df.shape[1]
        or list(df.columns) != [str(i) for i in range(df.shape[1])]
    ):
        raise EntryError("a frame's labels do not match its columns")
    for i in meta["objects"]:
        if type(i) is not int or not 0 <= i < df.shape[1]:
            raise EntryError("a bad object column")
        col = df.iloc[:, i]
        df[str(i)] = pd.Series([reader.value(json.loads(t)) for t in col], index=df.index, dtype=object)
    df.columns = pd.Index(labels) if labels else df.columns[:0]
    attrs = reader.value(meta["attrs"])
    if not isinstance(attrs, dict):
        raise EntryError("a frame's attrs are not a mapping")
    df.attrs = attrs
    return df


def loads(data: bytes, key: str):
    """The value of an entry written by :func:`dumps` for ``key``; EntryError when it is not one. Its ``str``
    columns come back in Python storage, as the load and the analysis make them (``memory.python_strings``)."""
    with python_strings():
        return _loads(data, key)


def _loads(data: bytes, key: str):
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            infos = z.infolist()
            if len(infos) > MEMBER_LIMIT or not infos or infos[0].filename != JSON_MEMBER:
                raise EntryError("not a cache entry")
            head = infos[0]
            if head.file_size > JSON_LIMIT:
                raise EntryError("entry.json too large")
            with z.open(head) as f:
                doc = json.loads(f.read(JSON_LIMIT + 1))
            if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("key") != key:
                raise EntryError("an entry of another format or key")
            n = doc.get("frames")
            names = [f"frame-{i}.arrow" for i in range(n)] if type(n) is int and n >= 0 else None
            if names is None or [i.filename for i in infos[1:]] != names:
                raise EntryError("an entry's members are not its frames")
            frames = []
            for info in infos[1:]:
                if (
                    info.compress_type != zipfile.ZIP_STORED
                    or PurePosixPath(info.filename).name != info.filename
                ):
                    raise EntryError(f"member {info.filename!r} is not a stored frame")
                frames.append(_read_frame(z.read(info)))
            return _Reader(frames).value(doc["value"])
    except EntryError:
        raise
    except (
        zipfile.BadZipFile,
        pa.ArrowException,
        ValueError,
        KeyError,
        TypeError,
        OverflowError,
        RecursionError,
        OSError,
        MemoryError,
        EOFError,
        NotImplementedError,
    ) as exc:
        raise EntryError(f"{type(exc).__name__}: {str(exc)[:200]}") from None
