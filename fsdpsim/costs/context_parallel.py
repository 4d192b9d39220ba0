"""Context parallelism: ring attention's and Ulysses' communication per layer, the attention
FLOPs a rank runs and the sequence lengths each method accepts.

Pure and vectorised like the rest of :mod:`fsdpsim.costs`; conventions (per layer, per
micro-batch, one rank; bytes as torch's collectives count them) and the Megatron-LM / torch
table as in :mod:`fsdpsim.costs.tensor_parallel`. Checked against torch 2.13 ring attention on
gloo in ``tests/test_torch_tp.py``.

References
----------
[4] torch 2.13 ``torch/distributed/tensor/experimental/_context_parallel/_attention.py``.
[5] Liu et al., "Ring Attention with Blockwise Transformers", arXiv 2310.01889 (2023), §3;
    TransformerEngine ``AttnFuncWithCPAndKVP2P`` (``context_parallel.py``).
[6] Jacobs et al., "DeepSpeed Ulysses", arXiv 2309.14509 (2023), §3.1-3.2.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from fsdpsim.costs.args import check_at_least_one
from fsdpsim.costs.compute import all_of, as_array
from fsdpsim.costs.tensor_parallel import IMPLEMENTATIONS
from fsdpsim.util.errors import ConfigError

#: torch's ring-attention K,V rotation (``_RotateMethod``).
ROTATE_METHODS = ("all_gather", "all_to_all")
#: :func:`cp_ring_attention_bytes`' send/recv (or gather) calls and bytes [-], [B].
CpRingVolumes = namedtuple("CpRingVolumes", "forward_calls forward_bytes backward_kv_calls "
                           "backward_kv_bytes backward_dkv_calls backward_dkv_bytes")
#: :func:`cp_all_to_all_bytes`' all-to-all calls and bytes [-], [B].
CpAllToAllVolumes = namedtuple("CpAllToAllVolumes",
                               "forward_calls forward_bytes backward_calls backward_bytes")


def cp_ring_attention_bytes(tokens, kv_dim, act_bytes, cp, tp=1, *, implementation="megatron",
                            rotate="all_gather", grad_accum_bytes=4.0):
    """Ring-attention communication of one layer per micro-batch on one rank [B] and [-].

    Parameters
    ----------
    tokens : b·s before the CP split [-]
    kv_dim : width of K (= V) at the attention kernel: kv_heads·head_size (GQA kernels), or
        n_heads·head_size when K and V are repeated before it [-]
    act_bytes : bytes per K, V element [B]
    cp : context-parallel degree [-]
    tp : tensor-parallel degree (splits the heads) [-]
    implementation : ``"megatron"`` (TransformerEngine P2P) or ``"torch"`` [-]
    rotate : torch only: ``"all_gather"`` (default ``_RotateMethod``) or ``"all_to_all"`` [-]
    grad_accum_bytes : torch only: bytes of the rotated dK, dV (fp32, ``convert_to_f32``) [B]

    Returns
    -------
    :data:`CpRingVolumes`: ``forward_calls``, ``forward_bytes``, ``backward_kv_calls``,
    ``backward_kv_bytes``, ``backward_dkv_calls``, ``backward_dkv_bytes``. Bytes: send/recv
    and all-to-all count the input, all-gather the gathered output.

    Notes
    -----
    Each rank holds tokens/cp tokens (chunks i and 2cp−1−i of the sequence, so every rank does
    1/cp of the causal work: :func:`cp_attention_flops_share`); its K, V block is
    ``kv = 2 · tokens/cp · kv_dim/tp · e`` bytes. The queries stay; the K, V blocks travel the
    ring ([5] §3)::

        megatron  forward   cp−1 send/recv of kv
                  backward  cp−1 of kv, cp−1 of dK,dV (dkv, same dtype); TE packs both into one
                            send per step: cp steps (step 0 kv only, the last dkv only)
        torch     forward   all_gather: 1 all-gather, output cp·kv; all_to_all: cp−1 × kv
                  backward  K, V as forward; dK, dV: cp all-to-all hops of the fp32
                            accumulator (each starts at its owner and returns to it)

    Hand-worked: b = 2, s = 16, 2 heads of 8 (kv_dim 16), fp32, cp = 2, tp = 1: kv = 2·16·16·4
    = 2048 B; torch forward all-gather 4096 B; backward all-gather 4096 B and 2 × 2048 B of
    dK, dV; Megatron 2048 B forward, 2048 + 2048 B backward.
    """
    if implementation not in IMPLEMENTATIONS:
        raise ConfigError(f"implementation={implementation!r} is not one of: "
                          f"{', '.join(IMPLEMENTATIONS)}")
    if rotate not in ROTATE_METHODS:
        raise ConfigError(f"rotate={rotate!r} is not one of: {', '.join(ROTATE_METHODS)}")
    c = check_at_least_one("cp", cp)
    t = check_at_least_one("tp", tp)
    block = as_array(tokens) / c * as_array(kv_dim) / t       # K (= V) elements on this rank
    kv = 2.0 * block * as_array(act_bytes)                     # K and V
    hops = c - 1.0                                             # ring steps to see every block
    if implementation == "megatron":
        return CpRingVolumes(hops, hops * kv, hops, hops * kv, hops, hops * kv)
    on = c > 1
    if rotate == "all_gather":
        kv_calls, kv_bytes = 1.0 * on, on * c * kv            # one gather of every block
    else:
        kv_calls, kv_bytes = hops, hops * kv
    dkv = 2.0 * block * as_array(grad_accum_bytes)
    return CpRingVolumes(forward_calls=kv_calls, forward_bytes=kv_bytes,
                         backward_kv_calls=kv_calls, backward_kv_bytes=kv_bytes,
                         backward_dkv_calls=on * c, backward_dkv_bytes=on * c * dkv)


def cp_all_to_all_bytes(tokens, q_dim, kv_dim, act_bytes, cp, tp=1):
    """DeepSpeed-Ulysses all-to-alls of one layer per micro-batch on one rank [B] and [-].

    Before attention Q, K and V are re-sharded from the sequence to the heads (3 all-to-alls),
    after it the output goes back (1); backward runs the reverse of each ([6] §3.1,
    ``DistributedAttention``). Input bytes per call: ``tokens/cp · width/tp · e``. Returns
    (:data:`CpAllToAllVolumes`) ``forward_calls``, ``forward_bytes``, ``backward_calls``,
    ``backward_bytes``; each rank sends (cp−1)/cp of them ([6] §3.2: 4·N·h/P per link for MHA).
    Needs the heads on a TP rank divisible by cp (:func:`check_context_parallel`).
    """
    c = check_at_least_one("cp", cp)
    t = check_at_least_one("tp", tp)
    per_token = (as_array(q_dim) + 2.0 * as_array(kv_dim)   # q, k, v in
                 + as_array(q_dim)) / t                      # attention output back
    nbytes = np.where(c > 1, as_array(tokens) / c * per_token * as_array(act_bytes), 0.0)
    calls = 4.0 * (c > 1)
    return CpAllToAllVolumes(forward_calls=calls, forward_bytes=nbytes,
                             backward_calls=calls, backward_bytes=nbytes)


def cp_attention_flops_share(cp, causal_skip=True):
    """Fraction of the unsharded attention-core FLOPs one CP rank executes [-].

    With load-balanced chunks (i and 2cp−1−i) every rank computes the same number of causal
    query-key pairs, 1/cp of them, which is the share for kernels that skip masked tiles
    (``causal_skip``). Counting every kernel call's full q × k square (``FlopCounterMode``,
    PaLM convention) a rank runs one causal call on its 2 chunks (4c² pairs, c = s/(2cp))
    and cp−1 unmasked calls of 2c², against s² unsharded: ``(cp+1)/(2·cp²)``.
    """
    c = check_at_least_one("cp", cp)
    return np.where(causal_skip, 1.0 / c, (c + 1.0) / (2.0 * c * c))


def cp_feasible(seq_len, n_heads, n_kv_heads, cp, tp=1, method="ring"):
    """Boolean mask of the (seq_len, heads, cp, tp) combinations a CP method accepts [-].

    ``"ring"`` (load-balanced): ``seq_len % (2·cp) == 0``. ``"ulysses"``: ``seq_len % cp == 0``
    and the query and KV heads on a TP rank divisible by cp.
    """
    s, c, t = as_array(seq_len), as_array(cp), as_array(tp)
    if method == "ring":
        return np.mod(s, 2.0 * c) == 0
    if method == "ulysses":
        q_local, kv_local = as_array(n_heads) / t, as_array(n_kv_heads) / t
        return ((np.mod(s, c) == 0) & (np.mod(q_local, c) == 0) & (np.mod(kv_local, c) == 0)
                & (np.mod(as_array(n_kv_heads), t) == 0))
    raise ConfigError(f"method={method!r} is not one of: ring, ulysses")


def check_context_parallel(seq_len, n_heads, n_kv_heads, cp, tp=1, method="ring") -> None:
    """Raise :class:`ConfigError` naming every degree when :func:`cp_feasible` is False."""
    if not all_of(cp_feasible(seq_len, n_heads, n_kv_heads, cp, tp, method)):
        need = ("seq_len divisible by 2*cp" if method == "ring" else
                "seq_len divisible by cp and n_heads/tp, n_kv_heads/tp divisible by cp")
        raise ConfigError(f"{method} context parallelism: seq_len({seq_len}), n_heads({n_heads}),"
                          f" n_kv_heads({n_kv_heads}), cp({cp}), tp({tp}): needs {need}")
