"""The notes of a whole trace from its parts' (``pipeline``'s stages run per part: one file, a batch of
files on a Dask worker, or the whole trace): each note once, per-rank items merged, and the step notes of
the parts that found the steps the analysis uses."""

from __future__ import annotations

import re

from ddp_profile.analysis.windows import NO_NVTX_RANGES as NO_RANGES

_RANK_ITEM = re.compile(r"; (?=rank \d+: )")


def merged_notes(notes: list[list[str]]) -> list[str]:
    """Several parts' notes as one trace's: each distinct note once, in part order; notes that differ only
    in their per-rank items (``"...; rank 0: ...; rank 1: ..."``, one part's ranks each) become one note
    listing every part's items in that order."""
    out: dict[str, list[str]] = {}
    for part in notes:
        for note in part:
            head, *items = _RANK_ITEM.split(note)
            got = out.setdefault(head, [])
            got += [i for i in items if i not in got]
    return ["; ".join([head, *items]) for head, items in out.items()]


def step_notes(parts: list) -> list[str]:
    """The step notes of the whole trace from its parts': those of the parts that found NVTX steps, else of
    those that inferred steps, else of all; "no NVTX ranges" only when every one of them says so."""
    with_steps = [p for p in parts if not p.steps.empty]
    chosen = [p for p in with_steps if not p.inferred] or with_steps or parts
    lists = [p.notes for p in chosen]
    if not all(any(n.startswith(NO_RANGES) for n in notes) for notes in lists):
        lists = [[n for n in notes if not n.startswith(NO_RANGES)] for notes in lists]
    return merged_notes(lists)


def kernel_notes(parts: list) -> list[str]:
    if sum(p.n_kernels for p in parts) == 0:
        return ["the trace has no GPU kernels (profile with `nsys profile -t cuda`)"]
    if not any(p.any_launch for p in parts):
        return [
            "kernels have no launch times (CUDA API trace missing): steps cannot be projected onto "
            "the GPU; profile with `nsys profile -t cuda,nvtx`"
        ]
    return []
