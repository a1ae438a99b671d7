"""The CS336 Transformer language model (assignment 1's architecture, used by assignment 2's DDP part).

Token embedding -> N pre-norm blocks (RMSNorm, causal multi-head attention with RoPE, RMSNorm, SwiGLU) ->
final RMSNorm -> untied LM head. No biases anywhere. Q, K and V are separate projections so the parameter
tensors match the assignment's (XL: 1,998,235,200 parameters in 435 tensors).

RoPE angles are computed in the forward pass rather than kept as a buffer: the model then has no buffers,
which keeps meta-device construction and `to_empty` trivial. They are computed once per forward and shared
by every layer: their GPU time is negligible, but computing them in each attention call costs 11 kernel
launches per call (arange, pow, cos, sin, casts...) in every layer, and XL under bf16 is bound by the host's
launch rate (``ddp-profile launches traces/none_xl_bf16_1xh200``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ddp_profile.harness.config import TransformerPreset


def _trunc_normal_(weight: torch.Tensor, std: float) -> None:
    nn.init.trunc_normal_(weight, mean=0.0, std=std, a=-3 * std, b=3 * std)


class Linear(nn.Module):
    """Bias-free linear layer with the assignment's truncated-normal init (std = sqrt(2 / (in + out)))."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        fan_in, fan_out = self.weight.shape[1], self.weight.shape[0]
        _trunc_normal_(self.weight, math.sqrt(2.0 / (fan_in + fan_out)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


class Embedding(nn.Module):
    def __init__(self, num_embeddings: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _trunc_normal_(self.weight, 1.0)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weight[ids]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 (as the assignment asks) even under bf16 autocast, then cast back.
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x32 * self.weight).to(dtype)


RopeTables = dict  # torch.dtype -> (cos, sin), each (seq, d_head / 2); see rope_tables()


def rope_tables(seq: int, d_head: int, theta: float, device: torch.device) -> RopeTables:
    """cos and sin of position * theta^(-2i/d) in fp32, keyed by dtype so `_rope` casts them once per dtype
    (under autocast q and k are bf16) however many layers share them."""
    inv_freq = theta ** (-torch.arange(0, d_head, 2, device=device, dtype=torch.float32) / d_head)
    angles = torch.arange(seq, device=device, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return {torch.float32: (angles.cos(), angles.sin())}


def _rope(x: torch.Tensor, theta: float, tables: RopeTables | None = None) -> torch.Tensor:
    """Rotate pairs (2i, 2i+1) of the last dim of x (batch, heads, seq, d_head) by position * theta^(-2i/d).

    `tables` (from `rope_tables` for x's seq and d_head) is filled with x's dtype on first use."""
    seq, d_head = x.shape[-2], x.shape[-1]
    if tables is None:
        tables = rope_tables(seq, d_head, theta, x.device)
    if x.dtype not in tables:
        cos32, sin32 = tables[torch.float32]
        tables[x.dtype] = (cos32.to(x.dtype), sin32.to(x.dtype))
    cos, sin = tables[x.dtype]
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int, rope_theta: float) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.rope_theta = rope_theta
        self.q_proj = Linear(d_model, d_model)
        self.k_proj = Linear(d_model, d_model)
        self.v_proj = Linear(d_model, d_model)
        self.output_proj = Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, rope: RopeTables | None = None) -> torch.Tensor:
        b, s, d = x.shape
        h = self.num_heads
        if rope is None:
            rope = rope_tables(s, d // h, self.rope_theta, x.device)

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, h, d // h).transpose(1, 2)

        q = _rope(heads(self.q_proj(x)), self.rope_theta, rope)
        k = _rope(heads(self.k_proj(x)), self.rope_theta, rope)
        v = heads(self.v_proj(x))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.output_proj(out.transpose(1, 2).reshape(b, s, d))


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.w1 = Linear(d_model, d_ff)
        self.w2 = Linear(d_ff, d_model)
        self.w3 = Linear(d_model, d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, p: TransformerPreset) -> None:
        super().__init__()
        self.ln1 = RMSNorm(p.d_model)
        self.attn = CausalSelfAttention(p.d_model, p.num_heads, p.rope_theta)
        self.ln2 = RMSNorm(p.d_model)
        self.ffn = SwiGLU(p.d_model, p.d_ff)

    def forward(self, x: torch.Tensor, rope: RopeTables | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), rope)
        return x + self.ffn(self.ln2(x))


class TransformerLM(nn.Module):
    """Maps token ids (batch, seq) to next-token logits (batch, seq, vocab)."""

    def __init__(self, preset: TransformerPreset) -> None:
        super().__init__()
        if preset.d_model % preset.num_heads:
            raise ValueError(f"d_model {preset.d_model} is not divisible by num_heads {preset.num_heads}")
        self.preset = preset
        self.token_embeddings = Embedding(preset.vocab_size, preset.d_model)
        self.layers = nn.ModuleList(Block(preset) for _ in range(preset.num_layers))
        self.ln_final = RMSNorm(preset.d_model)
        self.lm_head = Linear(preset.d_model, preset.vocab_size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.token_embeddings(ids)
        p = self.preset
        rope = rope_tables(ids.shape[-1], p.d_model // p.num_heads, p.rope_theta, ids.device)
        for layer in self.layers:
            x = layer(x, rope)
        return self.lm_head(self.ln_final(x))
