"""The scaling study's MLP: a stack of large Linear layers whose gradients are big and arrive in a
predictable order, so communication/computation overlap is easy to reason about."""

from __future__ import annotations

from torch import nn

from ddp_profile.harness.config import MLPPreset


class ScalingMLP(nn.Module):
    """Linear(in, hidden) -> ReLU -> (depth - 2) x [Linear(hidden, hidden) -> ReLU] -> Linear(hidden, out)."""

    def __init__(self, preset: MLPPreset) -> None:
        super().__init__()
        self.preset = preset
        widths = [preset.in_features] + [preset.hidden] * (preset.depth - 1) + [preset.out_features]
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
            layers.append(nn.Linear(a, b, bias=False))
            if i < preset.depth - 1:
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)
