"""Column-at-a-time writers for `analyze`'s JSON: the text ``json.dumps(obj, indent=2)`` gives for
``Analysis.to_json_dict()`` (a test holds them equal), built one column at a time.

``json.dumps`` with an indent runs its pure-Python encoder, one call per value (~0.5 s for the 15,000 rows of
a 1M-kernel run). Here a section is written in blocks of ROWS_PER_CHUNK rows, each yielded as soon as it is
built (``analyze`` streams them to its atomic temp file: a long capture's answer is never one string). In a
block, each column becomes an Arrow string array of its JSON tokens: integers, booleans and whole floats
converted by Arrow (the digits Python's repr gives), other floats by repr, NaN and missing values as ``null``,
names by one ``json.dumps`` per distinct value; the rows are then assembled by Arrow
(``binary_join_element_wise``) and the block's text is one span of the result's data buffer. CSV goes
through pandas' writer, which formats whole columns too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pandas as pd

INDENT = "  "


ROWS_PER_CHUNK = 65536
"""Rows of a section turned into text at a time (:func:`records_chunks`): a 450 MB answer is written as it is
built, never held as one string."""


def json_text(res, keys: list[str]) -> str:
    """``json.dumps({k: v for k, v in res.to_json_dict().items() if k in keep}, indent=2) + "\\n"`` with
    ``keep`` = the head (version, summary, notes, verdict, per_rank: ``res.json_head()``) and ``keys`` (JSON
    section names), in to_json_dict's key order: :func:`json_chunks` joined."""
    return "".join(json_chunks(res, keys))


def json_chunks(res, keys: list[str]) -> Iterator[str]:
    """The text of :func:`json_text` in pieces, as they are built (a section in blocks of ROWS_PER_CHUNK rows)."""
    from ddp_profile.schema import JSON_SECTIONS

    sep = "{\n"
    for k, v in res.json_head().items():
        yield f"{sep}{INDENT}{json.dumps(k)}: {_small(v)}"
        sep = ",\n"
    for key, attr in JSON_SECTIONS.items():
        if key in keys:
            df = getattr(res, attr)
            extra = ("compute_overlap_pct", "overlap_pct", "kind", "nccl") if key == "kernels" else None
            yield f"{sep}{INDENT}{json.dumps(key)}: "
            yield from records_chunks(df, 2, extra)
            sep = ",\n"
    yield "{\n\n}\n" if sep == "{\n" else "\n}\n"


def _small(value) -> str:
    """A small value (summary, notes) at nesting level 1: json.dumps' own text, re-indented."""
    return json.dumps(value, indent=2).replace("\n", "\n" + INDENT)


def records_text(df: pd.DataFrame, level: int, extra=None) -> str:
    """A frame as the text of a JSON list of row objects at nesting ``level`` (list items at ``level``,
    their keys one deeper), as json.dumps(records(df), indent=2) nests it. ``extra`` = (key, column,
    mask column, mask value): rows whose mask column equals the value also get ``key`` = that column's
    value, after the others (the kernels section's ``compute_overlap_pct``): :func:`records_chunks` joined."""
    return "".join(records_chunks(df, level, extra))


def records_chunks(df: pd.DataFrame, level: int, extra=None, rows: int = ROWS_PER_CHUNK) -> Iterator[str]:
    """The text of :func:`records_text` in pieces of at most ``rows`` rows each."""
    if len(df) == 0:
        yield "[]"
        return
    if len(df.columns) == 0:
        yield "[\n" + ",\n".join([INDENT * level + "{}"] * len(df)) + "\n" + INDENT * (level - 1) + "]"
        return
    import pyarrow as pa
    import pyarrow.compute as pc

    pad, inner = INDENT * level, INDENT * (level + 1)
    leads = [
        pa.scalar((pad + "{\n" if i == 0 else ",\n") + inner + json.dumps(str(col)) + ": ")
        for i, col in enumerate(df.columns)
    ]
    # every row's text ends with the separator to the next row: the last row's is cut off at the end
    tail = pa.scalar("\n" + pad + "},\n")
    for a in range(0, len(df), rows):
        block = df.iloc[a : a + rows]
        parts: list = []
        for i, lead in enumerate(leads):
            parts += [lead, _arrow_tokens(block.iloc[:, i])]
        if extra is not None:
            key, src, mask_col, value = extra
            hit = (
                (block[mask_col] == value).fillna(False).to_numpy(dtype=bool)
                if mask_col in block
                else np.zeros(len(block), bool)
            )
            with_key = pc.binary_join_element_wise(
                pa.scalar(",\n" + inner + json.dumps(key) + ": "), _arrow_tokens(block[src]), pa.scalar("")
            )
            parts.append(pc.if_else(pa.array(hit), with_key, pa.scalar("")))
        parts.append(tail)
        last = a + rows >= len(df)
        text = _concatenated(pc.binary_join_element_wise(*parts, pa.scalar("")), cut=2 if last else 0)
        yield "[\n" + text if a == 0 else text
    yield "\n" + INDENT * (level - 1) + "]"


def _arrow_tokens(col: pd.Series):
    """:func:`tokens` of a column as an Arrow string array without nulls: integers and booleans converted by
    Arrow (the same digits as Python's repr), other columns' Python tokens carried over."""
    import pyarrow as pa
    import pyarrow.compute as pc

    dtype = col.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "iu":
        return pc.cast(pa.array(col.to_numpy()), pa.string())
    if isinstance(dtype, np.dtype) and dtype.kind == "b":
        return pc.if_else(pa.array(col.to_numpy()), pa.scalar("true"), pa.scalar("false"))
    if isinstance(dtype, pd.core.dtypes.dtypes.BaseMaskedDtype) and dtype.kind in "iu":  # Int64: <NA> -> null
        missing = col.isna().to_numpy()
        values = pa.array(col.to_numpy(dtype="int64", na_value=0), mask=missing)
        return pc.fill_null(pc.cast(values, pa.string()), pa.scalar("null"))
    if dtype == np.float64:
        return _float_tokens(col.to_numpy(), None)
    if isinstance(dtype, pd.core.dtypes.dtypes.BaseMaskedDtype) and dtype == "Float64":  # <NA> -> null
        return _float_tokens(col.to_numpy(dtype="float64", na_value=0), col.isna().to_numpy())
    return pa.array(tokens(col), type=pa.string())


def _float_tokens(values: np.ndarray, missing: np.ndarray | None):
    """:func:`tokens` of float64 values as an Arrow string array: a whole number under 2**53 in magnitude is its
    integer's digits and '.0' (Python's repr of such a float), converted by Arrow; any other finite value is
    Python's repr; infinities 'Infinity' / '-Infinity'; NaN and ``missing`` 'null'."""
    import pyarrow as pa
    import pyarrow.compute as pc

    finite = np.isfinite(values)
    with np.errstate(invalid="ignore"):
        whole = finite & (np.trunc(values) == values) & (np.abs(values) < 2.0**53)
    whole &= ~((values == 0) & np.signbit(values))  # -0.0: repr '-0.0', not the integer's '0.0'
    digits = pc.cast(pa.array(np.where(whole, values, 0).astype(np.int64)), pa.string())
    text = pc.binary_join_element_wise(digits, pa.scalar(".0"), pa.scalar(""))
    other = np.flatnonzero(finite & ~whole)
    if other.size:
        full = np.full(len(values), "", dtype=object)
        full[other] = list(map(float.__repr__, values[other].tolist()))
        text = pc.if_else(pa.array(whole), text, pa.array(full, type=pa.string()))
    for mask, word in ((np.isposinf(values), "Infinity"), (np.isneginf(values), "-Infinity")):
        if mask.any():
            text = pc.if_else(pa.array(mask), pa.scalar(word), text)
    missing = np.isnan(values) if missing is None else missing | np.isnan(values)
    if missing.any():
        text = pc.if_else(pa.array(missing), pa.scalar("null"), text)
    return text


def _concatenated(arr, cut: int = 0) -> str:
    """The values of an Arrow string array without nulls, one after the other (less the last ``cut``
    characters; the text is ASCII: json.dumps escapes the rest): one span of its data buffer, decoded once."""
    import pyarrow as pa

    width = np.int64 if arr.type == pa.large_string() else np.int32
    offsets = np.frombuffer(
        arr.buffers()[1], dtype=width, count=len(arr) + 1, offset=arr.offset * width().itemsize
    )
    return str(memoryview(arr.buffers()[2])[int(offsets[0]) : int(offsets[-1]) - cut], "utf-8")


def tokens(col: pd.Series) -> list[str]:
    """One JSON token per value of a column, as json.dumps writes the value ``_clean`` makes of it
    (numpy scalars as Python ones; NaN, NA and None as null)."""
    dtype = col.dtype
    if pd.api.types.is_bool_dtype(dtype) and not isinstance(dtype, pd.api.extensions.ExtensionDtype):
        return np.where(col.to_numpy(), "true", "false").tolist()
    if pd.api.types.is_integer_dtype(dtype) or pd.api.types.is_float_dtype(dtype):
        if isinstance(dtype, pd.api.extensions.ExtensionDtype):  # nullable Int64/Float64: <NA> -> null
            missing = col.isna().to_numpy()
            values = col.to_numpy(
                dtype="float64" if pd.api.types.is_float_dtype(dtype) else "int64", na_value=0
            )
        else:
            values, missing = col.to_numpy(), None
        # Python's own repr per value, as json.dumps writes floats and ints: ~4x (ints) and ~1.6x (floats)
        # faster than numpy's astype(str) on 1M values.
        if values.dtype.kind == "f":
            # float64 only: a narrower float's repr would show its binary value's digits, where numpy's are short
            text = (
                list(map(float.__repr__, values.tolist()))
                if values.dtype == np.float64
                else values.astype(str).tolist()
            )
            nan = np.isnan(values)
            missing = nan if missing is None else missing | nan
            for i in np.flatnonzero(np.isinf(values)).tolist():
                text[i] = "Infinity" if values[i] > 0 else "-Infinity"
        else:
            text = list(map(int.__repr__, values.tolist()))
        if missing is not None:
            for i in np.flatnonzero(missing).tolist():
                text[i] = "null"
        return text
    # names and other objects: one json.dumps per distinct value
    try:
        codes, uniques = pd.factorize(col, use_na_sentinel=True)
    except TypeError:  # unhashable values (lists): one dumps per value
        return [json.dumps(_plain(v)) for v in col]
    words = [json.dumps(_plain(v)) for v in uniques] + ["null"]
    return np.array(words, dtype=object)[codes].tolist()  # code -1 (missing) -> the last word, null


def _plain(v):
    """One value as ``analysis.records`` writes it: numpy scalars as Python values, NaN / NA / NaT as None."""
    if isinstance(v, np.generic):
        v = v.item()
    if v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and v != v):
        return None
    return v
