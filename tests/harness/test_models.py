"""Model shapes and parameter counts. XL is built on the meta device: shapes only, no memory."""

import pytest
import torch

from ddp_profile.harness.config import TRANSFORMER_PRESETS
from ddp_profile.harness.models import build_model, param_stats


def expected_transformer_params(p):
    # embedding + head (untied) + final norm + per layer: q,k,v,o (d^2 each), SwiGLU 3*d*d_ff, two norms (d each)
    per_layer = 4 * p.d_model**2 + 3 * p.d_model * p.d_ff + 2 * p.d_model
    return 2 * p.vocab_size * p.d_model + p.d_model + p.num_layers * per_layer


def test_xl_has_the_assignment_parameter_count_and_tensor_count():
    stats = param_stats(build_model("xl", device="meta"))
    assert stats["param_count"] == 1_998_235_200
    assert stats["param_tensors"] == 435  # 48 layers x 9 tensors + embedding + final norm + head
    assert stats["param_bytes"] == 1_998_235_200 * 4


@pytest.mark.parametrize("name", sorted(TRANSFORMER_PRESETS))
def test_every_preset_matches_the_closed_form_count(name):
    preset = TRANSFORMER_PRESETS[name]
    stats = param_stats(build_model(name, device="meta"))
    assert stats["param_count"] == expected_transformer_params(preset)
    assert stats["param_tensors"] == 9 * preset.num_layers + 3


def test_presets_table():
    got = {k: (p.d_model, p.d_ff, p.num_layers, p.num_heads) for k, p in TRANSFORMER_PRESETS.items()}
    assert got["small"] == (768, 3072, 12, 12)
    assert got["medium"] == (1024, 4096, 24, 16)
    assert got["large"] == (1280, 5120, 36, 20)
    assert got["xl"] == (1600, 6400, 48, 25)
    assert got["2.7B"] == (2560, 10240, 32, 32)
    assert all(p.vocab_size == 10000 for k, p in TRANSFORMER_PRESETS.items() if k != "tiny")


def test_no_biases_and_untied_head():
    model = build_model("tiny")
    assert not any(name.endswith("bias") for name, _ in model.named_parameters())
    assert model.lm_head.weight.data_ptr() != model.token_embeddings.weight.data_ptr()
    assert len(list(model.buffers())) == 0


def test_tiny_forward_is_causal():
    torch.manual_seed(0)
    model = build_model("tiny")
    ids = torch.randint(0, 97, (2, 12))
    logits = model(ids)
    assert logits.shape == (2, 12, 97)
    changed = ids.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % 97  # alter only the future of position 7
    again = model(changed)
    torch.testing.assert_close(logits[:, :8], again[:, :8])
    assert not torch.allclose(logits[:, 8:], again[:, 8:])


def test_rope_preserves_norms_and_depends_only_on_relative_position():
    from ddp_profile.harness.models.transformer import _rope

    torch.manual_seed(0)
    q, k = torch.randn(8), torch.randn(8)
    seq = 6
    # Same q and k at every position: the rotated dot product at (m, n) must depend on m - n only.
    rq = _rope(q.expand(1, 1, seq, 8).clone(), 10000.0)[0, 0]
    rk = _rope(k.expand(1, 1, seq, 8).clone(), 10000.0)[0, 0]
    torch.testing.assert_close(rq.norm(dim=-1), q.norm().expand(seq))
    scores = rq @ rk.T
    torch.testing.assert_close(scores[3, 1], scores[4, 2])
    torch.testing.assert_close(scores[5, 5], scores[0, 0])
    assert not torch.allclose(scores[3, 1], scores[3, 2])  # different offsets differ
    torch.testing.assert_close(rq[0], q)  # position 0 is not rotated


def test_mlp_shapes_and_depth():
    model = build_model("mlp", device="meta", mlp_depth=4)
    stats = param_stats(model)
    assert stats["param_count"] == 4096 * 4096 * 3 + 4096 * 2048
    assert stats["param_tensors"] == 4
    small = build_model("mlp", device="meta", mlp_depth=2)
    assert param_stats(small)["param_tensors"] == 2
    assert small(torch.empty(3, 4096, device="meta")).shape == (3, 2048)
