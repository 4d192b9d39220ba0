"""The FLOPs of one training step: the model FLOPs of MFU and the hardware FLOPs of HFU."""

from __future__ import annotations


def step_flops(m, x, k, dp, rc_share):
    """Model and hardware FLOPs of one step of k micro-batches on each of dp ranks [FLOP].

    MFU: PaLM App. B model FLOPs, 6·N_mm + 12·L·s·q per token (attention over the full
    s × s square, no recompute). HFU: 3× every weight matmul, attention over the full square
    with flash's 2.5× backward, the LM head, plus the recomputed forward of the share
    ``rc_share`` of the layers that recompute (less the down projection under full
    recompute)."""
    L, b, s, vocab = m.n_layers, x["b"], x["s"], x["vocab"]
    tokens_per_step = b * s * k * dp
    model_flops = (6.0 * m.matmul_params + 12.0 * L * s * m.q_dim) * tokens_per_step
    T = b * s                                             # the whole micro-batch
    up = (2 if m.ffn_kind == "swiglu" else 1) * m.ffn_size
    layer_mm = 2.0 * T * ((m.q_dim + 2 * m.kv_dim) * m.d_model + m.d_model * m.q_dim
                          + up * m.d_model + m.d_model * m.ffn_size)
    attn_full = 4.0 * b * s * s * m.q_dim
    replayed = {"none": 0.0, "selective": attn_full,
                "full": layer_mm + attn_full                    # less the down projection
                - (0.0 if x["megatron"] else 2.0 * T * m.d_model * m.ffn_size),
                # op-selective: wk, wo and w3 (or GELU's down) again; biased: none (addmm)
                "op-selective": (0.0 if (m.mlp_bias or m.qkv_bias or m.attn_out_bias) else
                                 2.0 * T * m.d_model * (m.kv_dim + m.q_dim + m.ffn_size)),
                }[x["recompute"]]
    if x["rc_mlp"] and x["recompute"] != "full":   # the MLP's forward GEMMs again
        replayed += 2.0 * T * (up + m.ffn_size) * m.d_model
    hardware_flops = (L * (3.0 * layer_mm + (3.5 if x["flash"] else 3.0) * attn_full)
                      + 3.0 * 2.0 * T * m.d_model * vocab + L * replayed * rc_share) * k * dp
    return model_flops, hardware_flops
