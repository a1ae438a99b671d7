"""Model zoo of the harness: the CS336 Transformer LM presets and the scaling-study MLP.

`build_model(name, device=...)` constructs parameters directly on the target device (a `torch.device`
context), so an XL model (2 B parameters) is initialised on the GPU in seconds instead of on the CPU in
minutes; `device="meta"` builds the shapes only, which is how tests count XL's parameters without memory.
"""

from __future__ import annotations

import torch
from torch import nn

from ddp_profile.harness.config import MLP_MODEL, MLPPreset, TransformerPreset, model_preset
from ddp_profile.harness.models.mlp import ScalingMLP
from ddp_profile.harness.models.transformer import TransformerLM


def build_model(name: str, device: str | torch.device = "cpu", mlp_depth: int = 8) -> nn.Module:
    """Build the named model with its parameters allocated and initialised on `device`."""
    preset = model_preset(name, mlp_depth=mlp_depth)
    with torch.device(device):
        if isinstance(preset, MLPPreset):
            return ScalingMLP(preset)
        return TransformerLM(preset)


def param_stats(model: nn.Module) -> dict:
    """Parameter count, tensor count and bytes (unique tensors; tied weights counted once)."""
    params = list(model.parameters())  # parameters() already de-duplicates shared tensors
    return {
        "param_count": sum(p.numel() for p in params),
        "param_tensors": len(params),
        "param_bytes": sum(p.numel() * p.element_size() for p in params),
        "trainable_param_count": sum(p.numel() for p in params if p.requires_grad),
    }


__all__ = [
    "MLP_MODEL",
    "MLPPreset",
    "ScalingMLP",
    "TransformerLM",
    "TransformerPreset",
    "build_model",
    "param_stats",
]
