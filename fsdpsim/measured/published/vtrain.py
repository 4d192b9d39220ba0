"""Read vTrain's ground-truth tables (``vtrain_ground_truth_*.csv``: ``# GPUs``, ``hidden
size``, ..., ``iteration time (ms)``; Megatron-DeepSpeed GPT runs on A100, Bang et al.,
MICRO 2024) into fsdpsim's measurement schema."""

from __future__ import annotations

import pandas as pd

from fsdpsim.measured.published.plan import gpu_generation
from fsdpsim.measured.published.text import cell_count, cell_positive, tp_vocab

#: Megatron-DeepSpeed GPT vocabulary (GPT-2 BPE) of the vTrain runs.
VTRAIN_VOCAB = 50257
#: What the vTrain README states for its runs: A100 nodes of 8 GPUs, NVLink inside a node,
#: 4x 200 Gb/s HDR InfiniBand per node, activation checkpointing (github.com/VIA-Research/vTrain).
VTRAIN_GPU, VTRAIN_GPUS_PER_NODE, VTRAIN_NODE_GBPS = "a100-sxm4-80gb", 8, 4 * 200.0


def is_vtrain(columns) -> bool:
    return {"# GPUs", "hidden size", "iteration time (ms)"} <= set(columns)


def from_vtrain(raw: pd.DataFrame) -> pd.DataFrame:
    """Convert vTrain ground-truth rows (Megatron-DeepSpeed GPT on A100) to the fsdpsim schema.

    Iteration time → tokens/s per GPU = global batch · sequence / time / GPUs. The layout is
    the row's TP × PP × DP (tensor parallelism innermost, 8 GPUs per node), the plain 1F1B
    schedule, no sequence parallelism (Megatron-DeepSpeed's ``--sequence-parallel`` is opt-in),
    full activation checkpointing (vTrain README); the data-parallel gradients as DDP
    all-reduce (ZeRO-1's reduce-scatter + all-gather moves the same bytes); fp16 mixed
    precision as in Megatron-DeepSpeed's GPT examples. A row whose degrees do not multiply to
    its GPU count is skipped."""
    rows = []
    columns = {"tp": "tensor parallelism", "pp": "pipeline parallelism", "n_gpus": "# GPUs",
               "dp": "data parallelism", "mb": "micro batch", "gb": "global batch",
               "seq": "sequence length", "d": "hidden size", "layers": "# layers",
               "heads": "attention heads"}
    for i, r in raw.reset_index(drop=True).iterrows():
        counts = {k: cell_count(r.get(c)) for k, c in columns.items()}
        bad = [columns[k] for k, n in counts.items() if n is None]
        v = {k: n or 1 for k, n in counts.items()}
        tp, pp, n_gpus, dp = v["tp"], v["pp"], v["n_gpus"], v["dp"]
        mb, gb, seq, d, layers = v["mb"], v["gb"], v["seq"], v["d"], v["layers"]
        time_s = cell_positive(r.get("iteration time (ms)")) / 1e3
        skip = (f"{', '.join(bad)} not stated as whole numbers" if bad
                else f"layout tp({tp}) * pp({pp}) * dp({dp}) != # GPUs({n_gpus})"
                if tp * pp * dp != n_gpus
                else "" if time_s == time_s else "no iteration time")
        name = (f"GPT {r['Parameters (billion)']}B" if "Parameters (billion)" in raw.columns
                else f"GPT L{layers} d{d}")
        rows.append({
            "id": f"vtrain-{i + 1:04d}", "arch": "gpt", "model": name, "n_layers": layers,
            "d_model": d, "n_heads": v["heads"], "n_kv_heads": v["heads"], "ffn_size": 4 * d,
            "vocab": tp_vocab(VTRAIN_VOCAB, tp),
            "gpu": VTRAIN_GPU, "n_gpus": n_gpus, "gpus_per_node": min(VTRAIN_GPUS_PER_NODE, n_gpus),
            "inter_node_gbps_per_gpu": VTRAIN_NODE_GBPS / VTRAIN_GPUS_PER_NODE,
            "network": "ib-hdr-200", "seq_len": seq, "micro_batch": mb,
            "grad_accum": max(1, gb // (mb * dp)), "sharding": "none", "recompute": "full",
            "tp": tp, "pp": pp, "cp": 1, "vpp": 1, "pp_schedule": "1f1b",
            "sequence_parallel": False, "ep": 1,
            "precision": "fp16", "reduce_dtype": "fp16", "fused_loss": False,
            "flash_attention": False,  # Megatron-DeepSpeed GPT of vTrain: fused softmax, no flash
            "framework": "Megatron-DeepSpeed", "recipe": "megatron-2021", "dropout": True,
            "generation": gpu_generation(VTRAIN_GPU),
            "tokens_per_s_per_gpu": gb * seq / time_s / n_gpus,
            "measured_from": "iteration time (ms)", "subset": "vtrain", "skip": skip,
        })
    return pd.DataFrame(rows)
