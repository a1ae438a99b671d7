"""`none`: no gradient communication at all; the 1-GPU baseline (with world size > 1 the ranks drift
apart after the first step, by design)."""

from __future__ import annotations

from ddp_profile.harness.strategies.base import Wrapper


class NoSync(Wrapper):
    name = "none"

    def layout(self) -> dict:
        return {"buckets": 0, "bucket_bytes": [], "bucket_params": []}
