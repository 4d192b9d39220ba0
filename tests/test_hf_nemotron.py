"""``model_type: nemotron`` (Nemotron-4, Minitron) from its ``config.json``: exact parameter
counts, by hand and against a torch module built as transformers' ``modeling_nemotron`` builds
it (``NemotronMLP``: up_proj -> relu2 -> down_proj, no gate; ``NemotronLayerNorm1P``: an
``nn.LayerNorm`` with bias, weight + 1 applied; partial rotary, no parameters)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fsdpsim.model.hf_config import spec_from_hf_config

MINITRON_4B = Path(__file__).parent / "data" / "hf_configs_dense" / "nvidia__Minitron-4B-Base"


def test_minitron_4b_imports_with_its_exact_count():
    """Hand count (d 3072, 24 heads of 128, 8 KV heads, MLP 9216, vocab 256,000, untied):
    attention 3072·3072 + 2·3072·1024 + 3072·3072 = 25,165,824; MLP 2·3072·9216 = 56,623,104;
    two LayerNorm1P with bias 4·3072 = 12,288; a layer 81,801,216; 32 layers 2,617,638,912;
    embedding and head 2·256,000·3072 = 1,572,864,000; final norm 6,144:
    4,190,509,056 in all."""
    spec = spec_from_hf_config(MINITRON_4B)
    assert (spec.ffn_kind, spec.norm, spec.norm_bias, spec.tied_embeddings) == \
        ("gelu", "layernorm", True, False)
    assert spec.block_params == 81_801_216
    assert spec.n_params == 4_190_509_056


def _write(tmp_path, **overrides):
    data = json.loads((MINITRON_4B / "config.json").read_text())
    data.update(overrides)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


def test_biases_tying_and_head_dim_change_the_count(tmp_path):
    base = spec_from_hf_config(MINITRON_4B).n_params
    # attention_bias: q (3072), k, v (1024 each), o (3072) per layer
    biased = spec_from_hf_config(_write(tmp_path, attention_bias=True)).n_params
    assert biased - base == 32 * (3072 + 2 * 1024 + 3072)
    mlp = spec_from_hf_config(_write(tmp_path, mlp_bias=True)).n_params
    assert mlp - base == 32 * (9216 + 3072)
    tied = spec_from_hf_config(_write(tmp_path, tie_word_embeddings=True)).n_params
    assert base - tied == 256_000 * 3072
    # head_dim 256: q and o grow from 3072 to 6144 columns, k and v from 1024 to 2048
    wide = spec_from_hf_config(_write(tmp_path, head_dim=256)).n_params
    assert wide - base == 32 * 3072 * (2 * 3072 + 2 * 1024)


@pytest.mark.torch
def test_nemotron_count_equals_torch(tmp_path):
    torch = pytest.importorskip("torch")
    from torch import nn

    config = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=96, vocab_size=1000,
                  attention_bias=True, mlp_bias=False, tie_word_embeddings=False)
    path = _write(tmp_path, **config)
    d, ffn, h, kv, hd, v = 256, 768, 4, 2, 96, 1000

    class Layer(nn.Module):  # transformers NemotronDecoderLayer, as built
        def __init__(self):
            super().__init__()
            self.input_layernorm = nn.LayerNorm(d)
            self.q_proj = nn.Linear(d, h * hd, bias=True)
            self.k_proj = nn.Linear(d, kv * hd, bias=True)
            self.v_proj = nn.Linear(d, kv * hd, bias=True)
            self.o_proj = nn.Linear(h * hd, d, bias=True)
            self.post_attention_layernorm = nn.LayerNorm(d)
            self.up_proj = nn.Linear(d, ffn, bias=False)
            self.down_proj = nn.Linear(ffn, d, bias=False)

    with torch.device("meta"):
        model = nn.ModuleDict(dict(embed_tokens=nn.Embedding(v, d),
                                   layers=nn.ModuleList(Layer() for _ in range(3)),
                                   norm=nn.LayerNorm(d), lm_head=nn.Linear(d, v, bias=False)))
    expected = sum(p.numel() for p in model.parameters())
    assert spec_from_hf_config(path).n_params == expected
