"""The harness's strategy names, in the order pages show them: the harness offers them (``--strategy``) and
the report orders runs by them (unknown names after, alphabetically). Shared here because neither side
imports the other. Standard library only."""

from __future__ import annotations

STRATEGIES = ("none", "naive", "flat", "overlap", "bucketed", "torch_ddp", "fsdp")

__all__ = ["STRATEGIES"]
